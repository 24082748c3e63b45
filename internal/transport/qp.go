package transport

import (
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/wire"
)

// Config is what a QP is created with (struct ibv_qp_init_attr plus the
// device's resources).
type Config struct {
	// Type is the transport service: RC (also for the zero value), UC or
	// UD.
	Type      ibv.QPType
	QPN       uint32
	PD        uint32 // protection domain, passed to Memory
	MaxSendWR int    // send queue capacity
	MaxRecvWR int    // receive queue capacity (ignored with an SRQ)
	MaxSGE    int    // scatter/gather elements per work request
	MaxInline int    // inline data bytes per send work request
	Memory    Memory
	SendCQ    CompletionQueue
	RecvCQ    CompletionQueue
	SRQ       SharedRecvQueue // if set, receives come from it and PostRecv fails
	// SQSigAll makes every send work request signaled (sq_sig_all).
	SQSigAll bool
	// AtomicLocks serialises atomics on the device. All the QPs of a
	// device must share one; nil gives the QP a private one.
	AtomicLocks *AtomicLocks
	// EnteringError, if set, is called when the transport moves the QP
	// to ERR, before the error's completions are pushed: a NIC's QP is in
	// ERR by the time its error completion can be polled, so the caller
	// can show the new state first. It may be called more than once for
	// one error, on the caller's goroutine.
	EnteringError func()
}

// QP is the transport side of a reliable connected queue pair: requester,
// completer and responder, sans I/O. Every entry point takes the current
// time and appends the packets to send to an Output; Deadline says when
// OnTimer is due.
//
// A QP is not safe for concurrent use: the caller serialises calls.
type QP struct {
	typ       ibv.QPType
	qpn       uint32
	pd        uint32
	maxSGE    int
	maxInline int
	mem       Memory
	repin     LocalRepinner // mem, if it is one
	scq, rcq  CompletionQueue
	srq       SharedRecvQueue
	srqTake   RecvWQE // TakeRecv's destination, reused: no allocation per message
	sigAll    bool
	locks     *AtomicLocks
	dest      any

	state         ibv.QPState
	enteringError func()     // Config.EnteringError
	cause         ErrorCause // why the transport itself moved the QP to ERR
	refusal       Refusal    // the responder's first refusal since reset (refusal.go)

	// Attributes set by modify_qp.
	mtu             uint32
	destQPN         uint32
	timeout         uint8
	retryCnt        uint8
	rnrRetry        uint8
	minRNRTimer     uint8
	maxRdAtomic     uint32
	maxDestRdAtomic uint32
	access          ibv.AccessFlags
	window          uint32
	windowSet       bool // by SetMaxUnackedPSNs: the path MTU leaves it
	ackEvery        uint32

	sq sendRing
	rq recvRing

	req  requester
	comp completer
	resp responder

	// Selective repeat and the adaptive timeout, between goroce peers
	// that agreed to them (sr.go, rto.go).
	ssr srRequester
	rsr srResponder
	rto rtoState

	// Congestion control (cc.go, dcqcn.go, swift.go).
	cc ccState

	hdr wire.Headers // scratch for building headers
	wc  Completion   // scratch for completions
	now time.Time    // of the latest call, for Deadline

	counters Counters

	un unreliable // UC and UD state (uc.go, ud.go)
}

// NewQP returns a QP in the RESET state with the default attributes.
func NewQP(cfg Config) *QP {
	if s, ok := cfg.SRQ.(*SRQ); ok && s == nil {
		cfg.SRQ = nil // a nil *SRQ means no SRQ, not an SRQ that is nil
	}
	if cfg.Type == 0 {
		cfg.Type = ibv.QPTypeRC
	}
	qp := &QP{
		typ:           cfg.Type,
		qpn:           cfg.QPN & wire.QPNMask,
		pd:            cfg.PD,
		maxSGE:        max(cfg.MaxSGE, 1),
		maxInline:     max(cfg.MaxInline, 0),
		mem:           cfg.Memory,
		scq:           cfg.SendCQ,
		rcq:           cfg.RecvCQ,
		srq:           cfg.SRQ,
		sigAll:        cfg.SQSigAll,
		locks:         cfg.AtomicLocks,
		mtu:           DefaultPathMTU,
		enteringError: cfg.EnteringError,
		timeout:       DefaultTimeout,
		retryCnt:      DefaultRetryCnt,
		rnrRetry:      DefaultRNRRetry,
		minRNRTimer:   DefaultMinRNRTimer,
		window:        uint32(defaultWindow(DefaultPathMTU)),
		ackEvery:      DefaultAckEvery,
	}
	if qp.locks == nil {
		qp.locks = new(AtomicLocks)
	}
	qp.repin, _ = cfg.Memory.(LocalRepinner)
	qp.sq = newSendRing(max(cfg.MaxSendWR, 1), qp.maxSGE, qp.maxInline)
	if qp.srq == nil {
		qp.rq = newRecvRing(max(cfg.MaxRecvWR, 1), qp.maxSGE)
		qp.resp.held.store = make([]SGE, qp.maxSGE)
	} else {
		n := max(qp.srq.MaxRecvSGE(), 1)
		qp.resp.held.store = make([]SGE, n)
		qp.srqTake.SGL = make([]SGE, 0, n)
	}
	qp.resp.replies = make([]reply, 1) // max_dest_rd_atomic 0: READs get an invalid request NAK
	qp.resetState()
	return qp
}

