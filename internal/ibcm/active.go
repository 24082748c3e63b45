package ibcm

import (
	"net/netip"
	"time"

	"github.com/goroce/goroce/internal/mad"
)

// The active side: Connect (REQ) → REP → EventReply → Ready (RTU) →
// EventEstablished.

// ConnectParams are what Connect puts in the REQ (the kernel's struct
// ib_cm_req_param; rdma_cm fills it from the route and rdma_conn_param).
type ConnectParams struct {
	Peer      netip.Addr // the peer's address; its QP 1 gets the MADs
	ServiceID mad.ServiceID
	QPN       uint32 // 24 bits
	Transport mad.TransportType
	// StartingPSN is the first PSN our QP receives; the peer's sends
	// start there.
	StartingPSN uint32
	// ResponderResources and InitiatorDepth: the RDMA READs and atomics
	// our QP serves and issues at once.
	ResponderResources, InitiatorDepth uint8
	RetryCount, RNRRetryCount          uint8 // 3 bits each
	PathMTU                            uint8 // IB MTU enum, 1-5
	PKey                               uint16
	FlowControl, SRQ                   bool
	// Path is the primary path: GIDs, flow label (rdma_cm:
	// mad.RDMACMFlowLabel), traffic class, hop limit, SL, rate. Connect
	// sets its LIDs, SubnetLocal and LocalACKTimeout as the kernel's
	// cm_format_req does: LIDs 0xFFFF and not subnet-local above one hop.
	Path mad.Path
	// PacketLifetime is the path's packet life time exponent (default
	// DefaultPacketLifetime).
	PacketLifetime uint8
	// ResponseTimeout is both CM response timeouts of the REQ (default
	// DefaultResponseTimeout); MaxCMRetries the retransmissions of the
	// REQ, REP and DREQ (default DefaultMaxCMRetries).
	ResponseTimeout uint8
	MaxCMRetries    uint8
	VendorID        uint32 // ECE, 24 bits
	AttrMod         uint32 // ECE options, in the header
	PrivateData     []byte // at most 92 bytes (rdma_cm: its header and 56 bytes)
}

// Connect starts a connection: it sends a REQ and retransmits it until the
// peer answers (REP, REJ, MRA) or the retransmissions run out.
func (m *Manager) Connect(p ConnectParams, now time.Time, out *Output) (ID, error) {
	plt := p.PacketLifetime
	if plt == 0 {
		plt = DefaultPacketLifetime
	}
	rto := p.ResponseTimeout
	if rto == 0 {
		rto = DefaultResponseTimeout
	}
	retries := p.MaxCMRetries
	if retries == 0 {
		retries = DefaultMaxCMRetries
	}
	pkey := p.PKey
	if pkey == 0 {
		pkey = 0xFFFF
	}
	path := p.Path
	if path.HopLimit <= 1 {
		path.LocalLID, path.RemoteLID, path.SubnetLocal = 0, 0, true
	} else {
		path.LocalLID, path.RemoteLID, path.SubnetLocal = 0xFFFF, 0xFFFF, false
	}
	path.LocalACKTimeout = ACKTimeout(m.cfg.AckDelay, plt)
	req := &mad.REQ{
		VendorID: p.VendorID, ServiceID: p.ServiceID, LocalCAGUID: m.cfg.CAGUID, LocalQPN: p.QPN,
		ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		RemoteCMResponseTimeout: rto, TransportServiceType: p.Transport, EndToEndFlowControl: p.FlowControl,
		StartingPSN: p.StartingPSN, LocalCMResponseTimeout: rto, RetryCount: p.RetryCount, PKey: pkey,
		PathMTU: p.PathMTU, RNRRetryCount: p.RNRRetryCount, MaxCMRetries: retries, SRQ: p.SRQ,
		Primary: path, PrivateData: clone(p.PrivateData),
	}
	// Check every value before making a record.
	if _, err := req.AppendBody(m.buf[:0]); err != nil {
		return 0, err
	}
	c := m.newConn(StateReqSent, p.Peer)
	if c == nil {
		return 0, ErrTooMany
	}
	req.LocalCommID = uint32(c.id)
	c.tid, c.req, c.localQPN, c.packetLifetime = m.tid(c), req, p.QPN, plt
	c.avTimeout = plt + 1 // the kernel's cm_init_av_by_path
	// cm_send_req's timeout: two packet life times and the peer's
	// response time.
	c.timeout = 2*IBATime(plt) + IBATime(rto)
	c.maxRetries = int(retries)
	m.startPending(c, m.encode(c.tid, p.AttrMod, req), c.timeout, c.maxRetries, now, out)
	return c.id, nil
}

