//go:build linux

package nic

import (
	"github.com/goroce/goroce/internal/nicproto"
	"github.com/goroce/goroce/verbs"
)

// mwObj is a memory window. Its binds travel through a QP's send ring (a
// BIND_MW slot names the window and the region by handle), so that they
// execute in order with the QP's other work requests, as on a NIC.
type mwObj struct {
	h  uint32
	mw *verbs.MW
}

func (s *session) allocMW(body []byte, _ []int) (reply, error) {
	var req nicproto.AllocMWReq
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	pd := s.pd(req.PD)
	if pd == nil {
		return reply{}, errInval
	}
	mw, err := pd.pd.AllocMW(verbs.MWType(req.Type))
	if err != nil {
		return reply{}, err
	}
	s.mu.Lock()
	o := &mwObj{h: s.newHandle(), mw: mw}
	s.mws[o.h] = o
	s.mu.Unlock()
	return reply{body: []any{nicproto.AllocMWResp{Handle: o.h, RKey: mw.RKey()}}}, nil
}

func (s *session) deallocMW(body []byte, _ []int) (reply, error) {
	var req nicproto.Handle
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	s.mu.Lock()
	o := s.mws[req.Handle]
	delete(s.mws, req.Handle)
	s.mu.Unlock()
	if o == nil {
		return reply{}, errInval
	}
	return reply{}, o.mw.Dealloc()
}

// bindObjects returns the window and region a BIND_MW slot names (the
// region is nil for handle 0, an unbind).
func (s *session) bindObjects(mw, mr uint32) (*verbs.MW, *verbs.MR, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	w := s.mws[mw]
	if w == nil {
		return nil, nil, false
	}
	if mr == 0 {
		return w.mw, nil, true
	}
	m := s.mrs[mr]
	if m == nil || m.mr == nil {
		return nil, nil, false
	}
	return w.mw, m.mr, true
}