// QPN returns the QP number.
func (qp *QP) QPN() uint32 { return qp.qpn }

// State returns the current state. The transport itself moves the QP to ERR
// on a fatal error.
func (qp *QP) State() ibv.QPState { return qp.state }

// SetDest sets the opaque destination tagged on every outgoing packet.
func (qp *QP) SetDest(d any) { qp.dest = d }

// SetState moves the QP to s. The caller (verbs' modify_qp) validates the
// transition; the transport applies its effects: RESET empties both queues
// without completions and forgets all progress, ERR completes every
// outstanding work request with WR_FLUSH_ERR, SQD stops the requester from
// starting new work requests.
func (qp *QP) SetState(s ibv.QPState) {
	switch s {
	case ibv.QPStateReset:
		qp.state = ibv.QPStateReset
		qp.cause = CauseNone
		qp.refusal = Refusal{}
		qp.sq.head = qp.sq.tail
		if qp.srq == nil {
			qp.rq.head = qp.rq.tail
		}
		qp.resetState()
	case ibv.QPStateErr:
		qp.enterError()
	default:
		qp.state = s
		// Work queued in SQD (or before RTS) waits for a call with an
		// Output: Deadline asks for one at once.
		qp.req.kick = s == ibv.QPStateRTS && qp.req.idx != qp.sq.tail
	}
}

// resetState clears the progress of all three roles.
func (qp *QP) resetState() {
	sqpsn, rqpsn := qp.req.psn, qp.resp.epsn
	qp.req = requester{psn: sqpsn, sentHigh: sqpsn, idx: qp.sq.head, win: qp.window}
	qp.comp = completer{psn: sqpsn, retryLeft: qp.retryCnt, rnrLeft: qp.rnrRetry}
	held := qp.resp.held.store
	res, replies := qp.resp.res, qp.resp.replies
	for i := range res {
		res[i] = rdResource{}
	}
	qp.resp = responder{epsn: rqpsn, res: res, replies: replies}
	qp.resp.held.store = held
	qp.un.dropping = false
	qp.resetSR()
	qp.resetCC()
}

// PostSend queues a send work request and transmits what the window allows.
// It is allowed in RTS and SQD (queued until RTS); in ERR the request is
// accepted and completes at once with WR_FLUSH_ERR, as IBTA C10-42 and
// current rxe do; in other states it fails with ErrQPState.
func (qp *QP) PostSend(w *SendWQE, now time.Time, out *Output) error {
	qp.now = now
	if qp.typ != ibv.QPTypeRC {
		return qp.postSendUnreliable(w, now, out)
	}
	if !supportedOpcode(w.Opcode) {
		return ErrBadOpcode
	}
	if w.Flags&ibv.SendInline != 0 && isReadOrAtomic(w.Opcode) {
		return ErrBadOpcode
	}
	length, err := qp.wqeLength(w)
	if err != nil {
		return err
	}
	if isAtomic(w.Opcode) && (w.Flags&ibv.SendInline != 0 || len(w.SGL) != 1 || w.SGL[0].Length != 8) {
		return ErrBadAtomicSGL
	}
	if err := checkExtendedWQE(w, &length); err != nil {
		return err
	}
	switch qp.state {
	case ibv.QPStateRTS, ibv.QPStateSQD, ibv.QPStateSQE:
	case ibv.QPStateErr:
		qp.complete(qp.scq, w.WRID, ibv.WCWRFlushErr, wcOpcode(w.Opcode), 0)
		return nil
	default:
		return ErrQPState
	}
	if isReadOrAtomic(w.Opcode) && qp.maxRdAtomic == 0 {
		return ErrNoRdAtomic
	}
	if qp.sq.full() {
		return ErrSendQueueFull
	}
	qp.sq.push(w, length)
	qp.pump(now, out)
	return nil
}

