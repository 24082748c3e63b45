package ibcm

import (
	"net/netip"
	"time"

	"github.com/goroce/goroce/internal/mad"
)

// The passive side: REQ → EventConnectRequest → Accept (REP) → RTU →
// EventEstablished.

// handleREQ runs the kernel's cm_req_handler and cm_match_req checks in
// their order: duplicate, stale connection, listener; then the limits.
func (m *Manager) handleREQ(from netip.Addr, h *mad.Header, req *mad.REQ, now time.Time, out *Output) {
	// A retransmitted REQ of a connection we know: same comm ID from the
	// same CA.
	if c := m.byRemoteID[remoteKey{req.LocalCommID, req.LocalCAGUID}]; c != nil {
		m.counters.Duplicates++
		m.duplicateREQ(c, from, out)
		return
	}
	// A new REQ reusing the QPN of a connection we know with that CA (live
	// or in timewait): stale. Refuse it, and end the old connection, which
	// the peer has evidently lost.
	if c := m.byRemoteQPN[remoteKey{req.LocalQPN, req.LocalCAGUID}]; c != nil {
		m.issueREJ(out, from, h.TID, 0, req.LocalCommID, mad.RespondREQ, mad.RejectStaleConnection)
		m.stale(c, now, out)
		return
	}
	switch m.listening(req.ServiceID, from, req.PrivateData) {
	case NoListener:
		m.issueREJ(out, from, h.TID, 0, req.LocalCommID, mad.RespondREQ, mad.RejectInvalidServiceID)
		return
	case Refuse:
		m.issueREJ(out, from, h.TID, 0, req.LocalCommID, mad.RespondREQ, mad.RejectConsumer)
		return
	case Drop:
		m.counters.Dropped++
		return
	}
	// Only RC and UC connect through REQ/REP; the path MTU must be an IB
	// MTU. (The kernel leaves both to rdma_cm and the QP modify; answering
	// here names the reason.)
	if req.TransportServiceType != mad.TransportRC && req.TransportServiceType != mad.TransportUC {
		m.issueREJ(out, from, h.TID, 0, req.LocalCommID, mad.RespondREQ, mad.RejectInvalidTransportType)
		return
	}
	if req.PathMTU < 1 || req.PathMTU > 5 {
		m.issueREJ(out, from, h.TID, 0, req.LocalCommID, mad.RespondREQ, mad.RejectInvalidMTU)
		return
	}
	if !m.admit(from, out) {
		return
	}
	c := m.newConn(StateMRAReqSent, from)
	if c == nil {
		m.counters.Limited++
		return
	}
	r := *req
	r.PrivateData = clone(req.PrivateData)
	ev := r // the driver's copy
	ev.PrivateData = clone(req.PrivateData)
	c.passive, c.tid, c.req = true, h.TID, &r
	c.remoteID, c.remoteQPN, c.remoteGUID = req.LocalCommID, req.LocalQPN, req.LocalCAGUID
	c.timeout = IBATime(req.LocalCMResponseTimeout)
	c.maxRetries = int(req.MaxCMRetries)
	// The kernel's passive av.timeout: the path's packet life time (the
	// REQ's ACK timeout less one) plus one.
	c.avTimeout = max(req.Primary.LocalACKTimeout, 1)
	m.indexRemote(c)
	m.joinHalfOpen(c)
	m.schedule(c, timerAccept, now.Add(m.cfg.Limits.AcceptTimeout))
	m.event(out, c, Event{Type: EventConnectRequest, REQ: &ev})
}

// duplicateREQ answers a retransmitted REQ as cm_dup_req_handler does:
// with an MRA while the driver has not answered, with REJ "stale" in
// timewait, and not at all otherwise (a REP is retransmitted on its own
// timer).
func (m *Manager) duplicateREQ(c *conn, from netip.Addr, out *Output) {
	switch c.state {
	case StateMRAReqSent:
		m.send(out, from, c.tid, &mad.MRA{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID,
			MsgMRAed: mad.RespondREQ, ServiceTimeout: m.cfg.MRAServiceTimeout})
	case StateTimewait:
		m.sendREJ(out, c, mad.RejectStaleConnection, nil, nil)
	}
}

