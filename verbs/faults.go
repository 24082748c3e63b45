package verbs

import (
	"time"

	"github.com/goroce/goroce/internal/netio"
)

// Faults configures fault injection on a device's receive path, for
// testing only: DeviceConfig.FaultInjection makes the device drop,
// duplicate, corrupt, delay and reorder the packets it receives, before
// they are parsed, so that tests can exercise the transport's recovery
// (retransmission, duplicate detection, the ICRC check) over loopback.
//
// Fault injection exists only in binaries built with the goroce_faults
// build tag (go test -tags goroce_faults); elsewhere Open refuses a
// DeviceConfig with FaultInjection set, so a production binary cannot turn
// it on by accident (FaultInjectionBuilt reports which kind of binary this
// is).
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
	// Delay and Jitter, in [0, 1s], are the fixed and the uniformly
	// random part of the delay added to every received packet.
	Delay, Jitter time.Duration
}

// FaultInjectionBuilt reports whether this binary was built with the
// goroce_faults tag, that is whether DeviceConfig.FaultInjection may be set.
const FaultInjectionBuilt = netio.FaultInjectionBuilt

// FaultCounters count the faults a device's fault injection applied to the
// packets it received (see Faults). They are zero without fault injection.
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
}

// FaultCounters returns the counts of the faults injected so far.
func (d *Device) FaultCounters() FaultCounters {
	c := d.eng.conn.Counters()
	return FaultCounters{
		Dropped:    c.FaultDropped.Load(),
		Duplicated: c.FaultDuplicated.Load(),
		Corrupted:  c.FaultCorrupted.Load(),
		Delayed:    c.FaultDelayed.Load(),
	}
}

// checkFaults validates DeviceConfig.FaultInjection for Open.
func checkFaults(op string, f *Faults) error {
	if f == nil {
		return nil
	}
	if !FaultInjectionBuilt {
		return newError(op, "FaultInjection", ErrInvalidArgument, "fault injection needs a binary built with -tags goroce_faults")
	}
	if err := (*netio.Faults)(f).Validate(); err != nil {
		return errorf(op, "FaultInjection", ErrInvalidArgument, "%v", err)
	}
	return nil
}

// netioFaults converts f for netio.Config; nil stays nil.
func netioFaults(f *Faults) *netio.Faults {
	if f == nil {
		return nil
	}
	nf := netio.Faults(*f)
	return &nf
}
