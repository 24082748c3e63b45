package transport

import (
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// requester is the sending half of the send queue (rxe_req.c): it turns
// work requests into request packets, one MTU at a time, within the PSN
// window and the READ/atomic budget, and rewinds for retransmission when
// the completer says so (go-back-N).
type requester struct {
	psn      psn.PSN // PSN of the next packet
	sentHigh psn.PSN // one past the highest PSN ever assigned
	idx      uint32  // send queue counter of the WQE being transmitted
	off      uint32  // byte offset of the next packet within it
	noAck    uint32  // packets sent since the last one with AckReq
	rdAtomic uint32  // READ/atomic WQEs started and not completed
	rnrWait  bool    // an RNR NAK paused the requester until rnrUntil
	rnrUntil time.Time
	// ackNext asks for an ACK on the next packet: the first one resent
	// after a rewind, so that a retry round that gets through is
	// acknowledged even if the rest of it is lost again.
	ackNext bool
	// headCopies is how many times to send the next packet, the first of a
	// retransmission (see retry); 0 or 1 means once.
	headCopies uint8
	// kick asks for an OnTimer call at once: the QP returned to RTS with
	// work queued.
	kick bool
	// win is the effective window, between floorWindow and the maximum
	// QP.window (window.go); winCredit counts acknowledged PSNs toward its
	// next increment.
	win       uint32
	winCredit uint32
}

// pump transmits as many packets as the window, max_rd_atomic, fences and
// the QP state allow.
func (qp *QP) pump(now time.Time, out *Output) {
	// A wait for the rate limit's tokens is set again below if it still
	// holds; one left from before, when the window or a fence is what
	// holds now, would be a past deadline, due again and again.
	qp.cc.rp.waiting = false
	if qp.state != ibv.QPStateRTS && qp.state != ibv.QPStateSQD {
		return
	}
	qp.retireLocalOps()
	if qp.ssr.on && !qp.req.rnrWait {
		// Selective repeat: what is known lost goes before anything
		// new (sr.go).
		if qp.ssr.probe && !qp.sendProbes(now, out) {
			return
		}
		if qp.ssr.lostBelow != 0 && !qp.resendLost(now, out) {
			return
		}
	}
	for !qp.req.rnrWait && qp.req.idx != qp.sq.tail {
		s := qp.sq.at(qp.req.idx)
		if s.failed {
			return // completes when it reaches the head
		}
		if isLocal(s.wqe.Opcode) {
			// BIND_MW, LOCAL_INV: executed once, never sent.
			if !s.started && (qp.state == ibv.QPStateSQD || !qp.startLocalOp(s)) {
				return
			}
			qp.req.idx++
			qp.retireLocalOps()
			continue
		}
		if qp.ssr.on {
			if qp.srBlocked() {
				return
			}
		} else if qp.req.psn.Sub(qp.comp.psn) >= int32(qp.windowFor(s)) {
			return
		}
		if qp.cc.rp.limited && !qp.paced(now) {
			return
		}
		if !s.started {
			if qp.state == ibv.QPStateSQD {
				return // SQD lets started messages finish, starts none
			}
			op := s.wqe.Opcode
			if isReadOrAtomic(op) && qp.req.rdAtomic >= qp.maxRdAtomic {
				return
			}
			// IBTA fence: wait for every earlier READ and atomic to
			// complete. They are all earlier, since WQEs start in order.
			if s.wqe.Flags&ibv.SendFence != 0 && qp.req.rdAtomic > 0 {
				return
			}
			if st := qp.checkLocal(s, out); st != ibv.WCSuccess {
				s.failed, s.status = true, st
				qp.counters.LocalErrors++
				qp.retireFailed()
				return
			}
			s.started = true
			s.firstPSN = qp.req.psn
			s.lastPSN = qp.req.psn.Add(qp.packets(s) - 1)
			if isReadOrAtomic(op) {
				qp.req.rdAtomic++
			}
			qp.req.off = 0
		} else if qp.req.off == 0 {
			// Retransmission: a started WQE keeps its PSNs; a READ
			// resumes at its first missing response.
			qp.req.psn = s.firstPSN.Add(s.readDone / qp.mtu)
		}
		if !qp.transmit(s, now, out) {
			return
		}
	}
}

// packets returns the number of PSNs a WQE consumes.
func (qp *QP) packets(s *sendSlot) uint32 {
	if op := s.wqe.Opcode; isAtomic(op) || op == ibv.WRFlush || op == ibv.WRAtomicWrite || s.length == 0 {
		return 1
	}
	return (s.length + qp.mtu - 1) / qp.mtu
}

// checkLocal validates the local memory of a WQE before its first packet,
// so that a bad lkey fails the WQE before anything reaches the wire. When
// the Memory lets pins cover further accesses (LocalRepinner), an element
// the pin out took last covers needs no pin, and the pin of one it does not
// stays in out, for the WQE's packets to share.
func (qp *QP) checkLocal(s *sendSlot, out *Output) ibv.WCStatus {
	if s.wqe.Flags&ibv.SendInline != 0 {
		return ibv.WCSuccess
	}
	var need ibv.AccessFlags
	if op := s.wqe.Opcode; op == ibv.WRRDMARead || isAtomic(op) {
		need = ibv.AccessLocalWrite // the response is scattered there
	}
	for _, e := range s.wqe.SGL {
		if e.Length == 0 {
			continue
		}
		if qp.mem == nil {
			return ibv.WCLocProtErr
		}
		if held := out.lastRef(); held != nil && qp.repin != nil {
			if _, ok := qp.repin.LocalAgain(held, qp.pd, e.LKey, e.Addr, e.Length, need); ok {
				continue
			}
		}
		_, ref, err := qp.mem.Local(qp.pd, e.LKey, e.Addr, e.Length, need)
		if err != nil {
			return ibv.WCLocProtErr
		}
		if qp.repin != nil {
			out.hold(ref) // released with out, after its packets left
		} else {
			ref.Release()
		}
	}
	return ibv.WCSuccess
}

// transmit appends the next packet of s and advances the requester. It
// reports false if the packet could not be built (local memory vanished),
// in which case s has failed.
func (qp *QP) transmit(s *sendSlot, now time.Time, out *Output) bool {
	op := s.wqe.Opcode
	h := &qp.hdr
	*h = wire.Headers{}
	h.BTH.PKey = wire.DefaultPKey
	h.BTH.DestQP = wire.QPN(qp.destQPN)
	h.BTH.PSN = qp.req.psn
	var payload uint32
	last := true
	switch {
	case op == ibv.WRRDMARead:
		h.BTH.Opcode = wire.RCRDMAReadRequest
		h.RETH = wire.RETHFields{
			VA:        s.wqe.RemoteAddr + uint64(s.readDone),
			RKey:      s.wqe.RKey,
			DMALength: s.length - s.readDone,
		}
	case op == ibv.WRFlush:
		h.BTH.Opcode = wire.RCFlush
		h.FETH = wire.FETHFields{PlacementType: uint8(s.wqe.FlushType), SelectivityLevel: uint8(s.wqe.FlushLevel)}
		h.RETH = wire.RETHFields{VA: s.wqe.RemoteAddr, RKey: s.wqe.RKey, DMALength: s.wqe.FlushLength}
	case op == ibv.WRAtomicWrite:
		// The 8 bytes are gathered from the SGL below, like a WRITE.
		h.BTH.Opcode = wire.RCAtomicWrite
		h.RETH = wire.RETHFields{VA: s.wqe.RemoteAddr, RKey: s.wqe.RKey, DMALength: wire.AtomicWriteLen}
		payload = wire.AtomicWriteLen
	case isAtomic(op):
		h.BTH.Opcode = wire.RCFetchAdd
		h.AtomicETH = wire.AtomicETHFields{VA: s.wqe.RemoteAddr, RKey: s.wqe.RKey, SwapAdd: s.wqe.CompareAdd}
		if op == ibv.WRAtomicCmpAndSwp {
			h.BTH.Opcode = wire.RCCompareSwap
			h.AtomicETH.SwapAdd, h.AtomicETH.Compare = s.wqe.Swap, s.wqe.CompareAdd
		}
	default:
		rem := s.length - qp.req.off
		payload = min(rem, qp.mtu)
		first := qp.req.off == 0
		last = payload == rem
		h.BTH.Opcode = requestOpcode(op, first, last)
		if isWrite(op) && first {
			h.RETH = wire.RETHFields{VA: s.wqe.RemoteAddr, RKey: s.wqe.RKey, DMALength: s.length}
		}
		if last {
			h.ImmDt.Imm = s.wqe.Imm
			h.IETH.RKey = s.wqe.InvalidateRKey
			// rxe sets SE only where a receive completion results.
			h.BTH.SolicitedEvent = s.wqe.Flags&ibv.SendSolicited != 0 &&
				(isSend(op) || op == ibv.WRRDMAWriteWithImm)
		}
	}
	h.BTH.AckReq = last || qp.req.ackNext || qp.req.noAck+1 >= qp.ackInterval()
	if qp.ssr.on {
		qp.noteSent(qp.req.psn)
	}
	if h.BTH.AckReq && qp.req.psn == qp.req.sentHigh {
		qp.startSample(qp.req.psn, now)
	}
	if !qp.appendRequest(s, payload, qp.dest, out) {
		s.failed, s.status = true, ibv.WCLocProtErr
		qp.counters.LocalErrors++
		qp.retireFailed()
		return false
	}
	for ; qp.req.headCopies > 1; qp.req.headCopies-- {
		// alloc may move the packets: index, do not keep p.
		i := out.n - 1
		size := len(out.pkts[i].Bytes)
		if out.pkts[i].Payload != nil {
			size += int(wire.BTH(out.pkts[i].Bytes).PadCount()) // the pad's room
		}
		c := out.alloc(size)
		c.Bytes = append(c.Bytes, out.pkts[i].Bytes...)
		c.Payload = out.pkts[i].Payload // pinned once, until Reset
		c.QPN, c.Dest = qp.qpn, qp.dest
		qp.counters.SentPackets++
	}
	qp.req.headCopies = 0
	if qp.cc.rp.limited {
		qp.spend(payload)
	}

	qp.req.ackNext = false
	if h.BTH.AckReq {
		qp.req.noAck = 0
	} else {
		qp.req.noAck++
	}
	if isReadOrAtomic(op) {
		qp.req.psn = s.lastPSN.Next()
	} else {
		qp.req.psn = qp.req.psn.Next()
	}
	if last {
		qp.req.idx++
		qp.req.off = 0
	} else {
		qp.req.off += payload
	}
	if qp.req.sentHigh.LessThan(qp.req.psn) {
		qp.req.sentHigh = qp.req.psn
	}
	qp.armTimer(now)
	return true
}

// requestOpcode returns the opcode of a SEND or WRITE packet.
func requestOpcode(op ibv.WROpcode, first, last bool) wire.Opcode {
	if isWrite(op) {
		switch {
		case first && last && op == ibv.WRRDMAWriteWithImm:
			return wire.RCRDMAWriteOnlyWithImmediate
		case first && last:
			return wire.RCRDMAWriteOnly
		case first:
			return wire.RCRDMAWriteFirst
		case last && op == ibv.WRRDMAWriteWithImm:
			return wire.RCRDMAWriteLastWithImmediate
		case last:
			return wire.RCRDMAWriteLast
		}
		return wire.RCRDMAWriteMiddle
	}
	switch {
	case first && last && op == ibv.WRSendWithImm:
		return wire.RCSendOnlyWithImmediate
	case first && last && op == ibv.WRSendWithInv:
		return wire.RCSendOnlyWithInvalidate
	case first && last:
		return wire.RCSendOnly
	case first:
		return wire.RCSendFirst
	case last && op == ibv.WRSendWithImm:
		return wire.RCSendLastWithImmediate
	case last && op == ibv.WRSendWithInv:
		return wire.RCSendLastWithInvalidate
	case last:
		return wire.RCSendLast
	}
	return wire.RCSendMiddle
}

// gather copies the message bytes [off, off+len(dst)) of s into dst: one
// copy from registered memory into the packet, as a NIC's DMA.
func (qp *QP) gather(s *sendSlot, off uint32, dst []byte) bool {
	if s.wqe.Flags&ibv.SendInline != 0 {
		return copy(dst, s.wqe.Inline[off:]) == len(dst)
	}
	return qp.copySGL(s.wqe.SGL, off, dst, false)
}

// copySGL copies between data and the bytes [off, off+len(data)) of the
// memory an SGL describes: into the SGL (scatter, needing LOCAL_WRITE) or
// out of it (gather).
func (qp *QP) copySGL(sgl []SGE, off uint32, data []byte, scatter bool) bool {
	if qp.mem == nil {
		return len(data) == 0
	}
	var need ibv.AccessFlags
	if scatter {
		need = ibv.AccessLocalWrite
	}
	for _, e := range sgl {
		if len(data) == 0 {
			break
		}
		if off >= e.Length {
			off -= e.Length
			continue
		}
		n := min(e.Length-off, uint32(len(data)))
		b, ref, err := qp.mem.Local(qp.pd, e.LKey, e.Addr+uint64(off), n, need)
		if err != nil {
			return false
		}
		if scatter {
			copy(b, data[:n])
		} else {
			copy(data[:n], b)
		}
		ref.Release()
		data = data[n:]
		off = 0
	}
	return len(data) == 0
}

// sglSlice returns the bytes [off, off+n) of the memory an SGL describes
// when they lie in one element, pinned by ref (for a zero-copy send), or by
// held, a pin the caller already holds, when the Memory lets it cover them
// (LocalRepinner; ref is nil then); ok is false otherwise, or when the
// element's key does not resolve.
func (qp *QP) sglSlice(sgl []SGE, off, n uint32, held Ref) (b []byte, ref Ref, ok bool) {
	if qp.mem == nil {
		return nil, nil, false
	}
	for _, e := range sgl {
		if off >= e.Length {
			off -= e.Length
			continue
		}
		if e.Length-off < n {
			return nil, nil, false
		}
		if held != nil && qp.repin != nil {
			if b, ok := qp.repin.LocalAgain(held, qp.pd, e.LKey, e.Addr+uint64(off), n, 0); ok {
				return b, nil, true
			}
		}
		b, ref, err := qp.mem.Local(qp.pd, e.LKey, e.Addr+uint64(off), n, 0)
		if err != nil {
			return nil, nil, false
		}
		return b, ref, true
	}
	return nil, nil, false
}

// rewind restarts transmission at the oldest unacknowledged PSN (go-back-N):
// a partially acknowledged SEND or WRITE resumes at its first unacknowledged
// packet, a partially answered READ re-requests only the missing bytes.
func (qp *QP) rewind() {
	qp.rto.sampling = false // Karn: what follows is sent again
	if qp.ssr.on {
		// Everything from here is sent again, held or not: the marks
		// would count PSNs behind the next one as out of the window.
		qp.forgetSACKs()
	}
	qp.req.idx = qp.sq.head
	qp.req.off = 0
	qp.req.noAck = 0
	qp.req.ackNext = true
	qp.req.headCopies = 0
	if qp.sq.len() == 0 {
		return
	}
	s := qp.sq.at(qp.sq.head)
	if !s.started {
		return
	}
	qp.req.psn = s.firstPSN.Add(s.readDone / qp.mtu)
	if op := s.wqe.Opcode; !isReadOrAtomic(op) {
		d := qp.comp.psn.Sub(s.firstPSN)
		if d > 0 && s.length > 0 {
			d = min(d, int32(qp.packets(s)-1))
			qp.req.off = uint32(d) * qp.mtu
			qp.req.psn = s.firstPSN.Add(uint32(d))
		}
	}
}

// retireFailed completes a failed WQE that has reached the head of the send
// queue with its status, then moves the QP to ERR.
func (qp *QP) retireFailed() {
	if qp.state == ibv.QPStateErr || qp.sq.len() == 0 {
		return
	}
	if s := qp.sq.at(qp.sq.head); s.failed {
		qp.fatal(s.status)
	}
}

// appendRequest appends the request packet whose headers are in qp.hdr,
// with payload bytes of s gathered from offset qp.req.off and the pad the
// payload needs, addressed to dest. It reports false, appending nothing,
// if the local memory could not be read. RC, UC and UD requests share it.
func (qp *QP) appendRequest(s *sendSlot, payload uint32, dest any, out *Output) bool {
	h := &qp.hdr
	pad := wire.PadCount(int(payload))
	h.BTH.PadCount = pad
	if out.zeroCopy && payload > 0 && s.wqe.Flags&ibv.SendInline == 0 {
		if data, ref, ok := qp.sglSlice(s.wqe.SGL, qp.req.off, payload, out.lastRef()); ok {
			p := out.appendZeroCopy(h, data)
			if ref != nil {
				out.hold(ref)
			}
			p.QPN, p.Dest = qp.qpn, dest
			qp.counters.SentPackets++
			return true
		}
		// Spread over elements, or refused: the copy below gathers
		// it, or fails the request as it should.
	}
	p := out.alloc(h.Len() + int(payload) + int(pad))
	b := wire.AppendHeaders(p.Bytes, h)
	if payload > 0 {
		var dst []byte
		b, dst = grow(b, int(payload))
		if !qp.gather(s, qp.req.off, dst) {
			out.n-- // drop the half-built packet
			return false
		}
	}
	p.Bytes = wire.AppendPad(b, pad)
	p.QPN, p.Dest = qp.qpn, dest
	qp.counters.SentPackets++
	return true
}
