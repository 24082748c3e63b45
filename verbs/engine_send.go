package verbs

import (
	"net/netip"
	"slices"
	"sync"

	"github.com/goroce/goroce/internal/netio"
	"github.com/goroce/goroce/internal/seal"
	"github.com/goroce/goroce/internal/transport"
	"github.com/goroce/goroce/internal/wire"
)

// The send path of the software NIC. Outbound flow:
//
//  1. A QP gets its UDP source port on the way to RTR (connectLocked): one
//     per connection, derived as rxe does from the address vector's flow
//     label or else from both QP numbers, so all its packets follow one
//     path; a UD QP one from its own number.
//  2. Under the QP's xmu, PostSend (post.go), a received packet
//     (engine_recv.go) or a timer (engine_timers.go) runs the transport,
//     which builds packets into an Output lent by the engine's pool
//     (outputLocked). Payloads are not copied: they stay in the MR, pinned
//     until the send returns.
//  3. transmitLocked sends them in one SendBatch from the QP's port (runs
//     of equal-size packets become GSO datagrams), returns the Output,
//     mirrors a transport error into the QP's state and files its next
//     deadline. A post rings the doorbell (ringLocked, doorbell.go)
//     instead: when posts come faster than the kernel takes them, an RC
//     QP's packets are corked, with their Output, and the doorbell's
//     flusher sends them, many posts' in one SendBatch; a lone post
//     still sends inline.
//  4. Replies. On the receive goroutine the Output waits for the end of
//     the batch (EndBatch), and then the single-packet ACKNOWLEDGEs (ACK,
//     NAK, RNR NAK) that end each QP's output leave together from the
//     device's own port, 4791, as one GSO datagram per peer
//     (transmitRepliesToLocked, replyBatch; one batch per receive queue,
//     a QP's always its home queue's: engine_recv.go). With 1,000 active
//     QPs, an ACK from each QP's own socket cost one sendmmsg per WRITE,
//     and the requester's receive got no GRO. rxe matches a packet to its QP by
//     the destination port and the BTH's QPN and checks addresses, not
//     ports; a goroce receiver pins a connection's source port but takes
//     an ACKNOWLEDGE from the peer's RoCE port too (acceptSourcePort in
//     engine_recv.go). Nothing answers a response.
//  5. Ordering. Each QP's own packets go before the shared replies, and
//     only the replies after its last other response join them
//     (firstReply); ATOMIC_ACKNOWLEDGE keeps the QP's port (take). So on
//     one path a QP's responses stay in order. What replies give up is the
//     per-QP ECMP entropy: across paths an ACK that overtakes a READ
//     response is an implied NAK, and the requester re-reads (slower,
//     never wrong). DeviceConfig.PerQPReplyPort keeps every reply on its
//     QP's port; replies sent by a timer or a PostSend use it too.
//  6. Teardown. Deferring a batch's output stays invisible to the peer:
//     Modify and Destroy first send what the QP's Output holds and wait
//     for what it corked (transmitDeferredLocked), and Destroy and a move to ERR flush the
//     replies a batch took from it (flushReplies), so the ACK of a
//     receive the application already holds always leaves, and before
//     the DREQ of a disconnect.

// connectLocked points the QP at the device its AV names and takes the UDP
// source port of the connection (step 1).
func (qp *QP) connectLocked(op string, a *QPAttr) error {
	addr := a.AHAttr.DGID.Addr()
	if !addr.IsValid() {
		return newError(op, "ah_attr.dgid", ErrInvalidArgument, "not an IP address")
	}
	port := a.AHAttr.UDPPort
	if port == 0 {
		port = DefaultUDPPort
	}
	peer := netip.AddrPortFrom(addr.Unmap(), port)
	// rdma_get_udp_sport: from the AV's flow label when it has one (the
	// label rdma_cm derives from the connection's ports, so both ends
	// of an rdma_cm connection agree), else from both QP numbers.
	sport := netio.SourcePortForFlow(wireQPN(qp.qpn), wireQPN(a.DestQPNum))
	if fl := a.AHAttr.FlowLabel; fl != 0 {
		sport = netio.SourcePortForFlowLabel(fl)
	}
	qp.commEst = false // a new connection: its first packet raises EventCommEst
	qp.peerSrcPort = 0 // and pins its source port
	if qp.sender != nil && qp.peer == peer && qp.sender.Port() == sport {
		return nil
	}
	sender, err := qp.dev.eng.conn.Sender(sport)
	if err != nil {
		return errorf(op, "ah_attr", ErrNoMemory, "UDP source port: %v", err)
	}
	qp.disconnectLocked()
	qp.peer, qp.sender = peer, sender
	return nil
}

// openDatagramLocked takes the UDP source port of a UD QP: rxe gives each
// QP one derived from its number at creation, used for every destination.
func (qp *QP) openDatagramLocked(op string) error {
	sender, err := qp.dev.eng.conn.Sender(netio.SourcePortForQPN(wireQPN(qp.qpn)))
	if err != nil {
		return errorf(op, "qp_state", ErrNoMemory, "UDP source port: %v", err)
	}
	qp.sender = sender
	return nil
}

