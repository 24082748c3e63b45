package verbs

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/internal/transport"
)

// MWType is the type of a memory window (enum ibv_mw_type).
type MWType int

// Memory window types, with the libibverbs values.
const (
	// MWType1 windows are bound with QP.BindMW (ibv_bind_mw), can be
	// used through any QP of their PD, cannot be zero-based and cannot be
	// invalidated with LOCAL_INV or SEND_WITH_INV: a zero-length bind
	// unbinds them.
	MWType1 MWType = 1 // IBV_MW_TYPE_1
	// MWType2 windows are bound with a BIND_MW work request (WRBindMW),
	// only by a QP of their own PD, and then only that QP can use them
	// (type 2B, as rxe implements). LOCAL_INV or a SEND_WITH_INV received
	// on that QP invalidates them.
	MWType2 MWType = 2 // IBV_MW_TYPE_2
)

// String returns "type1" or "type2".
func (t MWType) String() string {
	switch t {
	case MWType1:
		return "type1"
	case MWType2:
		return "type2"
	}
	return "MWType(" + strconv.Itoa(int(t)) + ")"
}

// MW is a memory window (struct ibv_mw): a window onto part of a memory
// region, with its own rkey and rights, that can be handed to a peer and
// withdrawn again without touching the region's registration. Remote
// describes its binding for a peer.
//
// Rebinding, invalidating and deallocating wait for the remote accesses in
// flight through the window, so once they return (or the BIND_MW /
// LOCAL_INV completes) no peer uses the old rkey any more. While a window
// is bound its region cannot be deregistered or reregistered (ErrBusy).
type MW struct {
	// A binding is an immutable snapshot like an MR's registration (the
	// same type): the receive path looks the rkey up without locks,
	// checks the PD, the rights and the window's bounds, and pins the
	// binding for the access.
	dev   *Device
	pd    *PD
	typ   MWType
	index uint32

	// binding is the current binding, nil while the window is unbound; the
	// receive path loads it without locks.
	binding atomic.Pointer[mrRegion]
	// rkey is the window's rkey: the one its current (or latest) binding
	// uses. It changes only when a bind executes.
	rkey atomic.Uint32

	// hw is the hardware backend's window, nil on a goroce device; there
	// binding stays nil (the device holds the binding) and rkey is the
	// rkey of the latest bind posted.
	hw hwMW

	mu     sync.Mutex // serializes binds, invalidation and Dealloc
	dead   bool       // deallocated; guarded by mu
	posted uint32     // type 1: rkey of the latest BindMW posted; guarded by mu
	mr     *MR        // region of the current binding; guarded by mu
}

// AllocMW allocates a memory window of type typ in the PD (ibv_alloc_mw).
// The window starts unbound: its rkey is valid as an identifier but grants
// nothing until a bind. Errors: a type other than MWType1 and MWType2
// (ErrInvalidArgument, "type"), the max_mw limit (ErrResourceLimit).
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	const op = "AllocMW"
	if pd == nil {
		return nil, newError(op, "pd", ErrInvalidArgument, "nil")
	}
	if typ != MWType1 && typ != MWType2 {
		return nil, errorf(op, "type", ErrInvalidArgument, "%v", typ)
	}
	if pd.hw != nil {
		return pd.hw.allocMW(pd, typ)
	}
	d := pd.dev
	if err := pd.use(op); err != nil {
		return nil, err
	}
	if err := d.res.mw.acquire(op); err != nil {
		pd.unuse()
		return nil, err
	}
	index, key, ok := d.mws.alloc()
	if !ok {
		d.res.mw.release()
		pd.unuse()
		return nil, newError(op, "max_mw", ErrResourceLimit, "no free key index")
	}
	mw := &MW{dev: d, pd: pd, typ: typ, index: index, posted: key}
	mw.rkey.Store(key)
	if err := d.register(op, func() { d.mws.publish(index, mw) }); err != nil {
		d.mws.release(index)
		d.res.mw.release()
		pd.unuse()
		return nil, err
	}
	return mw, nil
}

// Type returns the window's type.
func (mw *MW) Type() MWType { return mw.typ }