// handleREP runs the kernel's cm_rep_handler: match the REQ, refuse a
// duplicate or a stale connection, then hand the REP to the driver.
func (m *Manager) handleREP(from netip.Addr, h *mad.Header, rep *mad.REP, now time.Time, out *Output) {
	c := m.lookup(rep.RemoteCommID, 0)
	if c == nil || (c.state != StateReqSent && c.state != StateMRAReqRcvd) {
		m.duplicateREP(rep, out)
		return
	}
	key := remoteKey{rep.LocalCommID, rep.LocalCAGUID}
	if m.byRemoteID[key] != nil {
		m.counters.Duplicates++ // another connection has that remote comm ID
		return
	}
	if old := m.byRemoteQPN[remoteKey{rep.LocalQPN, rep.LocalCAGUID}]; old != nil {
		// The peer answers with the QPN of a connection we hold with it:
		// that one is stale. The kernel refuses the REP and leaves the REQ
		// pending; refusing the connection outright ends the exchange.
		m.issueREJ(out, from, h.TID, rep.RemoteCommID, rep.LocalCommID, mad.RespondREP, mad.RejectStaleConnection)
		m.stale(old, now, out)
		m.event(out, c, Event{Type: EventRejected, Reason: mad.RejectStaleConnection, MsgRejected: mad.RespondREP, Local: true})
		m.enterTimewait(c, now)
		return
	}
	m.unschedule(c)
	c.pend = nil
	c.remoteID, c.remoteQPN, c.remoteGUID = rep.LocalCommID, rep.LocalQPN, rep.LocalCAGUID
	m.indexRemote(c)
	// The kernel's cm_rep_handler: the path's ACK timeout now adds the
	// peer's ACK delay (for the QP and for timewait).
	c.avTimeout = ACKTimeout(rep.TargetACKDelay, c.packetLifetime)
	// rdma_cm prepares an MRA when it delivers the REP: a duplicate REP
	// before Ready is answered with one.
	c.state = StateMRARepSent
	r := *rep
	r.PrivateData = clone(rep.PrivateData)
	q := c.req
	m.event(out, c, Event{Type: EventReply, REP: &r, QP: QPAttrs{
		DestQPN: rep.LocalQPN, RQPSN: q.StartingPSN, SQPSN: rep.StartingPSN, PathMTU: q.PathMTU,
		MaxDestRdAtomic: rep.InitiatorDepth, MaxRdAtomic: rep.ResponderResources,
		RetryCount: q.RetryCount, RNRRetry: rep.RNRRetryCount, Timeout: c.avTimeout, PKey: q.PKey,
		RemoteGID: q.Primary.RemoteGID, FlowLabel: q.Primary.FlowLabel, HopLimit: q.Primary.HopLimit,
		TrafficClass: q.Primary.TrafficClass,
	}})
}

// duplicateREP answers a REP for a connection past REQ_SENT as
// cm_dup_rep_handler does: the RTU again once established, an MRA while
// the driver has not called Ready.
func (m *Manager) duplicateREP(rep *mad.REP, out *Output) {
	c := m.lookup(rep.RemoteCommID, rep.LocalCommID)
	if c == nil {
		m.counters.Unmatched++
		return
	}
	m.counters.Duplicates++
	switch c.state {
	case StateEstablished:
		m.send(out, c.peer, c.tid, &mad.RTU{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID, PrivateData: c.privateData})
	case StateMRARepSent:
		m.send(out, c.peer, c.tid, &mad.MRA{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID,
			MsgMRAed: mad.RespondREP, ServiceTimeout: m.cfg.MRAServiceTimeout})
	}
}

// Ready completes active connection id once its QP is in RTS: it sends the
// RTU (with up to 224 bytes of private data) and reports
// EventEstablished.
func (m *Manager) Ready(id ID, privateData []byte, out *Output) error {
	c, err := m.get(id)
	if err != nil {
		return err
	}
	if c.state != StateMRARepSent && c.state != StateRepRcvd {
		return ErrState
	}
	rtu := &mad.RTU{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID, PrivateData: privateData}
	if _, err := rtu.AppendBody(m.buf[:0]); err != nil {
		return err
	}
	c.privateData = clone(privateData)
	m.send(out, c.peer, c.tid, rtu)
	c.state = StateEstablished
	c.req = nil
	m.event(out, c, Event{Type: EventEstablished})
	return nil
}
