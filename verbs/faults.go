//go:build goroce_faults

package verbs

import (
	"time"

	"github.com/goroce/goroce/internal/netio"
)

// This file exists only in binaries built with the goroce_faults tag (go
// test -tags goroce_faults): fault injection is for tests, and a production
// binary has no way to turn it on, not even by mistake.

// Faults configures fault injection on a device's receive path, for
// testing only: OpenWithFaults opens a device that drops, duplicates,
// corrupts, delays and reorders the packets it receives, before they are
// parsed, so that tests can exercise the transport's recovery
// (retransmission, duplicate detection, the ICRC check) over loopback.
//
// Each received datagram is dropped with probability Drop; otherwise
// duplicated with probability Duplicate (the copy arrives right after it).
// Each copy then has one bit covered by the ICRC flipped with probability
// Corrupt (the device drops it and counts it in Counters.ICRCErrors, or in
// Counters.Malformed when the parser rejects it first), and is held back
// for Delay plus a uniformly random part of Jitter, plus, with probability
// Reorder, long enough for later packets to overtake it. At most 128
// datagrams are held at once; beyond that they are not delayed. The
// decisions come from a generator seeded with Seed.
type Faults struct {
	// Seed seeds the generator of fault decisions: the same sequence of
	// packets meets the same faults.
	Seed uint64
	// Drop, Duplicate, Corrupt and Reorder are probabilities in [0, 1].
	Drop, Duplicate, Corrupt, Reorder float64
	// MarkCE, a probability in [0, 1], marks received ECN-capable packets
	// CE (congestion experienced), as a congested queue on the way would:
	// the test of congestion control's notification and reaction points
	// on a machine whose queues mark nothing. It draws after Drop.
	MarkCE float64
	// Delay and Jitter, in [0, 1s], are the fixed and the uniformly
	// random part of the delay added to every received packet.
	Delay, Jitter time.Duration
}

// OpenWithFaults is Open for a device whose receive path injects faults
// (see Faults). It fails with ErrInvalidArgument, naming "Faults", if a
// probability or delay is out of range.
func OpenWithFaults(cfg DeviceConfig, f Faults) (*Device, error) {
	const op = "OpenWithFaults"
	nf := netio.Faults(f)
	if err := nf.Validate(); err != nil {
		return nil, errorf(op, "Faults", ErrInvalidArgument, "%v", err)
	}
	return open(op, cfg, &nf)
}

// FaultCounters count the faults a device's fault injection applied to the
// packets it received (see Faults).
type FaultCounters struct {
	// Dropped counts packets dropped.
	Dropped uint64
	// Duplicated counts packets received twice.
	Duplicated uint64
	// Corrupted counts packet copies with a bit flipped; each is also
	// counted in Counters.ICRCErrors or Counters.Malformed.
	Corrupted uint64
	// Delayed counts packet copies held back (delayed or reordered).
	Delayed uint64
	// Released counts the held copies delivered when due. FaultCounters
	// reads it before Delayed, so Delayed minus Released is never less
	// than the copies still held.
	Released uint64
	// MarkedCE counts ECN-capable packets marked CE.
	MarkedCE uint64
}

// FaultCounters returns the counts of the faults injected so far; they are
// zero on a device opened without faults.
func (d *Device) FaultCounters() FaultCounters {
	if d.hw != nil {
		return FaultCounters{}
	}
	c := d.eng.netCounters()
	released := c.FaultReleased.Load()
	return FaultCounters{
		Dropped:    c.FaultDropped.Load(),
		Duplicated: c.FaultDuplicated.Load(),
		Corrupted:  c.FaultCorrupted.Load(),
		Delayed:    c.FaultDelayed.Load(),
		Released:   released,
		MarkedCE:   c.FaultMarkedCE.Load(),
	}
}
