package verbs_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
)

// TestPropertyRegistrationVsRemoteAccess interleaves, at random from a
// seed, registrations, deregistrations and re-registrations of memory on
// one device with remote WRITE, READ and atomic operations from another,
// through a real RC connection, and checks after every step that:
//
//   - an operation succeeds exactly when its rkey names, at the time it
//     executes, a registration in the target QP's PD with the right it
//     needs that holds the whole range, and then it moved exactly the bytes
//     it names; otherwise it fails with REM_ACCESS_ERR and the target QP
//     raises QP_ACCESS_ERR (both QPs are then reset and reconnected);
//   - a byte of the target's memory outside every current registration
//     never changes: it keeps the value it had when it stopped being
//     registered;
//   - a READ returns no byte from outside a registration.
//
// Some steps race a deregistration or re-registration with an operation in
// flight: the operation may then succeed or fail, but Dereg and Rereg wait
// for it, so the bytes they unregister are still frozen from the moment
// they return.
func TestPropertyRegistrationVsRemoteAccess(t *testing.T) {
	seeds, steps := 200, 100
	switch {
	case testing.Short():
		seeds, steps = 20, 100
	case raceDetector:
		seeds = 50
	}
	w := newPropWorld(t)
	for seed := range seeds {
		w.run(t, uint64(seed), steps)
		if t.Failed() {
			return
		}
	}
}

const (
	propSlots    = 4
	propSlotLen  = 4096
	propArenaLen = propSlots * propSlotLen
)

// propWorld is the state of the property test: the connection, the target
// memory and the model of what is registered.
type propWorld struct {
	a, b   *rdmatest.End
	arena  []byte
	frozen []byte // the value every unregistered byte must keep
	slots  [propSlots]propSlot
	rng    *rand.Rand
	seed   uint64
	step   int
	log    []string // what the current seed did, for failure reports
	// The PSNs the connection started with, a's and b's.
	psnA, psnB uint32
}

func (w *propWorld) logf(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf("%d: ", w.step)+fmt.Sprintf(format, args...))
}

// propSlot is one slot of the arena and the registration in it, if any.
type propSlot struct {
	mr     *verbs.MR
	off, n int // the registered range of the slot, relative to the arena
	stale  []uint32
}

func newPropWorld(t *testing.T) *propWorld {
	w := &propWorld{
		a:      newEnd(t, 1, rdmatest.EndOptions{BufSize: 8192}),
		b:      newEnd(t, 2, rdmatest.EndOptions{BufSize: 64}),
		arena:  make([]byte, propArenaLen),
		frozen: make([]byte, propArenaLen),
	}
	w.psnA, w.psnB = 0xFFFFF8, 0x2000
	rdmatest.Connect(t, w.a, w.b, rdmatest.DefaultLink(), rdmatest.DefaultLink())
	return w
}

func (w *propWorld) fatalf(t *testing.T, format string, args ...any) {
	t.Helper()
	tail := w.log[max(0, len(w.log)-20):]
	tail = append(tail, fmt.Sprintf("a %v %+v %+v", w.a.QP.State(), w.a.QP.Counters(), verbs.QPSnapshot(w.a.QP)),
		fmt.Sprintf("b %v %+v %+v", w.b.QP.State(), w.b.QP.Counters(), verbs.QPSnapshot(w.b.QP)))
	t.Fatalf("seed %d step %d: %s\nlast steps:\n%s", w.seed, w.step, fmt.Sprintf(format, args...), strings.Join(tail, "\n"))
}

// run plays one seed.
func (w *propWorld) run(t *testing.T, seed uint64, steps int) {
	t.Helper()
	w.seed, w.rng = seed, rand.New(rand.NewPCG(seed, 0x5eed))
	w.log = w.log[:0]
	for i := range w.slots {
		if s := &w.slots[i]; s.mr != nil {
			if err := s.mr.Dereg(); err != nil {
				t.Fatal(err)
			}
			s.mr = nil
		}
		w.slots[i].stale = w.slots[i].stale[:0]
	}
	for i := range w.arena {
		w.arena[i] = byte(w.rng.Uint32())
	}
	copy(w.frozen, w.arena)
	for w.step = 0; w.step < steps; w.step++ {
		switch k := w.rng.IntN(10); {
		case k < 2:
			w.register(t)
		case k < 3:
			w.deregister(t)
		case k < 4:
			w.reregister(t)
		case k < 5:
			w.race(t)
		default:
			w.remote(t)
		}
		w.checkUnregistered(t)
	}
}

