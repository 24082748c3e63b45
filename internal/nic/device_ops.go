//go:build linux

package nic

import (
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nicproto"
	"github.com/goroce/goroce/verbs"
)

func (s *session) list(_ []byte, _ []int) (reply, error) {
	devs := s.srv.deviceList()
	body := []any{nicproto.ListResp{Count: uint32(len(devs))}}
	for _, d := range devs {
		body = append(body, d.info())
	}
	return reply{body: body}, nil
}

func (s *session) ensureDevice(body []byte, _ []int) (reply, error) {
	var req nicproto.EnsureReq
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	addr := netip.AddrFrom16(req.GID).Unmap()
	if !addr.IsValid() || addr.IsUnspecified() {
		return reply{}, errInval
	}
	d, err := s.srv.ensure(addr)
	if err != nil {
		s.srv.cfg.Logf("ensure %v: %v", addr, err)
		return reply{}, unix.EADDRNOTAVAIL
	}
	return reply{body: []any{d.info()}}, nil
}

// open attaches the session to a device and returns its attributes, which
// the client caches: a goroce device's attributes, port and GID table never
// change while it is open.
func (s *session) open(body []byte, _ []int) (reply, error) {
	var req nicproto.OpenReq
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	d := s.srv.deviceByName(nicproto.Name(req.Name))
	if d == nil {
		return reply{}, errNoDev
	}
	r, w, err := newEventPipe()
	if err != nil {
		return reply{}, err
	}
	resp := nicproto.OpenResp{Info: d.info(), Attr: devAttr(d.dev)}
	port, err := d.dev.QueryPort(1)
	if err != nil {
		unix.Close(r)
		unix.Close(w)
		return reply{}, err
	}
	resp.Port = portAttr(port)
	// The table has room for more GIDs than the device has, as a NIC's
	// has for addresses not configured: the empty entries answer
	// ibv_query_gid_ex with ENODATA.
	resp.Port.GIDTblLen = max(resp.Port.GIDTblLen, nicproto.MaxGIDs)
	for i, g := range d.dev.GIDTable() {
		if i >= nicproto.MaxGIDs {
			break
		}
		resp.GIDs[i] = g.GID
		resp.GIDTypes[i] = uint32(g.Type)
		resp.GIDCount++
	}
	pkey, err := d.dev.QueryPKey(1, 0)
	if err != nil {
		unix.Close(r)
		unix.Close(w)
		return reply{}, err
	}
	resp.PKey = uint32(pkey)
	s.mu.Lock()
	s.dev = d
	s.asyncW = w
	s.mu.Unlock()
	return reply{body: []any{resp}, fds: []int{r}, closeAfter: []int{r}}, nil
}

func devAttr(d *verbs.Device) nicproto.DevAttr {
	a := d.Query()
	var o nicproto.DevAttr
	copy(o.FWVer[:63], a.FWVer)
	o.NodeGUID = uint64(a.NodeGUID)
	o.SysImageGUID = uint64(a.SysImageGUID)
	o.MaxMRSize = a.MaxMRSize
	o.PageSizeCap = a.PageSizeCap
	o.DeviceCapFlags = uint64(a.DeviceCapFlags)
	o.VendorID = a.VendorID
	o.VendorPartID = a.VendorPartID
	o.HWVer = a.HWVer
	o.MaxQP = uint32(a.MaxQP)
	o.MaxQPWR = uint32(a.MaxQPWR)
	o.MaxSGE = uint32(a.MaxSGE)
	o.MaxSGERD = uint32(a.MaxSGERD)
	o.MaxCQ = uint32(a.MaxCQ)
	o.MaxCQE = uint32(a.MaxCQE)
	o.MaxMR = uint32(a.MaxMR)
	o.MaxPD = uint32(a.MaxPD)
	o.MaxQPRdAtom = uint32(a.MaxQPRdAtom)
	o.MaxQPInitRdAtom = uint32(a.MaxQPInitRdAtom)
	o.MaxResRdAtom = uint32(a.MaxResRdAtom)
	o.AtomicCap = uint32(a.AtomicCap)
	o.MaxMW = uint32(a.MaxMW)
	o.MaxAH = uint32(a.MaxAH)
	o.MaxSRQ = uint32(a.MaxSRQ)
	o.MaxSRQWR = uint32(a.MaxSRQWR)
	o.MaxSRQSGE = uint32(a.MaxSRQSGE)
	o.MaxPKeys = uint32(a.MaxPKeys)
	o.LocalCAAckDelay = uint32(a.LocalCAAckDelay)
	o.PhysPortCnt = uint32(a.PhysPortCnt)
	o.MaxInlineData = uint32(a.MaxInlineData)
	o.NumCompVectors = uint32(d.NumCompVectors())
	return o
}

func portAttr(p verbs.PortAttr) nicproto.PortAttr {
	return nicproto.PortAttr{
		State: uint32(p.State), MaxMTU: uint32(p.MaxMTU), ActiveMTU: uint32(p.ActiveMTU),
		GIDTblLen: uint32(p.GIDTblLen), PortCapFlags: uint32(p.PortCapFlags), MaxMsgSz: p.MaxMsgSize,
		BadPKeyCntr: p.BadPKeyCntr, QKeyViolCntr: p.QKeyViolCntr, PKeyTblLen: uint32(p.PKeyTblLen),
		LID: uint32(p.LID), SMLID: uint32(p.SMLID), LMC: uint32(p.LMC), MaxVLNum: uint32(p.MaxVLNum),
		SMSL: uint32(p.SMSL), SubnetTimeout: uint32(p.SubnetTimeout), InitTypeReply: uint32(p.InitTypeReply),
		ActiveWidth: uint32(p.ActiveWidth), ActiveSpeed: uint32(p.ActiveSpeed),
		PhysState: uint32(p.PhysState), LinkLayer: uint32(p.LinkLayer),
	}
}
