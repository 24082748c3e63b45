package ibcm

import (
	"net/netip"
	"strconv"
	"time"

	"github.com/goroce/goroce/internal/mad"
)

// State is a connection's CM state (IBA vol. 1 12.9.6, the kernel's enum
// ib_cm_state; there is no LISTEN: listeners are the Listening callback).
type State uint8

// States. The MRA*Sent states are the kernel's too: rdma_cm marks a
// request delivered to its application (and a REP delivered to it) as
// MRA-sent without sending one, so that a duplicate is answered with an
// MRA; the Manager does the same.
const (
	StateIdle        State = iota
	StateReqSent           // active: REQ sent, retransmitted until answered
	StateReqRcvd           // passive: REQ received (not delivered yet: transient)
	StateMRAReqSent        // passive: REQ delivered as EventConnectRequest
	StateMRAReqRcvd        // active: the peer MRAed our REQ
	StateRepSent           // passive: REP sent, retransmitted until RTU
	StateRepRcvd           // active: REP received (transient)
	StateMRARepSent        // active: REP delivered as EventReply
	StateMRARepRcvd        // passive: the peer MRAed our REP
	StateEstablished       //
	StateDREQSent          // DREQ sent, retransmitted until DREP
	StateDREQRcvd          // DREQ delivered as EventDisconnectRequest
	StateTimewait          // closed; remembered for stale detection
	StateSIDRReqSent       // active SIDR
	StateSIDRReqRcvd       // passive SIDR, delivered as EventSIDRRequest
)

var stateNames = [...]string{"IDLE", "REQ_SENT", "REQ_RCVD", "MRA_REQ_SENT", "MRA_REQ_RCVD", "REP_SENT",
	"REP_RCVD", "MRA_REP_SENT", "MRA_REP_RCVD", "ESTABLISHED", "DREQ_SENT", "DREQ_RCVD", "TIMEWAIT",
	"SIDR_REQ_SENT", "SIDR_REQ_RCVD"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// remoteKey identifies a peer's comm ID or QPN: the kernel's remote_id and
// remote_qp tables are keyed by it and the peer's CA GUID.
type remoteKey struct {
	n    uint32
	guid uint64
}

// sidrKey identifies a received SIDR_REQ (the kernel keys its table by
// request ID and the sender's GID).
type sidrKey struct {
	reqID uint32
	from  netip.Addr
}

// timerKind says what a record's timer is for.
type timerKind uint8

const (
	timerNone       timerKind = iota
	timerRetransmit           // pending MAD unanswered
	timerAccept               // passive request waiting for the driver
	timerTimewait             // end of timewait
)

// pending is an outstanding request MAD: REQ, REP, DREQ or SIDR_REQ, sent
// again until answered.
type pending struct {
	mad      [mad.MADSize]byte
	attr     mad.AttrID
	timeout  time.Duration // the message's response timeout
	interval time.Duration // current wait, doubled after the linear retries
	retries  int           // retransmissions left
	sent     int           // retransmissions done
	end      time.Time     // total timeout; extended by an MRA
	mraSeen  bool          // an MRA extended it already (applied once)
}

// conn is one connection or SIDR request.
type conn struct {
	id        ID
	state     State
	passive   bool
	peer      netip.Addr
	tid       uint64 // the REQ's (or SIDR_REQ's, DREQ's) transaction ID
	destroyed bool   // the driver let go: no more events

	remoteID, remoteQPN uint32
	remoteGUID          uint64
	inRemoteID          bool // in Manager.byRemoteID
	inRemoteQPN         bool // in Manager.byRemoteQPN
	sidr                sidrKey
	inSIDR              bool

	localQPN uint32
	// timeout is the response timeout of our REP and DREQ (passive: the
	// REQ's local CM response timeout; active: our REQ's).
	timeout    time.Duration
	maxRetries int
	// avTimeout is the path's ACK timeout exponent: timewait lasts
	// IBATime(avTimeout) and an MRA adds it.
	avTimeout      uint8
	packetLifetime uint8 // active: what our REQ's path used

	req *mad.REQ // passive: the REQ, for Accept; active: ours, for QPAttrs
	// privateData is what a duplicate is answered with again: the RTU's
	// (duplicate REP), the DREP's (DREQ in timewait).
	privateData []byte

	pend *pending

	timer    timerKind
	deadline time.Time
	heapIdx  int // in Manager.timers; -1 when not scheduled

	// Half-open accounting (passive, before ESTABLISHED or the answer).
	halfOpen   bool
	prev, next *conn // Manager.halfOpenList, oldest first
	twPrev     *conn // Manager.timewaitList, oldest first
	twNext     *conn
}
