package transport

import (
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
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
	t.Helper()
	o := defaultOpts()
	o.mtu, o.sr, o.maxSendWR = 4096, sr, 128
	s := newSim(t, seed, link, o)
	a, b := s.eps[0], s.eps[1]
	w := newUniformWorkload(t, uint64(seed), a, b, 100, o.mtu, ibv.WRRDMAWrite, 64<<10)
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
	if len(qp.ssr.slots) != 256 {
		t.Errorf("%d slots for a window of 200, want 256", len(qp.ssr.slots))
	}
	qp.SetSelectiveRepeat(false)
	must(t, qp.SetMaxUnackedPSNs(4096))
	if qp.window != 4096 {
		t.Errorf("window %d without selective repeat, want 4096", qp.window)
	}
}