// PostRecv queues a receive work request. It is allowed from INIT on; in ERR
// the request completes at once with WR_FLUSH_ERR.
func (qp *QP) PostRecv(w *RecvWQE) error {
	if qp.srq != nil {
		return ErrHasSRQ
	}
	if len(w.SGL) > qp.maxSGE {
		return ErrTooManySGE
	}
	switch qp.state {
	case ibv.QPStateReset:
		return ErrQPState
	case ibv.QPStateErr:
		qp.complete(qp.rcq, w.WRID, ibv.WCWRFlushErr, ibv.WCRecv, 0)
		return nil
	}
	if qp.rq.full() {
		return ErrRecvQueueFull
	}
	qp.rq.push(w)
	return nil
}

// HandlePacket processes a packet addressed to this QP, already parsed and
// ICRC-checked by the caller: requests go to the responder; ACKs, atomic
// ACKs and READ responses to the completer. Packets of another transport
// or QP, or with a foreign P_Key, are dropped and counted.
func (qp *QP) HandlePacket(p *wire.Packet, now time.Time, out *Output) {
	qp.now = now
	if p.BTH.Opcode() == wire.CNP {
		if uint32(p.BTH.DestQP()) == qp.qpn {
			qp.handleCNP(now)
		}
		return
	}
	if qp.typ != ibv.QPTypeRC {
		qp.handleUnreliable(p, nil, out)
		return
	}
	qp.counters.ReceivedPackets++
	info := p.Info()
	if info.Transport() != wire.TransportRC || uint32(p.BTH.DestQP()) != qp.qpn ||
		p.BTH.PKey()&0x7FFF != wire.DefaultPKey&0x7FFF {
		qp.counters.DroppedPackets++
		return
	}
	switch {
	case info.IsRequest():
		switch qp.state {
		case ibv.QPStateRTR, ibv.QPStateRTS, ibv.QPStateSQD, ibv.QPStateSQE:
			// With requests held for replay, the ACK this one asks
			// for is owed after the replay (replayHeld).
			epsn := qp.resp.epsn
			qp.rsr.deferAck = qp.rsr.count > 0
			qp.respond(p, info, out)
			qp.rsr.deferAck = false
			// Only a request that moved the expected PSN (or failed
			// the QP) can make held ones replayable: one held ahead
			// of a gap, the common case under loss, cannot.
			moved := qp.resp.epsn != epsn || qp.state == ibv.QPStateErr || qp.resp.failing
			if (qp.rsr.count > 0 && moved) || qp.rsr.ackDue {
				qp.replayHeld(out)
			}
		default:
			qp.counters.DroppedPackets++
		}
	case info.IsResponse():
		switch qp.state {
		case ibv.QPStateRTS, ibv.QPStateSQD, ibv.QPStateSQE:
			qp.handleResponse(p, info, now)
			qp.pump(now, out)
		default:
			qp.counters.DroppedPackets++
		}
	default:
		qp.counters.DroppedPackets++
	}
}

// OnTimer runs the timers that are due at now: the retransmit timer and the
// end of an RNR wait. Calling it early is harmless.
func (qp *QP) OnTimer(now time.Time, out *Output) {
	qp.now = now
	qp.req.kick = false
	if qp.typ != ibv.QPTypeRC {
		qp.pumpUnreliable(out)
		return
	}
	switch qp.state {
	case ibv.QPStateRTR:
		qp.sendReplies(out)
		return
	case ibv.QPStateRTS, ibv.QPStateSQD, ibv.QPStateSQE:
		qp.sendReplies(out)
	default:
		return
	}
	if qp.req.rnrWait && !now.Before(qp.req.rnrUntil) {
		qp.req.rnrWait = false
		qp.rewind()
	}
	qp.earlyTimeout(now)
	if qp.comp.timerArmed && !now.Before(qp.comp.deadline) {
		qp.comp.timerArmed = false
		if qp.outstanding() {
			qp.retry(now, true)
		}
	}
	qp.pump(now, out)
}

// RetransmitDue reports whether OnTimer at now would retransmit: the
// retransmission timer, or the adaptive one before it, has expired with
// requests outstanding.
func (qp *QP) RetransmitDue(now time.Time) bool {
	if qp.typ != ibv.QPTypeRC || !qp.comp.timerArmed || !qp.outstanding() {
		return false
	}
	return !now.Before(qp.comp.deadline) || qp.rto.armed && !now.Before(qp.rto.deadline)
}

