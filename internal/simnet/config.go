package simnet

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"time"
)

// LinkConfig describes one direction of a link: what happens to a datagram
// sent from one address to another. The zero LinkConfig is a perfect link:
// no delay, no loss, no size limit, unlimited bandwidth.
//
// A datagram sent on a link goes through these stages, in order; the first
// that drops it decides its fate:
//
//  1. partition: dropped if the two addresses are partitioned
//     ([Network.Partition]);
//  2. MTU: dropped if longer than MTU;
//  3. queue: dropped if QueueLimit datagrams are already in flight on the link;
//  4. serialization: with a Bandwidth, the datagram waits until the link has
//     finished transmitting the datagrams before it, then takes
//     len/Bandwidth seconds to transmit; the bytes it finds waiting
//     (the backlog) decide whether it is marked CE (MarkMin, MarkMax,
//     MarkProb), as a switch that marks ECN above a queue threshold does;
//  5. loss: dropped with probability Loss;
//  6. duplication: with probability Duplicate the network makes a second copy;
//  7. per copy: with probability Corrupt one random bit of the copy is
//     flipped, and the copy travels for Delay plus a uniform random extra
//     delay in [0, Jitter], plus with probability Reorder a further uniform
//     random delay in (0, ReorderDelay].
//
// A copy is also dropped if its two addresses are partitioned when it
// arrives.
type LinkConfig struct {
	// Delay is the fixed one-way propagation delay.
	Delay time.Duration
	// Jitter is the upper bound of a uniformly distributed extra delay drawn
	// for every datagram. Any non-zero Jitter can reorder datagrams sent
	// closer together than Jitter.
	Jitter time.Duration

	// Loss is the probability that a datagram is lost.
	Loss float64
	// Duplicate is the probability that the network delivers a datagram
	// twice. The second copy is delayed (and possibly corrupted)
	// independently of the first.
	Duplicate float64
	// Corrupt is the probability that a copy of a datagram arrives with
	// exactly one bit flipped, at a uniformly random position. The sender's
	// bytes are never modified.
	Corrupt float64
	// Reorder is the probability that a datagram is held back for an extra
	// delay of up to ReorderDelay, so that datagrams sent after it overtake
	// it.
	Reorder float64
	// ReorderDelay bounds the extra delay of a reordered datagram. It must be
	// positive when Reorder is.
	ReorderDelay time.Duration

	// MTU is the largest datagram, in bytes, the link carries; longer ones
	// are dropped and counted in [Stats].DroppedMTU. It applies to the
	// datagram handed to [Network.Send] (a UDP payload), not to an IP packet.
	// Zero means no limit.
	MTU int
	// Bandwidth, in bytes per second, makes the link transmit one datagram
	// at a time, each taking len/Bandwidth seconds, so that a burst queues
	// behind itself and arrives spread out. Zero means infinite bandwidth.
	Bandwidth int64
	// QueueLimit is the most datagrams that may be in flight on the link
	// (sent and neither delivered nor dropped yet); a datagram sent while
	// the link is full is tail-dropped and counted in [Stats].DroppedQueue.
	// Duplicates made by the network are not refused. Zero means no limit.
	QueueLimit int

	// MarkMin, MarkMax and MarkProb make the link's transmit queue mark
	// ECN Congestion Experienced (delivered with the copy, see
	// [Network.DeliverECN]) on the backlog a datagram finds waiting, in
	// bytes, as RED does on the instantaneous queue in DCQCN's switches:
	// never at or below MarkMin, with a probability rising linearly to
	// MarkProb at MarkMax, always above MarkMax. MarkMin == MarkMax is a
	// step at one threshold (DCTCP's K). The backlog exists only with a
	// Bandwidth. MarkMax zero: no marking. Every datagram is taken as
	// ECN-capable.
	MarkMin, MarkMax int64
	MarkProb         float64
}

// marks reports whether a datagram that finds backlog bytes waiting is
// marked CE, drawing from r only between the thresholds.
func (c *LinkConfig) marks(r *rand.Rand, backlog int64) bool {
	switch {
	case c.MarkMax <= 0 || backlog <= c.MarkMin:
		return false
	case backlog > c.MarkMax:
		return true
	}
	return r.Float64() < c.MarkProb*float64(backlog-c.MarkMin)/float64(c.MarkMax-c.MarkMin)
}

// Validate reports whether c is a usable configuration: probabilities in
// [0, 1], no negative durations or sizes, and a ReorderDelay for a non-zero
// Reorder.
func (c LinkConfig) Validate() error {
	var errs []error
	prob := func(name string, p float64) {
		// The negated form also rejects NaN.
		if !(p >= 0 && p <= 1) {
			errs = append(errs, fmt.Errorf("%s %v not in [0, 1]", name, p))
		}
	}
	prob("Loss", c.Loss)
	prob("Duplicate", c.Duplicate)
	prob("Corrupt", c.Corrupt)
	prob("Reorder", c.Reorder)
	prob("MarkProb", c.MarkProb)
	nonNeg := func(name string, v int64) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s %d is negative", name, v))
		}
	}
	nonNeg("Delay", int64(c.Delay))
	nonNeg("Jitter", int64(c.Jitter))
	nonNeg("ReorderDelay", int64(c.ReorderDelay))
	nonNeg("MTU", int64(c.MTU))
	nonNeg("Bandwidth", c.Bandwidth)
	nonNeg("QueueLimit", int64(c.QueueLimit))
	nonNeg("MarkMin", c.MarkMin)
	nonNeg("MarkMax", c.MarkMax)
	if c.MarkMax > 0 && c.MarkMin > c.MarkMax {
		errs = append(errs, fmt.Errorf("MarkMin %d above MarkMax %d", c.MarkMin, c.MarkMax))
	}
	if c.Reorder > 0 && c.ReorderDelay <= 0 {
		errs = append(errs, errors.New("ReorderDelay must be positive when Reorder is set"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("simnet: invalid LinkConfig: %w", err)
	}
	return nil
}

// mustValidate panics on an invalid configuration. Link configurations are
// written by the programmer of a test, so a bad one is a bug to report at
// once rather than an error to handle.
func (c LinkConfig) mustValidate() {
	if err := c.Validate(); err != nil {
		panic(err)
	}
}

// backlog is the bytes the transmitter still has to send in wait, the time
// until it is free: wait x Bandwidth (zero when idle).
func (c LinkConfig) backlog(wait time.Duration) int64 {
	if wait <= 0 || c.Bandwidth <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(wait), uint64(c.Bandwidth))
	if hi >= uint64(time.Second) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(time.Second))
	return int64(min(q, math.MaxInt64))
}

// transmissionTime is how long the link takes to put n bytes on the wire.
// It rounds up so that a non-zero datagram always occupies the link for at
// least a nanosecond.
func (c LinkConfig) transmissionTime(n int) time.Duration {
	if c.Bandwidth <= 0 || n == 0 {
		return 0
	}
	// n * 1e9 / Bandwidth in 128 bits: exact for any size and bandwidth.
	hi, lo := bits.Mul64(uint64(n), uint64(time.Second))
	bw := uint64(c.Bandwidth)
	if hi >= bw {
		return time.Duration(math.MaxInt64)
	}
	q, r := bits.Div64(hi, lo, bw)
	if r != 0 {
		q++
	}
	return time.Duration(min(q, math.MaxInt64))
}