// randomAccess returns a valid MR access set, possibly without any remote
// right.
func (w *propWorld) randomAccess() verbs.AccessFlags {
	a := verbs.AccessFlags(w.rng.IntN(16)) & (verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic)
	if a&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 {
		a |= verbs.AccessLocalWrite
	}
	return a
}

// randomRange returns a range of slot i: 8-byte aligned, so atomics can
// hit it.
func (w *propWorld) randomRange(i int) (off, n int) {
	start := w.rng.IntN(propSlotLen/2) &^ 7
	n = 8 + w.rng.IntN(propSlotLen/2-8)&^7
	return i*propSlotLen + start, n
}

func (w *propWorld) register(t *testing.T) {
	i := w.rng.IntN(propSlots)
	s := &w.slots[i]
	if s.mr != nil {
		return
	}
	off, n := w.randomRange(i)
	mr, err := w.b.PD.RegMR(w.arena[off:off+n], w.randomAccess())
	if err != nil {
		w.fatalf(t, "RegMR: %v", err)
	}
	s.mr, s.off, s.n = mr, off, n
	w.logf("reg slot %d [%d,+%d) %v key %#x", i, off, n, mr.Access(), mr.RKey())
}

func (w *propWorld) deregister(t *testing.T) {
	if err := w.deregisterSlot(w.rng.IntN(propSlots)); err != nil {
		w.fatalf(t, "%v", err)
	}
}

func (w *propWorld) deregisterSlot(i int) error {
	s := &w.slots[i]
	if s.mr == nil {
		return nil
	}
	s.stale = append(s.stale, s.mr.RKey())
	w.logf("dereg slot %d key %#x", i, s.mr.RKey())
	if err := s.mr.Dereg(); err != nil {
		return fmt.Errorf("Dereg: %v", err)
	}
	// Dereg waited for accesses in flight: from now on these bytes stay.
	copy(w.frozen[s.off:s.off+s.n], w.arena[s.off:s.off+s.n])
	s.mr = nil
	return nil
}

func (w *propWorld) reregister(t *testing.T) {
	if err := w.reregisterSlot(w.rng.IntN(propSlots), w.rng.IntN(2) == 0, w.randomAccess()); err != nil {
		w.fatalf(t, "%v", err)
	}
}

// reregisterSlot changes slot i's access to access, or its range to a
// random one (translation).
func (w *propWorld) reregisterSlot(i int, translation bool, access verbs.AccessFlags) error {
	s := &w.slots[i]
	if s.mr == nil {
		return nil
	}
	s.stale = append(s.stale, s.mr.RKey())
	var err error
	off, n := s.off, s.n
	if translation {
		off, n = w.randomRange(i)
		err = s.mr.Rereg(verbs.ReregChangeTranslation, nil, w.arena[off:off+n], 0)
	} else {
		err = s.mr.Rereg(verbs.ReregChangeAccess, nil, nil, access)
	}
	if err != nil {
		return fmt.Errorf("Rereg: %v", err)
	}
	// Freeze what the old range held and the new one does not.
	for j := s.off; j < s.off+s.n; j++ {
		if j < off || j >= off+n {
			w.frozen[j] = w.arena[j]
		}
	}
	s.off, s.n = off, n
	w.logf("rereg slot %d [%d,+%d) %v key %#x", i, off, n, s.mr.Access(), s.mr.RKey())
	return nil
}

