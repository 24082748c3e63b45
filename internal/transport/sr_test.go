package transport

import (
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/simnet"
)

// srScenarios are the lossy links selective repeat is tested on: loss,
// reordering and duplication, as TestSimLossy's.
var srScenarios = []struct {
	name string
	link simnet.LinkConfig
	mtu  int
}{
	{"loss1%", simnet.LinkConfig{Delay: 10 * time.Microsecond, Jitter: 2 * time.Microsecond, Loss: 0.01}, 1024},
	{"loss5%+reorder+dup", simnet.LinkConfig{Delay: 10 * time.Microsecond, Jitter: 5 * time.Microsecond, Loss: 0.05,
		Reorder: 0.05, ReorderDelay: 30 * time.Microsecond, Duplicate: 0.03}, 256},
	{"loss10%+reorder+dup+corrupt", simnet.LinkConfig{Delay: 10 * time.Microsecond, Jitter: 10 * time.Microsecond, Loss: 0.10,
		Reorder: 0.1, ReorderDelay: 50 * time.Microsecond, Duplicate: 0.05, Corrupt: 0.02}, 1024},
	{"loss20%+reorder+dup", simnet.LinkConfig{Delay: 10 * time.Microsecond, Jitter: 10 * time.Microsecond, Loss: 0.20,
		Reorder: 0.1, ReorderDelay: 50 * time.Microsecond, Duplicate: 0.05}, 4096},
}

// TestSimSelectiveRepeat runs TestSimLossy's mixed workloads (WRITE, READ,
// SEND with and without immediate, atomics, both directions at once) with
// selective repeat on both QPs: every WR must complete exactly once with
// the right bytes and atomics the right original values (workload.verify),
// and both QPs end idle.
func TestSimSelectiveRepeat(t *testing.T) {
	seeds := 10
	if testing.Short() {
		seeds = 3
	}
	for _, sc := range srScenarios {
		t.Run(sc.name, func(t *testing.T) {
			var held, sacks uint64
			for seed := range seeds {
				o := simOpts()
				o.mtu, o.sr = sc.mtu, true
				s := newSim(t, int64(seed), sc.link, o)
				a, b := s.eps[0], s.eps[1]
				s.wls = []*workload{
					newWorkload(t, uint64(seed), a, b, 60, sc.mtu),
					newWorkload(t, uint64(seed)+1000, b, a, 30, sc.mtu),
				}
				start := s.clk.Now()
				if !s.run(10 * time.Second) {
					t.Fatalf("seed %d: not finished after %v: a %+v b %+v", seed, s.clk.Since(start), a.qp.Snapshot(), b.qp.Snapshot())
				}
				if a.qp.State() != ibv.QPStateRTS || b.qp.State() != ibv.QPStateRTS {
					t.Fatalf("seed %d: states %v %v; counters %+v %+v", seed, a.qp.State(), b.qp.State(), a.qp.Counters(), b.qp.Counters())
				}
				for _, w := range s.wls {
					w.verify()
				}
				for s.step() {
				}
				checkIdle(t, a, b)
				for _, e := range []*endpoint{a, b} {
					c := e.qp.Counters()
					held += c.HeldRequests
					sacks += c.SACKReceived
				}
			}
			if held == 0 || sacks == 0 {
				t.Errorf("selective repeat never ran: %d requests held, %d SACKs", held, sacks)
			}
		})
	}
}

// lossCounts runs a one-way stream of 64 KiB WRITEs, as goroce-perf
// write_bw, over link and returns the requester's and responder's
// counters and the virtual time it took.
func lossCounts(t *testing.T, seed int64, link simnet.LinkConfig, sr bool) (req, resp Counters, took time.Duration) {
	return lossCountsN(t, seed, link, sr, 100)
}

// lossCountsN is lossCounts with n WRITEs.
func lossCountsN(t *testing.T, seed int64, link simnet.LinkConfig, sr bool, n int) (req, resp Counters, took time.Duration) {
	t.Helper()
	o := defaultOpts()
	o.mtu, o.sr, o.maxSendWR = 4096, sr, 128
	s := newSim(t, seed, link, o)
	a, b := s.eps[0], s.eps[1]
	w := newUniformWorkload(t, uint64(seed), a, b, n, o.mtu, ibv.WRRDMAWrite, 64<<10)
	w.maxSQ = 64
	s.wls = []*workload{w}
	start := s.clk.Now()
	if !s.run(10 * time.Minute) {
		t.Fatalf("seed %d sr %v: not finished: %+v", seed, sr, a.qp.Snapshot())
	}
	w.verify()
	return a.qp.Counters(), b.qp.Counters(), s.clk.Since(start)
}