// AcceptParams are the passive side's answer to a REQ (the kernel's
// struct ib_cm_rep_param).
type AcceptParams struct {
	QPN         uint32 // 24 bits
	StartingPSN uint32 // the first PSN our QP receives
	// ResponderResources and InitiatorDepth: the RDMA READs and atomics
	// our QP serves and issues at once (at most the REQ's InitiatorDepth
	// and ResponderResources respectively, by rdma_cm's convention).
	ResponderResources, InitiatorDepth uint8
	// RNRRetryCount is the RNR retry count the active side's QP is to use.
	RNRRetryCount    uint8
	FailoverAccepted uint8
	FlowControl, SRQ bool
	VendorID         uint32 // ECE, 24 bits
	AttrMod          uint32 // ECE options, in the header
	PrivateData      []byte // at most 196 bytes
}

// Accept answers connection request id with a REP and returns the
// attributes of the QP. Transmit the REP only after moving the QP
// INIT→RTR→RTS with them (the peer may send at once on the REP); if that
// fails, drop the Output's sends and call Reject instead.
func (m *Manager) Accept(id ID, p AcceptParams, now time.Time, out *Output) (QPAttrs, error) {
	c, err := m.get(id)
	if err != nil {
		return QPAttrs{}, err
	}
	if c.state != StateMRAReqSent && c.state != StateReqRcvd {
		return QPAttrs{}, ErrState
	}
	rep := mad.REP{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID, LocalQPN: p.QPN,
		StartingPSN: p.StartingPSN, ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		TargetACKDelay: m.cfg.AckDelay, FailoverAccepted: p.FailoverAccepted, EndToEndFlowControl: p.FlowControl,
		RNRRetryCount: p.RNRRetryCount, SRQ: p.SRQ, LocalCAGUID: m.cfg.CAGUID, VendorID: p.VendorID,
		PrivateData: p.PrivateData}
	h := mad.CMHeader(mad.AttrREP, c.tid)
	h.AttrMod = p.AttrMod
	b, err := mad.AppendMAD(m.buf[:0], &h, &rep)
	if err != nil {
		return QPAttrs{}, err
	}
	m.buf = b
	c.localQPN = p.QPN
	c.state = StateRepSent
	m.startPending(c, b, c.timeout, c.maxRetries, now, out)
	r := c.req
	return QPAttrs{
		DestQPN: r.LocalQPN, RQPSN: p.StartingPSN, SQPSN: r.StartingPSN, PathMTU: r.PathMTU,
		MaxDestRdAtomic: p.ResponderResources, MaxRdAtomic: p.InitiatorDepth,
		RetryCount: r.RetryCount, RNRRetry: r.RNRRetryCount, Timeout: c.avTimeout, PKey: r.PKey,
		RemoteGID: r.Primary.LocalGID, FlowLabel: r.Primary.FlowLabel, HopLimit: r.Primary.HopLimit,
		TrafficClass: r.Primary.TrafficClass,
	}, nil
}

// handleRTU establishes a passive connection (cm_rtu_handler).
func (m *Manager) handleRTU(rtu *mad.RTU, out *Output) {
	c := m.lookup(rtu.RemoteCommID, rtu.LocalCommID)
	if c == nil || (c.state != StateRepSent && c.state != StateMRARepRcvd) {
		m.counters.Duplicates++
		return
	}
	m.establish(c)
	m.event(out, c, Event{Type: EventEstablished, PrivateData: clone(rtu.PrivateData)})
}

func (m *Manager) establish(c *conn) {
	m.unschedule(c)
	m.leaveHalfOpen(c)
	c.pend = nil
	c.state = StateEstablished
	c.req = nil
}

// Established is the driver's report that the QP of passive connection
// id received a packet before the RTU (IB_EVENT_COMM_EST, ib_cm_notify):
// the RTU was lost, the peer is connected, so is this side.
func (m *Manager) Established(id ID, out *Output) error {
	c, err := m.get(id)
	if err != nil {
		return err
	}
	if c.state != StateRepSent && c.state != StateMRARepRcvd {
		return ErrState
	}
	m.establish(c)
	m.event(out, c, Event{Type: EventEstablished})
	return nil
}