// checkUnregistered compares every byte outside the registrations with its
// frozen value.
func (w *propWorld) checkUnregistered(t *testing.T) {
	t.Helper()
	type span struct{ lo, hi int }
	var regs []span
	for i := range w.slots {
		if s := &w.slots[i]; s.mr != nil {
			regs = append(regs, span{s.off, s.off + s.n})
		}
	}
	// Slots are disjoint and ranges stay in their slot: sorted by slot.
	pos := 0
	for _, r := range append(regs, span{propArenaLen, propArenaLen}) {
		if !bytes.Equal(w.arena[pos:r.lo], w.frozen[pos:r.lo]) {
			for j := pos; j < r.lo; j++ {
				if w.arena[j] != w.frozen[j] {
					w.fatalf(t, "unregistered byte %d changed from %#x to %#x", j, w.frozen[j], w.arena[j])
				}
			}
		}
		pos = r.hi
	}
}

// propOp is a remote operation on the target.
type propOp struct {
	opcode verbs.WROpcode
	va     uint64
	n      int
	rkey   uint32
	slot   int
}

// randomOp picks an operation aimed at slot i, with the slot's current
// rkey most of the time, else a stale or forged one, and a range that
// usually falls inside the registration but may stray out of it, never out
// of the slot.
func (w *propWorld) randomOp(i int) propOp {
	s := &w.slots[i]
	op := propOp{slot: i, opcode: []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMARead, verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp}[w.rng.IntN(4)]}
	base, span := i*propSlotLen, propSlotLen
	if s.mr != nil && w.rng.IntN(4) != 0 {
		base, span = s.off, s.n
	}
	off := base + w.rng.IntN(span)&^7
	op.n = 8
	if !(op.opcode == verbs.WRAtomicFetchAndAdd || op.opcode == verbs.WRAtomicCmpAndSwp) {
		op.n = 1 + w.rng.IntN(300)
	}
	if w.rng.IntN(8) == 0 {
		off += 8 * w.rng.IntN(8) // may end past the registration
	}
	off = min(off, (i+1)*propSlotLen-op.n)
	op.va = uint64(uintptr(unsafe.Pointer(&w.arena[0]))) + uint64(off)
	switch r := w.rng.IntN(10); {
	case r < 7 && s.mr != nil:
		op.rkey = s.mr.RKey()
	case r < 9 && len(s.stale) > 0:
		op.rkey = s.stale[w.rng.IntN(len(s.stale))]
	default:
		op.rkey = w.rng.Uint32()
	}
	return op
}

// allowed reports whether the model lets op succeed now.
func (w *propWorld) allowed(op propOp) bool {
	s := &w.slots[op.slot]
	if s.mr == nil || s.mr.RKey() != op.rkey {
		return false
	}
	need := verbs.AccessRemoteWrite
	switch {
	case op.opcode == verbs.WRRDMARead:
		need = verbs.AccessRemoteRead
	case (op.opcode == verbs.WRAtomicFetchAndAdd || op.opcode == verbs.WRAtomicCmpAndSwp):
		need = verbs.AccessRemoteAtomic
	}
	lo := uint64(uintptr(unsafe.Pointer(&w.arena[s.off])))
	return s.mr.Access()&need != 0 && op.va >= lo && op.va+uint64(op.n) <= lo+uint64(s.n)
}

// post sends op from a, as its k-th operation of a batch: WRITEs and
// atomics take their operand from a's buffer at k*propOpSpace, READs and
// atomics return theirs at 4096 + k*propOpSpace.
func (w *propWorld) post(t *testing.T, op propOp, k int) {
	a := w.a
	src, dst := k*propOpSpace, 4096+k*propOpSpace
	wr := verbs.SendWR{WRID: uint64(k), Opcode: op.opcode, SendFlags: verbs.SendSignaled}
	switch {
	case op.opcode == verbs.WRRDMAWrite:
		wr.SGList = []verbs.SGE{a.MR.SGE(src, op.n)}
		wr.RDMA = verbs.RDMAParams{RemoteAddr: op.va, RKey: op.rkey}
	case op.opcode == verbs.WRRDMARead:
		wr.SGList = []verbs.SGE{a.MR.SGE(dst, op.n)}
		wr.RDMA = verbs.RDMAParams{RemoteAddr: op.va, RKey: op.rkey}
	default:
		wr.SGList = []verbs.SGE{a.MR.SGE(dst, 8)}
		wr.Atomic = verbs.AtomicParams{RemoteAddr: op.va, RKey: op.rkey, CompareAdd: binary.NativeEndian.Uint64(a.Buf[src:]), Swap: 0x1122334455667788}
	}
	if err := a.QP.PostSend(&wr); err != nil {
		w.fatalf(t, "PostSend: %v", err)
	}
}

