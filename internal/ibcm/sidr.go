package ibcm

import (
	"net/netip"
	"time"

	"github.com/goroce/goroce/internal/mad"
)

// Service ID resolution for UD QPs: SIDR_REQ → EventSIDRRequest →
// SIDRReply (SIDR_REP) → EventSIDRReply.

// SIDRParams are what SIDRRequest asks (the kernel's struct
// ib_cm_sidr_req_param).
type SIDRParams struct {
	Peer      netip.Addr
	ServiceID mad.ServiceID
	PKey      uint16 // 0: 0xFFFF
	// Timeout is the wait for the SIDR_REP before each retransmission
	// (default: IBATime(DefaultResponseTimeout), rdma_cm's); MaxRetries the
	// retransmissions (default DefaultMaxCMRetries).
	Timeout     time.Duration
	MaxRetries  int
	PrivateData []byte // at most 216 bytes (rdma_cm: its header and 180 bytes)
}

// SIDRRequest asks the peer which UD QP serves a service ID. The answer
// is EventSIDRReply, or EventTimeout.
func (m *Manager) SIDRRequest(p SIDRParams, now time.Time, out *Output) (ID, error) {
	if p.PKey == 0 {
		p.PKey = 0xFFFF
	}
	if p.Timeout <= 0 {
		p.Timeout = IBATime(DefaultResponseTimeout)
	}
	if p.MaxRetries <= 0 {
		p.MaxRetries = DefaultMaxCMRetries
	}
	req := &mad.SIDRREQ{PKey: p.PKey, ServiceID: p.ServiceID, PrivateData: p.PrivateData}
	if _, err := req.AppendBody(m.buf[:0]); err != nil {
		return 0, err
	}
	c := m.newConn(StateSIDRReqSent, p.Peer)
	if c == nil {
		return 0, ErrTooMany
	}
	req.RequestID = uint32(c.id)
	c.tid = m.tid(c)
	m.startPending(c, m.encode(c.tid, 0, req), p.Timeout, p.MaxRetries, now, out)
	return c.id, nil
}

// handleSIDRREQ runs the kernel's cm_sidr_req_handler: a duplicate (same
// request ID from the same sender) is dropped, no listener answered with
// "unsupported".
func (m *Manager) handleSIDRREQ(from netip.Addr, h *mad.Header, req *mad.SIDRREQ, now time.Time, out *Output) {
	key := sidrKey{req.RequestID, from}
	if m.bySIDR[key] != nil {
		m.counters.Duplicates++
		return
	}
	switch m.listening(req.ServiceID, from, req.PrivateData) {
	case NoListener:
		m.send(out, from, h.TID, &mad.SIDRREP{RequestID: req.RequestID, Status: mad.SIDRUnsupported,
			ServiceID: req.ServiceID})
		return
	case Refuse:
		m.send(out, from, h.TID, &mad.SIDRREP{RequestID: req.RequestID, Status: mad.SIDRReject,
			ServiceID: req.ServiceID})
		return
	case Drop:
		m.counters.Dropped++
		return
	}
	if !m.admit(from, out) {
		return
	}
	c := m.newConn(StateSIDRReqRcvd, from)
	if c == nil {
		m.counters.Limited++
		return
	}
	c.passive, c.tid, c.remoteID = true, h.TID, req.RequestID
	c.req = &mad.REQ{ServiceID: req.ServiceID} // what the SIDR_REP echoes
	c.sidr, c.inSIDR = key, true
	m.bySIDR[key] = c
	m.joinHalfOpen(c)
	m.schedule(c, timerAccept, now.Add(m.cfg.Limits.AcceptTimeout))
	m.event(out, c, Event{Type: EventSIDRRequest, ServiceID: req.ServiceID, PKey: req.PKey,
		PrivateData: clone(req.PrivateData)})
}

// SIDRReplyParams are the answer to a SIDR request.
type SIDRReplyParams struct {
	Status      mad.SIDRStatus
	QPN         uint32 // 24 bits
	QKey        uint32
	Info        []byte // at most 72 bytes (a ClassPortInfo with SIDRRedirect)
	PrivateData []byte // at most 136 bytes
}

// SIDRReply answers SIDR request id and forgets it. As in the kernel, a
// retransmission of the SIDR_REQ that arrives after the answer is a new
// request.
func (m *Manager) SIDRReply(id ID, p SIDRReplyParams, out *Output) error {
	c, err := m.get(id)
	if err != nil {
		return err
	}
	if c.state != StateSIDRReqRcvd {
		return ErrState
	}
	rep := &mad.SIDRREP{Status: p.Status, QPN: p.QPN, QKey: p.QKey, Info: p.Info, PrivateData: p.PrivateData}
	if _, err := rep.AppendBody(m.buf[:0]); err != nil {
		return err
	}
	m.sendSIDRREP(out, c, rep)
	m.free(c)
	return nil
}

func (m *Manager) sendSIDRREP(out *Output, c *conn, rep *mad.SIDRREP) {
	rep.RequestID, rep.ServiceID = c.remoteID, c.req.ServiceID
	m.send(out, c.peer, c.tid, rep)
}

// handleSIDRREP delivers the answer to our SIDR request.
func (m *Manager) handleSIDRREP(rep *mad.SIDRREP, out *Output) {
	c := m.conns[ID(rep.RequestID)]
	if c == nil || c.state != StateSIDRReqSent {
		m.counters.Unmatched++
		return
	}
	r := *rep
	r.Info, r.PrivateData = clone(rep.Info), clone(rep.PrivateData)
	m.event(out, c, Event{Type: EventSIDRReply, SIDRREP: &r})
	m.free(c)
}
