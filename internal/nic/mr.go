//go:build linux

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

// reregMR changes a registration (ibv_rereg_mr) in place, keeping its keys
// as a NIC that reregisters in place does: a new translation comes with a
// new view, mapped before and released after the change, and the region's
// IOVA is the application's address of the new memory.
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
	a := verbs.ReregAttr{Flags: verbs.ReregFlags(req.Flags), PD: pd, Access: verbs.AccessFlags(req.Access), KeepKeys: true}
	if v != nil {
		a.Buf, a.IOVA = v.bytes(req.Addr-req.ViewStart, req.Length), req.IOVA
	}
	if err := o.mr.ReregWith(a); err != nil {
		if v != nil {
			v.unmap()
		}
		return reply{}, err
	}
	if v != nil {
		o.v.unmap()
		o.v = v
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
	s.mu.Lock()
	delete(s.mrs, req.Handle)
	o.mr = nil
	s.mu.Unlock()
	o.v.unmap()
	return reply{}, nil
}