// propOpSpace is the room each operation of a batch has in a's buffer.
const propOpSpace = 512

// remote runs a batch of operations on distinct slots, with the
// registrations held still, and checks the outcome against the model: in
// posting order, allowed operations succeed until the first refused one,
// which fails with REM_ACCESS_ERR; the target's QP is then in ERR, so
// those behind it are flushed unexecuted.
func (w *propWorld) remote(t *testing.T) {
	slots := w.rng.Perm(propSlots)[:1+w.rng.IntN(propSlots)]
	ops := make([]propOp, len(slots))
	offs := make([]int, len(slots))
	befores := make([][]byte, len(slots))
	for k, i := range slots {
		op := w.randomOp(i)
		ops[k] = op
		offs[k] = int(op.va - uint64(uintptr(unsafe.Pointer(&w.arena[0]))))
		befores[k] = append([]byte(nil), w.arena[offs[k]:offs[k]+op.n]...)
		src := k * propOpSpace
		for j := range op.n {
			w.a.Buf[src+j] = byte(w.rng.Uint32())
		}
		if op.opcode == verbs.WRAtomicCmpAndSwp && w.rng.IntN(2) == 0 {
			copy(w.a.Buf[src:src+8], befores[k]) // make the compare succeed
		}
		clear(w.a.Buf[4096+src : 4096+src+op.n])
	}
	// The model's verdicts, taken before anything moves.
	allowed := make([]bool, len(ops))
	for k, op := range ops {
		allowed[k] = w.allowed(op)
	}
	for k, op := range ops {
		w.logf("post %v slot %d arena+%d n %d key %#x allowed %v", op.opcode, op.slot, offs[k], op.n, op.rkey, allowed[k])
		w.post(t, op, k)
	}
	failed := false
	for k, op := range ops {
		wc := w.waitWC(t)
		off, before, got := offs[k], befores[k], w.arena[offs[k]:offs[k]+op.n]
		src, dst := k*propOpSpace, 4096+k*propOpSpace
		what := fmt.Sprintf("%v of %d bytes at arena+%d, rkey %#x", op.opcode, op.n, off, op.rkey)
		switch {
		case wc.WRID != uint64(k):
			w.fatalf(t, "completion of wr %d where %d was due", wc.WRID, k)
		case failed:
			if wc.Status != verbs.WCWRFlushErr {
				w.fatalf(t, "%s behind a failed one: completed %v, want WR_FLUSH_ERR", what, wc.Status)
			}
		case !allowed[k]:
			if wc.Status != verbs.WCRemAccessErr {
				w.fatalf(t, "%s, not allowed: completed %v", what, wc.Status)
			}
			failed = true
		case wc.Status != verbs.WCSuccess:
			w.fatalf(t, "%s, allowed: completed %v", what, wc.Status)
		}
		if wc.Status != verbs.WCSuccess {
			if !bytes.Equal(got, before) {
				w.fatalf(t, "%s completed %v but changed the target", what, wc.Status)
			}
			continue
		}
		switch op.opcode {
		case verbs.WRRDMAWrite:
			if !bytes.Equal(got, w.a.Buf[src:src+op.n]) {
				w.fatalf(t, "%s did not land", what)
			}
		case verbs.WRRDMARead:
			if !bytes.Equal(w.a.Buf[dst:dst+op.n], before) {
				w.fatalf(t, "%s returned other bytes than the region's", what)
			}
		default:
			orig := binary.NativeEndian.Uint64(before)
			if r := binary.NativeEndian.Uint64(w.a.Buf[dst:]); r != orig {
				w.fatalf(t, "%s returned %#x, memory held %#x", what, r, orig)
			}
			operand, want := binary.NativeEndian.Uint64(w.a.Buf[src:]), orig
			switch {
			case op.opcode == verbs.WRAtomicFetchAndAdd:
				want = orig + operand
			case orig == operand:
				want = 0x1122334455667788
			}
			if v := binary.NativeEndian.Uint64(got); v != want {
				w.fatalf(t, "%s left %#x, want %#x", what, v, want)
			}
		}
	}
	if failed {
		w.recover(t, true)
	}
}

