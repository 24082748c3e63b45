//go:build linux

package nic

import (
	"github.com/goroce/goroce/internal/nicproto"
	"github.com/goroce/goroce/verbs"
)

type ahObj struct {
	h  uint32
	ah *verbs.AH
}

func (s *session) createAH(body []byte, _ []int) (reply, error) {
	var req nicproto.CreateAHReq
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	pd := s.pd(req.PD)
	if pd == nil {
		return reply{}, errInval
	}
	ah, err := pd.pd.CreateAH(s.srv.fromAHAttr(&req.Attr))
	if err != nil {
		return reply{}, err
	}
	s.mu.Lock()
	o := &ahObj{h: s.newHandle(), ah: ah}
	s.ahs[o.h] = o
	s.mu.Unlock()
	return reply{body: []any{nicproto.Handle{Handle: o.h}}}, nil
}

func (s *session) destroyAH(body []byte, _ []int) (reply, error) {
	var req nicproto.Handle
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	s.mu.Lock()
	o := s.ahs[req.Handle]
	delete(s.ahs, req.Handle)
	s.mu.Unlock()
	if o == nil {
		return reply{}, errInval
	}
	return reply{}, o.ah.Destroy()
}

// fromAHAttr converts an address vector. libibverbs has no UDP port in it:
// peers are at 4791, or at the daemon's own port when it was given another
// (goroce peers only, such as the devices of one daemon in tests).
func (srv *Server) fromAHAttr(a *nicproto.AHAttr) verbs.AddressVector {
	return verbs.AddressVector{
		DGID: a.DGID, FlowLabel: a.FlowLabel, SGIDIndex: int(a.SGIDIndex), HopLimit: uint8(a.HopLimit),
		TrafficClass: uint8(a.TrafficClass), SL: uint8(a.SL), StaticRate: uint8(a.StaticRate),
		IsGlobal: a.IsGlobal != 0, PortNum: int(a.PortNum), DLID: uint16(a.DLID), SrcPathBits: uint8(a.SrcPathBits),
		UDPPort: srv.cfg.UDPPort,
	}
}

func toAHAttr(v *verbs.AddressVector) nicproto.AHAttr {
	a := nicproto.AHAttr{
		DGID: v.DGID, FlowLabel: v.FlowLabel, SGIDIndex: uint32(v.SGIDIndex), HopLimit: uint32(v.HopLimit),
		TrafficClass: uint32(v.TrafficClass), SL: uint32(v.SL), StaticRate: uint32(v.StaticRate),
		PortNum: uint32(v.PortNum), DLID: uint32(v.DLID), SrcPathBits: uint32(v.SrcPathBits),
	}
	if v.IsGlobal {
		a.IsGlobal = 1
	}
	return a
}

func (srv *Server) fromQPAttr(a *nicproto.QPAttr) verbs.QPAttr {
	return verbs.QPAttr{
		QPState: verbs.QPState(a.QPState), CurQPState: verbs.QPState(a.CurQPState), PathMTU: verbs.MTU(a.PathMTU),
		PathMigState: verbs.MigState(a.PathMigState), QKey: a.QKey, RQPSN: a.RQPSN, SQPSN: a.SQPSN,
		DestQPNum: a.DestQPNum, QPAccessFlags: verbs.AccessFlags(a.QPAccessFlags),
		Cap: verbs.QPCap{MaxSendWR: int(a.Cap.MaxSendWR), MaxRecvWR: int(a.Cap.MaxRecvWR),
			MaxSendSGE: int(a.Cap.MaxSendSGE), MaxRecvSGE: int(a.Cap.MaxRecvSGE), MaxInlineData: int(a.Cap.MaxInlineData)},
		AHAttr: srv.fromAHAttr(&a.AHAttr), PKeyIndex: int(a.PKeyIndex), EnSQDAsyncNotify: a.EnSQDAsyncNotify != 0,
		MaxRdAtomic: int(a.MaxRdAtomic), MaxDestRdAtomic: int(a.MaxDestRdAtomic), MinRNRTimer: uint8(a.MinRNRTimer),
		PortNum: int(a.PortNum), Timeout: uint8(a.Timeout), RetryCnt: uint8(a.RetryCnt), RNRRetry: uint8(a.RNRRetry),
		RateLimit: a.RateLimit,
	}
}

func toQPAttr(a *verbs.QPAttr) nicproto.QPAttr {
	o := nicproto.QPAttr{
		QPState: uint32(a.QPState), CurQPState: uint32(a.CurQPState), PathMTU: uint32(a.PathMTU),
		PathMigState: uint32(a.PathMigState), QKey: a.QKey, RQPSN: a.RQPSN, SQPSN: a.SQPSN,
		DestQPNum: a.DestQPNum, QPAccessFlags: uint32(a.QPAccessFlags), PKeyIndex: uint32(a.PKeyIndex),
		MaxRdAtomic: uint32(a.MaxRdAtomic), MaxDestRdAtomic: uint32(a.MaxDestRdAtomic),
		MinRNRTimer: uint32(a.MinRNRTimer), PortNum: uint32(a.PortNum), Timeout: uint32(a.Timeout),
		RetryCnt: uint32(a.RetryCnt), RNRRetry: uint32(a.RNRRetry), RateLimit: a.RateLimit,
		Cap: nicproto.QPCap{MaxSendWR: uint32(a.Cap.MaxSendWR), MaxRecvWR: uint32(a.Cap.MaxRecvWR),
			MaxSendSGE: uint32(a.Cap.MaxSendSGE), MaxRecvSGE: uint32(a.Cap.MaxRecvSGE), MaxInlineData: uint32(a.Cap.MaxInlineData)},
		AHAttr: toAHAttr(&a.AHAttr),
	}
	if a.EnSQDAsyncNotify {
		o.EnSQDAsyncNotify = 1
	}
	if a.SQDraining {
		o.SQDraining = 1
	}
	return o
}
