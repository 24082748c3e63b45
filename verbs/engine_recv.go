package verbs

import (
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/netio"
	"github.com/goroce/goroce/internal/transport"
	"github.com/goroce/goroce/internal/wire"
)

// The receive path of the software NIC. Inbound flow:
//
//  1. A receive goroutine (netio.Conn.Serve), one per receive queue
//     (rxQueue, DeviceConfig.ReceiveQueues), or an application spinning
//     on CQ.Poll with DeviceConfig.BusyPoll, reads a batch with recvmmsg
//     and GRO, splits it, checks each ICRC, parses the packet and calls
//     HandlePacket: no channel hop, no allocation per packet.
//  2. HandlePacket looks the destination QP up without a lock, lets its
//     RecvFeeder post the receives queued elsewhere and, under its xmu,
//     checks the source against its peer and runs its responder
//     or completer inline, with a clock read once per rxNowEvery packets
//     (rxNow).
//  3. What that produced (ACKs, READ responses, requests the window now
//     allows) stays in the QP's Output until the end of the batch
//     (transmitAfterBatch).
//  4. A UD QP's datagram comes from any address and is answered at once
//     (handleDatagram).
//  5. EndBatch, after each batch and every 64 packets of a long one, sends
//     each pending QP's packets and then the batch's replies from the
//     device's port (engine_send.go, steps 4 and 5).
//  6. Then it raises the completion events (and a sink's notifications)
//     of the batch's completions, which pollers have seen since step 2:
//     the ACK of a message leaves before anyone is woken to answer it.

// rxQueue is one receive queue of the device (DeviceConfig.ReceiveQueues):
// a socket of the device's receive group, the goroutine serving it, and
// what that goroutine keeps between packets without a lock. Its fields
// are used only by whoever delivers the socket's packets, Serve's
// goroutine or a poller (CQ.Poll with BusyPoll, the timer goroutine),
// which netio.Conn lets only one at a time do (its receive lock): each
// queue is a single receiver, as the device's one socket was.
//
// The kernel steers each datagram to the queue of its destination QP
// (netio.OpenGroup: QP number mod the queue count), so a QP's packets
// normally all reach its home queue, in arrival order. Not always: a GSO
// datagram (or a GRO run) is steered whole by its first packet, and the
// coalesced replies a peer device sends from its port carry ACKs for
// several QPs in one datagram; two connections whose source ports collide
// share a flow too. So a QP's packets may be handled by any queue, one at
// a time under its xmu. What the queues share is locked or atomic: the QP
// table (sync.Map), each QP (xmu), SRQs and CQs (their mu), the reply
// batches (replyBatch.mu), the doorbell (its mu), the output pool, the
// timer heap, the engine's counters, QP 1's receiver (cm's queue is
// locked), a sealed QP's replay window (QP.openMu). A QP's replies always
// go into its home queue's batch, whichever queue took them
// (homeReplies), so they leave in the order they were taken.
type rxQueue struct {
	e     *engine
	conn  *netio.Conn
	index uint32 // in engine.rxqs: the home of QPs numbered index mod their count

	// offHome counts the packets handled here for a QP whose home is
	// another queue (coalesced by GSO or GRO behind another QP's packet).
	offHome atomic.Uint64

	// lastQP is the QP the last packet was for: the packets of a run
	// mostly go to one QP, and the QP table (a sync.Map) costs a hash
	// and an interface comparison per lookup. A QP is closed before its
	// number leaves the table, so an open lastQP still owns its number.
	lastQP *QP
	// pending lists the QPs whose output waits for the end of the
	// receive batch (transmitAfterBatch).
	pending []*QP
	// now and nowUses are rxNow's clock reading and how many packets
	// used it.
	now     time.Time
	nowUses int
	// unsealQP is the QP Sealed found for Unseal (seal.go).
	unsealQP *QP
	// replies gathers the replies of the QPs whose home this queue is,
	// sent from the device's port through the queue's socket
	// (replyBatch); nil with DeviceConfig.PerQPReplyPort. Destroy
	// flushes it too.
	replies *replyBatch
	// others lists the other queues' batches the current EndBatch took
	// replies into, to flush with its own.
	others []*replyBatch
	// notify lists the CQs whose consumers the batch's completions
	// notify once its replies are sent (CQ.push).
	notify []*CQ
}

