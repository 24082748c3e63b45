package ibcm

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/goroce/goroce/internal/mad"
)

// Rejection (REJ), message receipt acknowledgement (MRA) and the
// unsupported alternate path messages (LAP/APR).

// Reject refuses connection id during its handshake: the passive side a
// REQ (EventConnectRequest), the active side a REP (EventReply) or its own
// pending REQ. reason is normally mad.RejectConsumer, with up to 148 bytes
// of private data saying why; ari is at most 72 bytes. A refused REQ or
// REP is forgotten; an accepted one (REP sent) enters timewait.
func (m *Manager) Reject(id ID, reason mad.RejectReason, ari, privateData []byte, now time.Time, out *Output) error {
	c, err := m.get(id)
	if err != nil {
		return err
	}
	switch c.state {
	case StateReqSent, StateMRAReqRcvd, StateReqRcvd, StateMRAReqSent, StateRepRcvd, StateMRARepSent,
		StateRepSent, StateMRARepRcvd:
	default:
		return ErrState
	}
	rej := m.formatREJ(c, reason, ari, privateData)
	if _, err := rej.AppendBody(m.buf[:0]); err != nil {
		return err
	}
	m.send(out, c.peer, c.tid, &rej)
	if c.state == StateRepSent || c.state == StateMRARepRcvd {
		m.enterTimewait(c, now)
	} else {
		m.free(c)
	}
	return nil
}

// formatREJ fills a REJ from c as the kernel's cm_format_rej does: comm ID
// 0 and "REQ rejected" before the REQ was delivered, "REQ" or "REP"
// rejected while the driver decides, "other" after.
func (m *Manager) formatREJ(c *conn, reason mad.RejectReason, ari, privateData []byte) mad.REJ {
	rej := mad.REJ{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID, MsgRejected: mad.RespondOther,
		Reason: reason, ARI: ari, PrivateData: privateData}
	switch c.state {
	case StateReqRcvd:
		rej.LocalCommID, rej.MsgRejected = 0, mad.RespondREQ
	case StateMRAReqSent:
		rej.MsgRejected = mad.RespondREQ
	case StateRepRcvd, StateMRARepSent:
		rej.MsgRejected = mad.RespondREP
	}
	return rej
}

// sendREJ sends c's REJ; its values are the Manager's own and fit.
func (m *Manager) sendREJ(out *Output, c *conn, reason mad.RejectReason, ari, privateData []byte) {
	rej := m.formatREJ(c, reason, ari, privateData)
	m.send(out, c.peer, c.tid, &rej)
}

// issueREJ answers a message that has no connection behind it (the
// kernel's cm_issue_rej): its TID and its two comm IDs swapped, so that a
// rejected REQ (whose remote comm ID is 0) gets local comm ID 0.
func (m *Manager) issueREJ(out *Output, to netip.Addr, tid uint64, local, remote uint32, msg mad.MsgResponse, reason mad.RejectReason) {
	m.send(out, to, tid, &mad.REJ{LocalCommID: local, RemoteCommID: remote, MsgRejected: msg, Reason: reason})
}

// handleREJ runs the kernel's cm_rej_handler.
func (m *Manager) handleREJ(rej *mad.REJ, now time.Time, out *Output) {
	c := m.rejected(rej)
	if c == nil {
		m.counters.Unmatched++
		return
	}
	ev := Event{Type: EventRejected, Reason: rej.Reason, MsgRejected: rej.MsgRejected,
		ARI: clone(rej.ARI), PrivateData: clone(rej.PrivateData)}
	switch c.state {
	case StateReqSent, StateMRAReqRcvd, StateRepSent, StateMRARepRcvd, StateReqRcvd, StateMRAReqSent:
		m.event(out, c, ev)
		if rej.Reason == mad.RejectStaleConnection {
			m.enterTimewait(c, now)
		} else {
			m.free(c)
		}
	case StateEstablished:
		if d := m.cfg.Disconnecting; d != nil && !d(c.id, rej.PrivateData) {
			m.counters.Refused++
			return
		}
		m.event(out, c, ev)
		m.enterTimewait(c, now)
	case StateDREQSent, StateRepRcvd, StateMRARepSent:
		m.event(out, c, ev)
		m.enterTimewait(c, now)
	default:
		m.counters.Unmatched++
	}
}

// rejected finds the connection a REJ is for (cm_acquire_rejected_id): a
// timeout REJ by the rejecting CA's GUID in the ARI and its comm ID, a
// rejected REQ by our comm ID alone (we knew no remote one yet), others by
// both comm IDs.
func (m *Manager) rejected(rej *mad.REJ) *conn {
	switch {
	case rej.Reason == mad.RejectTimeout:
		if len(rej.ARI) < 8 {
			return nil
		}
		return m.byRemoteID[remoteKey{rej.LocalCommID, binary.BigEndian.Uint64(rej.ARI)}]
	case rej.MsgRejected == mad.RespondREQ:
		return m.lookup(rej.RemoteCommID, 0)
	}
	return m.lookup(rej.RemoteCommID, rej.LocalCommID)
}

// handleMRA runs the kernel's cm_mra_handler: the peer needs more time for
// our REQ or REP; wait the service time it gives before retransmitting.
func (m *Manager) handleMRA(mra *mad.MRA, now time.Time) {
	var c *conn
	if mra.MsgMRAed == mad.RespondREQ {
		c = m.lookup(mra.RemoteCommID, 0)
	} else {
		c = m.lookup(mra.RemoteCommID, mra.LocalCommID)
	}
	switch {
	case c == nil:
		m.counters.Unmatched++
	case c.state == StateReqSent && mra.MsgMRAed == mad.RespondREQ:
		if m.extend(c, mra.ServiceTimeout, now) {
			c.state = StateMRAReqRcvd
		}
	case c.state == StateRepSent && mra.MsgMRAed == mad.RespondREP:
		if m.extend(c, mra.ServiceTimeout, now) {
			c.state = StateMRARepRcvd
		}
	case c.state == StateMRAReqRcvd || c.state == StateMRARepRcvd:
		m.counters.Duplicates++
	default:
		m.counters.Unmatched++
	}
}

// handleLAP answers a LAP on an established connection with an APR
// "unsupported": goroce has no alternate paths. (The kernel's CM drops
// LAP on RoCE without an answer.)
func (m *Manager) handleLAP(from netip.Addr, h *mad.Header, lap *mad.LAP, out *Output) {
	c := m.lookup(lap.RemoteCommID, lap.LocalCommID)
	if c == nil || c.state != StateEstablished {
		m.counters.Unmatched++
		return
	}
	m.send(out, from, h.TID, &mad.APR{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID, Status: mad.APRUnsupported})
}