// Deadline returns when OnTimer must be called next, and false if no timer
// is armed. A deadline at or before the current time means at once: a long
// READ reply is sent in bursts, each continued by OnTimer.
func (qp *QP) Deadline() (time.Time, bool) {
	if qp.repliesPending() || qp.req.kick {
		return qp.now, true // more READ responses, or queued requests, to send now
	}
	var d time.Time
	ok := false
	if qp.comp.timerArmed {
		d, ok = qp.comp.deadline, true
		if qp.rto.armed && qp.rto.deadline.Before(d) {
			d = qp.rto.deadline
		}
	}
	if qp.req.rnrWait && (!ok || qp.req.rnrUntil.Before(d)) {
		d, ok = qp.req.rnrUntil, true
	}
	if r := &qp.cc.rp; r.waiting && r.limited && (!ok || r.waitUntil.Before(d)) {
		d, ok = r.waitUntil, true // the rate limit lets the next packet out
	}
	return d, ok
}

// Flush moves the QP to ERR: every outstanding send work request and every
// posted receive work request completes with WR_FLUSH_ERR, exactly once, in
// posting order. Requests of a shared receive queue stay queued, except one
// a message in progress had taken.
// wqeLength checks a send work request's data against the QP's limits
// (inline size, SGE count, 2^31 bytes) and returns its message length.
func (qp *QP) wqeLength(w *SendWQE) (uint32, error) {
	if w.Flags&ibv.SendInline != 0 {
		if len(w.Inline) > qp.maxInline {
			return 0, ErrInlineTooLong
		}
		return uint32(len(w.Inline)), nil
	}
	if len(w.SGL) > qp.maxSGE {
		return 0, ErrTooManySGE
	}
	if n := sglLength(w.SGL); n <= 1<<31 {
		return uint32(n), nil
	}
	return 0, ErrTooLong
}

// SendQueueDrained reports whether no send work request is in flight:
// every one the requester started has completed. In SQD none starts, so
// this is the moment the IBA's SQ Drained event marks.
func (qp *QP) SendQueueDrained() bool {
	return qp.sq.len() == 0 || !qp.sq.at(qp.sq.head).started
}

func (qp *QP) Flush() { qp.enterError() }

func (qp *QP) enterError() {
	if qp.state == ibv.QPStateErr {
		return
	}
	qp.announceError()
	qp.state = ibv.QPStateErr
	qp.comp.timerArmed = false
	qp.req.rnrWait = false
	qp.req.kick = false
	qp.cc.rp.waiting = false
	qp.dropReplies()
	for qp.sq.len() > 0 {
		s := qp.sq.at(qp.sq.head)
		qp.sq.head++
		qp.complete(qp.scq, s.wqe.WRID, ibv.WCWRFlushErr, wcOpcode(s.wqe.Opcode), 0)
	}
	qp.req.idx = qp.sq.head
	qp.req.rdAtomic = 0
	if qp.resp.hasWQE && qp.resp.fromSRQ {
		qp.complete(qp.rcq, qp.resp.held.wrid, ibv.WCWRFlushErr, ibv.WCRecv, 0)
	}
	qp.resp.hasWQE = false
	if qp.srq == nil {
		for qp.rq.len() > 0 {
			s := qp.rq.at(qp.rq.head)
			qp.rq.head++
			qp.complete(qp.rcq, s.wrid, ibv.WCWRFlushErr, ibv.WCRecv, 0)
		}
	}
}

// announceError tells the caller (Config.EnteringError) that the QP is
// moving to ERR, before any completion of the error is pushed.
func (qp *QP) announceError() {
	if qp.enteringError != nil {
		qp.enteringError()
	}
}

// complete pushes a minimal completion (status, opcode, byte count).
func (qp *QP) complete(cq CompletionQueue, wrid uint64, st ibv.WCStatus, op ibv.WCOpcode, n uint32) {
	qp.wc = Completion{WRID: wrid, Status: st, Opcode: op, ByteLen: n, QPN: qp.qpn}
	qp.push(cq)
}

// push delivers qp.wc to cq. An overflowing CQ is a fatal error for the QP.
func (qp *QP) push(cq CompletionQueue) {
	if cq == nil || cq.Push(&qp.wc) {
		return
	}
	qp.counters.CQOverflow++
	if qp.state != ibv.QPStateErr {
		if qp.cause == CauseNone {
			qp.cause = CauseCQOverflow
		}
		qp.enterError()
	}
}
