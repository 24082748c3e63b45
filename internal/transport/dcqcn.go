package transport

import (
	"math"
	"time"
)

// DCQCN's reaction point (Zhu et al., SIGCOMM 2015, section 3.1; the
// rate-increase stages are QCN's, IEEE 802.1Qau): a QP that receives a CNP
// sets a current rate rc and a target rate rt and paces its requests at
// rc with a token bucket until rc climbs back to the line rate.
//
//   - α estimates how much of the traffic is marked: every RPAlphaPeriod
//     it becomes (1−g)·α + g if a CNP arrived in the period, (1−g)·α
//     otherwise.
//   - A CNP (at most one decrease per RPRateReduceMonitorPeriod or
//     round trip, rpMonitorPeriod) sets
//     rt = rc and rc = rc·(1 − α/2^RPGD), by at most RPMinDecFac, not
//     below RPMinRate, and restarts the increase stages.
//   - Every RPTimeReset (timer) and every RPByteReset bytes sent (byte
//     counter) is an increase event: while both stages are below
//     RPThreshold, fast recovery (rc = (rt+rc)/2); once both are above
//     it, hyper increase (rt += i·RPHAIRate, i the lesser stage beyond
//     the threshold, then rc = (rt+rc)/2); otherwise additive increase
//     (rt += RPAIRate, then the same).
//
// Nothing here runs on a clock of its own: the timers are settled lazily,
// from the time of each call (advance), as many periods as have passed, so
// the rate curve is a function of the events and their times only.

// rpUnknownRate is the rate a QP is limited to on its first CNP when it has
// no measurement of its own rate and no RPMaxRate: about what one goroce
// QP sends on loopback.
const rpUnknownRate = 1e9

// rpMeterPeriod is the period over which an unthrottled QP measures its
// acknowledged rate, which stands for the line rate.
const rpMeterPeriod = time.Millisecond

// rpMeterMin is the least time over which a limited QP's sending rate is
// measured, for a decrease from it.
const rpMeterMin = 100 * time.Microsecond

// rpBurst is how long the token bucket may fill at the current rate: a
// timer woken late, or a pause, sends at most that much at once.
const rpBurst = time.Millisecond

// rpOverhead is what a packet costs on the wire beyond its payload, in the
// token bucket's accounting: IPv4, UDP, BTH, RETH and ICRC.
const rpOverhead = 20 + 8 + 12 + 16 + 4

// dcqcn is the reaction point's state.
type dcqcn struct {
	limited bool
	rc, rt  float64 // current and target rate, bytes per second
	alpha   float64 // in [0, 1]
	// alphaAt starts the current α period; cnpInPeriod says a CNP came
	// in it.
	alphaAt     time.Time
	cnpInPeriod bool
	decreasedAt time.Time
	// incAt is when the increase timer last fired (or was restarted);
	// sent the bytes since the last byte-counter event; timerStage and
	// byteStage count the events since the last decrease.
	incAt                 time.Time
	sent                  uint64
	timerStage, byteStage uint32
	// tokens is the bucket, in bytes, as of tokAt; waitUntil, when
	// waiting, is when it holds a packet's worth again.
	tokens    float64
	tokAt     time.Time
	waiting   bool
	waitUntil time.Time
	// The meter: unthrottled, of the bytes acknowledged since meterAt,
	// the rate of the last full period and the highest; limited, of the
	// bytes sent since the last decrease.
	meterAt    time.Time
	meterBytes uint64
	lastRate   float64
	peakRate   float64
}

// lineRate returns the rate at which the limit is lifted: RPMaxRate, or
// the highest rate the QP measured, at least rpUnknownRate. A rate the QP
// measured while it shared a queue is no line rate: lifting the limit
// there would let the whole window into the queue again, while a limit
// above what the QP achieves costs nothing but the bucket's arithmetic.
func (qp *QP) lineRate() float64 {
	if c := qp.cc.cfg.RPMaxRate; c > 0 {
		return c
	}
	return max(qp.cc.rp.peakRate, rpUnknownRate)
}

// rpMeter counts n acknowledged PSNs toward the unthrottled rate
// measurement (called on progress, with ECN on).
func (qp *QP) rpMeter(now time.Time, n int32) {
	r := &qp.cc.rp
	if r.limited || n <= 0 {
		return
	}
	if r.meterAt.IsZero() {
		r.meterAt = now
	}
	r.meterBytes += uint64(n) * uint64(qp.mtu+rpOverhead)
	if d := now.Sub(r.meterAt); d >= rpMeterPeriod {
		r.lastRate = float64(r.meterBytes) / d.Seconds()
		r.peakRate = max(r.peakRate, r.lastRate)
		r.meterAt, r.meterBytes = now, 0
	}
}

