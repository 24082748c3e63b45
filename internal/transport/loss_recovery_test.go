package transport

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/simnet"
	"github.com/goroce/goroce/internal/wire"
)

// newUniformWorkload is a workload of count WRs all of opcode op, of size
// bytes each (8 for atomics), signaled: the shape of a perftest run.
func newUniformWorkload(t testing.TB, seed uint64, from, to *endpoint, count, mtu int, op ibv.WROpcode, size int) *workload {
	if isAtomic(op) {
		size = 8
	}
	w := newWorkloadMax(t, seed, from, to, count, mtu, max(size, 4*mtu+17))
	w.consumers = w.consumers[:0]
	var value uint64
	for i := range w.wrs {
		r := &w.wrs[i]
		off := i * w.slotSize
		*r = simWR{slot: i, recv: -1, sigaled: true, n: size}
		r.w = SendWQE{WRID: uint64(i), Opcode: op, Flags: ibv.SendSignaled,
			SGL: []SGE{{Addr: 0x1_0000_0000 + uint64(off), Length: uint32(size), LKey: w.lkey}}}
		copy(w.local[off:off+size], pattern(size, byte(i)))
		switch {
		case isWrite(op):
			r.w.RemoteAddr, r.w.RKey = 0x2_0000_0000+uint64(off), w.wkey
		case op == ibv.WRRDMARead:
			r.w.RemoteAddr, r.w.RKey = 0x3_0000_0000+uint64(off), w.rkey
			clear(w.local[off : off+size])
		case op == ibv.WRAtomicFetchAndAdd:
			r.w.RemoteAddr, r.w.RKey, r.w.CompareAdd = 0x5_0000_0000+8, w.akey, uint64(i)+1
			r.orig = value
			value += uint64(i) + 1
		case op == ibv.WRAtomicCmpAndSwp:
			r.w.RemoteAddr, r.w.RKey = 0x5_0000_0000+8, w.akey
			r.w.CompareAdd, r.w.Swap = value, value*3+uint64(i)
			r.orig = value
			value = value*3 + uint64(i)
		}
		if isSend(op) || op == ibv.WRRDMAWriteWithImm {
			r.recv = len(w.consumers)
			w.consumers = append(w.consumers, i)
		}
	}
	return w
}

// realisticLink is a path like the veth pair of test/faults/loss.sh: 25 µs
// each way, 1 GB/s, with the given loss; the QPs use perftest's timeout 14
// (67 ms), so that a timer retry costs what it costs there.
func realisticLink(loss float64) simnet.LinkConfig {
	return simnet.LinkConfig{Delay: 25 * time.Microsecond, Loss: loss, Bandwidth: 1e9}
}

// TestSimLossThroughput runs perftest-shaped workloads (one operation kind
// at a time, 16 KiB messages or atomics) over realisticLink at 5% and 20%
// loss: every WR must succeed exactly once with the right bytes, and the
// virtual time to finish is logged (go test -v shows the bandwidth).
func TestSimLossThroughput(t *testing.T) {
	seeds := 4
	if testing.Short() {
		seeds = 1
	}
	ops := []struct {
		name  string
		op    ibv.WROpcode
		count int
	}{
		{"write", ibv.WRRDMAWrite, 200},
		{"read", ibv.WRRDMARead, 200},
		{"send", ibv.WRSend, 200},
		{"atomic", ibv.WRAtomicFetchAndAdd, 400},
	}
	const size = 16 << 10
	for _, loss := range []float64{0.01, 0.05, 0.20} {
		for _, o := range ops {
			t.Run(fmt.Sprintf("%s/loss%g%%", o.name, loss*100), func(t *testing.T) {
				var virtual time.Duration
				var timeouts, retries uint64
				for seed := range seeds {
					opts := defaultOpts()
					opts.maxSendWR = 128
					s := newSim(t, int64(seed), realisticLink(loss), opts)
					a, b := s.eps[0], s.eps[1]
					w := newUniformWorkload(t, uint64(seed), a, b, o.count, opts.mtu, o.op, size)
					w.maxSQ = 64
					s.wls = []*workload{w}
					start := s.clk.Now()
					if !s.run(10 * time.Minute) {
						t.Fatalf("seed %d: not finished: %+v", seed, a.qp.Snapshot())
					}
					if a.qp.State() != ibv.QPStateRTS {
						t.Fatalf("seed %d: state %v, counters %+v", seed, a.qp.State(), a.qp.Counters())
					}
					w.verify()
					virtual += s.clk.Since(start)
					c := a.qp.Counters()
					timeouts += c.Timeouts
					retries += c.CompleterRetry
				}
				n := o.count * size
				if isAtomic(o.op) {
					n = o.count * 8
				}
				mean := virtual / time.Duration(seeds)
				t.Logf("%d ops in %v virtual (%.2f MB/s, %.0f ops/s); per run %d timeouts, %d go-back-N restarts",
					o.count, mean, float64(n)/mean.Seconds()/1e6, float64(o.count)/mean.Seconds(),
					timeouts/uint64(seeds), retries/uint64(seeds))
			})
		}
	}
}