// PD returns the window's protection domain.
func (mw *MW) PD() *PD { return mw.pd }

// RKey returns the window's rkey (ibv_mw.rkey): the rkey of its current
// binding, or of its latest one once unbound. A bind changes the low byte
// (the key) when it executes, so the rkey returned by QP.BindMW or chosen
// in MWBindParams.RKey becomes RKey as soon as the bind took effect, before
// its completion is polled.
func (mw *MW) RKey() uint32 { return mw.rkey.Load() }

// Bound reports whether the window is bound to memory, that is whether its
// rkey grants access. On a hardware device (OpenHardware) the device holds
// the binding and Bound reports false.
func (mw *MW) Bound() bool { return mw.binding.Load() != nil }

// Dealloc deallocates the window (ibv_dealloc_mw), unbinding it first if
// bound: its rkey stops resolving at once, Dealloc waits for remote
// accesses already in flight through it, and later users get a remote
// access error. It fails with ErrClosed if the window was already
// deallocated.
func (mw *MW) Dealloc() error {
	const op = "DeallocMW"
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if mw.dead {
		return closedError(op, "mw")
	}
	if mw.hw != nil {
		if err := mw.hw.dealloc(mw); err != nil {
			return err
		}
		mw.dead = true
		mw.pd.unuse()
		return nil
	}
	mw.dead = true
	mw.unbindLocked()
	mw.dev.mws.release(mw.index)
	mw.pd.unuse()
	mw.dev.res.mw.release()
	return nil
}

// unbindLocked withdraws the current binding, waits for the accesses in
// flight through it and releases its hold on the region.
func (mw *MW) unbindLocked() {
	old := mw.binding.Swap(nil)
	if old == nil {
		return
	}
	old.revoke()
	mw.mr.boundMWs.Add(-1)
	mw.mr = nil
}

// MWBind is a type 1 bind request (struct ibv_mw_bind): the work request's
// ID and flags, and the window's memory and rights. A zero Length unbinds
// the window (then MR, Addr and Access are ignored).
type MWBind struct {
	WRID      uint64
	SendFlags SendFlags
	MR        *MR
	Addr      uint64 // first byte of the window, in the region's IOVA space
	Length    uint64
	// Access holds the window's remote rights (REMOTE_READ, REMOTE_WRITE,
	// REMOTE_ATOMIC); LOCAL_WRITE is accepted and has no effect. A type 1
	// window cannot be zero-based.
	Access AccessFlags
}

// MWBindParams are the bind_mw part of a BIND_MW send work request (struct
// ibv_send_wr.bind_mw), which binds a type 2 window.
type MWBindParams struct {
	MW *MW
	// RKey is the window's rkey after the bind: its index part must be
	// the window's, its low byte is the new key; ibv_inc_rkey's choice is
	// IncRKey(mw.RKey()).
	RKey   uint32
	MR     *MR
	Addr   uint64 // first byte of the window, in the region's IOVA space
	Length uint64 // not 0: a type 2 window is unbound with LOCAL_INV
	// Access holds the window's remote rights; with AccessZeroBased the
	// window is addressed from 0 instead of Addr.
	Access AccessFlags
}

// IncRKey returns rkey with its low byte (the key) incremented, as
// libibverbs' ibv_inc_rkey does to choose the rkey of a window's next bind.
func IncRKey(rkey uint32) uint32 { return rkey&^0xff | (rkey+1)&0xff }

