//go:build linux && cgo && goroce_ibverbs

package verbs

// Memory windows on the hardware backend: ibv_alloc_mw, ibv_bind_mw (type
// 1), BIND_MW work requests (type 2, converted in setSend), and
// ibv_dealloc_mw. The device holds the binding and enforces its rules; a
// refused bind completes with WCMWBindErr as on goroce devices.

import "github.com/goroce/goroce/internal/ibverbs"

type ibvMW struct{ mw *ibverbs.MW }

func (p *ibvPD) allocMW(pd *PD, typ MWType) (*MW, error) {
	const op = "AllocMW"
	if err := pd.use(op); err != nil {
		return nil, err
	}
	m, err := p.pd.AllocMW(int(typ))
	if err != nil {
		pd.unuse()
		return nil, hwError(op, err)
	}
	mw := &MW{dev: pd.dev, pd: pd, typ: typ, posted: m.RKey(), hw: &ibvMW{mw: m}}
	mw.rkey.Store(m.RKey())
	return mw, nil
}

// dealloc runs under mw.mu.
func (h *ibvMW) dealloc(*MW) error {
	if err := h.mw.Dealloc(); err != nil {
		return hwError("DeallocMW", err)
	}
	return nil
}

// hwMWOf returns mw's hardware window, or an error naming field.
func hwMWOf(op, field string, mw *MW) (*ibverbs.MW, error) {
	h, ok := mw.hw.(*ibvMW)
	if !ok {
		return nil, newError(op, field, ErrInvalidArgument, "not a window of a hardware device")
	}
	return h.mw, nil
}

// hwMROf returns mr's hardware registration (nil for a nil mr), or an
// error naming field.
func hwMROf(op, field string, mr *MR) (*ibverbs.MR, error) {
	if mr == nil {
		return nil, nil
	}
	h, ok := mr.hw.(*ibvMR)
	if !ok {
		return nil, newError(op, field, ErrInvalidArgument, "not a region of a hardware device")
	}
	return h.mr, nil
}

// bindMW posts a type 1 bind (ibv_bind_mw) on the send queue, in order
// with PostSend's requests, and returns the rkey the provider chose.
func (h *ibvQP) bindMW(qp *QP, mw *MW, bind *MWBind) (uint32, error) {
	const op = "BindMW"
	m, err := hwMWOf(op, "mw", mw)
	if err != nil {
		return 0, err
	}
	if bind.Length > 0 && bind.MR == nil {
		return 0, newError(op, "bind_info.mr", ErrInvalidArgument, "nil")
	}
	mr, err := hwMROf(op, "bind_info.mr", bind.MR)
	if err != nil {
		return 0, err
	}
	h.smu.Lock()
	defer h.smu.Unlock()
	if err := sendable(op, qp); err != nil {
		return 0, err
	}
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if mw.dead {
		return 0, closedError(op, "mw")
	}
	rkey, err := h.qp.BindMW(m, bind.WRID, int(bind.SendFlags), mr, bind.Addr, bind.Length, int(bind.Access))
	if err != nil {
		return 0, hwError(op, err)
	}
	mw.posted = rkey
	mw.rkey.Store(rkey)
	return rkey, nil
}

// setBind converts the bind of a BIND_MW work request (type 2) into s, with
// the checks goroce devices make at post time (bindWQE).
func setBind(op string, wr *SendWR, s *ibverbs.SendRequest) error {
	b := &wr.BindMW
	switch {
	case len(wr.SGList) != 0:
		return newError(op, "num_sge", ErrInvalidArgument, "BIND_MW carries no data")
	case wr.SendFlags&SendInline != 0:
		return newError(op, "send_flags", ErrInvalidArgument, "BIND_MW cannot carry inline data")
	case b.MW == nil:
		return newError(op, "bind_mw.mw", ErrInvalidArgument, "nil")
	case b.MW.typ == MWType1:
		return newError(op, "bind_mw.mw", ErrInvalidArgument, "a type 1 window is bound with QP.BindMW")
	case b.RKey>>8 != b.MW.RKey()>>8:
		return errorf(op, "bind_mw.rkey", ErrInvalidArgument, "%#x does not name window %#x", b.RKey, b.MW.RKey()&^0xff)
	case b.Length > 0 && b.MR == nil:
		return newError(op, "bind_mw.bind_info.mr", ErrInvalidArgument, "nil")
	case b.Access&^(accessMW|accessOptionalRange) != 0:
		return errorf(op, "bind_mw.bind_info.mw_access_flags", ErrInvalidArgument, "%v not valid for a window", b.Access&^accessMW)
	}
	m, err := hwMWOf(op, "bind_mw.mw", b.MW)
	if err != nil {
		return err
	}
	mr, err := hwMROf(op, "bind_mw.bind_info.mr", b.MR)
	if err != nil {
		return err
	}
	s.MW, s.RKey, s.BindMR = m, b.RKey, mr
	s.BindAddr, s.BindLength, s.BindAccess = b.Addr, b.Length, int(b.Access)
	return nil
}

// noteBinds records the rkeys of the type 2 binds among the posted
// requests: the window's RKey is that of the latest bind posted.
func noteBinds(wrs []SendWR) {
	for i := range wrs {
		if wrs[i].Opcode == WRBindMW && wrs[i].BindMW.MW != nil {
			wrs[i].BindMW.MW.rkey.Store(wrs[i].BindMW.RKey)
		}
	}
}