// TestRetryHeadCopiesAtomic: the first packet of a retransmission goes out
// three times; for an atomic the responder executes the first copy that
// arrives and answers the others from its saved result, so the atomic runs
// exactly once, and more losses on the same PSN cost no further timeout.
func TestRetryHeadCopiesAtomic(t *testing.T) {
	o := defaultOpts()
	o.timeout = 10
	a, b := newPair(t, o)
	l := newLink(t, a, b)
	word := make([]byte, 8)
	binary.NativeEndian.PutUint64(word, 40)
	rkey := b.mem.register(pd, word, 0x8000, ibv.AccessRemoteAtomic)
	res := make([]byte, 8)
	requests := 0
	l.drop = func(from *endpoint, p *wire.Packet) bool {
		if from == a && p.BTH.Opcode() == wire.RCFetchAdd {
			requests++
			// The original and two of the three copies.
			return requests == 1 || requests == 3 || requests == 4
		}
		return false
	}
	start := l.now
	l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRAtomicFetchAndAdd, Flags: ibv.SendSignaled, RemoteAddr: 0x8000, RKey: rkey,
		CompareAdd: 2, SGL: []SGE{{0, 8, a.mem.register(pd, res, 0, ibv.AccessLocalWrite)}}})
	l.run(time.Second)
	wantCompletions(t, a.scq.take(), Completion{WRID: 1, Opcode: ibv.WCFetchAdd, ByteLen: 8, QPN: qpnA})
	if got := binary.NativeEndian.Uint64(word); got != 42 {
		t.Errorf("target %d, want 42: executed more than once", got)
	}
	if got := binary.NativeEndian.Uint64(res); got != 40 {
		t.Errorf("returned %d, want 40", got)
	}
	if requests != 4 {
		t.Errorf("%d FETCH_ADD requests, want 4 (1 + 3 copies)", requests)
	}
	if got, want := l.now.Sub(start), a.qp.timeoutDuration(); got != want {
		t.Errorf("recovered after %v, want one timeout (%v)", got, want)
	}
	if c := a.qp.Counters(); c.Timeouts != 1 || c.CompleterRetry != 1 {
		t.Errorf("counters %+v", c)
	}
	checkIdle(t, a, b)
}

