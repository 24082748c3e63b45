package transport

import (
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// Selective repeat between goroce peers (SetSelectiveRepeat), after IRN
// (Mittal et al., SIGCOMM 2018): the responder keeps the requests that
// arrive ahead of the expected PSN instead of dropping them, and answers
// with a SACK (wire.RCSACK) naming the first PSN missing and the PSNs it
// holds beyond; the requester resends only the packets the SACKs show
// lost. Without the agreement nothing here runs: the wire is IBTA
// go-back-N, as rxe and NICs expect.
//
// Placement: a held request is kept whole, headers and payload, and run
// through the responder's ordinary checks and execution when the PSNs
// before it have arrived (replayHeld). That costs one copy of an
// out-of-order packet, but keeps every ordering rule of the in-sequence
// path for free: a SEND takes its receive WQE in message order (IRN
// needs extra headers for that), a WRITE MIDDLE finds its VA in the
// FIRST before it (no RETH on every packet), a READ or atomic executes
// once and in order (atomics are not idempotent), an RNR or an error
// stops where it would have. Only packets already in sequence are placed
// at once, which on a clean path is all of them.
//
// Loss detection (requester): every transmission gets a stamp from a
// counter; a packet not yet held whose latest stamp is older than the
// first stamp of a packet a SACK shows held was lost (sent before
// something that got through, on a path that does not reorder much), and
// is resent with a new stamp, so that a lost retransmission is found the
// same way once something sent after it gets through (RACK, RFC 8985, in
// transmission order rather than time). The first stamp, because which
// copy of a held packet arrived is unknown. A retransmission that is
// reordered rather than lost is only a duplicate, which the responder
// absorbs.
//
// Retry budget: SACK-driven resends spend no retry_cnt, since something
// got through. The IBTA retransmit timer still spends it, and a QP whose
// peer is gone fails after retry_cnt+1 timeouts, as before. Its first
// expiry since progress probes, as the adaptive timeout (rto.go) does
// between (sendProbes); a second one in a row forgets the SACKs and goes
// back N, in case the peer lost what it held.

// maxSRWindow bounds the PSNs selective repeat tracks, both ways: the
// reorder buffer and the requester's span of PSNs with selective repeat on.
const maxSRWindow = 1024

// srSpanFactor is how far, in windows, the requester's newest PSN may run
// ahead of its oldest unacknowledged one with selective repeat on. The
// window bounds the PSNs in flight that the responder is not known to
// hold (RFC 6675's pipe, counted in PSNs); the span lets new packets keep
// flowing past a hole while its resend travels. Under go-back-N a hole
// stops the window's advance until it is repaired, and a resend queues
// behind everything sent before it (on a veth path, in the receiver's
// socket buffer): at 1 % random loss a 256-PSN window stalled the sender
// at every few losses.
const srSpanFactor = 4

// srSlotHeadroom is the room for headers, pad and ICRC next to the MTU in
// a reorder buffer slot: BTH, RETH and ImmDt or AtomicETH at most.
const srSlotHeadroom = 64

// srWindow returns the number of PSNs selective repeat tracks for a
// window of w: srSpanFactor windows rounded up to a power of two, so that
// PSN modulo it stays unique across the 24-bit wrap, at most maxSRWindow.
// Both ends size their rings with it: a responder whose window is set
// smaller than its peer's drops what lies beyond its buffer, and the
// requester resends it.
func srWindow(w uint32) uint32 {
	n := uint32(32)
	for n < w*srSpanFactor && n < maxSRWindow {
		n <<= 1
	}
	return n
}

// sentSlot is the requester's record of one PSN under selective repeat.
type sentSlot struct {
	psn    psn.PSN
	first  uint32 // transmission counter at the first transmission
	stamp  uint32 // transmission counter at the latest (re)transmission
	sacked bool   // a SACK showed the responder holds it
}

// srRequester is the requester's selective repeat state.
type srRequester struct {
	on    bool
	slots []sentSlot // srWindow entries, by PSN modulo their number
	tx    uint32     // transmission counter
	// lostBelow: resend, before anything new, every unsacked packet
	// whose stamp is below it (set by a SACK, 0 for none).
	lostBelow uint32
	// probe: the adaptive timeout expired; send the oldest
	// unacknowledged packet and the newest, asking for an ACK.
	probe bool
	// sacked counts the slots marked sacked from sackedFrom on
	// (outstanding); the completer's progress is subtracted lazily.
	sacked     uint32
	sackedFrom psn.PSN
}

// srResponder is the responder's reorder buffer.
type srResponder struct {
	buf   []byte    // the slots' memory, slotSize bytes each
	psns  []psn.PSN // PSN held by each slot
	held  []bool
	lens  []uint16
	count int
	size  int // bytes per slot
	// deferAck: replaying; ACKs requested by the packets replayed are
	// owed once, at the end (ackDue).
	deferAck, ackDue bool
	pkt              wire.Packet // replay scratch
	bitmap           []byte      // SACK scratch
	// passed: no request held is before this PSN (dropStaleHeld).
	passed psn.PSN
}

// SetSelectiveRepeat turns selective repeat on or off. Both peers must
// have agreed (the connection manager's negotiation or an out-of-band
// exchange): a peer without it would drop the SACKs as unknown opcodes
// and never hold an out-of-order request. It also turns on the adaptive
// retransmission timeout (rto.go). With it on, the requester's window is
// at most 1,024 PSNs. Set it before RTR; it resets the tracking.
func (qp *QP) SetSelectiveRepeat(on bool) {
	qp.ssr.on = on
	qp.ssr.slots = nil
	qp.rsr = srResponder{}
	qp.rto = rtoState{}
	if on && qp.window > maxSRWindow {
		qp.window = maxSRWindow
		qp.req.win = min(qp.req.win, qp.window)
	}
}

// SelectiveRepeat reports whether selective repeat is on.
func (qp *QP) SelectiveRepeat() bool { return qp.ssr.on }

// resetSR forgets selective repeat progress (RESET, new PSNs), keeping
// the memory.
func (qp *QP) resetSR() {
	for i := range qp.ssr.slots {
		qp.ssr.slots[i] = sentSlot{}
	}
	qp.ssr.lostBelow, qp.ssr.probe, qp.ssr.sacked = 0, false, 0
	qp.dropHeld()
	qp.rto.reset()
}

// sentSlotFor returns the requester's slot of PSN p, allocating the ring
// on first use.
func (qp *QP) sentSlotFor(p psn.PSN) *sentSlot {
	if qp.ssr.slots == nil {
		qp.ssr.slots = make([]sentSlot, srWindow(qp.window))
	}
	return &qp.ssr.slots[uint32(p)&uint32(len(qp.ssr.slots)-1)]
}

// noteSent stamps a transmission of PSN p: a new PSN starts unsacked.
func (qp *QP) noteSent(p psn.PSN) {
	s := qp.sentSlotFor(p)
	qp.ssr.tx++
	if s.psn != p {
		*s = sentSlot{psn: p, first: qp.ssr.tx}
	}
	s.stamp = qp.ssr.tx
}

// forgetSACKs clears every SACK: the IBTA timeout goes back N.
func (qp *QP) forgetSACKs() {
	for i := range qp.ssr.slots {
		qp.ssr.slots[i].sacked = false
	}
	qp.ssr.lostBelow, qp.ssr.probe, qp.ssr.sacked = 0, false, 0
}

// srBlocked reports whether selective repeat's window holds the requester
// back: the span from the oldest unacknowledged PSN to the next has
// reached the tracking ring, or the PSNs in it that the responder is not
// known to hold have reached the send window.
func (qp *QP) srBlocked() bool {
	span := uint32(qp.req.psn.Sub(qp.comp.psn))
	if span >= srWindow(qp.window) {
		return true
	}
	// The marks can count PSNs at or past the next one (a SACK of
	// copies sent before a rewind): never less than nothing in flight.
	return span-min(qp.sackedOutstanding(), span) >= qp.sendWindow()
}

// sackedOutstanding returns how many PSNs from the oldest unacknowledged
// one on a SACK showed held. It first forgets the marks the completer has
// passed since it last ran, so the count costs O(1) per PSN acknowledged.
// The pump runs it before sending anything, so no new PSN reuses a slot
// still counted.
func (qp *QP) sackedOutstanding() uint32 {
	r := &qp.ssr
	n := uint32(len(r.slots))
	if n == 0 {
		return 0
	}
	if d := qp.comp.psn.Sub(r.sackedFrom); d != 0 {
		if d < 0 || uint32(d) > n {
			r.sacked = 0 // a reset or a jump: count again
			for i := range r.slots {
				sl := &r.slots[i]
				if sl.sacked && sl.psn.LessThan(qp.comp.psn) {
					sl.sacked = false
				}
				if sl.sacked {
					r.sacked++
				}
			}
		} else {
			for p := r.sackedFrom; p != qp.comp.psn; p = p.Next() {
				if sl := &r.slots[uint32(p)&(n-1)]; sl.psn == p && sl.sacked {
					sl.sacked = false
					r.sacked--
				}
			}
		}
		r.sackedFrom = qp.comp.psn
	}
	return r.sacked
}

// handleSACK handles a SACK: the PSNs before the one it names are
// acknowledged, those its bitmap marks are held; a packet sent before a
// held one and not held itself is lost and resent (pump, resendLost).
func (qp *QP) handleSACK(p *wire.Packet, P psn.PSN, now time.Time) {
	if !qp.ssr.on || p.AETH.Syndrome().Kind() != wire.AETHAck {
		qp.counters.StaleResponses++
		return
	}
	qp.counters.SACKReceived++
	if P.LessThan(qp.comp.psn) {
		qp.counters.StaleResponses++ // overtaken by a later acknowledgement
		return
	}
	qp.ackThrough(P.Add(psn.Mask), now)
	if qp.state == ibv.QPStateErr || qp.req.rnrWait {
		return
	}
	bm := wire.SACKBitmap(p.Payload)
	var newest uint32
	for i := range min(bm.Bits(), int(qp.req.sentHigh.Sub(P))-1) {
		if !bm.Held(i) {
			continue
		}
		q := P.Add(uint32(i) + 1)
		s := qp.sentSlotFor(q)
		if s.psn != q {
			continue // not sent as such: beyond the ring, or not a packet
		}
		if !s.sacked {
			s.sacked = true
			qp.ssr.sacked++
		}
		// Which copy arrived is unknown: the first was sent at
		// s.first at the latest, so everything sent before that and
		// still missing was lost (a later copy of s, a probe, must not
		// condemn what was sent between).
		newest = max(newest, s.first)
	}
	qp.ssr.lostBelow = max(qp.ssr.lostBelow, newest)
}

// resendLost sends again, oldest first, the packets from the oldest
// unacknowledged PSN that no SACK showed held and whose stamp is below
// lostBelow; each asks for an ACK. It returns false if the QP failed.
func (qp *QP) resendLost(now time.Time, out *Output) bool {
	below := qp.ssr.lostBelow
	qp.ssr.lostBelow = 0
	ok := true
	qp.eachUnacked(func(idx uint32, s *sendSlot, p psn.PSN) bool {
		sl := qp.sentSlotFor(p)
		if sl.psn == p && sl.first >= below {
			// First sent after the evidence, and so is every
			// later PSN: nothing beyond can be known lost.
			return false
		}
		if sl.psn != p || sl.sacked || sl.stamp >= below {
			// Held, sent after the evidence, or not sent as such (a
			// READ resuming at a response PSN, a PSN a long READ
			// pushed out of the ring): the probes and the IBTA
			// timer's go-back-N take care of the last.
			return true
		}
		qp.counters.SelectiveResends++
		ok = qp.resendOne(idx, s, p, now, out)
		return ok
	})
	return ok
}

// eachUnacked calls f for every packet sent from the oldest unacknowledged
// PSN on, in PSN order: each PSN of a SEND or WRITE, the request PSN of a
// READ (resuming at its first missing response) or atomic; f returns
// false to stop.
func (qp *QP) eachUnacked(f func(idx uint32, s *sendSlot, p psn.PSN) bool) {
	for idx := qp.sq.head; idx != qp.sq.tail; idx++ {
		s := qp.sq.at(idx)
		if !s.started || s.failed || isLocal(s.wqe.Opcode) {
			if isLocal(s.wqe.Opcode) && s.started {
				continue
			}
			return
		}
		if !s.firstPSN.LessThan(qp.req.sentHigh) {
			return
		}
		if isReadOrAtomic(s.wqe.Opcode) || s.wqe.Opcode == ibv.WRFlush || s.wqe.Opcode == ibv.WRAtomicWrite {
			if p := s.firstPSN.Add(s.readDone / qp.mtu); !p.LessThan(qp.comp.psn) && !f(idx, s, p) {
				return
			}
			continue
		}
		for p := s.firstPSN; p.LessThanEq(s.lastPSN) && p.LessThan(qp.req.sentHigh); p = p.Next() {
			if !p.LessThan(qp.comp.psn) && !f(idx, s, p) {
				return
			}
		}
	}
}

// resendOne transmits packet p of WQE idx again, asking for an ACK, and
// puts the requester back where it was. Karn's rule: the RTT sample in
// flight, if any, is dropped. It returns false if the QP failed.
func (qp *QP) resendOne(idx uint32, s *sendSlot, p psn.PSN, now time.Time, out *Output) bool {
	at := qp.req
	qp.rto.sampling = false
	qp.req.idx, qp.req.psn, qp.req.off, qp.req.ackNext, qp.req.headCopies = idx, p, 0, true, 0
	if !isReadOrAtomic(s.wqe.Opcode) && s.wqe.Opcode != ibv.WRFlush && s.wqe.Opcode != ibv.WRAtomicWrite {
		qp.req.off = uint32(p.Sub(s.firstPSN)) * qp.mtu
	}
	if !qp.transmit(s, now, out) {
		return false
	}
	qp.req.idx, qp.req.psn, qp.req.off, qp.req.noAck = at.idx, at.psn, at.off, at.noAck
	qp.req.ackNext, qp.req.headCopies = at.ackNext, at.headCopies
	return true
}

// sendProbes answers an expiry of the adaptive timeout: the oldest
// unacknowledged packet and the newest SEND or WRITE packet sent go out
// again, asking for an ACK. If only answers were late, this costs two
// duplicates; if the oldest was lost, it fills the gap; if the tail was
// lost, the SACK for the newest names every packet missing before it.
// It returns false if the QP failed.
func (qp *QP) sendProbes(now time.Time, out *Output) bool {
	qp.ssr.probe = false
	var (
		first, last         psn.PSN
		firstIdx, lastIdx   uint32
		firstSlot, lastSlot *sendSlot
		n                   int
	)
	qp.eachUnacked(func(idx uint32, s *sendSlot, p psn.PSN) bool {
		if n == 0 {
			first, firstIdx, firstSlot = p, idx, s
		}
		if op := s.wqe.Opcode; isSend(op) || isWrite(op) {
			last, lastIdx, lastSlot = p, idx, s
		}
		n++
		return true
	})
	if n == 0 {
		return true
	}
	qp.counters.SelectiveResends++
	if !qp.resendOne(firstIdx, firstSlot, first, now, out) {
		return false
	}
	if lastSlot == nil || last == first || qp.sentSlotFor(last).sacked {
		return true
	}
	qp.counters.SelectiveResends++
	return qp.resendOne(lastIdx, lastSlot, last, now, out)
}

// holdOutOfOrder keeps a request d PSNs ahead of the expected one for
// replay and answers with a SACK when the packet opens a new gap or asks
// for an ACK. A packet beyond the buffer, or too long for a slot, is
// dropped as go-back-N drops it; the requester sends it again.
func (qp *QP) holdOutOfOrder(p *wire.Packet, P psn.PSN, d int32, out *Output) {
	qp.counters.OutOfSeqRequest++
	r := &qp.rsr
	n := int32(srWindow(qp.window))
	if r.buf == nil || r.size != int(qp.mtu)+srSlotHeadroom {
		r.size = int(qp.mtu) + srSlotHeadroom
		r.buf = make([]byte, int(n)*r.size)
		r.psns, r.held, r.lens = make([]psn.PSN, n), make([]bool, n), make([]uint16, n)
		r.count = 0
		r.bitmap = make([]byte, wire.SACKLen(int(n)))
	}
	if d >= n {
		qp.counters.DroppedPackets++
		return
	}
	i := int(uint32(P) & uint32(n-1))
	if !r.held[i] || r.psns[i] != P {
		h := p.Headers()
		slot := r.buf[i*r.size : i*r.size : (i+1)*r.size]
		need := h.Len() + len(p.Payload) + len(p.Pad) + wire.ICRCLen
		if need > r.size {
			qp.counters.DroppedPackets++
			return
		}
		b := wire.AppendHeaders(slot, &h)
		b = append(b, p.Payload...)
		b = append(b, p.Pad...)
		b = append(b, 0, 0, 0, 0) // no ICRC: checked on arrival
		if r.count == 0 {
			r.passed = qp.resp.epsn // nothing held before it
		}
		if !r.held[i] {
			r.count++
		}
		r.held[i], r.psns[i], r.lens[i] = true, P, uint16(len(b))
		qp.counters.HeldRequests++
	}
	prev := int(uint32(P.Add(psn.Mask)) & uint32(n-1))
	opensGap := !r.held[prev] || r.psns[prev] != P.Add(psn.Mask)
	if opensGap || p.BTH.AckReq() {
		qp.sendSACK(out)
	}
}

// replayHeld runs the held requests that are now in sequence through the
// responder, as if they had just arrived, until a gap or one that does
// not advance the expected PSN (an RNR NAK, an error: the requester goes
// back for those). The ACKs they ask for become one, at the end: a SACK
// if a gap remains.
func (qp *QP) replayHeld(out *Output) {
	r := &qp.rsr
	n := uint32(len(r.held))
	replayed := false
	for r.count > 0 && qp.state != ibv.QPStateErr && !qp.resp.failing {
		P := qp.resp.epsn
		i := uint32(P) & (n - 1)
		if !r.held[i] || r.psns[i] != P {
			break
		}
		r.held[i] = false
		r.count--
		if r.pkt.Parse(r.buf[int(i)*r.size:int(i)*r.size+int(r.lens[i])], 0) != nil {
			break // cannot happen: built by holdOutOfOrder
		}
		r.deferAck, replayed = true, true
		qp.respond(&r.pkt, r.pkt.Info(), out)
		r.deferAck = false
		if qp.resp.epsn == P {
			if qp.state != ibv.QPStateErr && !qp.resp.failing {
				// Refused for now (RNR NAK, full reply queue): keep
				// it, as the SACKs said; a copy that arrives in
				// sequence takes its place.
				r.held[i] = true
				r.count++
			}
			break
		}
	}
	if r.count > 0 {
		qp.dropStaleHeld()
	}
	if qp.state == ibv.QPStateErr || qp.resp.failing {
		qp.dropHeld()
		return
	}
	// A replay acknowledges what it executed at once, whether the
	// packets asked or not: the requester's window has been waiting
	// for the gap.
	switch {
	case r.count > 0 && (replayed || r.ackDue):
		qp.sendSACK(out)
	case replayed || r.ackDue:
		qp.sendAck(wire.SyndromeAckUnlimited, qp.resp.epsn.Add(psn.Mask), out)
	}
	r.ackDue = false
}

// dropStaleHeld forgets held requests the expected PSN has passed
// without replaying them (a READ's response PSNs never carry requests: a
// peer's error or a forgery).
//
// It looks only at the slots of the PSNs passed since it last ran (every
// held PSN is at or after r.passed), so it costs O(1) per PSN rather than
// a walk of the whole buffer per packet, which at a window of 1,024 took
// a quarter of a receiver's CPU at 1 % loss.
func (qp *QP) dropStaleHeld() {
	r := &qp.rsr
	epsn := qp.resp.epsn
	n := uint32(len(r.held))
	if d := epsn.Sub(r.passed); d < 0 || uint32(d) >= n {
		for i := range r.held {
			qp.dropHeldIfBefore(uint32(i), epsn)
		}
	} else {
		for p := r.passed; p != epsn; p = p.Next() {
			qp.dropHeldIfBefore(uint32(p)&(n-1), epsn)
		}
	}
	r.passed = epsn
}

// dropHeldIfBefore forgets the request held in slot i if its PSN is before
// epsn.
func (qp *QP) dropHeldIfBefore(i uint32, epsn psn.PSN) {
	r := &qp.rsr
	if r.held[i] && r.psns[i].LessThan(epsn) {
		r.held[i] = false
		r.count--
	}
}

// dropHeld forgets every held request.
func (qp *QP) dropHeld() {
	r := &qp.rsr
	clear(r.held)
	r.count = 0
	r.deferAck, r.ackDue = false, false
}

// sendSACK appends a SACK of the expected PSN and the held ones after
// it. Behind queued READ replies it is reduced to the cumulative ACK
// that waits for them: responses leave in PSN order.
func (qp *QP) sendSACK(out *Output) {
	if qp.repliesPending() {
		qp.sendAck(wire.SyndromeAckUnlimited, qp.resp.epsn.Add(psn.Mask), out)
		return
	}
	r := &qp.rsr
	bm := wire.SACKBitmap(r.bitmap)
	clear(bm)
	// Held PSNs cluster just past the expected one: walk from there and
	// stop at the last, rather than over the whole buffer.
	n := uint32(len(r.held))
	for d, seen := uint32(1), 0; d < n && seen < r.count; d++ {
		P := qp.resp.epsn.Add(d)
		if i := uint32(P) & (n - 1); r.held[i] && r.psns[i] == P {
			bm.Set(int(d) - 1)
			seen++
		}
	}
	h := &qp.hdr
	*h = wire.Headers{}
	h.BTH = wire.BTHFields{Opcode: wire.RCSACK, PKey: wire.DefaultPKey, DestQP: wire.QPN(qp.destQPN), PSN: qp.resp.epsn}
	h.AETH = wire.AETHFields{Syndrome: wire.SyndromeAckUnlimited, MSN: qp.resp.msn}
	pkt := out.alloc(h.Len() + len(bm))
	pkt.Bytes = append(wire.AppendHeaders(pkt.Bytes, h), bm...)
	pkt.QPN, pkt.Dest = qp.qpn, qp.dest
	qp.counters.SentPackets++
	qp.counters.SACKSent++
}
