package verbs

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/netio"
	"github.com/goroce/goroce/internal/seal"
	"github.com/goroce/goroce/internal/transport"
)

// A QP's code is split by role, as rxe splits rxe_qp.c, rxe_verbs.c and
// rxe_net.c: this file holds the type, its accessors, Query and Destroy;
// qp_create.go creates QPs, qp_modify.go holds the state machine and the
// attributes, post.go posts work requests, and the device's data path
// (engine_send.go, engine_recv.go, engine_timers.go) moves their packets.

// QP is a queue pair (struct ibv_qp): a send queue and a receive queue (or
// an SRQ) bound to CQs, moved through the IBA state machine with Modify:
// RESET, then INIT (which takes receive work requests, and the access
// flags that let a peer READ, WRITE or run atomics on this side's
// memory), RTR (connected to the peer's QP), RTS (sends). Package cm makes
// these transitions for a connection.
//
// PostSend transmits on the caller's goroutine what the send window
// allows; PostSendWait posts and waits for the completion. Completions go
// to the QP's CQs. A QP that its responder moved to ERR keeps the reason
// (Refusal), and String prints it.
type QP struct {
	// A QP moves data through its transport state machines (requester,
	// completer, responder), which own its send and receive queues.
	// Posting runs the requester on the caller's goroutine; the device's
	// receive goroutine runs the responder and completer inline.

	// Set at creation, then read-only.
	dev      *Device
	pd       *PD
	qpType   QPType
	qpn      uint32
	sendCQ   *CQ
	recvCQ   *CQ
	srq      *SRQ
	sqSigAll bool
	feeder   RecvFeeder
	cap      QPCap
	// udMTU bounds a UD QP's datagrams: the port's active MTU when the
	// QP was created (rxe takes the port's at send time; a QP keeps its
	// own here, as RC and UC QPs keep their path MTU).
	udMTU MTU

	// mu serialises Modify, Query and Destroy and guards attr. Lock
	// order: mu, then xmu.
	mu   sync.Mutex
	attr QPAttr // QPState and CurQPState are kept in state

	// sqDraining is set by a move to SQD with en_sqd_async_notify until
	// the send queue has drained and EventSQDrained is raised; guarded
	// by xmu.
	sqDraining bool

	// state (a QPState) is read atomically. Modify changes it with mu
	// and xmu held; the transport's own move to ERR (an error
	// completion) is mirrored into it with xmu held, before the error's
	// completions reach the CQ (transport.Config.EnteringError).
	state  atomic.Int32
	closed atomic.Bool
	// errNoted: the events of the QP's current ERR have been raised
	// (noteTransportErrorLocked, or the Modify that entered it); xmu.
	errNoted bool

	// xmu serialises everything that touches the transport state
	// machines (posting, packet handling, timers and the effects of
	// Modify) and guards the fields below.
	xmu  sync.Mutex
	tq   *transport.QP     // the transport state machines (RC, UC or UD)
	out  *transport.Output // packets produced under xmu; nil when none (outputLocked)
	msgs []netio.Message   // their batch for the socket
	// replyMsgs holds the replies of a sealed QP bound for the receive
	// batch's replyBatch until the packets before them are sealed.
	replyMsgs []netio.Message
	sgl       []transport.SGE // work request conversion scratch
	// localKey and remoteKey remember the code (keys.go) of the last
	// lkey and rkey the transport resolved: the packets of one message
	// use the same key, and a key's code never changes.
	localKey, remoteKey keyMemo
	inline              []byte // inline data gathering scratch
	// rxBatch is the receive queue whose batch is handling one of the
	// QP's packets, while it does (HandlePacket): the completions that
	// packet produces notify their consumers after the batch's replies
	// are sent (rxQueue.notifyAfterBatch). nil otherwise.
	rxBatch *rxQueue
	// storePin is the registration the responder's stores in a receive
	// batch went through, kept pinned for the batch's next packets
	// (qpMemory.storeInBatch); storesPending counts those stores, which
	// are counted on its MR (MR.RemoteWrites) when the pin is let go,
	// before the QP's next packets leave (releaseStorePinLocked).
	storePin      *mrRegion
	storesPending uint64
	// sendSink and recvSink are the QP's CQs as its transport sees
	// them (qpCQ).
	sendSink, recvSink qpCQ
	peer               netip.AddrPort // the remote device, from the AV (RTR on)
	sender             *netio.Sender  // our UDP source port for this connection
	// corked counts the QP's transmissions waiting in the doorbell or
	// being sent by its flusher (doorbell.go); it rises under xmu.
	corked atomic.Int32
	// commEst is set once EventCommEst was raised for the connection
	// (gsi.go); connectLocked clears it.
	commEst bool
	// peerSrcPort is the UDP source port the connection is pinned to:
	// that of the first packet from the peer after RTR, 0 until then
	// (acceptSourcePort); connectLocked clears it.
	peerSrcPort uint16
	// sealer seals what the QP sends (seal.go); nil without keys.
	sealer *seal.Sealer
	// opener opens what the QP receives; the receive queues use it
	// (Unseal), SetPacketKeys swaps it under xmu. openMu serialises its
	// Open (the replay window, the nonce scratch) between the receive
	// queues the QP's two flows may hash to.
	opener atomic.Pointer[seal.Opener]
	openMu sync.Mutex

	timerIndex int       // position in the engine's timer heap; -1 if absent; guarded by engine.tmu
	deadline   time.Time // when the transport wants OnTimer; guarded by engine.tmu

	folded bool // counters added to the device's totals; guarded by engine.cmu

	hw hwQP // the hardware backend's; nil on a goroce device
}