// disconnectLocked gives back the source port.
func (qp *QP) disconnectLocked() {
	if qp.sender != nil {
		qp.sender.Release()
		qp.sender = nil
	}
	qp.peer = netip.AddrPort{}
}

// wireQPN converts a QP number for the wire package.
func wireQPN(q uint32) wire.QPN { return wire.QPN(q & wire.QPNMask) }

// outputPool lends transport.Outputs to QPs from the moment the transport
// builds packets in one until they are sent (step 2). Held by every QP,
// path-MTU buffers cost 64 MiB for 1,000 QPs sending 64 KiB each, long
// evicted from the caches; lent, only as many exist as QPs hold packets at
// once, and the last returned is lent first (goroce-scale: +20 % at 1,000
// QPs, 1 QP unchanged). Its lock is taken under a QP's xmu, never the
// other way round.
type outputPool struct {
	mu   sync.Mutex
	free []*transport.Output // LIFO
}

// get lends an Output, a new one if none is free.
func (p *outputPool) get() *transport.Output {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		o := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		return o
	}
	o := new(transport.Output)
	// Request payloads go from the MR straight into the kernel's buffers
	// (one copy, not two): the MR stays pinned until the packet is sent
	// and put returns the Output. +10 % on 64 KiB WRITEs over loopback.
	// READ responses are always copied (transport's continueRead).
	o.SetZeroCopy(true)
	return o
}

// put takes an Output back, emptied (which unpins its payloads).
func (p *outputPool) put(o *transport.Output) {
	o.Reset()
	p.mu.Lock()
	p.free = append(p.free, o)
	p.mu.Unlock()
}

// outputLocked returns the Output the transport builds qp's packets in:
// the one qp holds (what the receive path left for the end of its batch,
// say), or one from the pool. The caller holds qp.xmu.
func (qp *QP) outputLocked() *transport.Output {
	if qp.out == nil {
		qp.out = qp.dev.eng.outputs.get()
	}
	return qp.out
}

// releaseOutputLocked discards what qp's Output holds and returns it to
// the pool. The caller holds qp.xmu.
func (qp *QP) releaseOutputLocked() {
	if qp.out != nil {
		qp.dev.eng.outputs.put(qp.out)
		qp.out = nil
	}
}

// transmitLocked sends the packets the transport produced, in one batch,
// and files the QP's next deadline (step 3). A packet the socket refuses
// counts as lost: the transport's retransmission recovers it. The caller
// holds xmu.
func (qp *QP) transmitLocked() { qp.transmitRepliesToLocked(nil) }

// appendMessage appends a Message for a packet to msgs, filled in place:
// a Message (80 bytes) built on the stack and appended was copied with
// 16-byte moves that stalled on the narrow stores that had just built it,
// once per packet (42% of transmitRepliesToLocked's time in a 64 KiB
// WRITE client).
func appendMessage(msgs []netio.Message, dst netip.AddrPort, pkt, payload []byte) []netio.Message {
	n := len(msgs)
	msgs = slices.Grow(msgs, 1)[:n+1]
	m := &msgs[n]
	m.Dst, m.Packet, m.Payload = dst, pkt, payload
	return msgs
}

// transmitRepliesToLocked is transmitLocked, except that the replies that
// end the QP's output go to replies, unless nil, instead of the QP's port
// (step 4: EndBatch).
func (qp *QP) transmitRepliesToLocked(replies *replyBatch) {
	if qp.storePin != nil {
		qp.releaseStorePinLocked() // stores counted before their ACKs leave
	}
	if qp.corked.Load() > 0 {
		// Behind the QP's corked packets (doorbell.go), replies too,
		// on the QP's port.
		qp.corkAllLocked()
		return
	}
	var pkts []transport.OutPacket
	if qp.out != nil { // nil: nothing was built since the last transmission
		pkts = qp.out.Packets()
	}
	if len(pkts) > 0 && qp.sender != nil {
		msgs, held := qp.msgs[:0], qp.replyMsgs[:0]
		from := len(pkts)
		if replies != nil {
			from = firstReply(pkts)
			// Held until the QP's own packets have left: a
			// Destroy's flush must not send its replies first.
			replies.mu.Lock()
		}
		for i := range pkts {
			dst := qp.peer
			if ah, ok := pkts[i].Dest.(*AH); ok {
				dst = ah.dst // a UD send: the WR's address handle
			}
			if i >= from && pkts[i].Payload == nil && isReply(pkts[i].Bytes) {
				if qp.sealer == nil {
					_ = replies.take(dst, pkts[i].Bytes)
				} else {
					held = append(held, netio.Message{Dst: dst, Packet: pkts[i].Bytes}) // sealed below
				}
				continue
			}
			msgs = appendMessage(msgs, dst, pkts[i].Bytes, pkts[i].Payload)
		}
		var sealed []byte
		if qp.sealer != nil {
			sealed = qp.sealLocked(msgs)
			// The replies take their counters after the packets
			// sent now, which they follow on the wire.
			for i := range held {
				replies.takeSealed(held[i].Dst, held[i].Packet, qp.sealer)
			}
		}
		if len(msgs) > 0 {
			_, _ = qp.sender.SendBatch(msgs)
		}
		qp.dev.eng.seals.put(sealed)
		if replies != nil {
			replies.mu.Unlock()
		}
		clear(msgs) // drop references to the packet buffers
		clear(held)
		qp.msgs, qp.replyMsgs = msgs[:0], held[:0]
	}
	qp.afterTransmitLocked()
}

