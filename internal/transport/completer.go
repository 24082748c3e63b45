package transport

import (
	"encoding/binary"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// completer is the acknowledging half of the send queue (rxe_comp.c): it
// matches ACKs, NAKs, atomic ACKs and READ responses against the oldest
// outstanding work requests, completes them in posting order, and decides
// retransmissions (timer, sequence NAK, RNR NAK).
type completer struct {
	psn          psn.PSN // oldest unacknowledged PSN: everything before is acknowledged
	retryLeft    uint8   // retransmissions left before RETRY_EXC_ERR
	rnrLeft      uint8   // RNR retries left; 7 means infinite
	startedRetry bool    // a NAK-triggered retry is under way, no progress since
	timerArmed   bool
	deadline     time.Time
	// gapRetry allows one immediate go-back for a READ response or atomic
	// ACK that a later response shows lost; progress allows it again
	// (lostResponse).
	gapRetry bool
}

// outstanding reports whether some sent PSN is not acknowledged yet.
func (qp *QP) outstanding() bool { return qp.comp.psn.LessThan(qp.req.sentHigh) }

// armTimer starts the retransmit timer if it is not running.
func (qp *QP) armTimer(now time.Time) {
	if qp.timeout != 0 && !qp.comp.timerArmed {
		qp.comp.timerArmed = true
		qp.comp.deadline = now.Add(qp.timeoutDuration())
		qp.armEarly(now)
	}
}

// progress records that the peer acknowledged something, the PSNs from up
// to the oldest unacknowledged one: the window widens for them
// (growWindow), the retry budgets are refilled (as rxe's
// reset_retry_counters) and the retransmit timer restarts, or stops if
// nothing is outstanding.
func (qp *QP) progress(now time.Time, from psn.PSN) {
	qp.growWindow(from)
	qp.endSample(now)
	if qp.cc.cfg.ECN {
		qp.rpMeter(now, qp.comp.psn.Sub(from))
	}
	qp.comp.retryLeft = qp.retryCnt
	qp.comp.rnrLeft = qp.rnrRetry
	qp.comp.startedRetry = false
	qp.comp.gapRetry = true
	qp.comp.timerArmed = false
	if qp.outstanding() {
		qp.armTimer(now)
	}
}

// handleResponse dispatches a response packet.
func (qp *QP) handleResponse(p *wire.Packet, info wire.OpInfo, now time.Time) {
	P := p.BTH.PSN()
	if qp.sq.len() == 0 || !qp.sq.at(qp.sq.head).started || !P.LessThan(qp.req.sentHigh) {
		// Nothing outstanding, or a PSN ahead of anything sent.
		qp.counters.StaleResponses++
		return
	}
	switch {
	case p.BTH.Opcode() == wire.RCSACK:
		qp.handleSACK(p, P, now)
	case info.IsReadResponse():
		qp.readResponse(p, P, now)
	case p.BTH.Opcode() == wire.RCAtomicAcknowledge:
		qp.atomicAck(p, P, now)
	default:
		syn := p.AETH.Syndrome()
		switch syn.Kind() {
		case wire.AETHAck:
			if !qp.ackThrough(P, now) {
				qp.counters.StaleResponses++
			}
		case wire.AETHRNRNak:
			qp.rnrNak(P, syn.RNRTimer(), now)
		case wire.AETHNak:
			qp.nak(P, syn.NAKCode(), now)
		default:
			qp.counters.StaleResponses++
		}
	}
}

// ackThrough acknowledges every PSN up to and including a: SENDs and WRITEs
// that end at or before a complete, a partially acknowledged one records
// its progress. A READ or atomic is only completed by its response, so an
// acknowledgement of a later request means the response was lost: retry
// (rxe's implicit NAK). It reports whether anything was acknowledged.
func (qp *QP) ackThrough(a psn.PSN, now time.Time) bool {
	progress, lost := false, false
	from := qp.comp.psn
	for qp.sq.len() > 0 && qp.state != ibv.QPStateErr {
		s := qp.sq.at(qp.sq.head)
		if !s.started || s.failed {
			break
		}
		if isReadOrAtomic(s.wqe.Opcode) {
			lost = !a.LessThan(s.lastPSN)
			break
		}
		if s.lastPSN.LessThanEq(a) {
			if qp.comp.psn.LessThanEq(s.lastPSN) {
				qp.comp.psn = s.lastPSN.Next()
			}
			qp.completeHead(ibv.WCSuccess)
			progress = true
			continue
		}
		if qp.comp.psn.LessThanEq(a) {
			qp.comp.psn = a.Next()
			progress = true
		}
		break
	}
	if progress {
		qp.progress(now, from)
		qp.retireFailed()
	}
	if lost && qp.state != ibv.QPStateErr {
		qp.lostResponse(now)
	}
	return progress
}

// lostResponse goes back for a READ response or atomic ACK that a later
// response shows lost. The first time since progress it goes back at once
// without spending retry_cnt: a response just arrived, so the path works
// and the responder holds the request for replay. It is allowed again only
// by progress, so a response PSN that is always lost cannot loop. Later
// losses before progress go through retry, which ignores them while a retry
// is under way (started_retry): they wait for the timer, which spends the
// retry budget as usual.
func (qp *QP) lostResponse(now time.Time) {
	if !qp.comp.gapRetry || qp.comp.startedRetry {
		qp.retry(now, false)
		return
	}
	qp.comp.gapRetry = false
	qp.comp.startedRetry = true
	qp.counters.CompleterRetry++
	qp.shrinkWindow()
	qp.rewind()
	qp.req.headCopies = retryHeadCopies // as retry does, for the same reason
}

// nak handles a NAK. Every NAK implicitly acknowledges the PSNs before its
// own. A PSN sequence error restarts transmission there; the others fail the
// work request the NAKed PSN belongs to and move the QP to ERR.
func (qp *QP) nak(p psn.PSN, code wire.NAKCode, now time.Time) {
	prev := p.Add(psn.Mask)
	if code == wire.NAKPSNSequenceError {
		qp.counters.RcvdSeqErr++
		if p.LessThan(qp.comp.psn) {
			// The responder expects a PSN already acknowledged: a NAK
			// overtaken by progress, or a repeat of one the requester
			// already went back for. Going back again would resend what
			// the responder has (rxe's check_psn drops it too).
			qp.counters.StaleResponses++
			return
		}
		qp.ackThrough(prev, now)
		// While an RNR wait runs, the sequence NAK is the responder's
		// reaction to the packets sent after the RNR-NAKed one; the
		// retransmission after the wait repairs both.
		if qp.state != ibv.QPStateErr && !qp.req.rnrWait && qp.outstanding() {
			qp.retry(now, false)
		}
		return
	}
	qp.counters.NakReceived++
	qp.ackThrough(prev, now)
	s := qp.headInFlight(p)
	if s == nil {
		qp.counters.StaleResponses++
		return
	}
	switch code {
	case wire.NAKInvalidRequest:
		qp.fatal(ibv.WCRemInvReqErr)
	case wire.NAKRemoteAccessError:
		qp.fatal(ibv.WCRemAccessErr)
	default: // remote operational error, and codes IBTA reserves (rxe)
		qp.fatal(ibv.WCRemOpErr)
	}
}

// headInFlight returns the head WQE if it is in flight and p is one of its
// PSNs at or after the oldest unacknowledged one.
func (qp *QP) headInFlight(p psn.PSN) *sendSlot {
	if qp.state == ibv.QPStateErr || qp.sq.len() == 0 {
		return nil
	}
	s := qp.sq.at(qp.sq.head)
	if !s.started || s.failed || p.LessThan(s.firstPSN) || s.lastPSN.LessThan(p) || p.LessThan(qp.comp.psn) {
		return nil
	}
	return s
}

// rnrNak handles a receiver-not-ready NAK: wait for the responder's RNR
// timer, then retransmit from the NAKed PSN. rnr_retry 7 retries forever.
func (qp *QP) rnrNak(p psn.PSN, timer uint8, now time.Time) {
	qp.counters.RNRNakReceived++
	qp.ackThrough(p.Add(psn.Mask), now)
	if qp.headInFlight(p) == nil || qp.req.rnrWait {
		return
	}
	if qp.comp.rnrLeft == 0 {
		qp.counters.RNRRetryExceeded++
		qp.fatal(ibv.WCRNRRetryExcErr)
		return
	}
	if qp.comp.rnrLeft != 7 {
		qp.comp.rnrLeft--
	}
	qp.req.rnrWait = true
	qp.req.rnrUntil = now.Add(wire.RNRDelay(timer))
	qp.comp.timerArmed = false // the RNR wait replaces the retransmit timer
}

// retry starts a go-back-N retransmission, spending one unit of retry_cnt
// (7 means 7 retries: IBTA defines infinity only for rnr_retry). A NAK or
// lost response starts one retry sequence; more NAKs before any progress do
// not start another, only the timer does (rxe's started_retry).
func (qp *QP) retry(now time.Time, timeout bool) {
	if timeout {
		qp.counters.Timeouts++
	} else if qp.comp.startedRetry {
		return
	}
	if qp.comp.retryLeft == 0 {
		qp.counters.RetryExceeded++
		qp.fatal(ibv.WCRetryExcErr)
		return
	}
	qp.comp.retryLeft--
	qp.comp.startedRetry = true
	qp.counters.CompleterRetry++
	qp.shrinkWindow()
	if qp.ssr.on && timeout && qp.comp.retryLeft+1 == qp.retryCnt {
		// Selective repeat, first timeout since progress: probe, as
		// the adaptive timeout does (sr.go); the SACK the newest
		// packet draws names what to resend. On a loaded machine the
		// answers are more often late than lost: resending the window
		// would only add to the queue that delays them.
		qp.rto.sampling = false
		qp.ssr.probe = true
		qp.armTimer(now)
		return
	}
	// Again without progress: whatever the SACKs said, go back N
	// (rewind forgets them).
	qp.rewind()
	// A retry means a packet or its response was lost: send the head of
	// the retransmission more than once, so that one more loss on the
	// same PSN does not cost a retransmit timeout (or, at high loss, the
	// whole retry budget): a round where the request or its response is
	// lost with probability q fails with q^copies instead, 0.36 → 0.05
	// at 20% loss each way. A responder must accept duplicate requests
	// (go-back-N resends them anyway): a SEND or WRITE is
	// re-acknowledged, a READ replayed, an atomic answered from its saved
	// result, so the copies are harmless to any compliant peer (rxe
	// included), and cost a packet or two next to the window go-back-N
	// resends. A second round without progress sends one more.
	qp.req.headCopies = min(retryHeadCopies-1+qp.retryCnt-qp.comp.retryLeft, maxHeadCopies)
}

// Copies of the first packet of a retransmission: after a first loss, and
// at most.
const (
	retryHeadCopies = 3
	maxHeadCopies   = 4
)

// readResponse places a READ response packet. Responses are accepted in PSN
// order only; a gap re-requests the missing bytes at once the first time
// since progress (lostResponse), later ones wait for the retransmit timer.
func (qp *QP) readResponse(p *wire.Packet, P psn.PSN, now time.Time) {
	// A READ response implicitly acknowledges every earlier request.
	qp.ackThrough(P.Add(psn.Mask), now)
	s := qp.headInFlight(P)
	if s != nil && (s.wqe.Opcode == ibv.WRFlush || s.wqe.Opcode == ibv.WRAtomicWrite) {
		qp.emptyReadResponse(p, P, now)
		return
	}
	if s == nil || s.wqe.Opcode != ibv.WRRDMARead || P != qp.comp.psn {
		qp.counters.StaleResponses++
		if s != nil && s.wqe.Opcode == ibv.WRRDMARead && qp.comp.psn.LessThan(P) {
			qp.lostResponse(now)
		}
		return
	}
	op := p.BTH.Opcode()
	if op != wire.RCRDMAReadResponseMiddle && p.AETH.Syndrome().Kind() != wire.AETHAck {
		qp.fatal(ibv.WCBadRespErr)
		return
	}
	n := uint32(len(p.Payload))
	rem := s.length - s.readDone
	final := op == wire.RCRDMAReadResponseLast || op == wire.RCRDMAReadResponseOnly
	// FIRST or ONLY may restart the stream at a resumed READ's PSN, MIDDLE
	// or LAST continue it (rxe replays that way): either is fine as long
	// as the length is the one expected at this offset.
	if final && n != rem || !final && (n != qp.mtu || rem <= qp.mtu) {
		qp.fatal(ibv.WCBadRespErr)
		return
	}
	if n > 0 && !qp.copySGL(s.wqe.SGL, s.readDone, p.Payload, true) {
		qp.counters.LocalErrors++
		qp.fatal(ibv.WCLocProtErr)
		return
	}
	s.readDone += n
	qp.comp.psn = P.Next()
	if final {
		qp.completeHead(ibv.WCSuccess)
	}
	qp.progress(now, P)
	qp.retireFailed()
}

// atomicAck completes an atomic with the original value the responder
// returned, stored in host order in the WQE's 8-byte buffer.
func (qp *QP) atomicAck(p *wire.Packet, P psn.PSN, now time.Time) {
	qp.ackThrough(P.Add(psn.Mask), now)
	s := qp.headInFlight(P)
	if s == nil || !isAtomic(s.wqe.Opcode) || P != qp.comp.psn {
		qp.counters.StaleResponses++
		return
	}
	if p.AETH.Syndrome().Kind() != wire.AETHAck {
		qp.fatal(ibv.WCBadRespErr)
		return
	}
	var v [8]byte
	binary.NativeEndian.PutUint64(v[:], p.AtomicAckETH.OrigData())
	if !qp.copySGL(s.wqe.SGL, 0, v[:], true) {
		qp.counters.LocalErrors++
		qp.fatal(ibv.WCLocProtErr)
		return
	}
	qp.comp.psn = P.Next()
	qp.completeHead(ibv.WCSuccess)
	qp.progress(now, P)
	qp.retireFailed()
}

// completeHead retires the oldest WQE with status st. A successful
// unsignaled WQE completes silently; an error always produces a completion
// (IBA 10.7.3.1).
func (qp *QP) completeHead(st ibv.WCStatus) {
	s := qp.sq.at(qp.sq.head)
	qp.sq.head++
	if int32(qp.req.idx-qp.sq.head) < 0 {
		// The requester was resending (a rewind) what is now
		// acknowledged. It resumes at the new head: pump finds the PSN
		// of a started one; an unstarted one must start at the next
		// new PSN, not at the resend position, whose PSNs were used.
		qp.req.idx, qp.req.off = qp.sq.head, 0
		qp.req.psn = qp.req.sentHigh
	}
	if s.started && isReadOrAtomic(s.wqe.Opcode) {
		qp.req.rdAtomic--
	}
	if st == ibv.WCSuccess && isSend(s.wqe.Opcode) {
		qp.counters.RDMASends++
	}
	if st == ibv.WCSuccess && !qp.sigAll && s.wqe.Flags&ibv.SendSignaled == 0 {
		return
	}
	qp.wc = Completion{WRID: s.wqe.WRID, Status: st, Opcode: wcOpcode(s.wqe.Opcode), QPN: qp.qpn}
	if st == ibv.WCSuccess {
		qp.wc.ByteLen = s.length
		if s.wqe.Opcode == ibv.WRSendWithImm || s.wqe.Opcode == ibv.WRRDMAWriteWithImm {
			qp.wc.Flags = ibv.WCWithImm // as rxe's make_send_cqe
		}
	}
	qp.push(qp.scq)
}

// fatal completes the head WQE with an error status and moves the QP to
// ERR, which flushes everything else.
func (qp *QP) fatal(st ibv.WCStatus) {
	if qp.state == ibv.QPStateErr {
		return
	}
	qp.announceError() // before the head's error completion can be polled
	if qp.sq.len() > 0 {
		qp.completeHead(st)
	}
	qp.enterError()
}
