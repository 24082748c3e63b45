package transport

import (
	"time"

	"github.com/goroce/goroce/internal/psn"
)

// The adaptive retransmission timeout, with selective repeat on: the
// requester measures the round trip of its own packets and, when nothing
// has been acknowledged for a few round trips, probes (sendProbes) long
// before the IBTA timer, 4.096 µs × 2^timeout (67 ms at perftest's 14),
// would expire. The estimator is RFC 6298's (SRTT, RTTVAR, RTO = SRTT +
// 4·RTTVAR, doubled on each expiry), with Karn's rule: no sample from a
// PSN sent more than once, and none while a retransmission is under way.
//
// The early timer is an addition, never a replacement: it spends no
// retry_cnt, and it is armed only when it would expire before the IBTA
// timer, which still runs from the last progress and still spends
// retry_cnt and fails the QP after retry_cnt+1 expiries. So the timeout a
// QP was given is an upper bound whatever the estimate: the RTO is at most
// half of it, and an RTO that backs off to that stops there.

// rtoFloor is the least adaptive timeout: a loaded machine holds a
// goroutine off its processor for a millisecond or more now and then,
// and a timeout below that would probe on the scheduler's delays rather
// than on losses. A spurious probe costs two packets.
const rtoFloor = time.Millisecond

// rtoMaxBackoff bounds the doublings of the timeout (the IBTA timeout
// bounds it sooner at any usual setting).
const rtoMaxBackoff = 16

// rtoState is the round-trip estimator and the early timer.
type rtoState struct {
	srtt, rttvar time.Duration
	valid        bool // srtt and rttvar hold a measurement
	// sampling: the round trip of samplePSN, sent at sampleAt, is being
	// measured.
	sampling  bool
	samplePSN psn.PSN
	sampleAt  time.Time
	backoff   uint8 // doublings since the last progress
	armed     bool
	deadline  time.Time
}

func (r *rtoState) reset() { *r = rtoState{} }

// startSample begins measuring the round trip of PSN p, a packet sent for
// the first time that asks for an ACK, if no measurement is under way.
func (qp *QP) startSample(p psn.PSN, now time.Time) {
	if qp.rto.sampling || (!qp.ssr.on && !qp.cc.cfg.RTT && !qp.cc.cfg.ECN) {
		return
	}
	qp.rto.sampling, qp.rto.samplePSN, qp.rto.sampleAt = true, p, now
}

// endSample takes the measurement if the oldest unacknowledged PSN has
// passed the PSN being measured (RFC 6298 2.2 and 2.3), and forgets the
// backoff.
func (qp *QP) endSample(now time.Time) {
	r := &qp.rto
	r.backoff = 0
	if !r.sampling || !r.samplePSN.LessThan(qp.comp.psn) {
		return
	}
	r.sampling = false
	rtt := now.Sub(r.sampleAt)
	if rtt < 0 {
		return
	}
	qp.rttSample(rtt, now)
	if !r.valid {
		r.srtt, r.rttvar, r.valid = rtt, rtt/2, true
		return
	}
	dev := r.srtt - rtt
	if dev < 0 {
		dev = -dev
	}
	r.rttvar = (3*r.rttvar + dev) / 4
	r.srtt = (7*r.srtt + rtt) / 8
}

// RTO returns the adaptive retransmission timeout, backoff included, and
// false when there is none: selective repeat off, no measurement yet, a
// QP without a timeout, or an IBTA timeout under twice the floor. It is at
// most half the IBTA timeout: on a loaded machine the round trips measured
// include the scheduler's delays and their variance can put the estimate
// above the IBTA timeout, which would then expire first, spend retry_cnt
// and probe no sooner; a probe costs two packets.
func (qp *QP) RTO() (time.Duration, bool) {
	r := &qp.rto
	if !qp.ssr.on || !r.valid || qp.timeout == 0 {
		return 0, false
	}
	half := qp.timeoutDuration() / 2
	if half < rtoFloor {
		return 0, false
	}
	v := max(r.srtt+4*r.rttvar, rtoFloor)
	for range r.backoff {
		if v >= half {
			break
		}
		v *= 2
	}
	return min(v, half), true
}

// armEarly arms the early timer, if it would expire before the IBTA one.
func (qp *QP) armEarly(now time.Time) {
	qp.rto.armed = false
	if v, ok := qp.RTO(); ok && qp.comp.timerArmed {
		if d := now.Add(v); d.Before(qp.comp.deadline) {
			qp.rto.armed, qp.rto.deadline = true, d
		}
	}
}

// earlyTimeout runs the early timer if it is due: probes go out with the
// next pump, the timeout doubles, and the sample under way is dropped
// (Karn). The IBTA timer keeps running.
func (qp *QP) earlyTimeout(now time.Time) {
	r := &qp.rto
	if !r.armed || !qp.comp.timerArmed || now.Before(r.deadline) || !now.Before(qp.comp.deadline) {
		return
	}
	r.armed = false
	if !qp.outstanding() || qp.req.rnrWait {
		return
	}
	qp.counters.EarlyTimeouts++
	qp.ssr.probe = true
	r.sampling = false
	if r.backoff < rtoMaxBackoff {
		r.backoff++
	}
	qp.armEarly(now)
}
