//go:build goroce_faults

package netio

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"time"
)

const faultsBuilt = true

// bthMaskedByte is the byte of the BTH the ICRC does not cover.
const bthMaskedByte = 4

// heldDatagram is a datagram the fault tap holds back; its bytes are in the
// tap's buffer pool at the slot's index.
type heldDatagram struct {
	used        bool
	n           int
	due         time.Duration // since faultTap.epoch
	seq         uint64        // arrival order, to break ties in due
	from, local netip.AddrPort
	ecn         ECN
}

// faultTap applies Faults to received datagrams. It is used only by the
// goroutine running Serve (one at a time), so it needs no lock. Every
// buffer is allocated by newFaultTap: the steady state does not allocate.
type faultTap struct {
	cfg   Faults
	rng   *rand.Rand
	epoch time.Time
	size  int    // bytes per held datagram
	pool  []byte // MaxHeldDatagrams slots of size bytes
	held  [MaxHeldDatagrams]heldDatagram
	nheld int
	seq   uint64

	// deadline is the read deadline last set on the socket, valid while
	// armed: Serve's cancellation and its exit also set the deadline, so
	// armed is cleared whenever the socket's deadline may differ.
	deadline time.Time
	armed    bool
}

// newFaultTap returns the tap for f, nil when f is nil; size is the
// largest datagram.
func newFaultTap(f *Faults, size int) (*faultTap, error) {
	if f == nil {
		return nil, nil
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return &faultTap{
		cfg: *f,
		// The second PCG word is a fixed odd constant (the golden
		// ratio), so that Seed alone fixes the sequence.
		rng:   rand.New(rand.NewPCG(f.Seed, 0x9e3779b97f4a7c15)),
		epoch: time.Now(),
		size:  size,
		pool:  make([]byte, MaxHeldDatagrams*size),
	}, nil
}

// now returns the tap's clock, monotonic.
func (t *faultTap) now() time.Duration { return time.Since(t.epoch) }

// chance draws true with probability p; it draws nothing when p is 0, so
// that a fault left at zero does not change the others' sequence.
func (t *faultTap) chance(p float64) bool {
	return p > 0 && t.rng.Float64() < p
}

// holdTime draws how long a datagram is held back; 0 delivers it at once.
func (t *faultTap) holdTime() time.Duration {
	d := t.cfg.Delay
	if t.cfg.Jitter > 0 {
		d += time.Duration(t.rng.Int64N(int64(t.cfg.Jitter)))
	}
	if t.chance(t.cfg.Reorder) {
		d += max(t.cfg.Delay+t.cfg.Jitter, ReorderHold)
	}
	return d
}

// admit applies the faults to one datagram read at time now with ECN
// field ecn and delivers what is left of it (c.accept) or holds it back. A
// corrupted bit is flipped in place and flipped back afterwards, so that a
// duplicate starts from the original bytes.
func (t *faultTap) admit(c *Conn, rx *receiver, h Handler, data []byte, from, local netip.AddrPort, ecn ECN, tl *rxTally, now time.Duration) {
	ctr := &c.counters
	if t.chance(t.cfg.Drop) {
		ctr.FaultDropped.Add(1)
		return
	}
	if (ecn == ECNECT0 || ecn == ECNECT1) && t.chance(t.cfg.MarkCE) {
		// As a queue marks: only ECN-capable packets.
		ecn = ECNCE
		ctr.FaultMarkedCE.Add(1)
	}
	copies := 1
	if t.chance(t.cfg.Duplicate) {
		copies = 2
		ctr.FaultDuplicated.Add(1)
	}
	for range copies {
		bit := -1
		if len(data) > bthMaskedByte && t.chance(t.cfg.Corrupt) {
			// Any bit the ICRC covers: not BTH byte 4 (FECN, BECN
			// and reserved bits), which it masks so that switches
			// may mark congestion.
			bit = t.rng.IntN(8 * (len(data) - 1))
			if bit >= 8*bthMaskedByte {
				bit += 8
			}
			data[bit/8] ^= 1 << (bit % 8)
			ctr.FaultCorrupted.Add(1)
		}
		if d := t.holdTime(); d > 0 && t.hold(data, from, local, ecn, now+d) {
			ctr.FaultDelayed.Add(1)
		} else {
			c.accept(rx, h, data, from, local, ecn, tl)
		}
		if bit >= 0 {
			data[bit/8] ^= 1 << (bit % 8)
		}
	}
}

// hold copies data into a free slot, due at due; false when every slot is
// taken.
func (t *faultTap) hold(data []byte, from, local netip.AddrPort, ecn ECN, due time.Duration) bool {
	if t.nheld == len(t.held) || len(data) > t.size {
		return false
	}
	for i := range t.held {
		s := &t.held[i]
		if s.used {
			continue
		}
		copy(t.pool[i*t.size:], data)
		t.seq++
		*s = heldDatagram{used: true, n: len(data), due: due, seq: t.seq, from: from, local: local, ecn: ecn}
		t.nheld++
		return true
	}
	return false
}

// next returns the index of the held datagram due first, -1 if none.
func (t *faultTap) next() int {
	best := -1
	for i := range t.held {
		s := &t.held[i]
		if !s.used {
			continue
		}
		if best < 0 || s.due < t.held[best].due || (s.due == t.held[best].due && s.seq < t.held[best].seq) {
			best = i
		}
	}
	return best
}

// release delivers the held datagrams due by now, earliest first; false
// means the Conn was closed meanwhile.
func (t *faultTap) release(c *Conn, rx *receiver, h Handler, tl *rxTally, now time.Duration) bool {
	for t.nheld > 0 {
		i := t.next()
		s := &t.held[i]
		if s.due > now {
			break
		}
		if c.closing.Load() {
			return false
		}
		s.used = false
		t.nheld--
		c.accept(rx, h, t.pool[i*t.size:i*t.size+s.n], s.from, s.local, s.ecn, tl)
		c.counters.FaultReleased.Add(1)
	}
	return true
}

// disarm records that the socket's read deadline is unknown.
func (t *faultTap) disarm() { t.armed = false }

// arm sets the socket's read deadline to when the next held datagram is due
// (none when nothing is held), so that the blocked read wakes for it. It
// returns ctx.Err() checked after setting the deadline: a cancellation that
// expired the deadline before is not overwritten unnoticed.
func (t *faultTap) arm(ctx context.Context, c *Conn) error {
	var want time.Time
	if i := t.next(); i >= 0 {
		want = t.epoch.Add(t.held[i].due)
	}
	if t.armed && want.Equal(t.deadline) {
		return nil
	}
	if err := c.uc.SetReadDeadline(want); err != nil {
		return err
	}
	t.deadline, t.armed = want, true
	return ctx.Err()
}
