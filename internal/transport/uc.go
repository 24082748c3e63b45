package transport

import (
	"errors"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// wireTransport is the transport of the opcodes the QP accepts.
func wireTransport(t ibv.QPType) wire.Transport {
	switch t {
	case ibv.QPTypeUC:
		return wire.TransportUC
	case ibv.QPTypeUD:
		return wire.TransportUD
	}
	return wire.TransportRC
}

// Errors of PostSend on UC and UD QPs.
var (
	// ErrMessageTooLong refuses a UD send longer than the path MTU: a
	// datagram is one packet.
	ErrMessageTooLong = errors.New("transport: UD message longer than the path MTU")
	// ErrBadOpcodeForType refuses an operation the QP's transport does not
	// have: UC has SEND and WRITE (with and without immediate), UD has
	// SEND (with and without immediate).
	ErrBadOpcodeForType = errors.New("transport: opcode not valid for the QP's transport")
)

// unrelBurst is the most packets one call appends for a UC or UD send
// queue; Deadline asks for an immediate OnTimer to continue, so that a long
// UC message never needs more than a burst of Output.
const unrelBurst = 64

// unreliable is the state UC and UD add to a QP. Their requester reuses
// the send ring and the PSN counter of RC's (qp.req), their responder the
// expected PSN, the message kind and the held receive WQE of RC's
// (qp.resp), without acknowledgements, retries or responder resources.
type unreliable struct {
	// dropping: a UC message lost a packet or failed a check; its
	// remaining packets are dropped until the next FIRST or ONLY.
	dropping bool
	qkey     uint32 // UD: the QP's Q_Key (IBV_QP_QKEY)
}

// postSendUnreliable is PostSend for UC and UD: the same checks as RC's
// for the operations these transports have, plus the one-packet rule of UD.
func (qp *QP) postSendUnreliable(w *SendWQE, now time.Time, out *Output) error {
	switch op := w.Opcode; {
	case op == ibv.WRSend || op == ibv.WRSendWithImm:
	case qp.typ == ibv.QPTypeUC && (isWrite(op) || op == ibv.WRBindMW):
	default:
		return ErrBadOpcodeForType
	}
	length, err := qp.wqeLength(w)
	if err != nil {
		return err
	}
	if qp.typ == ibv.QPTypeUD && length > qp.mtu {
		return ErrMessageTooLong
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
	if qp.sq.full() {
		return ErrSendQueueFull
	}
	qp.sq.push(w, length)
	qp.now = now
	qp.pumpUnreliable(out)
	return nil
}

// pumpUnreliable transmits queued UC or UD work requests, at most
// unrelBurst packets, completing each when its last packet is handed to
// out: nothing acknowledges them. SQD finishes a started message and starts
// none.
func (qp *QP) pumpUnreliable(out *Output) {
	if qp.state != ibv.QPStateRTS && qp.state != ibv.QPStateSQD {
		return
	}
	for budget := unrelBurst; qp.sq.len() > 0; budget-- {
		if budget == 0 {
			qp.req.kick = true // continue at once, from OnTimer
			return
		}
		s := qp.sq.at(qp.sq.head)
		if !s.started && s.wqe.Opcode == ibv.WRBindMW {
			if qp.state == ibv.QPStateSQD {
				return
			}
			// A local operation: everything before it has completed
			// (UC completes at transmission), so a fence holds.
			if ops, _ := qp.mem.(LocalOps); ops == nil || !ops.BindMW(qp.pd, &s.wqe.Bind) {
				qp.counters.LocalErrors++
				qp.fatal(ibv.WCMWBindErr)
				return
			}
			qp.completeHead(ibv.WCSuccess)
			continue
		}
		if !s.started {
			if qp.state == ibv.QPStateSQD {
				return
			}
			if st := qp.checkLocal(s, out); st != ibv.WCSuccess {
				qp.counters.LocalErrors++
				qp.fatal(st)
				return
			}
			s.started = true
			s.firstPSN = qp.req.psn
			qp.req.off = 0
		}
		if !qp.transmitUnreliable(s, out) {
			qp.counters.LocalErrors++
			qp.fatal(ibv.WCLocProtErr)
			return
		}
	}
}

// transmitUnreliable appends the next packet of s, the head of the send
// queue, and completes s after its last packet. It reports false if the
// local memory could not be read.
func (qp *QP) transmitUnreliable(s *sendSlot, out *Output) bool {
	op := s.wqe.Opcode
	h := &qp.hdr
	*h = wire.Headers{}
	h.BTH.PKey = wire.DefaultPKey
	h.BTH.PSN = qp.req.psn
	rem := s.length - qp.req.off
	payload := min(rem, qp.mtu)
	first := qp.req.off == 0
	last := payload == rem
	dest := qp.dest
	if qp.typ == ibv.QPTypeUD {
		h.BTH.Opcode = wire.UDSendOnly
		if op == ibv.WRSendWithImm {
			h.BTH.Opcode = wire.UDSendOnlyWithImmediate
		}
		h.BTH.DestQP = wire.QPN(s.wqe.RemoteQPN & wire.QPNMask)
		qkey := s.wqe.RemoteQKey
		if qkey&0x80000000 != 0 {
			qkey = qp.un.qkey // IBTA 10.2.5: the QP's own (possibly privileged) Q_Key
		}
		h.DETH = wire.DETHFields{QKey: qkey, SrcQP: wire.QPN(qp.qpn)}
		dest = s.wqe.Dest
	} else {
		// UC opcodes are RC's plus 0x20 (IBTA table 37).
		h.BTH.Opcode = requestOpcode(op, first, last) + wire.UCSendFirst - wire.RCSendFirst
		h.BTH.DestQP = wire.QPN(qp.destQPN)
		if isWrite(op) && first {
			h.RETH = wire.RETHFields{VA: s.wqe.RemoteAddr, RKey: s.wqe.RKey, DMALength: s.length}
		}
	}
	if last {
		h.ImmDt.Imm = s.wqe.Imm
		h.BTH.SolicitedEvent = s.wqe.Flags&ibv.SendSolicited != 0 &&
			(isSend(op) || op == ibv.WRRDMAWriteWithImm)
	}
	// No AckReq: nothing answers UC or UD (the rxe captures show it clear).
	if !qp.appendRequest(s, payload, dest, out) {
		return false
	}
	qp.req.psn = qp.req.psn.Next()
	qp.req.sentHigh = qp.req.psn
	qp.comp.psn = qp.req.psn // nothing is ever outstanding
	if !last {
		qp.req.off += payload
		return true
	}
	qp.req.off = 0
	qp.completeHead(ibv.WCSuccess)
	return true
}

// handleUnreliable is HandlePacket for UC and UD QPs: nh describes the IP
// header the packet came in (UD needs it for the GRH; nil leaves the GRH
// area zero).
func (qp *QP) handleUnreliable(p *wire.Packet, nh *NetHeader, out *Output) {
	qp.counters.ReceivedPackets++
	info := p.Info()
	if info.Transport() != wireTransport(qp.typ) || !info.IsRequest() ||
		uint32(p.BTH.DestQP()) != qp.qpn || p.BTH.PKey()&0x7FFF != wire.DefaultPKey&0x7FFF {
		qp.counters.DroppedPackets++
		return
	}
	switch qp.state {
	case ibv.QPStateRTR, ibv.QPStateRTS, ibv.QPStateSQD, ibv.QPStateSQE:
	default:
		qp.counters.DroppedPackets++
		return
	}
	if qp.typ == ibv.QPTypeUD {
		qp.receiveUD(p, info, nh)
	} else {
		qp.receiveUC(p, info)
	}
	_ = out // UC and UD never answer
}

// receiveUC is the UC responder (rxe_resp.c for IB_QPT_UC): RC's checks
// and placement without acknowledgements. A PSN gap, a broken opcode
// sequence or any check failing drops the rest of the message, silently,
// until the next FIRST or ONLY packet, which starts afresh. A message cut
// short leaves no trace but bytes already placed: its receive WQE serves
// the next message.
//
// Unlike rxe, which takes any FIRST or ONLY whatever its PSN, a packet
// behind the expected PSN is ignored as a duplicate or a straggler: it
// belongs to a message already delivered or given up, and taking it would
// deliver messages out of order (or twice) and cut short the one in
// progress.
func (qp *QP) receiveUC(p *wire.Packet, info wire.OpInfo) {
	P := p.BTH.PSN()
	rs := &qp.resp
	if P.Sub(rs.epsn) < 0 {
		qp.counters.DuplicateRequest++
		qp.counters.DroppedPackets++
		return
	}

	// Check PSN: any gap loses the message in progress.
	if qp.un.dropping || P != rs.epsn {
		if P != rs.epsn {
			qp.counters.OutOfSeqRequest++
		}
		if !info.StartsMessage() {
			qp.ucDrop(P)
			return
		}
		qp.ucAbandon()
		qp.un.dropping = false
	}
	// Check opcode sequence: a new message while one is in progress
	// abandons the old one; a MIDDLE or LAST out of place is dropped.
	switch {
	case rs.inMsg == msgSend && info.IsSend() && !info.StartsMessage(),
		rs.inMsg == msgWrite && info.IsWrite() && !info.StartsMessage():
	case info.StartsMessage():
		qp.ucAbandon()
	default:
		qp.ucDrop(P)
		return
	}
	// Check op valid.
	if info.IsWrite() && qp.access&ibv.AccessRemoteWrite == 0 {
		qp.ucDrop(P)
		return
	}
	// Check length against the path MTU (C9-92).
	if info.Payload().Check(len(p.Payload), len(p.Pad), int(qp.mtu)) != nil {
		qp.ucDrop(P)
		return
	}
	if info.IsSend() {
		qp.ucSend(p, info, P)
	} else {
		qp.ucWrite(p, info, P)
	}
}

// ucSend places a UC SEND packet in the receive WQE.
func (qp *QP) ucSend(p *wire.Packet, info wire.OpInfo, P psn.PSN) {
	rs := &qp.resp
	// Check resources: no receive WQE drops the message (class D).
	if !rs.hasWQE && !qp.takeRecvWQE() {
		qp.counters.DroppedNoRecv++
		qp.ucDrop(P)
		return
	}
	w := qp.heldWQE()
	n := uint32(len(p.Payload))
	if uint64(rs.rcvd)+uint64(n) > uint64(w.length) {
		qp.counters.LocalErrors++
		qp.ucDrop(P)
		return
	}
	if n > 0 && !qp.copySGL(w.sgl, rs.rcvd, p.Payload, true) {
		qp.recvLocalFault()
		return
	}
	rs.rcvd += n
	rs.epsn = P.Next()
	if !info.EndsMessage() {
		rs.inMsg = msgSend
		return
	}
	rs.inMsg = msgNone
	rs.msn = rs.msn.Next()
	qp.wc = Completion{
		Status:    ibv.WCSuccess,
		Opcode:    ibv.WCRecv,
		ByteLen:   rs.rcvd,
		SrcQP:     qp.destQPN,
		Solicited: p.BTH.SolicitedEvent(),
	}
	if info.HasImmediate() {
		qp.wc.Imm, qp.wc.Flags = p.ImmDt.Imm(), ibv.WCWithImm
	}
	qp.completeRecv()
}

// ucWrite places a UC RDMA WRITE packet in the memory its RETH names.
func (qp *QP) ucWrite(p *wire.Packet, info wire.OpInfo, P psn.PSN) {
	rs := &qp.resp
	imm := info.HasImmediate()
	if imm && !rs.hasWQE && !qp.takeRecvWQE() {
		qp.counters.DroppedNoRecv++
		qp.ucDrop(P)
		return
	}
	if info.StartsMessage() {
		va, rkey, l := p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALength()
		if l > 1<<31 || l > 0 && qp.checkRemote(rkey, va, l, ibv.AccessRemoteWrite) != nil {
			qp.ucDrop(P)
			return
		}
		rs.va, rs.rkey, rs.resid, rs.wlen = va, rkey, l, l
	}
	n := uint32(len(p.Payload))
	if rs.resid > qp.mtu {
		if n != qp.mtu || info.EndsMessage() {
			qp.ucDrop(P)
			return
		}
	} else if n != rs.resid || !info.EndsMessage() {
		qp.ucDrop(P)
		return
	}
	if n > 0 {
		b, ref, err := qp.mem.Remote(qp.pd, rs.rkey, rs.va, n, ibv.AccessRemoteWrite)
		if err != nil {
			qp.ucDrop(P) // deregistered since the FIRST packet
			return
		}
		copy(b, p.Payload)
		ref.Release()
	}
	rs.va += uint64(n)
	rs.resid -= n
	rs.epsn = P.Next()
	if !info.EndsMessage() {
		rs.inMsg = msgWrite
		return
	}
	rs.inMsg = msgNone
	rs.msn = rs.msn.Next()
	if imm {
		qp.wc = Completion{
			Status:    ibv.WCSuccess,
			Opcode:    ibv.WCRecvRDMAWithImm,
			ByteLen:   rs.wlen,
			Imm:       p.ImmDt.Imm(),
			SrcQP:     qp.destQPN,
			Flags:     ibv.WCWithImm,
			Solicited: p.BTH.SolicitedEvent(),
		}
		qp.completeRecv()
	}
}

// ucDrop drops the message that packet P belongs to: it and the rest of
// it, until the next FIRST or ONLY. The receive WQE it held, if any, is
// kept for the next message.
func (qp *QP) ucDrop(P psn.PSN) {
	qp.counters.DroppedPackets++
	if !qp.un.dropping {
		qp.un.dropping = true
		qp.counters.DroppedMessages++
	}
	qp.resp.inMsg = msgNone
	qp.resp.rcvd = 0
	qp.resp.epsn = P.Next()
}

// ucAbandon forgets a message in progress, whose end was lost, before a
// new one starts; its receive WQE serves the new message from its start.
func (qp *QP) ucAbandon() {
	if qp.resp.inMsg != msgNone && !qp.un.dropping {
		qp.counters.DroppedMessages++
	}
	qp.resp.inMsg = msgNone
	qp.resp.rcvd = 0
}

// recvLocalFault handles a UC or UD receive WQE whose memory cannot be
// written: the WQE completes with LOC_PROT_ERR and the QP enters ERR, as on
// RC.
func (qp *QP) recvLocalFault() {
	qp.counters.LocalErrors++
	if qp.cause == CauseNone {
		qp.cause = CauseRecvCompletion // the completion reports it
	}
	qp.wc = Completion{Status: ibv.WCLocProtErr, Opcode: ibv.WCRecv}
	qp.completeRecv()
	qp.enterError()
}