// TestSelectiveRepeatResendsLess compares go-back-N and selective repeat
// on the same seeds: at 1% and 5% loss the requester must resend far
// fewer packets (sent beyond the 1,600 of the WRITEs), the responder see
// no more duplicate requests, and the transfer must not take longer.
func TestSelectiveRepeatResendsLess(t *testing.T) {
	for _, loss := range []float64{0.01, 0.05} {
		t.Run(fmt.Sprintf("loss%g%%", loss*100), func(t *testing.T) {
			var gbnDup, srDup, gbnSent, srSent uint64
			var gbnTime, srTime time.Duration
			for seed := range int64(2) {
				link := realisticLink(loss)
				req, resp, took := lossCounts(t, seed, link, false)
				gbnDup += resp.DuplicateRequest
				gbnSent += req.SentPackets
				gbnTime += took
				req, resp, took = lossCounts(t, seed, link, true)
				srDup += resp.DuplicateRequest
				srSent += req.SentPackets
				srTime += took
				if req.SelectiveResends == 0 || resp.HeldRequests == 0 {
					t.Errorf("seed %d: selective repeat did not run: %+v %+v", seed, req, resp)
				}
			}
			const need = 2 * 100 * 16 // seeds × WRITEs × packets
			t.Logf("go-back-N: %d resent, %d duplicates, %v; selective repeat: %d resent, %d duplicates, %v",
				gbnSent-need, gbnDup, gbnTime, srSent-need, srDup, srTime)
			if (srSent-need)*4 > gbnSent-need || srDup > gbnDup {
				t.Errorf("selective repeat resent %d packets (%d duplicates), go-back-N %d (%d)", srSent-need, srDup, gbnSent-need, gbnDup)
			}
			if srTime > gbnTime {
				t.Errorf("selective repeat took %v, go-back-N %v", srTime, gbnTime)
			}
		})
	}
}

// TestSelectiveRepeatWindowBound: with selective repeat the window is at
// most maxSRWindow, whichever of SetSelectiveRepeat and SetMaxUnackedPSNs
// comes first, so that every PSN in flight has a slot of its own.
func TestSelectiveRepeatWindowBound(t *testing.T) {
	qp := NewQP(Config{QPN: 1, MaxSendWR: 4})
	must(t, qp.SetMaxUnackedPSNs(4096))
	qp.SetSelectiveRepeat(true)
	if qp.window != maxSRWindow || qp.req.win != maxSRWindow {
		t.Errorf("window %d/%d after SetSelectiveRepeat, want %d", qp.window, qp.req.win, maxSRWindow)
	}
	must(t, qp.SetMaxUnackedPSNs(1<<20))
	if qp.window != maxSRWindow || srWindow(qp.window) != maxSRWindow {
		t.Errorf("window %d after SetMaxUnackedPSNs, want %d", qp.window, maxSRWindow)
	}
	must(t, qp.SetMaxUnackedPSNs(200))
	qp.sentSlotFor(0) // allocates the ring
	if len(qp.ssr.slots) != 1024 {
		t.Errorf("%d slots for a window of 200, want 1024 (srSpanFactor windows, a power of two)", len(qp.ssr.slots))
	}
	must(t, qp.SetMaxUnackedPSNs(20))
	qp.sentSlotFor(0)
	if len(qp.ssr.slots) != 128 {
		t.Errorf("%d slots for a window of 20, want 128", len(qp.ssr.slots))
	}
	qp.SetSelectiveRepeat(false)
	must(t, qp.SetMaxUnackedPSNs(4096))
	if qp.window != 4096 {
		t.Errorf("window %d without selective repeat, want 4096", qp.window)
	}
}

