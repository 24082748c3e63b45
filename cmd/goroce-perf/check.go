package main

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/goroce/goroce/internal/oob"
)

// pattern is the byte at offset off of the data a QP sends, seeded with the
// QP's starting PSN, which the peer learns from the key line: so --check
// can validate the data without another exchange.
func pattern(seed uint32, off int) byte {
	x := uint32(off)*2654435761 + seed*40503
	return byte(x>>24) ^ byte(x>>8)
}

func fillPattern(b []byte, seed uint32) {
	for i := range b {
		b[i] = pattern(seed, i)
	}
}

// fillForCheck fills the memory the peer will read, or that we will send,
// with the pattern seeded by the QP's PSN.
func (s *side) fillForCheck() error {
	ms := s.maxSize()
	for i := range s.qps {
		seed := s.local[i].PSN
		switch s.cfg.test.verb {
		case verbWrite, verbSend:
			fillPattern(s.buf[i*s.slot:i*s.slot+ms], seed)
		case verbRead:
			fillPattern(s.buf[(s.cfg.qps+i)*s.slot:(s.cfg.qps+i)*s.slot+ms], seed)
		}
	}
	return nil
}

// checkData validates, with --check, what this side can see of the data
// after the last size: the bytes written, read or sent into its memory
// carry the pattern of the peer's QP, and atomics left the expected value.
func (s *side) checkData() error {
	if !s.cfg.check {
		return nil
	}
	_, _ = s.cq.Poll(nil) // synchronise with the device's memory stores
	cfg := s.cfg
	t := cfg.test
	size := s.maxSize()
	// In ib_write_lat the sender's last byte of each size carries its
	// count, so with -a the bytes at 2^k-1 hold counts, not the pattern.
	countByte := func(j int) bool { return t.lat && t.verb == verbWrite && (j+1)&j == 0 }
	region := func(off, n int, seed uint32) error {
		for j := range n {
			if got, want := s.buf[off+j], pattern(seed, j); got != want && !countByte(j) {
				return fmt.Errorf("check: byte %d is %#02x, want %#02x", j, got, want)
			}
		}
		return nil
	}
	checked := false
	for q := range s.qps {
		peer := s.remote[q].PSN
		var err error
		switch {
		case t.verb == verbWrite && t.lat:
			// The last byte carries the count.
			err = region(s.recvSlot(q), size-1, peer)
			if err == nil && s.buf[s.recvSlot(q)+size-1] != byte(cfg.iters) {
				err = fmt.Errorf("check: the count byte is %d, want %d", s.buf[s.recvSlot(q)+size-1], byte(cfg.iters))
			}
			checked = true
		case t.verb == verbWrite && (s.role == oob.Server || cfg.bidir):
			if cfg.conn == "UC" {
				s.awaitUCWrites(q)
			}
			err, checked = region(s.recvSlot(q), size, peer), true
		case t.verb == verbSend && (s.role == oob.Server || t.lat || cfg.bidir):
			// After the GRH with UD.
			err, checked = region(s.recvSlot(q)+s.recvExtra(), size, peer), true
		case t.verb == verbRead && (s.role == oob.Client || cfg.bidir):
			err, checked = region(s.sendSlot(q), size, peer), true
		case t.verb == verbAtomic && (s.role == oob.Client || cfg.bidir):
			// Each atomic returned the value before it; the last one
			// returned the number of atomics before it on this QP.
			n := s.atomicsDone(q)
			if got := binary.NativeEndian.Uint64(s.buf[s.sendSlot(q):]); got != uint64(n-1) {
				err = fmt.Errorf("check: the last atomic returned %d, want %d", got, n-1)
			}
			if err == nil && cfg.bidir && cfg.duration == 0 {
				err = s.checkAtomicTarget(q)
			}
			checked = true
		case t.verb == verbAtomic && s.role == oob.Server && !t.lat && cfg.duration == 0:
			want := uint64(cfg.iters)
			if got := binary.NativeEndian.Uint64(s.buf[s.recvSlot(q):]); got != want {
				err = fmt.Errorf("check: the target holds %d after the atomics, want %d", got, want)
			}
			checked = true
		}
		if err != nil {
			return fmt.Errorf("QP %d: %w", q, err)
		}
	}
	s.checked = checked
	return nil
}

// atomicsDone is how many atomics QP q ran in the last run.
func (s *side) atomicsDone(q int) int {
	if q < len(s.perQP) {
		return s.perQP[q]
	}
	if q == 0 && len(s.results) > 0 {
		return int(s.results[len(s.results)-1].iters) // runLat
	}
	return 0
}

// checkAtomicTarget checks the 8 bytes the peer's atomics on QP q ran on:
// each added 1, or swapped in one more than it found.
func (s *side) checkAtomicTarget(q int) error {
	want := uint64(s.cfg.iters)
	if got := binary.NativeEndian.Uint64(s.buf[s.recvSlot(q):]); got != want {
		return fmt.Errorf("check: the target holds %d after the atomics, want %d", got, want)
	}
	return nil
}

// ucSettle is how long --check waits for the last UC WRITEs to land on
// the passive side, which nothing tells when they have.
const ucSettle = 5 * time.Second

// awaitUCWrites waits, before --check reads what the peer's UC WRITEs
// wrote on QP q, until the QP has taken in every packet of the run. A UC
// WRITE completes at the writer once sent, so the barrier that follows may
// overtake its packets. The QP's packet counter is read under the lock the
// device holds while it places a packet: once it shows them all, the bytes
// are settled and ours to read. With -D the count is not known: it waits
// until the counter has not moved for a while. A packet that never comes
// leaves it waiting ucSettle, and the check then fails.
func (s *side) awaitUCWrites(q int) {
	want := uint64(0)
	if s.cfg.duration == 0 {
		mtu := s.mtu.Bytes()
		for _, size := range s.sizes() {
			want += uint64(s.cfg.iters) * uint64(max(1, (size+mtu-1)/mtu))
		}
	}
	deadline := time.Now().Add(ucSettle)
	last, since := s.qps[q].Counters().RcvdPkts, time.Now()
	for time.Now().Before(deadline) {
		n := s.qps[q].Counters().RcvdPkts
		switch {
		case want > 0 && n >= want:
			return
		case n != last:
			last, since = n, time.Now()
		case want == 0 && time.Since(since) > 100*time.Millisecond:
			return
		}
		time.Sleep(time.Millisecond)
	}
}
