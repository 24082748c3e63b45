package verbs

import (
	"github.com/goroce/goroce/internal/transport"
)

// The transport sees the verbs objects through three small interfaces. The
// adapters below are the verbs objects themselves under another type name,
// so handing one to the transport costs no allocation and adds no exported
// method to the public types.

// qpMemory is a QP's view of registered memory (transport.Memory): keys are
// resolved on the device's lock-free key table and checked against the QP's
// PD, the bounds and the access rights before a byte moves; the
// registration stays pinned until the transport releases it (a receive
// batch's stores: until the batch's replies leave, storeInBatch), so
// Dereg waits for the copy to finish.
type qpMemory QP

func (m *qpMemory) Remote(_ uint32, rkey uint32, va uint64, length uint32, need AccessFlags) ([]byte, transport.Ref, error) {
	if need == AccessRemoteWrite && m.rxBatch != nil {
		r, err := m.storeInBatch(rkey, va, length)
		if err != nil {
			return nil, nil, transportFault(err)
		}
		if r != m.storePin {
			return r.bytes(va, int(length)), r.ref(need), nil // a window's
		}
		return r.bytes(va, int(length)), (*batchStore)(m), nil
	}
	r, err := m.acquireRemote(rkey, va, length, need)
	if err != nil {
		return nil, nil, transportFault(err)
	}
	return r.bytes(va, int(length)), r.ref(need), nil
}

func (m *qpMemory) Local(_ uint32, lkey uint32, addr uint64, length uint32, need AccessFlags) ([]byte, transport.Ref, error) {
	code := m.localKey.code(m.dev.keys, lkey)
	r, err := m.dev.acquireRegion(m.dev.mrs.lookupCode(code), lkey, m.pd, addr, int(length), need)
	if err != nil {
		return nil, nil, transportFault(err)
	}
	return r.bytes(addr, int(length)), r, nil
}

// LocalAgain lets held, a pin the QP's Output took, cover a further local
// access (transport.LocalRepinner): when held pins the registration that
// lkey names, still its MR's current one and not revoked, the access needs
// no pin of its own. Anything else goes to Local: a memory window's
// binding (a READ response's pin), which no local key may name; a
// registration that Rereg replaced; one being revoked (Dereg sets the mark
// before it waits for the pins to go, so an access after it is refused
// here too, and Local fails it as before).
func (m *qpMemory) LocalAgain(held transport.Ref, _ uint32, lkey uint32, addr uint64, length uint32, need AccessFlags) ([]byte, bool) {
	r, ok := held.(*mrRegion)
	if !ok || r.key != lkey || r.mr == nil || r.mr.reg.Load() != r || r.refs.Load()&regionDead != 0 ||
		r.check(m.pd, addr, int(length), need) != nil {
		return nil, false
	}
	return r.bytes(addr, int(length)), true
}

// CheckRemote authorises a remote access without performing it
// (transport.RemoteChecker): unlike Remote, it counts no store.
func (m *qpMemory) CheckRemote(_ uint32, rkey uint32, va uint64, length uint32, need AccessFlags) error {
	if need == AccessRemoteWrite && m.rxBatch != nil {
		// The first packet of a WRITE: its stores follow under the pin.
		r, err := m.storeInBatch(rkey, va, length)
		if err != nil {
			return transportFault(err)
		}
		if r != m.storePin {
			r.release()
		}
		return nil
	}
	r, err := m.acquireRemote(rkey, va, length, need)
	if err != nil {
		return transportFault(err)
	}
	r.release()
	return nil
}

// acquireRemote resolves and pins rkey for a remote access: a memory
// window's binding (mw.go) or a memory region. The key's code (keys.go)
// tells both the table and the slot; the QP remembers the last one. The
// transport calls it under the QP's xmu, which guards the memo.
func (m *qpMemory) acquireRemote(rkey uint32, va uint64, length uint32, need AccessFlags) (*mrRegion, error) {
	code := m.remoteKey.code(m.dev.keys, rkey)
	if codeIsMW(code) {
		return m.dev.acquireWindow(m.dev.mws.lookupCode(code), rkey, (*QP)(m), va, int(length), need)
	}
	return m.dev.acquireRegion(m.dev.mrs.lookupCode(code), rkey, m.pd, va, int(length), need)
}

