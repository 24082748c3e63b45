package transport

import (
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/simnet"
	"github.com/goroce/goroce/internal/wire"
)

// rtoSim is a pair with selective repeat over a link of a fixed delay
// each way, no loss, and a's workload of count one-packet WRITEs.
func rtoSim(t *testing.T, delay time.Duration, timeout uint8, count int) (*sim, *workload) {
	t.Helper()
	o := defaultOpts()
	o.sr, o.timeout = true, timeout
	s := newSim(t, 1, simnet.LinkConfig{Delay: delay}, o)
	w := newUniformWorkload(t, 1, s.eps[0], s.eps[1], count, o.mtu, ibv.WRRDMAWrite, 512)
	w.maxSQ = 1 // one at a time: each WRITE's round trip is a sample
	s.wls = []*workload{w}
	return s, w
}

// TestRTOEstimate: over a link of 5 ms each way every sample is 10 ms of
// virtual time, so SRTT is exactly 10 ms and RTTVAR has decayed from its
// first 5 ms by 3/4 per sample (RFC 6298); the RTO is SRTT + 4·RTTVAR.
func TestRTOEstimate(t *testing.T) {
	const n = 20
	s, w := rtoSim(t, 5*time.Millisecond, 16, n) // IBTA timeout 268 ms
	if !s.run(10 * time.Second) {
		t.Fatal("not finished")
	}
	w.verify()
	qp := s.eps[0].qp
	r := qp.rto
	if !r.valid || r.srtt != 10*time.Millisecond {
		t.Fatalf("SRTT %v (valid %v), want 10ms", r.srtt, r.valid)
	}
	// One sample per WRITE: RTTVAR = 5 ms × (3/4)^(n-1), as the
	// estimator rounds.
	want := 5 * time.Millisecond
	for range n - 1 {
		want = (3 * want) / 4
	}
	if r.rttvar != want {
		t.Errorf("RTTVAR %v, want %v", r.rttvar, want)
	}
	if got, ok := qp.RTO(); !ok || got != 10*time.Millisecond+4*want {
		t.Errorf("RTO %v %v, want %v", got, ok, 10*time.Millisecond+4*want)
	}
	if c := qp.Counters(); c.EarlyTimeouts != 0 || c.Timeouts != 0 {
		t.Errorf("timeouts on a clean path: %+v", c)
	}
}

// TestRTOBounds: the RTO stays between the floor and half the IBTA
// timeout the QP was given, whatever the estimate and the backoff; with no
// IBTA timeout, or one under twice the floor, there is none.
func TestRTOBounds(t *testing.T) {
	s, _ := rtoSim(t, 50*time.Microsecond, 12, 10) // IBTA 16.8 ms
	if !s.run(time.Second) {
		t.Fatal("not finished")
	}
	qp := s.eps[0].qp
	if got, ok := qp.RTO(); !ok || got != rtoFloor {
		t.Fatalf("RTO %v %v on a 100 µs round trip, want the floor %v", got, ok, rtoFloor)
	}
	ibta := qp.timeoutDuration()
	for qp.rto.backoff = 0; qp.rto.backoff <= rtoMaxBackoff; qp.rto.backoff++ {
		got, ok := qp.RTO()
		want := min(rtoFloor<<qp.rto.backoff, ibta/2)
		if !ok || got != want {
			t.Fatalf("backoff %d: RTO %v %v, want %v (half the IBTA timeout %v at most)", qp.rto.backoff, got, ok, want, ibta)
		}
	}
	qp.rto.backoff = 0
	qp.rto.srtt = 10 * ibta
	if got, ok := qp.RTO(); !ok || got != ibta/2 {
		t.Errorf("RTO %v %v for an SRTT beyond the IBTA timeout, want %v", got, ok, ibta/2)
	}
	must(t, qp.SetTimeout(8)) // 1.05 ms: half is under the floor
	if got, ok := qp.RTO(); ok {
		t.Errorf("RTO %v with an IBTA timeout of %v", got, qp.timeoutDuration())
	}
	must(t, qp.SetTimeout(0))
	qp.rto.srtt = time.Millisecond
	if got, ok := qp.RTO(); ok {
		t.Errorf("RTO %v with no IBTA timeout (infinite)", got)
	}
}

// TestRTOKarn: the ACK of a PSN sent twice yields no sample. The first
// WRITE's only packet is dropped once; its retransmission is acknowledged
// after the one round trip, which, counted from the first transmission,
// would read as the retransmission timeout plus a round trip.
func TestRTOKarn(t *testing.T) {
	s, w := rtoSim(t, 5*time.Millisecond, 14, 3) // IBTA 67 ms
	dropped := false
	s.drop = func(from int, pkt []byte) bool {
		if from == 0 && !dropped && wire.Opcode(pkt[0]) == wire.RCRDMAWriteOnly {
			dropped = true
			return true
		}
		return false
	}
	if !s.run(10 * time.Second) {
		t.Fatal("not finished")
	}
	w.verify()
	qp := s.eps[0].qp
	c := qp.Counters()
	if !dropped || c.Timeouts != 1 {
		t.Fatalf("dropped %v, %d IBTA timeouts, want one (no estimate yet): %+v", dropped, c.Timeouts, c)
	}
	// The two later WRITEs each gave a 10 ms sample; a sample of the
	// first would have made SRTT far larger.
	if qp.rto.srtt != 10*time.Millisecond {
		t.Errorf("SRTT %v, want 10ms from the WRITEs sent once", qp.rto.srtt)
	}
}

// TestRTOEarlyTimeoutTailLoss: the last packet of a message is lost and
// nothing follows it, so no SACK can report it. With a round trip
// measured, the early timer probes after about an RTO, long before the
// IBTA timer: the WRITE completes within a few RTOs of virtual time, no
// retry_cnt spent.
func TestRTOEarlyTimeoutTailLoss(t *testing.T) {
	o := defaultOpts()
	o.sr = true // timeout 14: 67 ms
	s := newSim(t, 1, simnet.LinkConfig{Delay: 50 * time.Microsecond}, o)
	a, b := s.eps[0], s.eps[1]
	w := newUniformWorkload(t, 1, a, b, 12, o.mtu, ibv.WRRDMAWrite, 8*o.mtu)
	w.maxSQ = 1
	s.wls = []*workload{w}
	var lastPSN psn.PSN
	n := 0
	s.drop = func(from int, pkt []byte) bool {
		if from != 0 || wire.Opcode(pkt[0]) != wire.RCRDMAWriteLast {
			return false
		}
		n++
		if n == 10 { // the tenth WRITE's LAST, the first time
			lastPSN = wire.BTH(pkt).PSN()
			return true
		}
		return false
	}
	start := s.clk.Now()
	if !s.run(10 * time.Second) {
		t.Fatal("not finished")
	}
	took := s.clk.Since(start)
	w.verify()
	c := a.qp.Counters()
	t.Logf("lost PSN %v; finished in %v virtual; %+v", lastPSN, took, c)
	if c.EarlyTimeouts == 0 || c.Timeouts != 0 || c.CompleterRetry != 0 {
		t.Fatalf("want early timeouts only: %+v", c)
	}
	if ibta := a.qp.timeoutDuration(); took >= ibta {
		t.Errorf("took %v of virtual time, not less than one IBTA timeout (%v)", took, ibta)
	}
}
