package nic

import (
	"github.com/goroce/goroce/internal/nicproto"
	"github.com/goroce/goroce/verbs"
)

type pdObj struct {
	h  uint32
	pd *verbs.PD
}

// mrObj is a registration over application memory the daemon maps
// through the memfds the client passed (see libgoroce/src/mem.c).
type mrObj struct {
	h  uint32
	mr *verbs.MR
	v  *view
}

func (m *mrObj) release() {
	if m.mr != nil {
		m.mr.Dereg()
	}
	m.v.unmap()
}

func (s *session) allocPD(_ []byte, _ []int) (reply, error) {
	pd, err := s.dev.dev.AllocPD()
	if err != nil {
		return reply{}, err
	}
	s.mu.Lock()
	o := &pdObj{h: s.newHandle(), pd: pd}
	s.pds[o.h] = o
	s.mu.Unlock()
	return reply{body: []any{nicproto.Handle{Handle: o.h}}}, nil
}

func (s *session) deallocPD(body []byte, _ []int) (reply, error) {
	var req nicproto.Handle
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.pds[req.Handle]
	if o == nil {
		return reply{}, errInval
	}
	if err := o.pd.Dealloc(); err != nil {
		return reply{}, err
	}
	delete(s.pds, req.Handle)
	return reply{}, nil
}

func (s *session) pd(h uint32) *pdObj {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.pds[h]
}

// decodeReg reads a REG_MR or REREG_MR request and maps its view.
func decodeReg(body []byte, fds []int) (nicproto.RegMRReq, *view, error) {
	var req nicproto.RegMRReq
	rest, err := nicproto.Decode(body, &req)
	if err != nil || req.NPieces > nicproto.MaxPieces {
		return req, nil, errInval
	}
	pieces := make([]nicproto.Piece, req.NPieces)
	if _, err := nicproto.Decode(rest, pieces); err != nil {
		return req, nil, errInval
	}
	if req.NPieces == 0 {
		return req, nil, nil
	}
	v, err := mapView(pieces, fds)
	if err != nil {
		return req, nil, err
	}
	if req.Addr < req.ViewStart || req.Length == 0 || req.Addr-req.ViewStart+req.Length > uint64(v.size) ||
		req.Addr-req.ViewStart+req.Length < req.Length {
		v.unmap()
		return req, nil, errInval
	}
	return req, v, nil
}

func (s *session) regMR(body []byte, fds []int) (reply, error) {
	req, v, err := decodeReg(body, fds)
	if err != nil {
		return reply{}, err
	}
	if v == nil {
		return reply{}, errInval
	}
	pd := s.pd(req.PD)
	if pd == nil || (!v.writable && needsWrite(req.Access)) {
		v.unmap()
		return reply{}, errInval
	}
	buf := v.bytes(req.Addr-req.ViewStart, req.Length)
	mr, err := pd.pd.RegMRIOVA(buf, req.IOVA, verbs.AccessFlags(req.Access))
	if err != nil {
		v.unmap()
		return reply{}, err
	}
	s.mu.Lock()
	o := &mrObj{h: s.newHandle(), mr: mr, v: v}
	s.mrs[o.h] = o
	s.mu.Unlock()
	return reply{body: []any{nicproto.RegMRResp{Handle: o.h, LKey: mr.LKey(), RKey: mr.RKey()}}}, nil
}

// reregMR changes a registration (ibv_rereg_mr): a new translation comes
// with a new view, mapped before and released after the change.
func (s *session) reregMR(body []byte, fds []int) (reply, error) {
	req, v, err := decodeReg(body, fds)
	if err != nil {
		return reply{}, err
	}
	o, pd, err := s.checkRereg(req, v)
	if err != nil {
		if v != nil {
			v.unmap()
		}
		return reply{}, err
	}
	flags := verbs.ReregFlags(req.Flags)
	if v == nil {
		if err := o.mr.Rereg(flags, pd, nil, verbs.AccessFlags(req.Access)); err != nil {
			return reply{}, err
		}
	} else if err := o.retranslate(flags, pd, v, req); err != nil {
		v.unmap()
		return reply{}, err
	}
	return reply{body: []any{nicproto.RegMRResp{Handle: o.h, LKey: o.mr.LKey(), RKey: o.mr.RKey()}}}, nil
}

// checkRereg finds the region and the new PD, and refuses rights to store
// into a view the daemon may only read.
func (s *session) checkRereg(req nicproto.RegMRReq, v *view) (*mrObj, *verbs.PD, error) {
	s.mu.RLock()
	o := s.mrs[req.Handle]
	s.mu.RUnlock()
	flags := verbs.ReregFlags(req.Flags)
	if o == nil || (flags&verbs.ReregChangeTranslation != 0) != (v != nil) {
		return nil, nil, errInval
	}
	var pd *verbs.PD
	if flags&verbs.ReregChangePD != 0 {
		p := s.pd(req.PD)
		if p == nil {
			return nil, nil, errInval
		}
		pd = p.pd
	}
	newView, access := o.v, uint32(o.mr.Access())
	if v != nil {
		newView = v
	}
	if flags&verbs.ReregChangeAccess != 0 {
		access = req.Access
	}
	if !newView.writable && needsWrite(access) {
		return nil, nil, errInval
	}
	return o, pd, nil
}

// needsWrite reports whether access lets the device store into the region:
// the daemon's mapping must then be writable, or a store would fault.
func needsWrite(access uint32) bool {
	a := verbs.AccessFlags(access)
	return a&(verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0
}

// retranslate gives the region new memory. verbs.MR.Rereg would set the
// IOVA to the daemon's view address, not the application's, so the region is
// registered anew with the application's IOVA and the old one dropped: the
// keys change, as they do on every rereg.
func (o *mrObj) retranslate(flags verbs.ReregFlags, pd *verbs.PD, v *view, req nicproto.RegMRReq) error {
	if pd == nil {
		pd = o.mr.PD()
	}
	access := o.mr.Access()
	if flags&verbs.ReregChangeAccess != 0 {
		access = verbs.AccessFlags(req.Access)
	}
	mr, err := pd.RegMRIOVA(v.bytes(req.Addr-req.ViewStart, req.Length), req.IOVA, access)
	if err != nil {
		return err
	}
	if err := o.mr.Dereg(); err != nil {
		mr.Dereg()
		return err
	}
	o.v.unmap()
	o.mr, o.v = mr, v
	return nil
}

func (s *session) deregMR(body []byte, _ []int) (reply, error) {
	var req nicproto.Handle
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	s.mu.RLock()
	o := s.mrs[req.Handle]
	s.mu.RUnlock()
	if o == nil {
		return reply{}, errInval
	}
	if err := o.mr.Dereg(); err != nil {
		return reply{}, err
	}
	o.mr = nil
	o.v.unmap()
	s.mu.Lock()
	delete(s.mrs, req.Handle)
	s.mu.Unlock()
	return reply{}, nil
}