// rpCNP reacts to a CNP.
func (qp *QP) rpCNP(now time.Time) {
	r := &qp.cc.rp
	c := &qp.cc.cfg
	if !r.limited {
		rate := c.RPMaxRate
		if rate <= 0 {
			rate = r.lastRate
			if d := now.Sub(r.meterAt); rate <= 0 && !r.meterAt.IsZero() && d > 0 {
				rate = float64(r.meterBytes) / d.Seconds()
			}
			if rate <= 0 {
				rate = rpUnknownRate
			}
			r.peakRate = max(r.peakRate, rate)
		}
		*r = dcqcn{
			limited: true, rc: rate, rt: rate,
			alpha: float64(c.RPInitialAlpha) / 1024, alphaAt: now,
			incAt: now, tokAt: now,
			lastRate: r.lastRate, peakRate: r.peakRate,
			meterAt: now,
		}
		r.tokens = qp.bucketDepth()
		r.decreasedAt = now.Add(-c.RPRateReduceMonitorPeriod)
	}
	qp.rpAdvance(now)
	r.cnpInPeriod = true
	if now.Sub(r.decreasedAt) < qp.rpMonitorPeriod() {
		return
	}
	// A QP that sends less than its rate (its window, or the
	// application, holds it back) decreases from what it sends, but by
	// no more than RPMinDecFac again: a cut of a rate it does not use
	// would change nothing while its increases went on, and a QP that
	// sends a packet now and then must not fall to the minimum at once.
	if d := now.Sub(r.meterAt); d >= rpMeterMin && !r.meterAt.IsZero() {
		used := float64(r.meterBytes) / d.Seconds()
		r.rc = min(r.rc, max(used, r.rc*float64(c.RPMinDecFac)/100, c.RPMinRate))
	}
	r.meterAt, r.meterBytes = now, 0
	r.decreasedAt = now
	r.rt = r.rc
	f := 1 - r.alpha/float64(uint64(1)<<c.RPGD)
	r.rc *= max(f, float64(c.RPMinDecFac)/100)
	r.rc = max(r.rc, c.RPMinRate)
	r.incAt, r.sent, r.timerStage, r.byteStage = now, 0, 0, 0
	qp.counters.RateDecreases++
}

// rpMonitorPeriod returns the least time between two decreases:
// RPRateReduceMonitorPeriod, or the QP's smoothed round trip when longer.
// The CNPs of packets sent before a decrease took effect say nothing about
// the new rate; a NIC's round trips are microseconds, so the monitor
// period covers them, but here a queue of a few hundred kilobytes (a
// window of every flow) takes milliseconds to drain, and a decrease per
// CNP over that time would take the rate to the minimum.
func (qp *QP) rpMonitorPeriod() time.Duration {
	p := qp.cc.cfg.RPRateReduceMonitorPeriod
	if qp.rto.valid {
		p = max(p, qp.rto.srtt)
	}
	return p
}

// rpAdvance settles the α periods and increase timer events up to now.
func (qp *QP) rpAdvance(now time.Time) {
	r := &qp.cc.rp
	c := &qp.cc.cfg
	if p := c.RPAlphaPeriod; p > 0 {
		if n := now.Sub(r.alphaAt) / p; n > 0 {
			r.alphaAt = r.alphaAt.Add(n * p)
			g := float64(c.RPG) / 1024
			if r.cnpInPeriod {
				r.alpha = (1-g)*r.alpha + g
				r.cnpInPeriod = false
				n--
			}
			r.alpha *= math.Pow(1-g, float64(n))
		}
	}
	if p := c.RPTimeReset; p > 0 {
		for r.limited && now.Sub(r.incAt) >= p {
			r.incAt = r.incAt.Add(p)
			r.timerStage++
			qp.rpIncrease()
		}
	}
}

// rpIncrease is one increase event (timer or byte counter, whose stage the
// caller counted); it lifts the limit once rc reaches the line rate.
func (qp *QP) rpIncrease() {
	r := &qp.cc.rp
	c := &qp.cc.cfg
	f := c.RPThreshold
	lo, hi := min(r.timerStage, r.byteStage), max(r.timerStage, r.byteStage)
	switch {
	case hi < f: // fast recovery
	case lo > f:
		r.rt += float64(lo-f) * c.RPHAIRate
	default:
		r.rt += c.RPAIRate
	}
	r.rc = (r.rt + r.rc) / 2
	if line := qp.lineRate(); r.rc >= line {
		r.limited, r.waiting = false, false
		qp.counters.RateLifted++
	}
}

// bucketDepth is the token bucket's size at the current rate: rpBurst
// worth, at least two packets.
func (qp *QP) bucketDepth() float64 {
	return max(qp.cc.rp.rc*rpBurst.Seconds(), float64(2*(qp.mtu+rpOverhead)))
}

// paced reports whether the rate limit lets the requester send a packet
// now; when it does not, Deadline asks for a call when it will.
func (qp *QP) paced(now time.Time) bool {
	r := &qp.cc.rp
	qp.rpAdvance(now)
	if !r.limited {
		return true
	}
	if d := now.Sub(r.tokAt); d > 0 {
		r.tokens = min(r.tokens+r.rc*d.Seconds(), qp.bucketDepth())
		r.tokAt = now
	}
	if r.tokens > 0 {
		r.waiting = false
		return true
	}
	r.waiting = true
	r.waitUntil = now.Add(time.Duration(-r.tokens/r.rc*1e9) + time.Microsecond)
	return false
}

// spend charges a packet of payload bytes to the bucket and to the byte
// counter (called only while limited).
func (qp *QP) spend(payload uint32) {
	r := &qp.cc.rp
	n := uint64(payload) + rpOverhead
	r.tokens -= float64(n)
	r.sent += n
	r.meterBytes += n
	if b := qp.cc.cfg.RPByteReset; b > 0 && r.sent >= b {
		r.sent -= b
		r.byteStage++
		qp.rpIncrease()
	}
}

// RateLimit returns the QP's current rate limit in bytes per second, and
// false when it is not limited.
func (qp *QP) RateLimit() (float64, bool) {
	return qp.cc.rp.rc, qp.cc.rp.limited
}