// BindMW binds a type 1 window (ibv_bind_mw): it posts a BIND_MW work
// request on the QP and returns the window's new rkey, which is valid once
// the request executed, in order behind the work requests posted before
// it. The request completes with WCBindMW (if signaled), or with
// WCMWBindErr if a rule forbids the bind when it executes: the region must
// be live, registered with AccessMWBind, not zero-based and in the window's
// PD, the window must lie within the region, and remote write or atomic
// rights need LOCAL_WRITE on the region (IBA C10-73 to C10-75). A zero
// Length unbinds the window. Errors at post time are those of PostSend, and
// ErrInvalidArgument for a window of another type or device, a zero-based
// window or a missing region.
func (qp *QP) BindMW(mw *MW, bind MWBind) (uint32, error) {
	const op = "BindMW"
	switch {
	case mw == nil:
		return 0, newError(op, "mw", ErrInvalidArgument, "nil")
	case mw.typ != MWType1:
		return 0, newError(op, "mw", ErrInvalidArgument, "a type 2 window is bound with a BIND_MW work request")
	case mw.dev != qp.dev:
		return 0, newError(op, "mw", ErrInvalidArgument, "belongs to another device")
	case bind.Access&AccessZeroBased != 0:
		return 0, newError(op, "bind_info.mw_access_flags", ErrInvalidArgument, "a type 1 window cannot be zero-based")
	}
	if qp.hw != nil {
		return qp.hw.bindMW(qp, mw, &bind)
	}
	// The rkey is handed out at post time, as libibverbs does; the bind
	// itself may execute at once, inside PostSend, and takes mw.mu then.
	mw.mu.Lock()
	if mw.dead {
		mw.mu.Unlock()
		return 0, closedError(op, "mw")
	}
	from := mw.posted
	rkey := IncRKey(from)
	mw.posted = rkey
	mw.mu.Unlock()
	wr := SendWR{
		WRID:      bind.WRID,
		Opcode:    WRBindMW,
		SendFlags: bind.SendFlags,
		BindMW: MWBindParams{
			MW: mw, RKey: rkey, MR: bind.MR,
			Addr: bind.Addr, Length: bind.Length, Access: bind.Access,
		},
		bindType1: true,
		bindFrom:  from,
	}
	if err := qp.postSendOp(op, &wr); err != nil {
		mw.mu.Lock()
		if mw.posted == rkey {
			mw.posted = from
		}
		mw.mu.Unlock()
		return 0, err
	}
	return rkey, nil
}

// postSendOp is PostSend reporting errors under the name of the verb that
// posted the request.
func (qp *QP) postSendOp(op string, wr *SendWR) error {
	err := qp.PostSend(wr)
	if e, ok := err.(*Error); ok {
		e.Op = op
	}
	return err
}

// accessMW are the rights a window may carry.
const accessMW = AccessLocalWrite | accessRemote | AccessZeroBased |
	AccessFlushGlobal | AccessFlushPersistent

// bindWQE validates the bind part of a BIND_MW send work request and
// converts it for the transport.
func (qp *QP) bindWQE(op string, wr *SendWR, w *transport.SendWQE) error {
	b := &wr.BindMW
	mw := b.MW
	switch {
	case len(wr.SGList) != 0:
		return newError(op, "num_sge", ErrInvalidArgument, "BIND_MW carries no data")
	case wr.SendFlags&SendInline != 0:
		return newError(op, "send_flags", ErrInvalidArgument, "BIND_MW cannot carry inline data")
	case mw == nil:
		return newError(op, "bind_mw.mw", ErrInvalidArgument, "nil")
	case mw.dev != qp.dev:
		return newError(op, "bind_mw.mw", ErrInvalidArgument, "belongs to another device")
	case mw.typ == MWType1 && !wr.bindType1:
		return newError(op, "bind_mw.mw", ErrInvalidArgument, "a type 1 window is bound with QP.BindMW")
	case b.RKey>>8 != mw.RKey()>>8: // the code is the window's for life
		return errorf(op, "bind_mw.rkey", ErrInvalidArgument, "%#x does not name window %#x", b.RKey, mw.RKey()&^0xff)
	case b.Length > 0 && b.MR == nil:
		return newError(op, "bind_mw.bind_info.mr", ErrInvalidArgument, "nil")
	case b.MR != nil && b.MR.dev != qp.dev:
		return newError(op, "bind_mw.bind_info.mr", ErrInvalidArgument, "belongs to another device")
	case b.Access&^(accessMW|accessOptionalRange) != 0:
		return errorf(op, "bind_mw.bind_info.mw_access_flags", ErrInvalidArgument, "%v not valid for a window", b.Access&^accessMW)
	}
	w.Bind = transport.MWBind{
		RKey:   b.RKey,
		Addr:   b.Addr,
		Length: b.Length,
		Access: b.Access,
		Type1:  mw.typ == MWType1,
	}
	if wr.bindType1 {
		w.Bind.MWRKey = wr.bindFrom
	} else {
		w.Bind.MWRKey = mw.RKey()
	}
	if b.MR != nil {
		w.Bind.MRLKey = b.MR.LKey()
	}
	return nil
}

