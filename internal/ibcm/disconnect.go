package ibcm

import (
	"net/netip"
	"time"

	"github.com/goroce/goroce/internal/mad"
)

// Teardown: DREQ → DREP → timewait, and the driver's Destroy.

// Disconnect ends connection id, as rdma_disconnect does: established, it
// sends a DREQ (retransmitted until the DREP); after the peer's DREQ
// (EventDisconnectRequest) it sends the DREP. Either way the connection
// ends in timewait. Move the QP to ERR first. Private data: at most 220
// bytes for a DREQ, 224 for a DREP.
func (m *Manager) Disconnect(id ID, privateData []byte, now time.Time, out *Output) error {
	c, err := m.get(id)
	if err != nil {
		return err
	}
	switch c.state {
	case StateEstablished:
		return m.sendDREQ(c, privateData, true, now, out)
	case StateDREQRcvd:
		drep := &mad.DREP{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID, PrivateData: privateData}
		if _, err := drep.AppendBody(m.buf[:0]); err != nil {
			return err
		}
		c.privateData = clone(privateData) // for a duplicate DREQ in timewait
		m.send(out, c.peer, c.tid, drep)
		m.enterTimewait(c, now)
		return nil
	}
	return ErrState
}

// sendDREQ sends c's DREQ with a fresh TID, retransmitted if retry.
func (m *Manager) sendDREQ(c *conn, privateData []byte, retry bool, now time.Time, out *Output) error {
	dreq := &mad.DREQ{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID, RemoteQPN: c.remoteQPN,
		PrivateData: privateData}
	if _, err := dreq.AppendBody(m.buf[:0]); err != nil {
		return err
	}
	c.tid = m.tid(c)
	b := m.encode(c.tid, 0, dreq)
	if !retry {
		out.send(c.peer, b)
		m.counters.Sent[mad.AttrDREQ-mad.AttrREQ]++
		m.enterTimewait(c, now)
		return nil
	}
	c.state = StateDREQSent
	m.startPending(c, b, c.timeout, c.maxRetries, now, out)
	return nil
}

// handleDREQ runs the kernel's cm_dreq_handler.
func (m *Manager) handleDREQ(from netip.Addr, h *mad.Header, dreq *mad.DREQ, now time.Time, out *Output) {
	c := m.lookup(dreq.RemoteCommID, dreq.LocalCommID)
	if c == nil {
		// Unknown (long gone, or never ours): the kernel answers with a
		// DREP anyway, so that the peer's disconnect completes.
		m.counters.Unmatched++
		m.send(out, from, h.TID, &mad.DREP{LocalCommID: dreq.RemoteCommID, RemoteCommID: dreq.LocalCommID})
		return
	}
	if c.localQPN != dreq.RemoteQPN {
		m.counters.Unmatched++ // the kernel drops it silently
		return
	}
	switch c.state {
	case StateRepSent, StateMRARepRcvd, StateEstablished:
		// (Before the RTU: the peer connected, the RTU was lost, and the
		// peer is already done.)
		if d := m.cfg.Disconnecting; d != nil && !d(c.id, dreq.PrivateData) {
			m.counters.Refused++
			return
		}
		m.unschedule(c)
		m.leaveHalfOpen(c)
		c.pend, c.req = nil, nil
		c.state, c.tid = StateDREQRcvd, h.TID
		m.event(out, c, Event{Type: EventDisconnectRequest, PrivateData: clone(dreq.PrivateData)})
	case StateDREQSent:
		// Crossing DREQs. The kernel reports the DREQ and its rdma_cm
		// answers it on the application's rdma_disconnect; the driver has
		// disconnected already, so the Manager answers at once.
		c.tid = h.TID
		m.send(out, c.peer, c.tid, &mad.DREP{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID})
		m.event(out, c, Event{Type: EventDisconnected})
		m.enterTimewait(c, now)
	case StateTimewait:
		// Our DREP was lost: send it again.
		m.counters.Duplicates++
		m.send(out, c.peer, h.TID, &mad.DREP{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID,
			PrivateData: c.privateData})
	case StateDREQRcvd:
		m.counters.Duplicates++
	default:
		m.counters.Unmatched++
	}
}

// handleDREP runs the kernel's cm_drep_handler.
func (m *Manager) handleDREP(drep *mad.DREP, now time.Time, out *Output) {
	c := m.lookup(drep.RemoteCommID, drep.LocalCommID)
	if c == nil || (c.state != StateDREQSent && c.state != StateDREQRcvd) {
		m.counters.Unmatched++
		return
	}
	m.event(out, c, Event{Type: EventDisconnected, PrivateData: clone(drep.PrivateData)})
	m.enterTimewait(c, now)
}

// stale ends c, a connection whose remote QPN a new REQ or REP reuses: the
// kernel sends it a DREQ if it is established.
func (m *Manager) stale(c *conn, now time.Time, out *Output) {
	if c.state != StateEstablished {
		return
	}
	if d := m.cfg.Disconnecting; d != nil && !d(c.id, nil) {
		m.counters.Refused++ // anyone can send a REQ with the peer's GUID and QPN
		return
	}
	m.event(out, c, Event{Type: EventStale})
	_ = m.sendDREQ(c, nil, true, now, out)
}

// Destroy lets go of connection id whatever its state, as the kernel's
// cm_destroy_id: a pending REQ is withdrawn with REJ "timeout", an
// unfinished handshake refused with REJ "consumer defined", an
// established connection gets one DREQ (not retransmitted), a received
// DREQ its DREP, a SIDR request SIDR_REP "rejected". The record stays in
// timewait if the connection got that far; no event is reported for id
// any more. privateData goes in the DREQ or DREP, as Disconnect's, and in
// the REJ of a connection whose RTU has not come: a secured connection's
// peer takes only a tagged one once established (package cm).
func (m *Manager) Destroy(id ID, privateData []byte, now time.Time, out *Output) error {
	c, err := m.get(id)
	if err != nil {
		return err
	}
	c.destroyed = true
	switch c.state {
	case StateReqSent, StateMRAReqRcvd:
		m.sendREJ(out, c, mad.RejectTimeout, m.guidARI(), nil)
		m.free(c)
	case StateReqRcvd, StateMRAReqSent, StateRepRcvd, StateMRARepSent:
		m.sendREJ(out, c, mad.RejectConsumer, nil, nil)
		m.free(c)
	case StateRepSent, StateMRARepRcvd:
		// The peer may be established already (our RTU lost):
		// the REJ then ends its connection, tagged as a DREQ.
		m.sendREJ(out, c, mad.RejectConsumer, nil, privateData)
		m.enterTimewait(c, now)
	case StateEstablished:
		_ = m.sendDREQ(c, privateData, false, now, out)
	case StateDREQSent:
		m.enterTimewait(c, now)
	case StateDREQRcvd:
		drep := &mad.DREP{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID, PrivateData: privateData}
		if _, err := drep.AppendBody(m.buf[:0]); err != nil {
			drep.PrivateData = nil // too long: as the kernel, answer without
		}
		c.privateData = clone(drep.PrivateData) // for a duplicate DREQ in timewait
		m.send(out, c.peer, c.tid, drep)
		m.enterTimewait(c, now)
	case StateSIDRReqRcvd:
		m.sendSIDRREP(out, c, &mad.SIDRREP{Status: mad.SIDRReject})
		m.free(c)
	case StateTimewait:
		// Keep it until timewait ends, silently.
	default:
		m.free(c)
	}
	return nil
}