// TestReadGapRequestBounded: a READ response that is always lost, behind
// one that arrives. The first gap re-requests at once without spending
// retry_cnt; with no progress since, the next gaps wait for the timer,
// which spends the budget: the READ ends in RETRY_EXC_ERR after
// (retry_cnt+1) timeouts, it does not loop.
func TestReadGapRequestBounded(t *testing.T) {
	for _, retry := range []uint8{0, 3, 7} {
		t.Run(fmt.Sprint(retry), func(t *testing.T) {
			o := defaultOpts()
			o.mtu = 256
			o.timeout = 10
			o.retryCnt = retry
			a, b := newPair(t, o)
			l := newLink(t, a, b)
			n := 4 * 256
			rkey := b.mem.register(pd, pattern(n, 1), 0x4000, ibv.AccessRemoteRead)
			dst := make([]byte, n)
			requests := 0
			l.drop = func(from *endpoint, p *wire.Packet) bool {
				if from == a && p.BTH.Opcode() == wire.RCRDMAReadRequest {
					requests++
				}
				return from == b && p.BTH.PSN() == base.Add(1)
			}
			start := l.now
			l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRRDMARead, Flags: ibv.SendSignaled, RemoteAddr: 0x4000, RKey: rkey,
				SGL: []SGE{{0, uint32(n), a.mem.register(pd, dst, 0, ibv.AccessLocalWrite)}}})
			l.run(time.Hour)
			wantCompletions(t, a.scq.take(), Completion{WRID: 1, Status: ibv.WCRetryExcErr, Opcode: ibv.WCRDMARead, QPN: qpnA})
			c := a.qp.Counters()
			// One immediate re-request, then a timer retry per unit of
			// retry_cnt, then the final timeout.
			if c.Timeouts != uint64(retry)+1 || c.CompleterRetry != uint64(retry)+1 || c.RetryExceeded != 1 {
				t.Errorf("counters %+v", c)
			}
			if got, want := l.now.Sub(start), time.Duration(retry+1)*a.qp.timeoutDuration(); got != want {
				t.Errorf("gave up after %v, want %v", got, want)
			}
			// 1 original + 3 copies of the re-request + the timer rounds
			// (3, then 4 copies).
			want := 4
			for i := 1; i <= int(retry); i++ {
				want += min(2+i, 4)
			}
			if requests != want {
				t.Errorf("%d READ requests, want %d", requests, want)
			}
		})
	}
}

// TestSequenceNakOnce: repeated sequence NAKs for one gap make the
// requester go back once; a NAK for a PSN already acknowledged is stale.
func TestSequenceNakOnce(t *testing.T) {
	o := defaultOpts()
	o.mtu = 256
	a, b := newPair(t, o)
	l := newLink(t, a, b)
	n := 4 * 256
	dst := make([]byte, n)
	rkey := b.mem.register(pd, dst, 0, ibv.AccessRemoteWrite)
	l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled, RKey: rkey,
		SGL: []SGE{{0, uint32(n), a.mem.register(pd, pattern(n, 3), 0, 0)}}})
	a.out.Reset() // all four packets lost
	nak := func(p uint32) []byte {
		h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCAcknowledge, PKey: 0xFFFF, DestQP: qpnA, PSN: base.Add(p)},
			AETH: wire.AETHFields{Syndrome: wire.NakSyndrome(wire.NAKPSNSequenceError)}}
		return wire.AppendHeaders(nil, &h)
	}
	got := l.inject(b, a, nak(2)) // acknowledges 0 and 1, go back to 2
	eq(t, "first NAK", got, "RC RDMA_WRITE_MIDDLE@2", "RC RDMA_WRITE_MIDDLE@2", "RC RDMA_WRITE_MIDDLE@2", "RC RDMA_WRITE_LAST@3")
	eq(t, "repeated NAK", l.inject(b, a, nak(2)))
	eq(t, "stale NAK", l.inject(b, a, nak(1)))
	if c := a.qp.Counters(); c.CompleterRetry != 1 || c.RcvdSeqErr != 3 || c.StaleResponses != 1 {
		t.Errorf("counters %+v", c)
	}
	if s := a.qp.Snapshot(); s.CompPSN != base.Add(2) || s.RetryLeft != 6 {
		t.Errorf("snapshot %+v", s)
	}
}

