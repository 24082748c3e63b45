package netio

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Faults configures the fault-injection tap, a testing aid: it damages the
// datagrams a Conn receives, before they are parsed, so that the transport's
// recovery (retransmission, duplicate detection, the ICRC check) can be
// exercised over a perfect loopback network. The tap exists only in
// binaries built with the goroce_faults build tag; elsewhere Open refuses a
// Config with Faults set (ErrFaultsNotBuilt), so a production binary cannot
// turn it on by accident.
//
// Each datagram read from the socket is, in this order: dropped with
// probability Drop; otherwise, if it arrived ECN-capable (ECT(0) or
// ECT(1); see Config.ECT), marked CE with probability MarkCE, as a
// congested queue on the way would have (no qdisc on this machine's
// kernels marks); then duplicated with probability Duplicate (the
// copy arrives right after the original). Each copy then has one random bit
// flipped with probability Corrupt, which the ICRC check (or the parser,
// when the bit lands in a header field it checks) must catch: any bit the
// ICRC covers, that is any but those of BTH byte 4 (FECN, BECN and reserved
// bits, which the ICRC masks because switches may change them), and is held
// back (delayed) for Delay plus a uniformly random part of Jitter. With
// probability Reorder a copy is held back for an extra Delay + Jitter (at
// least ReorderHold), so that later datagrams overtake it. Held datagrams
// are delivered when due by the receive loop; at most MaxHeldDatagrams wait
// at once, beyond which datagrams are delivered without delay.
//
// The decisions come from a PCG generator seeded with Seed: the same
// sequence of datagrams meets the same faults.
type Faults struct {
	// Seed seeds the generator of fault decisions.
	Seed uint64
	// Drop, Duplicate, Corrupt, Reorder and MarkCE are probabilities in
	// [0, 1].
	Drop, Duplicate, Corrupt, Reorder float64
	MarkCE                            float64
	// Delay is added to the arrival time of every datagram; Jitter is the
	// bound of a uniformly random extra delay, which reorders datagrams
	// that arrive within Jitter of each other. Both are non-negative and
	// at most MaxFaultDelay.
	Delay, Jitter time.Duration
}

// Bounds of Faults.
const (
	// MaxHeldDatagrams bounds the datagrams the tap holds back at once;
	// their buffers are allocated when the Conn opens.
	MaxHeldDatagrams = 128
	// MaxFaultDelay bounds Faults.Delay and Faults.Jitter: the tap
	// simulates a network, not an outage.
	MaxFaultDelay = time.Second
	// ReorderHold is the least extra hold of a reordered datagram, used
	// when Delay and Jitter are both zero.
	ReorderHold = 200 * time.Microsecond
)

// ErrFaultsNotBuilt is returned by Open for a Config with Faults set in a
// binary built without the goroce_faults tag.
var ErrFaultsNotBuilt = errors.New("netio: fault injection needs a binary built with -tags goroce_faults")

// FaultInjectionBuilt reports whether this binary was built with the
// goroce_faults tag, that is whether Config.Faults may be set.
const FaultInjectionBuilt = faultsBuilt

// Validate checks that the fields of f are in range.
func (f *Faults) Validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"Drop", f.Drop}, {"Duplicate", f.Duplicate}, {"Corrupt", f.Corrupt}, {"Reorder", f.Reorder}, {"MarkCE", f.MarkCE}} {
		if math.IsNaN(p.v) || p.v < 0 || p.v > 1 {
			return fmt.Errorf("netio: Faults.%s %v is not a probability in [0, 1]", p.name, p.v)
		}
	}
	if f.Delay < 0 || f.Delay > MaxFaultDelay || f.Jitter < 0 || f.Jitter > MaxFaultDelay {
		return fmt.Errorf("netio: Faults.Delay %v and Faults.Jitter %v must be in [0, %v]", f.Delay, f.Jitter, MaxFaultDelay)
	}
	return nil
}
