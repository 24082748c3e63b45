package transport

// What the responder sends back: READ responses in bursts, atomic
// acknowledgements, ACKs and NAKs.

import (
	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// responsePackets returns the number of READ response packets for l bytes.
func (qp *QP) responsePackets(l uint32) uint32 {
	if l == 0 {
		return 1
	}
	return (l + qp.mtu - 1) / qp.mtu
}

// reply is a queued response: a READ reply, sent in bursts of readBurst
// packets so that a READ of up to 2 GiB never needs more than a burst of
// Output (Deadline asks for an immediate OnTimer to continue), or the
// ATOMIC_ACKNOWLEDGE of an atomic.
type reply struct {
	atomic bool
	first  bool    // the next packet is the reply's first
	psn    psn.PSN // of the next packet
	va     uint64
	rkey   uint32
	resid  uint32
	orig   uint64 // original value of an atomic
}

// readBurst is the most READ response packets a call appends.
const readBurst = 64

// startRead queues the reply to a READ of [va, va+l) at PSN first, after
// checking the whole range so that an access error answers the request
// itself. It returns the access error, having queued nothing, if any.
func (qp *QP) startRead(first psn.PSN, va uint64, rkey uint32, l uint32, out *Output) error {
	if l > 0 {
		if err := qp.checkRemote(rkey, va, l, ibv.AccessRemoteRead); err != nil {
			return err
		}
	}
	qp.queueReply(reply{first: true, psn: first, va: va, rkey: rkey, resid: l}, out)
	return nil
}

// queueReply appends r to the reply queue and sends what a call may.
func (qp *QP) queueReply(r reply, out *Output) {
	rs := &qp.resp
	if rs.replyLen == len(rs.replies) {
		return // checked by respond; unreachable
	}
	rs.replies[(rs.replyHead+rs.replyLen)%len(rs.replies)] = r
	rs.replyLen++
	qp.sendReplies(out)
}

// dropReplies forgets every queued response.
func (qp *QP) dropReplies() {
	qp.resp.replyLen = 0
	qp.resp.ackOwed = false
	qp.resp.failing = false
}

// repliesPending reports responses waiting to be sent.
func (qp *QP) repliesPending() bool { return qp.resp.replyLen > 0 || qp.resp.ackOwed }

// sendReplies appends up to readBurst packets of queued responses, then the
// owed acknowledgement once the queue is empty.
func (qp *QP) sendReplies(out *Output) {
	rs := &qp.resp
	for budget := readBurst; budget > 0 && rs.replyLen > 0; {
		r := &rs.replies[rs.replyHead]
		if r.atomic {
			qp.emitAtomicAck(r.psn, r.orig, out)
			budget--
		} else if !qp.continueRead(r, &budget, out) {
			return // failed: the QP is in ERR
		}
		if r.atomic || r.resid == 0 && !r.first {
			rs.replyHead = (rs.replyHead + 1) % len(rs.replies)
			rs.replyLen--
		}
	}
	if rs.replyLen == 0 && rs.ackOwed {
		rs.ackOwed = false
		qp.emitAck(rs.ackSyn, rs.ackPSN, out)
		if rs.failing {
			qp.enterError()
		}
	}
}

// continueRead appends packets of READ reply r within *budget, copying
// from registered memory into the packets. The copy is what makes a packet
// self-consistent: the target's CPU may be writing the memory a READ reads
// (a seqlock's record, a counter), and a payload left in memory until the
// send (as requests' payloads are, Output.SetZeroCopy) could change
// between its ICRC and the kernel's copy, and be dropped as corrupt at the
// requester, again on every retry. The memory is looked up again for every
// burst: if it was deregistered meanwhile, the READ fails with a remote
// access error. It reports false on such a failure.
func (qp *QP) continueRead(r *reply, budget *int, out *Output) bool {
	var data []byte
	var ref Ref
	if n := min(r.resid, uint32(*budget)*qp.mtu); n > 0 {
		var err error
		data, ref, err = qp.mem.Remote(qp.pd, r.rkey, r.va, n, ibv.AccessRemoteRead)
		if err != nil {
			// The earliest response not sent fails: nothing queued
			// behind it can go out any more.
			why := Refusal{Reason: accessReason(err), Opcode: wire.RCRDMAReadRequest, PSN: r.psn,
				RKey: r.rkey, VA: r.va, Length: r.resid, Need: ibv.AccessRemoteRead, QPAccess: qp.access}
			qp.failNow(r.psn, wire.NAKRemoteAccessError, ibv.WCRemAccessErr, why, out)
			return false
		}
	}
	for *budget > 0 && (r.first || r.resid > 0) {
		chunk := data[:min(uint32(len(data)), qp.mtu)]
		data = data[len(chunk):]
		last := r.resid <= qp.mtu
		op := wire.RCRDMAReadResponseMiddle
		switch {
		case r.first && last:
			op = wire.RCRDMAReadResponseOnly
		case r.first:
			op = wire.RCRDMAReadResponseFirst
		case last:
			op = wire.RCRDMAReadResponseLast
		}
		h := &qp.hdr
		*h = wire.Headers{}
		h.BTH = wire.BTHFields{
			Opcode:   op,
			PadCount: wire.PadCount(len(chunk)),
			PKey:     wire.DefaultPKey,
			DestQP:   wire.QPN(qp.destQPN),
			PSN:      r.psn,
		}
		h.AETH = wire.AETHFields{Syndrome: wire.SyndromeAckUnlimited, MSN: qp.resp.msn}
		pkt := out.alloc(h.Len() + len(chunk) + int(h.BTH.PadCount))
		b := wire.AppendHeaders(pkt.Bytes, h)
		b = append(b, chunk...)
		pkt.Bytes = wire.AppendPad(b, h.BTH.PadCount)
		pkt.QPN, pkt.Dest = qp.qpn, qp.dest
		qp.counters.SentPackets++

		r.first = false
		r.psn = r.psn.Next()
		r.va += uint64(len(chunk))
		r.resid -= uint32(len(chunk))
		*budget--
	}
	if ref != nil {
		ref.Release()
	}
	return true
}

// sendRNRNak refuses a request for lack of a receive WQE; the requester retries
// after the QP's min_rnr_timer, and nothing advances meanwhile.
func (qp *QP) sendRNRNak(P psn.PSN, out *Output) {
	qp.counters.RNRNakSent++
	qp.sendAck(wire.RNRNakSyndrome(qp.minRNRTimer), P, out)
}

// ackIfRequested acknowledges a request that asks for it; ACKs are
// coalesced otherwise, since the next ACK covers this PSN too.
func (qp *QP) ackIfRequested(p *wire.Packet, P psn.PSN, out *Output) {
	if p.BTH.AckReq() && qp.rsr.deferAck {
		qp.rsr.ackDue = true // one ACK after the replay (sr.go)
		return
	}
	if p.BTH.AckReq() {
		qp.sendAck(wire.SyndromeAckUnlimited, P, out)
	} else {
		qp.counters.AckDeferred++
	}
}

// sendAck acknowledges with the given syndrome, at once or, if responses
// are queued, after them.
func (qp *QP) sendAck(syn wire.AETHSyndrome, P psn.PSN, out *Output) {
	if qp.repliesPending() {
		qp.resp.ackOwed, qp.resp.ackSyn, qp.resp.ackPSN = true, syn, P
		return
	}
	qp.emitAck(syn, P, out)
}

// emitAck appends an ACKNOWLEDGE with the given syndrome and the current
// MSN.
func (qp *QP) emitAck(syn wire.AETHSyndrome, P psn.PSN, out *Output) {
	if syn.Kind() == wire.AETHAck {
		qp.coalesceAck(P, out)
	}
	h := &qp.hdr
	*h = wire.Headers{}
	h.BTH = wire.BTHFields{Opcode: wire.RCAcknowledge, PKey: wire.DefaultPKey, DestQP: wire.QPN(qp.destQPN), PSN: P}
	h.AETH = wire.AETHFields{Syndrome: syn, MSN: qp.resp.msn}
	qp.appendHeaderOnly(out)
}

// coalesceAck takes back the ACK that ends out if it is this QP's: the
// ACK about to follow acknowledges everything it did (ACKs are cumulative,
// and a requester completes every request up to an ACK's PSN, as hardware
// responders coalesce). So the requests of one QP that a receive batch
// holds (the Output waits for its end) get one ACK, not one each, and a
// message-rate test's requester reads one ACK per batch. A NAK, an RNR
// NAK, a response after the ACK, or an ACK of a later PSN than P keeps
// it.
func (qp *QP) coalesceAck(P psn.PSN, out *Output) {
	if out.n == 0 {
		return
	}
	last := &out.pkts[out.n-1]
	b := last.Bytes
	if last.QPN != qp.qpn || last.Payload != nil || len(b) != wire.BTHLen+wire.AETHLen ||
		wire.Opcode(b[0]) != wire.RCAcknowledge || wire.AETH(b[wire.BTHLen:]).Syndrome().Kind() != wire.AETHAck ||
		P.LessThan(wire.BTH(b).PSN()) {
		return
	}
	out.n--
	qp.counters.SentPackets--
	qp.counters.AckDeferred++
}

// sendAtomicAck queues an ATOMIC_ACKNOWLEDGE carrying the original value.
func (qp *QP) sendAtomicAck(P psn.PSN, orig uint64, out *Output) {
	qp.queueReply(reply{atomic: true, psn: P, orig: orig}, out)
}

// emitAtomicAck appends an ATOMIC_ACKNOWLEDGE.
func (qp *QP) emitAtomicAck(P psn.PSN, orig uint64, out *Output) {
	h := &qp.hdr
	*h = wire.Headers{}
	h.BTH = wire.BTHFields{Opcode: wire.RCAtomicAcknowledge, PKey: wire.DefaultPKey, DestQP: wire.QPN(qp.destQPN), PSN: P}
	h.AETH = wire.AETHFields{Syndrome: wire.SyndromeAckUnlimited, MSN: qp.resp.msn}
	h.AtomicAckETH.OrigData = orig
	qp.appendHeaderOnly(out)
}

func (qp *QP) appendHeaderOnly(out *Output) {
	pkt := out.alloc(qp.hdr.Len())
	pkt.Bytes = wire.AppendHeaders(pkt.Bytes, &qp.hdr)
	pkt.QPN, pkt.Dest = qp.qpn, qp.dest
	qp.counters.SentPackets++
}