// lookupMW returns the window whose index key names, or nil; the caller
// compares rkeys. It takes no lock.
func (d *Device) lookupMW(key uint32) *MW { return d.mws.lookup(key) }

// executeBind performs a BIND_MW when the requester of qp reaches it (rxe
// rxe_bind_mw): it checks the rules of IBA 10.6.7.2 against the window
// and the region as they are now, publishes the new binding and withdraws
// the old one, waiting for accesses in flight through it. It reports
// false, changing nothing, if a rule forbids the bind.
func (d *Device) executeBind(qp *QP, b *transport.MWBind) bool {
	mw := d.lookupMW(b.MWRKey)
	if mw == nil {
		return false
	}
	mw.mu.Lock()
	defer mw.mu.Unlock()
	ok := mw.bindLocked(qp, b)
	if !ok && mw.typ == MWType1 {
		// The rkey BindMW handed out never took effect: later binds
		// continue from the window's real rkey (what libibverbs asks
		// its users to undo by hand).
		mw.posted = mw.rkey.Load()
	}
	return ok
}

func (mw *MW) bindLocked(qp *QP, b *transport.MWBind) bool {
	access := b.Access
	if mw.dead || mw.rkey.Load() != b.MWRKey {
		return false
	}
	switch mw.typ {
	case MWType1:
		if access&AccessZeroBased != 0 { // o10-36.2.2
			return false
		}
	case MWType2:
		// A type 2 window must be free (o10-37.2.30), bound by a QP of
		// its PD (C10-72), to a region with a length (o10-37.2.40).
		if mw.binding.Load() != nil || qp.pd != mw.pd || b.Length == 0 {
			return false
		}
	}
	key := b.MWRKey&^0xff | b.RKey&0xff
	if b.Length == 0 {
		mw.unbindLocked()
		mw.rkey.Store(key)
		return true
	}
	mr := mw.dev.lookupMR(b.MRLKey)
	if mr == nil {
		return false
	}
	r, ok := mw.newBinding(qp, mr, b, key)
	if !ok {
		return false
	}
	old, oldMR := mw.binding.Swap(r), mw.mr
	mw.mr = mr
	mw.rkey.Store(key)
	if old != nil {
		old.revoke()
		oldMR.boundMWs.Add(-1)
	}
	return true
}

// newBinding checks the region side of a bind and returns the window's new
// binding, holding the region (its window count) until the binding is
// withdrawn. The region's mutex makes the check and the count atomic with
// respect to Dereg and Rereg, which refuse while windows are bound.
func (mw *MW) newBinding(qp *QP, mr *MR, b *transport.MWBind, key uint32) (*mrRegion, bool) {
	access := b.Access
	mr.mu.Lock()
	defer mr.mu.Unlock()
	reg := mr.reg.Load()
	switch {
	case mr.dead || reg.key != b.MRLKey:
		return nil, false
	case reg.pd != mw.pd: // the region and the window share a PD
		return nil, false
	case reg.access&AccessZeroBased != 0: // rxe: no window on a zero-based region
		return nil, false
	case reg.access&AccessMWBind == 0: // C10-73
		return nil, false
	case access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && reg.access&AccessLocalWrite == 0: // C10-74
		return nil, false
	case b.Addr < reg.iova || b.Addr-reg.iova > uint64(len(reg.buf)) ||
		b.Length > uint64(len(reg.buf))-(b.Addr-reg.iova): // C10-75
		return nil, false
	}
	off := b.Addr - reg.iova
	iova := b.Addr
	if access&AccessZeroBased != 0 {
		iova = 0
	}
	r := newRegion(mr, key, mw.pd, reg.buf[off:off+b.Length:off+b.Length], iova, access&^AccessZeroBased)
	if mw.typ == MWType2 {
		r.qp = qp // type 2B: only the binding QP may use it
	}
	mr.boundMWs.Add(1)
	return r, true
}

