package transport

import "time"

// The RTT-based window (CCConfig.RTT), after Swift (Kumar et al., "Swift:
// Delay is Simple and Effective for Congestion Control in the Datacenter",
// SIGCOMM 2020), for paths whose queues mark no ECN: the round trips the
// adaptive timeout measures (rto.go: one packet at a time, Karn's rule)
// are compared with a target round trip, RTTTarget. Swift's target is a
// fixed delay too (a base plus per-hop and per-flow terms, set for the
// fabric): a least round trip measured as a target's base would be taken
// with the queue already full for every flow that starts after another,
// and those flows would then keep a longer queue than the first, and a
// larger share. Below it the window grows by RTTAI packets per round trip; above it, at
// most once per round trip, it shrinks by RTTBeta × (rtt − target) / rtt,
// at most RTTMaxMDF of it. The window bounds the PSNs in flight on top of
// the go-back-N window (sendWindow); flows through one queue that all keep
// its delay near the same target converge to equal windows, and the queue
// to about the target's worth of packets.

// rttMinWindow is the least RTT window, in packets: one packet keeps a
// flow's round trips measured.
const rttMinWindow = 1

// rttWindow is the RTT window's state.
type rttWindow struct {
	started     bool    // cwnd is set (first sample taken)
	cwnd        float64 // packets
	decreasedAt time.Time
}

// packets returns the window in whole packets, max before the first
// sample.
func (w *rttWindow) packets(max uint32) uint32 {
	if !w.started {
		return max
	}
	return min(uint32(w.cwnd), max)
}

// rttSample feeds one round-trip measurement to the RTT window.
func (qp *QP) rttSample(rtt time.Duration, now time.Time) {
	w := &qp.cc.win
	c := &qp.cc.cfg
	if !c.RTT || rtt <= 0 {
		return
	}
	if !w.started {
		// Start from what is in flight, as a window that was not
		// limiting.
		w.started = true
		w.cwnd = float64(qp.req.win)
	}
	target := c.RTTTarget
	if rtt <= target {
		w.cwnd += c.RTTAI
	} else if now.Sub(w.decreasedAt) >= rtt {
		f := c.RTTBeta * float64(rtt-target) / float64(rtt)
		w.cwnd *= 1 - min(f, c.RTTMaxMDF)
		w.decreasedAt = now
		qp.counters.RTTDecreases++
	}
	w.cwnd = min(max(w.cwnd, rttMinWindow), float64(qp.window))
}

// RTTWindow returns the RTT window in packets, and false before the first
// sample or with the RTT window off.
func (qp *QP) RTTWindow() (float64, bool) {
	w := &qp.cc.win
	return w.cwnd, qp.cc.cfg.RTT && w.started
}