// TestSelectiveRepeatSendsPastAHole: on a path whose round trip holds
// more than the window's worth of data in queues (one-way delay 500 µs at
// 1 GB/s), a hole must not stop the requester: the PSNs the responder is
// known to hold leave the window (srBlocked), so at 1 % loss a stream of
// 64 KiB WRITEs keeps at least 85 % of its lossless throughput, in
// virtual time. With the window counted from the oldest unacknowledged
// PSN it kept 60 %.
func TestSelectiveRepeatSendsPastAHole(t *testing.T) {
	const writes = 300
	var clean, lossy time.Duration
	for seed := range int64(2) {
		link := realisticLink(0)
		link.Delay = 500 * time.Microsecond
		_, _, took := lossCountsN(t, seed, link, true, writes)
		clean += took
		link.Loss = 0.01
		req, _, took := lossCountsN(t, seed, link, true, writes)
		lossy += took
		if req.SACKReceived == 0 {
			t.Fatalf("seed %d: no SACK at 1 %% loss", seed)
		}
	}
	share := float64(clean) / float64(lossy)
	t.Logf("lossless %v, 1 %% loss %v: %.1f %% of the lossless throughput", clean, lossy, 100*share)
	if share < 0.85 {
		t.Errorf("at 1 %% loss selective repeat kept %.1f %% of its lossless throughput, want at least 85 %%", 100*share)
	}
}

// TestSACKedOutstanding: the count of PSNs a SACK showed held follows the
// completer lazily, across the PSN wrap, and a rewind forgets the marks.
func TestSACKedOutstanding(t *testing.T) {
	qp := NewQP(Config{QPN: 1, MaxSendWR: 4})
	qp.SetSelectiveRepeat(true)
	start := psn.PSN(psn.Mask - 5)
	qp.comp.psn, qp.req.psn = start, start.Add(40)
	for i := range uint32(40) {
		qp.noteSent(start.Add(i))
	}
	qp.ssr.sackedFrom = start
	for _, i := range []uint32{3, 4, 10, 30} {
		qp.sentSlotFor(start.Add(i)).sacked = true
		qp.ssr.sacked++
	}
	if n := qp.sackedOutstanding(); n != 4 {
		t.Fatalf("sacked %d, want 4", n)
	}
	qp.comp.psn = start.Add(11) // across the wrap, past three marks
	if n := qp.sackedOutstanding(); n != 1 {
		t.Fatalf("sacked %d after the completer passed three, want 1", n)
	}
	if qp.sentSlotFor(start.Add(4)).sacked {
		t.Error("a mark the completer passed is still set: a new PSN in its slot would inherit it")
	}
	qp.comp.psn = start.Add(5000) // a jump beyond the ring: counted again
	if n := qp.sackedOutstanding(); n != 0 {
		t.Fatalf("sacked %d after a jump past everything, want 0", n)
	}
	qp.comp.psn = start.Add(5000)
	qp.sentSlotFor(start.Add(5001)).psn = start.Add(5001)
	qp.sentSlotFor(start.Add(5001)).sacked = true
	qp.ssr.sacked = 1
	qp.rewind()
	if qp.ssr.sacked != 0 || qp.sentSlotFor(start.Add(5001)).sacked {
		t.Errorf("a rewind kept the marks (count %d)", qp.ssr.sacked)
	}
}

// TestDropStaleHeld: held requests the expected PSN has passed are
// forgotten, those ahead kept, whether the expected PSN moved a little
// (only the passed slots are looked at) or far (the whole buffer is).
func TestDropStaleHeld(t *testing.T) {
	qp := NewQP(Config{QPN: 1, MaxSendWR: 4})
	qp.SetSelectiveRepeat(true)
	r := &qp.rsr
	n := int(srWindow(qp.window))
	r.held, r.psns = make([]bool, n), make([]psn.PSN, n)
	hold := func(p psn.PSN) {
		i := uint32(p) & uint32(n-1)
		r.held[i], r.psns[i] = true, p
		r.count++
	}
	base := psn.PSN(psn.Mask - 2)
	qp.resp.epsn, r.passed = base, base
	for _, d := range []uint32{1, 2, 5, 9} {
		hold(base.Add(d))
	}
	qp.resp.epsn = base.Add(6) // a READ's response PSNs passed 1, 2 and 5
	qp.dropStaleHeld()
	if r.count != 1 || !r.held[uint32(base.Add(9))&uint32(n-1)] {
		t.Fatalf("count %d after passing three of four, want the one at +9 kept", r.count)
	}
	if r.passed != qp.resp.epsn {
		t.Errorf("passed %v, want the expected PSN %v", r.passed, qp.resp.epsn)
	}
	hold(base.Add(20))
	qp.resp.epsn = base.Add(uint32(3 * n)) // far beyond the buffer
	qp.dropStaleHeld()
	if r.count != 0 {
		t.Errorf("count %d after a jump past everything, want 0", r.count)
	}
}