// race posts an operation and, at the same time, deregisters or
// re-registers the region it aims at. Either outcome is allowed; the
// frozen bytes are checked after both are done.
func (w *propWorld) race(t *testing.T) {
	op := w.randomOp(w.rng.IntN(propSlots))
	// Draw every random choice here: the goroutine must not share rng.
	dereg, translation, access := w.rng.IntN(2) == 0, w.rng.IntN(2) == 0, w.randomAccess()
	if translation {
		// reregisterSlot draws the new range: do it before racing.
		dereg = true
	}
	w.logf("race %v slot %d key %#x with dereg %v", op.opcode, op.slot, op.rkey, dereg)
	w.post(t, op, 0)
	errc := make(chan error, 1)
	go func() {
		if dereg {
			errc <- w.deregisterSlot(op.slot)
		} else {
			errc <- w.reregisterSlot(op.slot, false, access)
		}
	}()
	wc := w.waitWC(t)
	if err := <-errc; err != nil {
		w.fatalf(t, "%v", err)
	}
	switch wc.Status {
	case verbs.WCSuccess:
	case verbs.WCRemAccessErr:
		w.logf("race lost")
		w.recover(t, false)
	default:
		w.fatalf(t, "%v racing a registration change completed %v", op.opcode, wc.Status)
	}
}

// recover brings both QPs back after a remote access error: the target's
// QP is in ERR (with exactly one QP_ACCESS_ERR when strict), the
// requester's too.
func (w *propWorld) recover(t *testing.T, strict bool) {
	t.Helper()
	w.spinUntil(t, "target QP in ERR", func() bool { return w.b.QP.State() == verbs.QPStateErr })
	var evs []verbs.AsyncEvent
	for _, ev := range pendingEvents(w.b.Dev) {
		// A packet of the previous connection reaching the target while
		// its next one was in RTR raised COMM_EST: not this test's.
		if ev.Type != verbs.EventCommEst {
			evs = append(evs, ev)
		}
	}
	if strict && (len(evs) != 1 || evs[0].Type != verbs.EventQPAccessErr) {
		w.fatalf(t, "target events %+v, want one QP_ACCESS_ERR", evs)
	}
	for _, e := range []*rdmatest.End{w.a, w.b} {
		rdmatest.Modify(t, e.QP, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateReset}, Mask: verbs.QPAttrState})
		rdmatest.Poll(t, e.CQ)
	}
	// New PSNs, far from the old ones: packets of the failed connection
	// may still be on their way (the NAKed request's successors, queued
	// in the target's socket when it failed), and must not pass for
	// packets of the new one, as they would with the same QPNs and PSNs.
	w.psnA = (w.psnA + 0x100000 + w.rng.Uint32N(0x600000)) & 0xFFFFFF
	w.psnB = (w.psnB + 0x100000 + w.rng.Uint32N(0x600000)) & 0xFFFFFF
	rdmatest.LinkQP(t, w.a.QP, rdmatest.DefaultLink(), w.psnA, rdmatest.PeerOf(t, w.b.QP, w.psnB))
	rdmatest.LinkQP(t, w.b.QP, rdmatest.DefaultLink(), w.psnB, rdmatest.PeerOf(t, w.a.QP, w.psnA))
}

// spinUntil waits for cond, yielding rather than sleeping: the steps are
// round trips of tens of microseconds, which a sleep would multiply.
func (w *propWorld) spinUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; !cond(); i++ {
		if i%1024 == 1023 && time.Now().After(deadline) {
			w.fatalf(t, "%s: not within 10 s", what)
		}
		runtime.Gosched()
	}
}

// waitWC returns a's next completion.
func (w *propWorld) waitWC(t *testing.T) verbs.WorkCompletion {
	t.Helper()
	var wc [1]verbs.WorkCompletion
	w.spinUntil(t, "completion", func() bool {
		n, err := w.a.CQ.Poll(wc[:])
		if err != nil {
			w.fatalf(t, "Poll: %v", err)
		}
		return n == 1
	})
	return wc[0]
}