// afterTransmitLocked returns the QP's Output, if it still holds one,
// mirrors a transport error into the QP's state and files its next
// deadline. The caller holds xmu.
func (qp *QP) afterTransmitLocked() {
	qp.releaseOutputLocked()
	qp.noteTransportErrorLocked()
	qp.checkSQDrainedLocked()
	qp.dev.eng.schedule(qp)
}

// transmitDeferredLocked sends what the receive path left in qp.out for
// the end of its batch, as a NIC would already have sent it, before a
// Modify or Destroy changes what the QP may send: among it may be the ACK
// of a SEND whose completion the application already holds, and without
// it the peer retries that SEND into a QP in ERR or a closed port until
// RETRY_EXC_ERR. The caller holds xmu.
func (qp *QP) transmitDeferredLocked() {
	if qp.out != nil && qp.out.Len() > 0 {
		qp.transmitLocked()
	}
	// And what PostSend corked (doorbell.go) has left before, too.
	qp.dev.eng.doorbell.drain(qp)
}

// replyBatch gathers the replies of a receive batch, to send them at its
// end in one SendBatch from the device's own port (step 4). The packets
// are copied (a sealed QP's sealed into the batch): a QP's Output is
// reused once its lock is released. mu
// guards the copies: the receive path takes and flushes them, and Destroy
// flushes them too (flushReplies). Lock order: QP.xmu, then mu.
type replyBatch struct {
	sender *netio.Sender
	mu     sync.Mutex
	buf    []byte // the copies, each followed by room for its ICRC
	msgs   []netio.Message
}

// replyLen is the length of a reply: BTH and AETH.
const replyLen = wire.BTHLen + wire.AETHLen

// isReply reports whether pkt is a reply: an ACKNOWLEDGE (ACK, NAK or RNR
// NAK).
func isReply(pkt []byte) bool {
	return len(pkt) == replyLen && wire.Opcode(pkt[0]) == wire.RCAcknowledge
}

// firstReply returns the index from which the replies of pkts may leave
// after the QP's other packets: past its last response that is not a reply
// (step 5). A NAK sent after the responses to the retransmission it asked
// for would make the requester retry again; requests do not order against
// responses.
func firstReply(pkts []transport.OutPacket) int {
	for i := len(pkts) - 1; i >= 0; i-- {
		b := pkts[i].Bytes
		if len(b) > 0 && !isReply(b) && wire.Opcode(b[0]).Info().IsResponse() {
			return i + 1
		}
	}
	return 0
}

// take copies pkt, for dst, into the batch if it is a reply, and reports
// whether it did. Not ATOMIC_ACKNOWLEDGE: a READ response the timer paces
// out before the flush would overtake it, an implied NAK that retries the
// atomic. The memory grows to the largest batch and is reused.
func (b *replyBatch) take(dst netip.AddrPort, pkt []byte) bool {
	if !isReply(pkt) { // an ACKNOWLEDGE: all headers, no Payload
		return false
	}
	n := len(b.buf)
	// If append moves buf, the packets taken so far keep the old array.
	b.buf = append(b.buf, pkt...)
	b.add(dst, n)
	return true
}

// takeSealed is take for a sealed QP's reply (isReply): it is sealed by s
// into the batch. Its counter is older than those of what the QP sends until the
// flush, at the end of the receive batch: far fewer packets than the
// peer's replay window (seal.WindowSize) can leave meanwhile.
func (b *replyBatch) takeSealed(dst netip.AddrPort, pkt []byte, s *seal.Sealer) {
	n := len(b.buf)
	b.buf = s.Append(b.buf, pkt, nil, 0)
	b.add(dst, n)
}

// add files the packet at buf[n:] for dst, with room for its ICRC after it.
func (b *replyBatch) add(dst netip.AddrPort, n int) {
	end := len(b.buf)
	b.buf = append(b.buf, 0, 0, 0, 0) // the ICRC's room
	b.msgs = append(b.msgs, netio.Message{Dst: dst, Packet: b.buf[n : end : end+wire.ICRCLen]})
}

// flush sends the replies taken since the last flush. A failed send is
// counted by netio and recovered by the requester's retransmission.
func (b *replyBatch) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.msgs) == 0 {
		return
	}
	_, _ = b.sender.SendBatch(b.msgs)
	clear(b.msgs) // the copies are reused; keep no stale pointers around
	b.msgs = b.msgs[:0]
	b.buf = b.buf[:0]
}