// homeReplies returns the reply batch of qp's home queue, the one its
// number steers it to (nil with DeviceConfig.PerQPReplyPort).
func (e *engine) homeReplies(qp *QP) *replyBatch {
	return e.rxqs[qp.qpn%uint32(len(e.rxqs))].replies
}

// HandlePacket is the receive path (netio.Handler, step 2): the packet has
// parsed and its ICRC matched.
func (q *rxQueue) HandlePacket(p *wire.Packet, from netip.AddrPort, info *netio.RecvInfo) {
	e := q.e
	qpn := uint32(p.BTH.DestQP())
	qp := q.lastQP
	if qp == nil || qp.qpn != qpn || qp.closed.Load() {
		qp = e.dev.lookupQP(qpn)
		q.lastQP = qp
	}
	if qp == nil {
		if p.BTH.DestQP() == wire.GSIQPN {
			// QP 1 is not in the QP table: only a miss pays for it.
			if g := e.dev.gsi.Load(); g != nil {
				g.receive(p, from, info.Local.Addr())
				return
			}
		}
		e.unknownQP.Add(1)
		return
	}
	if n := uint32(len(e.rxqs)); n > 1 && qp.qpn%n != q.index {
		q.offHome.Add(1)
	}
	if qp.feeder != nil {
		// The feeder runs the application's code on this goroutine,
		// ordered after the sender's by the socket: tell the race
		// detector, as for the transport's calls below.
		raceSync()
		qp.feeder.FeedRecv()
	}
	if qp.qpType == QPTypeUD {
		e.handleDatagram(qp, p, from, info)
		return
	}
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	switch {
	case qp.tq == nil || qp.closed.Load():
		e.unknownQP.Add(1)
		return
	case !qp.peer.IsValid() || from.Addr().Unmap() != qp.peer.Addr():
		// An RC QP talks to one peer: the address its AV names.
		e.wrongSource.Add(1)
		return
	case from.Port() != qp.peerSrcPort && !qp.acceptSourcePort(from.Port(), p):
		e.wrongPort.Add(1)
		return
	}
	if p.BTH.Opcode() == wire.CNP {
		// From the QP's peer (checked above): the reaction point's.
		// It neither establishes the connection nor pins a port.
		qp.tq.HandlePacket(p, q.rxNow(), qp.outputLocked())
		return
	}
	if !qp.commEst {
		e.firstPacket(qp)
	}
	raceSync()
	now := q.rxNow()
	if info.ECN == netio.ECNCE {
		// The notification point: a queue on the way was congested.
		qp.tq.MarkCE(now, qp.outputLocked())
	}
	qp.rxBatch = q
	qp.tq.HandlePacket(p, now, qp.outputLocked())
	qp.rxBatch = nil
	raceSync()
	q.transmitAfterBatch(qp)
}

// acceptSourcePort decides on a packet from the peer's address whose UDP
// source port is not the one the connection is pinned to
// (DeviceConfig.AnySourcePort): the first such packet after RTR pins its
// port, since rxe and goroce send all of a QP's packets from one port (rxe:
// rdma_get_udp_sport of the flow label or the QP numbers, set with the
// AV); an ACKNOWLEDGE or a CNP may also come from the peer's RoCE port, the
// one a goroce peer sends coalesced replies from (engine_send.go, step 4),
// and pins nothing; a CNP pins nothing either, and before a port is pinned
// one is taken from any. Port 0 is no sender's. The caller holds xmu.
func (qp *QP) acceptSourcePort(port uint16, p *wire.Packet) bool {
	switch {
	case qp.dev.anySourcePort:
		return true
	case port == qp.peer.Port() && (p.BTH.Opcode() == wire.RCAcknowledge || p.BTH.Opcode() == wire.CNP):
		return true
	case p.BTH.Opcode() == wire.CNP:
		// Before the peer's QP sent anything else (a responder that
		// only acknowledged, from its RoCE port), its CNP is taken
		// from any port of the peer's address.
		return qp.peerSrcPort == 0 && port != 0
	case qp.peerSrcPort == 0 && port != 0:
		qp.peerSrcPort = port
		return true
	}
	return false
}

// rxNowEvery is how many packets of a batch share one reading of the clock.
const rxNowEvery = 16

// rxNow returns the time for the transport's handling of a received
// packet. Reading the clock costs more than a 64 KiB run's per-packet
// transport work; the packets of a batch arrived together, so one reading
// serves rxNowEvery of them (stale by microseconds, against timers of
// milliseconds). The queue's receiver only.
func (q *rxQueue) rxNow() time.Time {
	if q.nowUses == 0 {
		q.now = time.Now()
	}
	q.nowUses = (q.nowUses + 1) % rxNowEvery
	return q.now
}

