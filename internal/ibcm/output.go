package ibcm

import (
	"net/netip"

	"github.com/goroce/goroce/internal/mad"
)

// ID is a local communication ID, the Manager's handle on a connection or
// SIDR request (never 0).
type ID uint32

// Send is a MAD the Manager wants sent: a UD SEND Only from the device's
// QP 1 to QP 1 of To, with the GSI Q_Key and P_Key 0xFFFF.
type Send struct {
	To  netip.Addr
	MAD [mad.MADSize]byte
}

// EventType says what happened to a connection.
type EventType uint8

// Events, with what the driver must do about each.
const (
	// EventConnectRequest (passive): a REQ matched a listener. Event.REQ
	// holds it. The driver chooses a QP and calls Accept, which returns
	// the QP's attributes: it moves the QP INIT→RTR→RTS with them before
	// it transmits the REP that Accept put in the Output; or it calls
	// Reject. Duplicates of the REQ meanwhile are answered with MRAs.
	EventConnectRequest EventType = iota + 1
	// EventReply (active): the REP arrived. Event.REP holds it, Event.QP
	// the QP's attributes: the driver moves its QP RTR→RTS with them and
	// calls Ready (RTU), or Reject.
	EventReply
	// EventEstablished: the connection is up (passive: the RTU arrived,
	// with Event.PrivateData, or the driver called Established; active:
	// the driver called Ready).
	EventEstablished
	// EventRejected: the peer rejected (Event.Reason, Event.ARI,
	// Event.PrivateData, Event.MsgRejected), or the Manager refused a
	// stale REP (Event.Local). The driver moves the QP to ERR; the ID is
	// gone or in timewait.
	EventRejected
	// EventTimeout: a REQ, REP, DREQ or SIDR_REQ (Event.Unanswered) went
	// unanswered through all retransmissions. For a REQ or REP the
	// Manager sent the peer a REJ "timeout" and forgot the ID; after a
	// DREQ the connection is in timewait. The driver moves the QP to ERR.
	EventTimeout
	// EventAbandoned (passive): the Manager dropped a half-open request:
	// not accepted within Limits.AcceptTimeout, or evicted by the
	// HalfOpen limit. No MAD was sent; the driver drops the request and
	// any QP it made for it.
	EventAbandoned
	// EventDisconnectRequest: the peer sent a DREQ (Event.PrivateData).
	// The driver moves the QP to ERR and calls Disconnect, which sends
	// the DREP.
	EventDisconnectRequest
	// EventDisconnected: our DREQ was answered (Event.PrivateData holds
	// the DREP's) or crossed the peer's; the connection is in timewait.
	EventDisconnected
	// EventStale: a new REQ or REP reused this connection's remote QPN
	// with the same CA GUID: the peer has lost the connection. The
	// Manager sent a DREQ; the driver moves the QP to ERR.
	// EventDisconnected or EventTimeout follows.
	EventStale
	// EventTimewaitExit: the record is freed. The QPN may be reused now:
	// stray packets of the old connection have died out.
	EventTimewaitExit
	// EventSIDRRequest (passive): a SIDR_REQ matched a listener
	// (Event.ServiceID, Event.PKey, Event.PrivateData). The driver
	// answers with SIDRReply.
	EventSIDRRequest
	// EventSIDRReply (active): Event.SIDRREP holds the answer (status,
	// QPN, Q_Key, private data); the ID is gone.
	EventSIDRReply
)

var eventNames = [...]string{"", "ConnectRequest", "Reply", "Established", "Rejected", "Timeout", "Abandoned",
	"DisconnectRequest", "Disconnected", "Stale", "TimewaitExit", "SIDRRequest", "SIDRReply"}

func (t EventType) String() string {
	if int(t) < len(eventNames) && t != 0 {
		return eventNames[t]
	}
	return "EventType(?)"
}

// Event is something the driver must know or act on. Only the fields of
// its Type are set; byte slices are the Event's own.
type Event struct {
	Type EventType
	ID   ID
	Peer netip.Addr

	REQ *mad.REQ // EventConnectRequest
	REP *mad.REP // EventReply
	QP  QPAttrs  // EventReply

	Reason      mad.RejectReason // EventRejected
	MsgRejected mad.MsgResponse  // EventRejected
	ARI         []byte           // EventRejected
	Local       bool             // EventRejected: refused here, not by the peer

	Unanswered mad.AttrID // EventTimeout

	// PrivateData: the RTU's (EventEstablished, passive), the REJ's, the
	// DREQ's (EventDisconnectRequest), the DREP's (EventDisconnected), the
	// SIDR_REQ's.
	PrivateData []byte

	ServiceID mad.ServiceID // EventSIDRRequest
	PKey      uint16        // EventSIDRRequest
	SIDRREP   *mad.SIDRREP  // EventSIDRReply
}

// QPAttrs are the attributes the driver programs into a connected QP, as
// the kernel's ib_cm_init_qp_attr derives them: RTR takes the address,
// PathMTU, DestQPN, RQPSN and MaxDestRdAtomic; RTS takes SQPSN, Timeout,
// RetryCount, RNRRetry and MaxRdAtomic.
type QPAttrs struct {
	DestQPN uint32
	// RQPSN is the first PSN the local QP receives (its own REQ's or REP's
	// starting PSN); SQPSN the first it sends (the peer's).
	RQPSN, SQPSN uint32
	PathMTU      uint8 // IB MTU enum
	// MaxDestRdAtomic is the responder resources, MaxRdAtomic the
	// initiator depth.
	MaxDestRdAtomic, MaxRdAtomic uint8
	RetryCount, RNRRetry         uint8
	// Timeout is the local ACK timeout exponent (4.096 µs × 2^t).
	Timeout uint8
	// MinRNRTimer is what the kernel's CM sets: 0 (655 ms).
	MinRNRTimer uint8
	PKey        uint16
	// The address vector: the peer's GID and the path's GRH fields. The
	// UDP source port follows from FlowLabel (mad.QPSourcePort).
	RemoteGID    mad.GID
	FlowLabel    uint32
	HopLimit     uint8
	TrafficClass uint8
}

// Output collects the MADs and events of Manager calls. The caller
// transmits Sends (after programming the QPs its events ask for), handles
// Events, and calls Reset; the buffers are reused.
type Output struct {
	sends  []Send
	events []Event
}

// Sends returns the MADs appended since the last Reset.
func (o *Output) Sends() []Send { return o.sends }

// Events returns the events appended since the last Reset.
func (o *Output) Events() []Event { return o.events }

// Reset empties o, keeping its buffers.
func (o *Output) Reset() {
	clear(o.events)
	o.sends, o.events = o.sends[:0], o.events[:0]
}

func (o *Output) send(to netip.Addr, b []byte) {
	o.sends = append(o.sends, Send{To: to})
	copy(o.sends[len(o.sends)-1].MAD[:], b)
}

func (o *Output) event(e Event) { o.events = append(o.events, e) }

// clone returns a copy of b that the Event owns, nil for none.
func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}