// TestLostNak: the sequence NAK of a gap is lost. The responder NAKs a gap
// once (later packets asking for an acknowledgement draw nothing: no
// amplification), so the requester recovers by its retransmit timer, once.
func TestLostNak(t *testing.T) {
	o := defaultOpts()
	o.mtu = 256
	a, b := newPair(t, o)
	l := newLink(t, a, b)
	var lostData, lostNak bool
	l.drop = func(from *endpoint, p *wire.Packet) bool {
		if from == a && p.BTH.PSN() == base.Add(1) && !lostData {
			lostData = true
			return true
		}
		if from == b && p.AETH != nil && p.AETH.Syndrome().Kind() == wire.AETHNak && !lostNak {
			lostNak = true
			return true
		}
		return false
	}
	// WRITEs of two packets: each LAST asks for an ACK.
	var dsts [3][]byte
	for i := range dsts {
		dsts[i] = make([]byte, 512)
		rkey := b.mem.register(pd, dsts[i], 0, ibv.AccessRemoteWrite)
		l.post(a, SendWQE{WRID: uint64(i), Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled, RKey: rkey,
			SGL: []SGE{{0, 512, a.mem.register(pd, pattern(512, byte(i)), 0, 0)}}})
	}
	l.run(time.Second)
	for i, d := range dsts {
		wantBytes(t, fmt.Sprint("WRITE ", i), d, pattern(512, byte(i)))
	}
	if got := a.scq.take(); len(got) != len(dsts) {
		t.Fatalf("completions %+v", got)
	}
	if c := b.qp.Counters(); c.SeqNakSent != 1 {
		t.Errorf("responder counters %+v", c)
	}
	if c := a.qp.Counters(); c.Timeouts != 1 || c.CompleterRetry != 1 {
		t.Errorf("requester counters %+v", c)
	}
	checkIdle(t, a, b)
}

// TestSpuriousRewindThenFullAck: a retransmit timeout rewinds the
// requester, which resends only the narrowed window's worth; then the
// ACK of everything sent arrives (the timeout was spurious: the ACKs were
// only late). The WQEs posted after must start at the next new PSN, not
// where the resending had got to: PSNs used twice would read as
// duplicates at the responder, and the requester would wait for an ACK
// beyond anything it believes sent until RETRY_EXC_ERR, or, with a
// message boundary moved, the responder would see a MIDDLE where a FIRST
// was due and fail the QP. Both with and without selective repeat.
func TestSpuriousRewindThenFullAck(t *testing.T) {
	for _, sr := range []bool{false, true} {
		t.Run(fmt.Sprintf("sr=%v", sr), func(t *testing.T) {
			o := defaultOpts()
			o.timeout, o.maxSendWR, o.sr = 8, 512, sr // 1 ms
			s := newSim(t, 1, simnet.LinkConfig{Delay: 10 * time.Microsecond}, o)
			a, b := s.eps[0], s.eps[1]
			// 4-packet messages: 64 of them fill the 256-PSN window exactly,
			// so the WQE after them has not started when they complete.
			w := newUniformWorkload(t, 1, a, b, 300, o.mtu, ibv.WRRDMAWrite, 4*o.mtu)
			w.maxSQ = 300
			s.wls = []*workload{w}
			until := s.clk.Now().Add(1500 * time.Microsecond)
			s.drop = func(from int, _ []byte) bool { return from == 1 && s.clk.Now().Before(until) }
			if !s.run(10 * time.Second) {
				t.Fatalf("not finished: %+v %+v", a.qp.Snapshot(), a.qp.Counters())
			}
			if a.qp.State() != ibv.QPStateRTS || b.qp.State() != ibv.QPStateRTS {
				t.Fatalf("states %v %v: %+v %+v", a.qp.State(), b.qp.State(), a.qp.Counters(), b.qp.Refusal())
			}
			w.verify()
			if c := a.qp.Counters(); c.Timeouts == 0 {
				t.Fatalf("no timeout: the test did not rewind: %+v", c)
			}
		})
	}
}