// storeInBatch resolves rkey for a remote store (WRITE, ATOMIC_WRITE) of
// a packet that a receive batch handles, as acquireRemote does, but the
// pin a memory region's access takes stays with the QP (storePin) and
// covers the stores of the batch's next packets through that region,
// until releaseStorePinLocked: a WRITE of 64 packets at MTU 1024 costs
// three atomic operations on the region instead of 198 (pin, count,
// release per packet), and a post list's small WRITEs into one buffer
// share them too. The pin covers an access only while the key's slot
// still holds that very registration (not deregistered, not replaced by
// Rereg) and it is not revoked, and the access passes check: a refusal
// is as it would be without the pin. Dereg waits for the pin, as for any
// access in flight, until the QP's next packets leave, at the latest at
// the batch's end (EndBatch) or when the QP is destroyed. A memory
// window's binding is pinned per access, as before: it returns pinned,
// and is not storePin. The caller holds xmu.
func (m *qpMemory) storeInBatch(rkey uint32, va uint64, length uint32) (*mrRegion, error) {
	code := m.remoteKey.code(m.dev.keys, rkey)
	if codeIsMW(code) {
		return m.dev.acquireWindow(m.dev.mws.lookupCode(code), rkey, (*QP)(m), va, int(length), AccessRemoteWrite)
	}
	slot := m.dev.mrs.lookupCode(code)
	if r := m.storePin; r != nil && r == slot && r.key == rkey && r.refs.Load()&regionDead == 0 &&
		r.check(m.pd, va, int(length), AccessRemoteWrite) == nil {
		return r, nil
	}
	r, err := m.dev.acquireRegion(slot, rkey, m.pd, va, int(length), AccessRemoteWrite)
	if err != nil {
		return nil, err
	}
	(*QP)(m).releaseStorePinLocked()
	m.storePin = r
	return r, nil
}

// releaseStorePinLocked counts the stores made under the QP's store pin
// on its MR, waking WaitRemoteWrite, and lets the pin go. The QP's
// output calls it before it sends anything (transmitRepliesToLocked), so
// a WRITE is counted before its acknowledgement leaves. The caller holds
// xmu.
func (qp *QP) releaseStorePinLocked() {
	r := qp.storePin
	if r == nil {
		return
	}
	qp.storePin = nil
	if n := qp.storesPending; n > 0 {
		qp.storesPending = 0
		r.mr.writes.noteN(n)
	}
	r.release()
}

// batchStore is the transport.Ref of a store under the QP's store pin:
// its release counts the store, to be noted with the pin's.
type batchStore QP

func (b *batchStore) Release() { b.storesPending++ }

// ref is the transport.Ref of an access to r with rights need: r itself, or
// for a remote store (WRITE, atomic, ATOMIC_WRITE) r as a regionStore, whose
// release also counts the store on the MR (MR.RemoteWrites).
func (r *mrRegion) ref(need AccessFlags) transport.Ref {
	if need&(AccessRemoteWrite|AccessRemoteAtomic) != 0 {
		return (*regionStore)(r)
	}
	return r
}

// regionStore is an mrRegion pinned for a remote store.
type regionStore mrRegion

// Release ends the store: it is counted, and waiters woken, before the
// region is released.
func (w *regionStore) Release() {
	r := (*mrRegion)(w)
	r.mr.writes.note()
	r.release()
}

// transportFault maps the key table's refusal to the transport's reasons.
func transportFault(err error) error {
	switch err {
	case faultPD:
		return transport.ErrWrongPD
	case faultAccess:
		return transport.ErrAccessDenied
	case faultBounds:
		return transport.ErrOutOfBounds
	}
	return transport.ErrInvalidKey
}

// Release ends an access the transport began through qpMemory
// (transport.Ref).
func (r *mrRegion) Release() { r.release() }

// qpCQ is a CQ as one QP's transport sees it: it knows the QP, so that
// the completions of a packet that a receive batch handles notify their
// consumers only after that batch's replies are sent (QP.rxBatch).
type qpCQ struct {
	cq *CQ
	qp *QP
}

// Push adds a completion; false (a full CQ) makes the transport move the QP
// to the error state. The transport calls it with the QP's xmu held, which
// guards rxBatch.
func (s *qpCQ) Push(c *transport.Completion) bool {
	return !s.cq.push(s.qp.rxBatch, WorkCompletion{
		WRID:            c.WRID,
		Status:          c.Status,
		Opcode:          c.Opcode,
		ByteLen:         c.ByteLen,
		ImmData:         c.Imm,
		InvalidatedRKey: c.InvalidatedRKey,
		QPNum:           c.QPN,
		SrcQP:           c.SrcQP,
		WCFlags:         c.Flags,
	}, c.Solicited)
}

// srqSource is an SRQ as the transport's shared receive queue.
type srqSource SRQ

func (s *srqSource) TakeRecv(w *transport.RecvWQE) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.rq.ring.front()
	if s.closed || e == nil {
		return false
	}
	w.WRID = e.wrID
	w.SGL = w.SGL[:0]
	for _, g := range e.sge {
		w.SGL = append(w.SGL, transport.SGE{Addr: g.Addr, Length: g.Length, LKey: g.LKey})
	}
	s.rq.ring.pop()
	(*SRQ)(s).checkLimitLocked()
	return true
}

func (s *srqSource) MaxRecvSGE() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rq.maxSGE
}