// QPN returns the QP number.
func (qp *QP) QPN() uint32 { return qp.qpn }

// Type returns the QP type.
func (qp *QP) Type() QPType { return qp.qpType }

// State returns the current state.
func (qp *QP) State() QPState {
	if qp.hw != nil {
		return qp.hw.state()
	}
	return QPState(qp.state.Load())
}

// Cap returns the QP's queue capacities.
func (qp *QP) Cap() QPCap { return qp.cap }

// PD returns the QP's protection domain.
func (qp *QP) PD() *PD { return qp.pd }

// Query returns the QP's attributes and creation attributes (ibv_query_qp).
// Like libibverbs it may return more than mask asks for: every attribute is
// filled in. CurQPState equals QPState.
func (qp *QP) Query(mask QPAttrMask) (QPAttr, QPInitAttr, error) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closed.Load() {
		return QPAttr{}, QPInitAttr{}, closedError("QueryQP", "qp")
	}
	a := qp.attr
	a.QPState = qp.State()
	a.CurQPState = a.QPState
	a.Cap = qp.cap
	init := QPInitAttr{
		QPType:   qp.qpType,
		SendCQ:   qp.sendCQ,
		RecvCQ:   qp.recvCQ,
		SRQ:      qp.srq,
		Cap:      qp.cap,
		SQSigAll: qp.sqSigAll,
	}
	return a, init, nil
}

// Destroy destroys the QP (ibv_destroy_qp): posted work requests are
// discarded without completions, and the QP releases its CQs, SRQ and PD.
func (qp *QP) Destroy() error {
	const op = "DestroyQP"
	if qp.hw != nil {
		return qp.hw.destroy(qp)
	}
	qp.mu.Lock()
	if qp.closed.Load() {
		qp.mu.Unlock()
		return closedError(op, "qp")
	}
	qp.xmu.Lock()
	qp.transmitDeferredLocked()
	qp.closed.Store(true)
	if qp.tq != nil {
		// RESET discards the queued work requests without completions.
		qp.tq.SetState(QPStateReset)
		qp.sendCQ.dropClaims(qp.qpn, closedError("PostSendWait", "qp"))
	}
	qp.disconnectLocked()
	qp.dropKeysLocked()
	qp.releaseOutputLocked()
	qp.releaseStorePinLocked()
	// Fold the QP's counters into the device's totals in the same xmu
	// section that closes it: Device.Counters sees it either live or
	// folded, never both nor neither.
	qp.dev.eng.retire(qp)
	qp.xmu.Unlock()
	qp.mu.Unlock()
	// The replies a receive batch took from the QP before it closed may
	// still wait for that batch's end, on a goroutine the scheduler may
	// hold up until the device has closed its socket (Device.Close right
	// after Destroy): they leave now.
	qp.dev.eng.flushReplies()
	qp.dev.eng.unschedule(qp)

	qp.dev.qps.Delete(qp.qpn)
	qp.sendCQ.detach()
	qp.recvCQ.detach()
	if qp.srq != nil {
		qp.srq.detach()
	}
	qp.dev.res.qp.release()
	qp.pd.unuse()
	return nil
}
