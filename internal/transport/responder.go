package transport

import (
	"encoding/binary"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// msgKind is the kind of multi-packet message the responder is inside.
type msgKind uint8

const (
	msgNone msgKind = iota
	msgSend
	msgWrite
)

// rdKind is the kind of a responder resource.
type rdKind uint8

const (
	rdNone rdKind = iota
	rdRead
	rdAtomic
	rdFlush       // answered again without flushing again (oA19-14, oA19-15)
	rdAtomicWrite // answered again without writing again
)

// rdResource remembers a READ or atomic request for duplicate replay: a
// READ is answered again by re-reading memory, an atomic by its saved
// original value, never by executing it twice.
type rdResource struct {
	kind        rdKind
	first, last psn.PSN
	va          uint64
	rkey        uint32
	length      uint32
	orig        uint64
}

// responder is the receive side of the QP (rxe_resp.c). HandlePacket runs
// its steps in the order of rxe's state table: check PSN, check opcode
// sequence, check op valid for the QP's access flags, check resources, check
// length, check rkey, execute, acknowledge.
type responder struct {
	epsn       psn.PSN  // expected PSN
	msn        wire.MSN // completed request messages
	sentPSNNak bool     // a sequence NAK was sent for the current gap
	inMsg      msgKind

	// The RDMA WRITE in progress (from its RETH).
	va    uint64
	rkey  uint32
	resid uint32
	wlen  uint32

	// The receive WQE a SEND (FIRST to LAST) or a WRITE with immediate
	// consumes. One from the QP's own queue stays at its head until
	// completed; one from an SRQ is copied into held.
	hasWQE  bool
	fromSRQ bool
	held    recvSlot
	rcvd    uint32 // SEND bytes placed so far

	res     []rdResource // max_dest_rd_atomic entries, reused round robin
	resNext int

	// Responses not sent yet, in PSN order: READ replies go out in
	// bursts, and an ACK or NAK that follows them waits (coalesced: the
	// latest supersedes the others, every RC acknowledgement being
	// cumulative).
	replies   []reply // ring, max_dest_rd_atomic+1 entries
	replyHead int
	replyLen  int
	ackOwed   bool
	ackSyn    wire.AETHSyndrome
	ackPSN    psn.PSN

	// failing: a request failed while earlier READ replies were still
	// queued. The owed acknowledgement is its NAK, sent after them, and
	// the QP enters ERR then; requests arriving meanwhile are dropped.
	failing bool
}

// respond runs the responder on a request packet.
func (qp *QP) respond(p *wire.Packet, info wire.OpInfo, out *Output) {
	P := p.BTH.PSN()

	// A failed request is waiting for the responses before it to leave:
	// the responder executes nothing more.
	if qp.resp.failing {
		qp.counters.DroppedPackets++
		return
	}

	// A READ or atomic is answered through the reply queue. A requester
	// keeping to its max_rd_atomic never fills it; one that does not sees
	// its request dropped, as if lost.
	if (info.IsReadRequest() || info.IsAtomic() || info.IsFlush() || info.IsAtomicWrite()) &&
		qp.resp.replyLen >= len(qp.resp.replies) {
		qp.counters.DroppedBusy++
		return
	}

	// Check PSN.
	switch d := P.Sub(qp.resp.epsn); {
	case d > 0 && qp.ssr.on:
		qp.holdOutOfOrder(p, P, d, out)
		return
	case d > 0:
		// Out of sequence: NAK with the expected PSN once per gap, then
		// drop further out-of-sequence requests silently until the
		// expected PSN arrives (IBTA 9.7.5.2.2, rxe's sent_psn_nak),
		// whatever they ask: a NAK per packet would let anyone who can
		// put packets on the path make the responder send one NAK (and
		// the peer one go-back-N retransmission) per forged packet. A
		// lost NAK costs the requester its retransmit timer; the
		// requester's own loss recovery (retransmitting the head of a
		// go-back more than once) keeps that rare.
		qp.counters.OutOfSeqRequest++
		if !qp.resp.sentPSNNak {
			qp.resp.sentPSNNak = true
			qp.counters.SeqNakSent++
			qp.sendAck(wire.NakSyndrome(wire.NAKPSNSequenceError), qp.resp.epsn, out)
		}
		return
	case d < 0:
		qp.counters.DuplicateRequest++
		qp.duplicate(p, info, P, out)
		return
	}
	qp.resp.sentPSNNak = false

	// Check opcode sequence.
	if !qp.checkOpSeq(info) {
		qp.classC(P, wire.NAKInvalidRequest, ibv.WCRemInvReqErr, qp.refused(RefusedOpcodeSequence, p, 0), out)
		return
	}
	// Check the operation is enabled on the QP (rxe answers a disabled
	// one with an invalid request NAK).
	if !qp.checkOpValid(p, info) {
		qp.classC(P, wire.NAKInvalidRequest, ibv.WCRemInvReqErr, qp.refused(RefusedQPAccess, p, opAccess(p, info)), out)
		return
	}
	// Check length against the path MTU (C9-92): the caller may have parsed
	// without knowing this QP's MTU.
	if info.Payload().Check(len(p.Payload), len(p.Pad), int(qp.mtu)) != nil {
		qp.classC(P, wire.NAKInvalidRequest, ibv.WCRemInvReqErr, qp.refused(RefusedPacketLength, p, 0), out)
		return
	}
	switch {
	case info.IsSend():
		qp.execSend(p, info, P, out)
	case info.IsWrite():
		qp.execWrite(p, info, P, out)
	case info.IsReadRequest():
		qp.execRead(p, P, out)
	case info.IsAtomic():
		qp.execAtomic(p, P, out)
	case info.IsFlush():
		qp.execFlush(p, P, out)
	case info.IsAtomicWrite():
		qp.execAtomicWrite(p, P, out)
	default:
		qp.classC(P, wire.NAKInvalidRequest, ibv.WCRemInvReqErr, qp.refused(RefusedOpcode, p, 0), out)
	}
}

// checkOpSeq enforces the opcode sequence: MIDDLE and LAST only continue a
// message of their kind, and a new message starts only after the last one
// ended.
func (qp *QP) checkOpSeq(info wire.OpInfo) bool {
	switch qp.resp.inMsg {
	case msgSend:
		return info.IsSend() && (info.IsMiddle() || info.IsLast())
	case msgWrite:
		return info.IsWrite() && (info.IsMiddle() || info.IsLast())
	}
	return info.StartsMessage()
}

// checkOpValid checks the QP's remote access flags; a FLUSH needs the
// flush rights of its placement type (rxe check_qp_attr_access).
func (qp *QP) checkOpValid(p *wire.Packet, info wire.OpInfo) bool {
	switch {
	case info.IsWrite():
		return qp.access&ibv.AccessRemoteWrite != 0
	case info.IsReadRequest():
		return qp.access&ibv.AccessRemoteRead != 0
	case info.IsAtomic():
		return qp.access&ibv.AccessRemoteAtomic != 0
	case info.IsAtomicWrite():
		return qp.access&ibv.AccessRemoteWrite != 0 // as rxe
	case info.IsFlush():
		need := flushAccess(ibv.FlushType(p.FETH.PlacementType()))
		return qp.access&need == need
	}
	return true
}

// execSend places a SEND packet in the receive WQE, taking one from the RQ
// or SRQ at the first packet.
func (qp *QP) execSend(p *wire.Packet, info wire.OpInfo, P psn.PSN, out *Output) {
	// Check resources.
	if !qp.resp.hasWQE && !qp.takeRecvWQE() {
		qp.sendRNRNak(P, out)
		return
	}
	w := qp.heldWQE()
	n := uint32(len(p.Payload))
	// Check length: the message must fit the receive buffer.
	if uint64(qp.resp.rcvd)+uint64(n) > uint64(w.length) {
		qp.counters.LocalErrors++
		why := qp.refused(RefusedRecvTooShort, p, 0)
		why.RecvLength = w.length
		qp.classC(P, wire.NAKInvalidRequest, ibv.WCLocLenErr, why, out)
		return
	}
	// Execute.
	if n > 0 && !qp.copySGL(w.sgl, qp.resp.rcvd, p.Payload, true) {
		qp.counters.LocalErrors++
		qp.classC(P, wire.NAKRemoteOperationalError, ibv.WCLocProtErr, qp.refused(RefusedRecvBuffer, p, ibv.AccessLocalWrite), out)
		return
	}
	qp.resp.rcvd += n
	if !info.EndsMessage() {
		qp.resp.inMsg = msgSend
		qp.resp.epsn = P.Next()
		qp.ackIfRequested(p, P, out)
		return
	}
	if info.HasInvalidate() {
		inv, ok := qp.mem.(RKeyInvalidator)
		if !ok || inv.InvalidateRKey(qp.pd, p.IETH.RKey()) != nil {
			why := qp.refused(RefusedInvalidate, p, 0)
			why.RKey = p.IETH.RKey()
			qp.classC(P, wire.NAKInvalidRequest, ibv.WCRemInvReqErr, why, out)
			return
		}
	}
	qp.resp.inMsg = msgNone
	qp.resp.epsn = P.Next()
	qp.resp.msn = qp.resp.msn.Next()
	qp.wc = Completion{
		Status:    ibv.WCSuccess,
		Opcode:    ibv.WCRecv,
		ByteLen:   qp.resp.rcvd,
		SrcQP:     qp.destQPN,
		Solicited: p.BTH.SolicitedEvent(),
	}
	if info.HasImmediate() {
		qp.wc.Imm, qp.wc.Flags = p.ImmDt.Imm(), ibv.WCWithImm
	}
	if info.HasInvalidate() {
		qp.wc.InvalidatedRKey, qp.wc.Flags = p.IETH.RKey(), ibv.WCWithInv
	}
	qp.ackIfRequested(p, P, out)
	qp.completeRecv()
}

// execWrite places an RDMA WRITE packet in the memory its RETH names.
func (qp *QP) execWrite(p *wire.Packet, info wire.OpInfo, P psn.PSN, out *Output) {
	// Check resources: a WRITE with immediate consumes a receive WQE.
	imm := info.HasImmediate()
	if imm && !qp.resp.hasWQE && !qp.takeRecvWQE() {
		qp.sendRNRNak(P, out)
		return
	}
	// Check rkey of the whole message before a byte moves. A zero-length
	// WRITE names no memory (C9-88).
	if info.IsFirst() || info.IsOnly() {
		va, rkey, l := p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALength()
		if l > 1<<31 {
			qp.classC(P, wire.NAKInvalidRequest, ibv.WCRemInvReqErr, qp.refused(RefusedMessageLength, p, 0), out)
			return
		}
		if l > 0 {
			if err := qp.checkRemote(rkey, va, l, ibv.AccessRemoteWrite); err != nil {
				qp.classC(P, wire.NAKRemoteAccessError, ibv.WCRemAccessErr, qp.refusedAccess(err, p, ibv.AccessRemoteWrite), out)
				return
			}
		}
		qp.resp.va, qp.resp.rkey, qp.resp.resid, qp.resp.wlen = va, rkey, l, l
	}
	// Check length: packets fill the MTU until the last, which ends the
	// RETH length exactly (C9-92, rxe check_rkey).
	n := uint32(len(p.Payload))
	if qp.resp.resid > qp.mtu {
		if n != qp.mtu || info.EndsMessage() {
			qp.classC(P, wire.NAKInvalidRequest, ibv.WCRemInvReqErr, qp.refused(RefusedPacketLength, p, 0), out)
			return
		}
	} else if n != qp.resp.resid || !info.EndsMessage() {
		qp.classC(P, wire.NAKInvalidRequest, ibv.WCRemInvReqErr, qp.refused(RefusedPacketLength, p, 0), out)
		return
	}
	// Execute.
	if n > 0 {
		b, ref, err := qp.mem.Remote(qp.pd, qp.resp.rkey, qp.resp.va, n, ibv.AccessRemoteWrite)
		if err != nil {
			qp.classC(P, wire.NAKRemoteAccessError, ibv.WCRemAccessErr, qp.refusedAccess(err, p, ibv.AccessRemoteWrite), out)
			return
		}
		copy(b, p.Payload)
		ref.Release()
	}
	qp.resp.va += uint64(n)
	qp.resp.resid -= n
	qp.resp.epsn = P.Next()
	if !info.EndsMessage() {
		qp.resp.inMsg = msgWrite
		qp.ackIfRequested(p, P, out)
		return
	}
	qp.resp.inMsg = msgNone
	qp.resp.msn = qp.resp.msn.Next()
	qp.ackIfRequested(p, P, out)
	if imm {
		qp.wc = Completion{
			Status:  ibv.WCSuccess,
			Opcode:  ibv.WCRecvRDMAWithImm,
			ByteLen: qp.resp.wlen, // rxe reports the RETH length
			Imm:     p.ImmDt.Imm(),
			SrcQP:   qp.destQPN,
			Flags:   ibv.WCWithImm,
			// SE is meaningful for WRITE with immediate too.
			Solicited: p.BTH.SolicitedEvent(),
		}
		qp.completeRecv()
	}
}

// execRead records a READ request in the responder resources and starts
// answering it.
func (qp *QP) execRead(p *wire.Packet, P psn.PSN, out *Output) {
	if len(qp.resp.res) == 0 {
		qp.classC(P, wire.NAKInvalidRequest, ibv.WCRemInvReqErr, qp.refused(RefusedNoResources, p, 0), out)
		return
	}
	va, rkey, l := p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALength()
	if l > 1<<31 {
		qp.classC(P, wire.NAKInvalidRequest, ibv.WCRemInvReqErr, qp.refused(RefusedMessageLength, p, 0), out)
		return
	}
	// The MSN counts the READ when it is accepted (C9-148), so its
	// responses already carry the new value.
	qp.resp.msn = qp.resp.msn.Next()
	n := qp.responsePackets(l)
	r := qp.nextResource()
	*r = rdResource{kind: rdRead, first: P, last: P.Add(n - 1), va: va, rkey: rkey, length: l}
	qp.resp.epsn = P.Add(n)
	if err := qp.startRead(P, va, rkey, l, out); err != nil {
		qp.classC(P, wire.NAKRemoteAccessError, ibv.WCRemAccessErr, qp.refusedAccess(err, p, ibv.AccessRemoteRead), out)
	}
}

// execAtomic performs a COMPARE_SWAP or FETCH_ADD on the native-endian
// alignedTarget resolves the 8 bytes at va an atomic or ATOMIC_WRITE
// targets, checked against rkey and need, and pinned: the caller releases
// ref. A bad key or right is a remote access error, a va not 8-byte
// aligned an invalid request; either is NAKed here and ok is false.
func (qp *QP) alignedTarget(p *wire.Packet, P psn.PSN, rkey uint32, va uint64, need ibv.AccessFlags, out *Output) (b []byte, ref Ref, ok bool) {
	if qp.mem == nil {
		qp.classC(P, wire.NAKRemoteAccessError, ibv.WCRemAccessErr, qp.refusedAccess(ErrInvalidKey, p, need), out)
		return nil, nil, false
	}
	b, ref, err := qp.mem.Remote(qp.pd, rkey, va, 8, need)
	if err != nil {
		qp.classC(P, wire.NAKRemoteAccessError, ibv.WCRemAccessErr, qp.refusedAccess(err, p, need), out)
		return nil, nil, false
	}
	if va%8 != 0 {
		ref.Release()
		qp.classC(P, wire.NAKInvalidRequest, ibv.WCRemInvReqErr, qp.refused(RefusedMisaligned, p, need), out)
		return nil, nil, false
	}
	return b, ref, true
}

// 8-byte word at the target, under the device's stripe lock.
func (qp *QP) execAtomic(p *wire.Packet, P psn.PSN, out *Output) {
	if len(qp.resp.res) == 0 {
		qp.classC(P, wire.NAKInvalidRequest, ibv.WCRemInvReqErr, qp.refused(RefusedNoResources, p, 0), out)
		return
	}
	a := p.AtomicETH
	va := a.VA()
	b, ref, ok := qp.alignedTarget(p, P, a.RKey(), va, ibv.AccessRemoteAtomic, out)
	if !ok {
		return
	}
	mu := qp.locks.lockFor(b)
	mu.Lock()
	orig := binary.NativeEndian.Uint64(b)
	if p.BTH.Opcode() == wire.RCCompareSwap {
		if orig == a.Compare() {
			binary.NativeEndian.PutUint64(b, a.SwapAdd())
		}
	} else {
		binary.NativeEndian.PutUint64(b, orig+a.SwapAdd())
	}
	mu.Unlock()
	ref.Release()

	r := qp.nextResource()
	*r = rdResource{kind: rdAtomic, first: P, last: P, va: va, rkey: a.RKey(), length: 8, orig: orig}
	qp.resp.msn = qp.resp.msn.Next()
	qp.resp.epsn = P.Next()
	qp.sendAtomicAck(P, orig, out)
}

// duplicate answers a request behind the expected PSN without executing it
// again: SEND and WRITE are re-acknowledged, READs replayed from memory,
// atomics answered with their saved original value. A READ or atomic that
// the resources ring no longer holds is dropped (class D).
func (qp *QP) duplicate(p *wire.Packet, info wire.OpInfo, P psn.PSN, out *Output) {
	switch {
	case info.IsSend() || info.IsWrite():
		if p.BTH.AckReq() {
			qp.sendAck(wire.SyndromeAckUnlimited, qp.resp.epsn.Add(psn.Mask), out)
		}
	case info.IsReadRequest():
		r := qp.findResource(P, rdRead)
		if r == nil {
			return
		}
		va, rkey, l := p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALength()
		// Only the original request or a tail of it may be asked again.
		if rkey != r.rkey || va < r.va || uint64(l) > uint64(r.length) ||
			va-r.va > uint64(r.length-l) || r.last.LessThan(P.Add(qp.responsePackets(l)-1)) {
			return
		}
		// The requester goes back to P (go-back-N): the responses
		// queued for it and what followed are sent again on request.
		qp.dropReplies()
		if err := qp.startRead(P, va, rkey, l, out); err != nil {
			// Deregistered since: a remote access error.
			qp.classC(P, wire.NAKRemoteAccessError, ibv.WCRemAccessErr, qp.refusedAccess(err, p, ibv.AccessRemoteRead), out)
		}
	case info.IsAtomic():
		if r := qp.findResource(P, rdAtomic); r != nil && r.first == P {
			qp.sendAtomicAck(P, r.orig, out)
		}
	case info.IsFlush():
		qp.duplicateEmptyResponse(P, rdFlush, out)
	case info.IsAtomicWrite():
		qp.duplicateEmptyResponse(P, rdAtomicWrite, out)
	}
}

func (qp *QP) nextResource() *rdResource {
	r := &qp.resp.res[qp.resp.resNext]
	qp.resp.resNext = (qp.resp.resNext + 1) % len(qp.resp.res)
	return r
}

func (qp *QP) findResource(p psn.PSN, kind rdKind) *rdResource {
	for i := range qp.resp.res {
		r := &qp.resp.res[i]
		if r.kind == kind && r.first.LessThanEq(p) && p.LessThanEq(r.last) {
			return r
		}
	}
	return nil
}

// checkRemote validates a remote access without copying; it returns the
// Memory's reason for a refusal.
func (qp *QP) checkRemote(rkey uint32, va uint64, l uint32, need ibv.AccessFlags) error {
	if qp.mem == nil {
		return ErrInvalidKey
	}
	if c, ok := qp.mem.(RemoteChecker); ok {
		return c.CheckRemote(qp.pd, rkey, va, l, need)
	}
	_, ref, err := qp.mem.Remote(qp.pd, rkey, va, l, need)
	if err != nil {
		return err
	}
	ref.Release()
	return nil
}

// takeRecvWQE gives the responder a receive WQE, from the SRQ or the RQ.
func (qp *QP) takeRecvWQE() bool {
	if qp.srq != nil {
		w := &qp.srqTake
		if !qp.srq.TakeRecv(w) {
			return false
		}
		if len(w.SGL) > len(qp.resp.held.store) {
			// The queue grew its SGE limit after the QP was created:
			// keep the receive, at one allocation.
			qp.resp.held.store = make([]SGE, len(w.SGL))
		}
		qp.resp.held.set(w)
		qp.resp.fromSRQ = true
	} else {
		if qp.rq.len() == 0 {
			return false
		}
		qp.resp.fromSRQ = false
	}
	qp.resp.hasWQE = true
	qp.resp.rcvd = 0
	return true
}

func (qp *QP) heldWQE() *recvSlot {
	if qp.resp.fromSRQ {
		return &qp.resp.held
	}
	return qp.rq.at(qp.rq.head)
}

// completeRecv retires the held receive WQE with the completion prepared
// in qp.wc (whose WRID and QPN it fills in).
func (qp *QP) completeRecv() {
	w := qp.heldWQE()
	qp.wc.WRID, qp.wc.QPN = w.wrid, qp.qpn
	if !qp.resp.fromSRQ {
		qp.rq.head++
	}
	qp.resp.hasWQE = false
	if qp.wc.Status == ibv.WCSuccess {
		qp.counters.RDMARecvs++
	}
	qp.push(qp.rcq)
}

// classC handles a responder error of IBTA class C (and A): NAK the request
// with code, complete a receive WQE the message held with recvStatus, and
// move the QP to ERR.
//
// Responses leave in PSN order: if READ replies or atomic ACKs of earlier
// requests are still queued, those requests were executed and their
// responses are sent first, then the NAK, and only then does the QP enter
// ERR (the order rxe produces, as it answers a READ in full before it looks
// at the next request). Dropping them would leave the requester waiting
// for responses that a NAK of a later PSN does not replace, until its
// retries ran out.
//
// why is the check that failed and the request it failed on, kept for the
// QP's asynchronous event (QP.Refusal).
func (qp *QP) classC(P psn.PSN, code wire.NAKCode, recvStatus ibv.WCStatus, why Refusal, out *Output) {
	qp.noteRefusal(why)
	qp.noteResponderFault(code)
	if qp.resp.hasWQE {
		qp.wc = Completion{Status: recvStatus, Opcode: ibv.WCRecv}
		qp.completeRecv()
	}
	if qp.resp.replyLen > 0 {
		qp.counters.NakSent++
		qp.resp.failing = true
		qp.resp.ackOwed, qp.resp.ackSyn, qp.resp.ackPSN = true, wire.NakSyndrome(code), P
		return
	}
	qp.failNow(P, code, recvStatus, why, out)
}

// failNow NAKs P at once, dropping whatever responses are queued, and moves
// the QP to ERR. A receive WQE the message held completes with recvStatus.
func (qp *QP) failNow(P psn.PSN, code wire.NAKCode, recvStatus ibv.WCStatus, why Refusal, out *Output) {
	qp.noteRefusal(why)
	qp.noteResponderFault(code)
	qp.counters.NakSent++
	qp.dropReplies() // the QP is going to ERR: what is queued is lost
	qp.emitAck(wire.NakSyndrome(code), P, out)
	if qp.resp.hasWQE {
		qp.wc = Completion{Status: recvStatus, Opcode: ibv.WCRecv}
		qp.completeRecv()
	}
	qp.enterError()
}