// transmitAfterBatch leaves qp's output for EndBatch (step 3), so that
// what a batch causes (the ACKs of a GRO run, the requests a run of ACKs
// lets out) leaves in one send; a PostSend or timer in between sends it
// with its own, and so does another receive queue's EndBatch if the QP
// is pending there too (qp.out is the QP's, whichever queue filled it).
// The caller holds qp.xmu and is the queue's receiver.
func (q *rxQueue) transmitAfterBatch(qp *QP) {
	if n := len(q.pending); n > 0 && q.pending[n-1] == qp {
		return
	}
	for _, o := range q.pending {
		if o == qp {
			return
		}
	}
	q.pending = append(q.pending, qp)
}

// handleDatagram is the receive path of a UD QP (step 4): the transport
// writes the IP header the datagram came with into the GRH area of the
// receive buffer. QP 1 (GSI) has its own path (gsi.go).
func (e *engine) handleDatagram(qp *QP, p *wire.Packet, from netip.AddrPort, info *netio.RecvInfo) {
	nh := transport.NetHeader{
		Src:  from.Addr().Unmap(),
		Dst:  info.Local.Addr().Unmap(),
		IPID: info.IPID,
		// The socket reports neither the TTL nor the traffic class:
		// Linux's default TTL stands in for it, as in the capture tap.
		HopLimit: datagramHopLimit,
	}
	if !nh.Dst.IsValid() {
		nh.Dst = e.dev.addr
	}
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	if qp.closed.Load() {
		e.unknownQP.Add(1)
		return
	}
	raceSync()
	qp.tq.HandlePacketFrom(p, &nh, time.Now(), qp.outputLocked())
	raceSync()
	qp.transmitLocked()
}

// datagramHopLimit is the TTL or hop limit written into the GRH of a UD
// receive: Linux's default, which goroce and rxe peers send with unless an
// AH says otherwise.
const datagramHopLimit = 64

// EndBatch sends what the packets of a receive batch caused
// (netio.BatchEnder, step 5): each pending QP's own packets first, from
// its port, then the replies of all of them, from the device's.
func (q *rxQueue) EndBatch() {
	e := q.e
	batchHook(e.dev, batchStart)
	for i, qp := range q.pending {
		b := e.homeReplies(qp)
		qp.xmu.Lock()
		if !qp.closed.Load() {
			qp.transmitRepliesToLocked(b)
		}
		qp.xmu.Unlock()
		if b != q.replies && !slices.Contains(q.others, b) {
			q.others = append(q.others, b) // a packet steered by another QP's
		}
		q.pending[i] = nil
	}
	q.pending = q.pending[:0]
	q.nowUses = 0
	batchHook(e.dev, batchFlush)
	if q.replies != nil {
		q.replies.flush()
	}
	for i, b := range q.others {
		b.flush()
		q.others[i] = nil
	}
	q.others = q.others[:0]
	q.notifyAfterBatch()
}

// notifyAfterBatch raises the completion notifications that the batch's
// packets caused, now that their replies have left (step 6).
func (q *rxQueue) notifyAfterBatch() {
	for i, cq := range q.notify {
		cq.notifyDue()
		q.notify[i] = nil
	}
	q.notify = q.notify[:0]
}

// flushReplies sends the replies taken since the last flush by every
// receive queue. Destroy calls it: a QP's replies taken into a batch
// must not wait for a receive goroutine that the scheduler may hold up
// until after the device has closed its socket.
func (e *engine) flushReplies() {
	for _, q := range e.rxqs {
		if q.replies != nil {
			q.replies.flush()
		}
	}
}

// batchPoint names where in EndBatch endBatchHook runs.
type batchPoint int

const (
	batchStart batchPoint = iota // before any QP's output is sent
	batchFlush                   // QPs' own packets sent, replies taken, not flushed
)

// endBatchHook, when set (by tests only), runs at both points of every
// EndBatch: it lets a test hold a receive batch's replies back, in the
// QPs' Outputs or in the batch, and check what happens to them meanwhile.
var endBatchHook atomic.Pointer[func(*Device, batchPoint)]

func batchHook(d *Device, at batchPoint) {
	if h := endBatchHook.Load(); h != nil {
		(*h)(d, at)
	}
}