// invalidateMW invalidates the type 2 window whose rkey is rkey, for a
// LOCAL_INV posted on qp or (remote) a SEND_WITH_INV received by qp (rxe
// rxe_invalidate_mw): the window must be bound, of type 2 (o10-37.2.26)
// and in qp's PD; a remote invalidation must come through the QP the
// window is bound to, the only one that may use it. The window returns to
// the free state with its rkey unchanged, after the accesses in flight
// through it. goroce has no fast-registration regions, the only regions
// IBA lets LOCAL_INV or SEND_WITH_INV invalidate (rxe checks
// IB_MR_TYPE_MEM_REG), so an MR's rkey is always refused.
func (d *Device) invalidateMW(qp *QP, rkey uint32, remote bool) bool {
	if !d.keys.isMW(rkey) {
		return false
	}
	mw := d.lookupMW(rkey)
	if mw == nil {
		return false
	}
	mw.mu.Lock()
	defer mw.mu.Unlock()
	r := mw.binding.Load()
	switch {
	case mw.dead || mw.typ != MWType2 || r == nil || mw.rkey.Load() != rkey:
		return false
	case mw.pd != qp.pd:
		return false
	case remote && r.qp != qp:
		return false
	}
	mw.unbindLocked()
	return true
}

// acquireWindow resolves a window's rkey for a remote access by qp, as
// acquireMR does for a region: the binding must be current and, for a type
// 2 window, belong to qp; then PD, rights and the window's bounds are
// checked (rxe checks only the region's bounds; IBA bounds the access by
// the window). mw is what key's slot holds (or nil). Lock-free; it pins
// the binding until release.
func (d *Device) acquireWindow(mw *MW, key uint32, qp *QP, va uint64, length int, need AccessFlags) (*mrRegion, error) {
	if mw == nil {
		return nil, faultKey
	}
	r := mw.binding.Load()
	if r == nil || r.key != key || !r.acquire() {
		return nil, faultKey
	}
	if r.qp != nil && r.qp != qp {
		r.release()
		return nil, faultKey
	}
	if err := r.check(qp.pd, va, length, need); err != nil {
		r.release()
		return nil, err
	}
	return r, nil
}

// BindMW executes a BIND_MW for the transport (transport.LocalOps).
func (m *qpMemory) BindMW(_ uint32, b *transport.MWBind) bool {
	return m.dev.executeBind((*QP)(m), b)
}

// LocalInvalidate executes a LOCAL_INV for the transport
// (transport.LocalOps).
func (m *qpMemory) LocalInvalidate(_ uint32, rkey uint32) bool {
	return m.dev.invalidateMW((*QP)(m), rkey, false)
}

// InvalidateRKey executes the invalidation of a received SEND_WITH_INV
// (transport.RKeyInvalidator).
func (m *qpMemory) InvalidateRKey(_ uint32, rkey uint32) error {
	if !m.dev.invalidateMW((*QP)(m), rkey, true) {
		return transport.ErrInvalidKey
	}
	return nil
}

// CheckRKey validates an rkey for a FLUSH of a whole region or window
// (transport.RKeyChecker): the key, the PD and the rights, not a range. No
// memory is touched, so nothing is pinned.
func (m *qpMemory) CheckRKey(_ uint32, rkey uint32, need AccessFlags) error {
	var r *mrRegion
	if m.dev.keys.isMW(rkey) {
		if mw := m.dev.lookupMW(rkey); mw != nil {
			r = mw.binding.Load()
			if r != nil && r.qp != nil && r.qp != (*QP)(m) {
				r = nil
			}
		}
	} else {
		r = m.dev.mrs.lookup(rkey)
	}
	if r == nil || r.key != rkey {
		return transport.ErrInvalidKey
	}
	if err := r.check(m.pd, r.iova, 0, need); err != nil {
		return transportFault(err)
	}
	return nil
}
