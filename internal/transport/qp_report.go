package transport

// What a QP reports about itself: why it entered ERR, its counters and a
// snapshot of its state for tests and probes.

import (
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// ErrorCause is why the transport moved a QP to ERR by itself, as far as
// the verbs layer must report it beyond completions: the responder's errors
// that no receive work request can carry become affiliated asynchronous
// events (IBTA C9-222.1.1, 10.10.2.3).
type ErrorCause uint8

// Error causes.
const (
	// CauseNone: the QP is not in ERR, was moved there by SetState, or
	// failed in a way its send completions report (a requester error).
	CauseNone ErrorCause = iota
	// CauseInvalidRequest: the responder NAKed an invalid request no
	// receive work request was charged with (IBV_EVENT_QP_REQ_ERR).
	CauseInvalidRequest
	// CauseAccess: the responder NAKed a remote access error no receive
	// work request was charged with (IBV_EVENT_QP_ACCESS_ERR).
	CauseAccess
	// CauseCQOverflow: a completion did not fit its CQ
	// (IBV_EVENT_QP_FATAL).
	CauseCQOverflow
	// CauseRecvCompletion: the responder charged its error to the
	// receive work request the message held, whose completion reports it.
	CauseRecvCompletion
)

// ErrorCause returns why the QP entered ERR by itself; CauseNone until it
// does and again after SetState(ibv.QPStateReset).
func (qp *QP) ErrorCause() ErrorCause { return qp.cause }

// noteResponderFault records the cause of a responder error NAKed with
// code, before any receive work request the message held is completed.
func (qp *QP) noteResponderFault(code wire.NAKCode) {
	if qp.cause != CauseNone || qp.state == ibv.QPStateErr {
		return
	}
	if qp.resp.hasWQE {
		qp.cause = CauseRecvCompletion
		return
	}
	switch code {
	case wire.NAKInvalidRequest:
		qp.cause = CauseInvalidRequest
	case wire.NAKRemoteAccessError:
		qp.cause = CauseAccess
	}
}

// Counters are per-QP event counts, in the spirit of rxe's hw_counters.
type Counters struct {
	SentPackets      uint64 // packets appended to an Output
	ReceivedPackets  uint64 // packets given to HandlePacket
	DroppedPackets   uint64 // wrong transport, QP, P_Key or state
	DuplicateRequest uint64 // requests behind the expected PSN (duplicate_request)
	OutOfSeqRequest  uint64 // requests ahead of the expected PSN (out_of_seq_request)
	SeqNakSent       uint64 // PSN sequence error NAKs sent (one per gap)
	RcvdSeqErr       uint64 // PSN sequence error NAKs received (rcvd_seq_err)
	RNRNakSent       uint64 // RNR NAKs sent (send_rnr_err in rxe's naming)
	RNRNakReceived   uint64 // RNR NAKs received (rcvd_rnr_err)
	NakSent          uint64 // other NAKs sent (invalid request, access, operational)
	NakReceived      uint64 // other NAKs received
	RetryExceeded    uint64 // RETRY_EXC_ERR completions (retry_exceeded_err)
	RNRRetryExceeded uint64 // RNR_RETRY_EXC_ERR completions
	CompleterRetry   uint64 // go-back-N restarts (completer_retry_err)
	Timeouts         uint64 // retransmit timer expiries with something outstanding
	AckDeferred      uint64 // requests accepted without an immediate ACK (coalesced)
	DroppedBusy      uint64 // READ/atomic requests dropped for a full reply queue (beyond max_dest_rd_atomic)
	StaleResponses   uint64 // ACKs and READ responses ignored: duplicate, stale, ahead or out of order
	CQOverflow       uint64 // completions refused by a full CQ
	LocalErrors      uint64 // local protection or length errors
	RDMASends        uint64 // SEND work requests completed successfully, signaled or not (rdma_sends)
	RDMARecvs        uint64 // receive work requests completed successfully (rdma_recvs)
	DroppedMessages  uint64 // UC messages dropped after a PSN gap or a failed check, until the next FIRST/ONLY
	DroppedNoRecv    uint64 // UC and UD messages dropped for want of a receive WQE (no RNR on UC/UD)
	QKeyViolations   uint64 // UD datagrams dropped for a wrong Q_Key (rxe's qkey_viol_cntr)

	// Selective repeat (sr.go, rto.go), between goroce peers only.
	HeldRequests     uint64 // out-of-order requests kept for replay
	SACKSent         uint64 // SACKs sent
	SACKReceived     uint64 // SACKs received
	SelectiveResends uint64 // packets resent on a SACK or an early timeout
	EarlyTimeouts    uint64 // adaptive retransmit timer expiries (no retry_cnt spent)

	// Congestion control (cc.go), with mlx5's counter names.
	ECNMarked     uint64 // packets received with ECN CE (np_ecn_marked_roce_packets)
	CNPSent       uint64 // CNPs sent (np_cnp_sent)
	CNPReceived   uint64 // CNPs received from the peer
	CNPHandled    uint64 // CNPs the reaction point acted on (rp_cnp_handled); the rest: rp_cnp_ignored
	RateDecreases uint64 // DCQCN rate decreases
	RateLifted    uint64 // DCQCN rate limits lifted (back at the line rate)
	RTTDecreases  uint64 // RTT window decreases
}

// Counters returns the QP's counters.
func (qp *QP) Counters() Counters { return qp.counters }

// Snapshot is the QP's internal state, for tests and probes.
type Snapshot struct {
	State ibv.QPState
	// Requester and completer.
	NextPSN         psn.PSN // next PSN the requester sends
	SentHighPSN     psn.PSN // one past the highest PSN ever sent
	CompPSN         psn.PSN // oldest unacknowledged PSN
	SQDepth         int     // send work requests not completed
	RdAtomicOut     int     // READ/atomic requests outstanding
	RetryLeft       uint8
	RNRRetryLeft    uint8
	RNRWait         bool
	TimerArmed      bool
	TimerDeadline   time.Time
	RNRWaitDeadline time.Time
	// Responder.
	ExpectedPSN   psn.PSN
	MSN           wire.MSN
	SentPSNNak    bool
	InMessage     bool // between the FIRST and LAST packets of a SEND or WRITE
	RQDepth       int  // receive work requests posted on the QP's own queue
	HoldsRecvWQE  bool
	RepliesQueued int  // READ replies and atomic ACKs not fully sent
	AckOwed       bool // an ACK or NAK waits behind them
}

// Snapshot returns the QP's internal state.
func (qp *QP) Snapshot() Snapshot {
	return Snapshot{
		State:           qp.state,
		NextPSN:         qp.req.psn,
		SentHighPSN:     qp.req.sentHigh,
		CompPSN:         qp.comp.psn,
		SQDepth:         int(qp.sq.len()),
		RdAtomicOut:     int(qp.req.rdAtomic),
		RetryLeft:       qp.comp.retryLeft,
		RNRRetryLeft:    qp.comp.rnrLeft,
		RNRWait:         qp.req.rnrWait,
		TimerArmed:      qp.comp.timerArmed,
		TimerDeadline:   qp.comp.deadline,
		RNRWaitDeadline: qp.req.rnrUntil,
		ExpectedPSN:     qp.resp.epsn,
		MSN:             qp.resp.msn,
		SentPSNNak:      qp.resp.sentPSNNak,
		InMessage:       qp.resp.inMsg != msgNone,
		RQDepth:         int(qp.rq.len()),
		HoldsRecvWQE:    qp.resp.hasWQE,
		RepliesQueued:   qp.resp.replyLen,
		AckOwed:         qp.resp.ackOwed,
	}
}
