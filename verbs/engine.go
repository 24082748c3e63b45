package verbs

import (
	"container/heap"
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/netio"
	"github.com/goroce/goroce/internal/transport"
	"github.com/goroce/goroce/internal/wire"
)

// engine is the device's software NIC: its UDP socket, the receive goroutine
// that runs the responder and completer of the addressed QP inline (parse,
// ICRC check, dispatch, copy, acknowledge: no channel hop, no allocation per
// packet), and the timer goroutine that runs retransmission, RNR waits and
// paced READ replies. What the packets of one receive batch make an RC QP
// send (ACKs, requests the ACKs let out) is sent once at the end of the
// batch (EndBatch), in one sendmmsg with as few GSO datagrams as netio can
// make of it.
//
// Replies. With many active QPs a batch touches many QPs with a packet or
// two each, and sending each QP's acknowledgement from its own source port
// costs a system call per QP (one socket each): with 1,000 active QPs that
// was one sendmmsg per WRITE just for its ACK, and the requester's receive
// path got no GRO either. So the single-packet responses a batch makes
// (ACKNOWLEDGE, which also carries NAKs and RNR NAKs) leave together at
// its end from the device's own
// socket, port 4791 (netio.Conn.ReplySender), as one GSO datagram per
// peer. Receivers do not look at the source port (rxe matches a packet to
// its QP by the destination port and the BTH's QPN, and checks the
// addresses, not the ports), and nothing answers a response. What the
// replies give up is the per-QP ECMP entropy: requests and READ responses
// keep the QP's port, so a QP's requests stay on one path, and so do its
// replies, but an ACK may take another path than the READ responses of the
// same QP before it. EndBatch sends every QP's own packets before the
// replies, and only the replies that follow a QP's last other response in
// its output go with the shared batch (firstReply), so on one path (a
// link, loopback) a QP's responses stay in order; ATOMIC_ACKNOWLEDGE keeps
// the QP's port (see take). Across ECMP paths an ACK that overtakes a READ
// response is an implied NAK at the requester, which re-reads: slower,
// never wrong. Devices whose peers mix
// READs and WRITEs on one QP over multipath fabrics can keep every reply
// on its QP's port with DeviceConfig.PerQPReplyPort. Replies the timer or
// a PostSend send (they send what is pending) use the QP's port too.
//
// Deferring the batch's output must stay invisible to the peer: a QP
// whose receive completion the application holds has its ACK sent even if
// the application moves the QP to ERR or destroys it before the batch
// ends. Modify and Destroy send what the QP's Output still holds
// (transmitDeferredLocked), and Destroy flushes the replies a batch took
// from it (flushReplies).
//
// Lock order: QP.xmu, then engine.tmu (schedule is called with xmu held);
// the timer goroutine never holds tmu while it takes a QP's xmu.
type engine struct {
	dev    *Device
	conn   *netio.Conn
	cancel context.CancelFunc
	done   sync.WaitGroup

	// atomics serialises atomic operations across every QP of the device
	// (ATOMIC_HCA).
	atomics transport.AtomicLocks

	tmu    sync.Mutex
	timers timerHeap     // QPs with a pending deadline, earliest first
	wake   chan struct{} // capacity 1: a deadline earlier than the sleep's end
	// sleeping and sleepUntil say whether and until when the timer
	// goroutine sleeps (guarded by tmu): schedule wakes it only for a
	// deadline before sleepUntil. A deadline moved later, or removed,
	// costs at most one early wake-up, at the old time, instead of a
	// wake-up of the timer goroutine for every WRITE and every ACK
	// (each arms or moves its QP's retransmission deadline).
	sleeping   bool
	sleepUntil time.Time

	async *asyncQueue // asynchronous events for GetAsyncEvent

	// pending lists the QPs whose output the receive goroutine sends at
	// the end of the batch (transmitAfterBatch); only that goroutine
	// touches it.
	pending []*QP
	// replies gathers the replies of the batch (see "Replies" above);
	// nil with DeviceConfig.PerQPReplyPort.
	replies *replyBatch

	// outputs lends QPs the buffers the transport builds packets in.
	outputs outputPool
	// now and nowUses are rxNow's clock reading and how many packets
	// used it; receive goroutine only.
	now     time.Time
	nowUses int

	unknownQP   atomic.Uint64 // packets for no live RC QP of this device
	wrongSource atomic.Uint64 // packets from another address than the QP's peer

	// cmu guards retired, the summed counters of destroyed QPs, and each
	// QP's folded flag. Lock order: QP.xmu, then cmu; it is never held
	// across QPs, so Device.Counters does not hold up traffic.
	cmu     sync.Mutex
	retired Counters
}

// startEngine opens the device's socket, with the fault-injection tap
// faults unless nil, and starts its goroutines. perQPReplies keeps each
// reply on its QP's source port (DeviceConfig.PerQPReplyPort).
func startEngine(d *Device, faults *netio.Faults, noOffload, perQPReplies bool) (*engine, error) {
	conn, err := netio.Open(netio.Config{Addr: d.addr, Port: d.udpPort, Faults: faults, NoGSO: noOffload, NoGRO: noOffload})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &engine{dev: d, conn: conn, cancel: cancel, wake: make(chan struct{}, 1), async: newAsyncQueue()}
	if !perQPReplies {
		e.replies = &replyBatch{sender: conn.ReplySender()}
	}
	e.done.Add(2)
	go func() {
		defer e.done.Done()
		_ = conn.Serve(ctx, e)
	}()
	go func() {
		defer e.done.Done()
		e.runTimers(ctx)
	}()
	return e, nil
}

// stop ends both goroutines and closes the socket. QPs must be destroyed
// first, so that no call into the transport is left waiting for a lock.
func (e *engine) stop() {
	e.cancel()
	_ = e.conn.Close()
	e.done.Wait()
	e.async.close()
}

// HandlePacket is the receive path (netio.Handler): the packet has parsed
// and its ICRC matched.
func (e *engine) HandlePacket(p *wire.Packet, from netip.AddrPort, info netio.RecvInfo) {
	qp := e.dev.lookupQP(uint32(p.BTH.DestQP()))
	if qp == nil {
		e.unknownQP.Add(1)
		return
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
	}
	raceSync()
	qp.tq.HandlePacket(p, e.rxNow(), qp.outputLocked())
	raceSync()
	e.transmitAfterBatch(qp)
}

// rxNowEvery is how many packets of a batch share one reading of the clock.
const rxNowEvery = 16

// rxNow returns the time for the transport's handling of a received
// packet. Reading the clock for every packet of a 64 KiB run costs more
// than the packet's transport work; the packets of a batch arrived
// together, so one reading serves rxNowEvery of them, which bounds its
// staleness to their handling (microseconds, against timers of
// milliseconds). Only the receive goroutine calls it.
func (e *engine) rxNow() time.Time {
	if e.nowUses == 0 {
		e.now = time.Now()
	}
	e.nowUses = (e.nowUses + 1) % rxNowEvery
	return e.now
}

// transmitAfterBatch leaves what the transport produced for qp in its
// Output until the end of the receive batch (EndBatch), so that what one
// batch of packets causes (the ACKs of a GRO run, the requests a run of
// ACKs lets out) goes out in one send, as larger GSO super-packets, rather
// than one system call per packet. A PostSend or timer in between sends it
// with its own. The caller holds qp.xmu and is the receive goroutine.
func (e *engine) transmitAfterBatch(qp *QP) {
	if n := len(e.pending); n > 0 && e.pending[n-1] == qp {
		return
	}
	for _, q := range e.pending {
		if q == qp {
			return
		}
	}
	e.pending = append(e.pending, qp)
}

// EndBatch sends what the packets of a receive batch caused
// (netio.BatchEnder): it runs on the receive goroutine after each batch.
// Each QP's own packets go first, from its port; then the replies of all
// of them, from the device's (see "Replies" above).
func (e *engine) EndBatch() {
	batchHook(e.dev, batchStart)
	for i, qp := range e.pending {
		qp.xmu.Lock()
		if !qp.closed.Load() {
			qp.transmitRepliesToLocked(e.replies)
		}
		qp.xmu.Unlock()
		e.pending[i] = nil
	}
	e.pending = e.pending[:0]
	e.nowUses = 0
	batchHook(e.dev, batchFlush)
	e.flushReplies()
}

// flushReplies sends the replies taken since the last flush. EndBatch
// calls it, and so does Destroy: a QP's replies taken into the batch
// must not wait for a receive goroutine that the scheduler may hold up
// until after the device has closed its socket.
func (e *engine) flushReplies() {
	if e.replies != nil {
		e.replies.flush()
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

// outputPool lends transport.Outputs to QPs from the moment the transport
// builds packets in one until they are sent (transmitLocked). A QP's
// packet buffers are as large as the packets it sent, a path MTU each: held
// by every QP, 1,000 QPs that each send a 64 KiB message keep 64 MiB of
// buffers, and every message is copied into buffers long evicted from the
// caches (measured with goroce-scale: lending raised 1,000-QP throughput
// by a fifth, and the 1-QP figure did not move). Lent, only as many
// exist as QPs hold packets at once (those a receive batch touched, those
// in PostSend), and the last returned, still in the caches, is lent first.
// An idle QP holds none. The pool's lock is taken under a QP's xmu and
// never the other way round.
type outputPool struct {
	mu   sync.Mutex
	free []*transport.Output // LIFO
}

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
	// Request payloads and READ responses go from the MR straight into
	// the kernel's buffers (one copy, not two): the MR stays pinned until
	// the packet is sent and put returns the Output. +10 % on 64 KiB
	// WRITEs over loopback. READ responses through a memory window are
	// still copied (mrRegion.Holdable).
	o.SetZeroCopy(true)
	return o
}

func (p *outputPool) put(o *transport.Output) {
	o.Reset()
	p.mu.Lock()
	p.free = append(p.free, o)
	p.mu.Unlock()
}

// outputLocked returns the Output the transport builds qp's packets in,
// borrowing one from the engine's pool unless qp holds one already (what
// the receive path left for the end of its batch, say). The caller holds
// qp.xmu.
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

// replyBatch gathers the replies the QPs of a receive batch make, to send
// them at its end in one SendBatch from the device's own port. The packets
// are copied: a QP's Output is reused once its lock is released (by a
// PostSend, or the timer). mu guards the copies: the receive path takes
// and flushes them, and Destroy flushes them too (flushReplies). Lock
// order: QP.xmu, then mu.
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

// firstReply returns the index of the first packet of pkts from which on
// the replies may leave separately, after the QP's other packets: past its
// last response that is not a reply. A reply before a READ response or an
// ATOMIC_ACKNOWLEDGE of its QP must stay on the QP's port, sent before it;
// if it were sent after, an ACK would merely be stale at the requester, but
// a NAK arriving after the responses to the retransmission it asked for
// makes the requester retry again. Requests do not order against
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
// whether it did; the caller holds b.mu. ATOMIC_ACKNOWLEDGE is not taken:
// a READ response of a later request would overtake it (one the timer
// paces out between the QP's part of EndBatch and the flush of the
// replies), which the requester takes for an implied NAK and answers by
// retrying the atomic. The batch's memory grows to the largest batch seen
// and is then reused: no allocation per packet.
func (b *replyBatch) take(dst netip.AddrPort, pkt []byte) bool {
	if !isReply(pkt) { // an ACKNOWLEDGE: all headers, no Payload
		return false
	}
	n := len(b.buf)
	// If append moves buf, the packets taken so far keep the old array.
	b.buf = append(b.buf, pkt...)
	b.buf = append(b.buf, 0, 0, 0, 0) // the ICRC's room
	b.msgs = append(b.msgs, netio.Message{Dst: dst, Packet: b.buf[n : n+len(pkt) : n+len(pkt)+wire.ICRCLen]})
	return true
}

// flush sends the replies taken since the last flush. As for any packet,
// a failed send is counted by netio and recovered by the requester's
// retransmission.
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

// handleDatagram is the receive path of a UD QP: datagrams come from any
// address, and the transport writes the IP header they came with into the
// GRH area of the receive buffer. QP1 (GSI) is not a goroce QP: CM MADs
// count as packets for an unknown QP.
func (e *engine) handleDatagram(qp *QP, p *wire.Packet, from netip.AddrPort, info netio.RecvInfo) {
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

// schedule files qp's next deadline. The caller holds qp.xmu.
func (e *engine) schedule(qp *QP) {
	var (
		at time.Time
		ok bool
	)
	if qp.tq != nil && !qp.closed.Load() {
		at, ok = qp.tq.Deadline()
	}
	e.tmu.Lock()
	defer e.tmu.Unlock()
	if !ok {
		if qp.timerIndex >= 0 {
			heap.Remove(&e.timers, qp.timerIndex)
		}
		return
	}
	if qp.timerIndex >= 0 && qp.deadline.Equal(at) {
		return
	}
	qp.deadline = at
	if qp.timerIndex >= 0 {
		heap.Fix(&e.timers, qp.timerIndex)
	} else {
		heap.Push(&e.timers, qp)
	}
	if e.timers[0] == qp && e.sleeping && at.Before(e.sleepUntil) {
		e.sleeping = false // one wake-up is enough
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
}

// unschedule forgets qp's deadline (Destroy).
func (e *engine) unschedule(qp *QP) {
	e.tmu.Lock()
	defer e.tmu.Unlock()
	if qp.timerIndex >= 0 {
		heap.Remove(&e.timers, qp.timerIndex)
	}
}

// runTimers fires QP deadlines until ctx ends. It sleeps while no deadline
// is pending: an idle device burns no CPU.
func (e *engine) runTimers(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		e.tmu.Lock()
		var (
			due  *QP
			wait = time.Hour
		)
		now := time.Now()
		if len(e.timers) > 0 {
			if d := e.timers[0].deadline.Sub(now); d <= 0 {
				due = heap.Pop(&e.timers).(*QP)
			} else {
				wait = d
			}
		}
		e.sleeping = due == nil
		e.sleepUntil = now.Add(wait)
		e.tmu.Unlock()

		if due != nil {
			due.xmu.Lock()
			if due.tq != nil && !due.closed.Load() {
				raceSync()
				due.tq.OnTimer(time.Now(), due.outputLocked())
				raceSync()
				due.transmitLocked()
			}
			due.xmu.Unlock()
			continue
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-e.wake:
		case <-t.C:
		}
	}
}

// timerHeap orders QPs by deadline (container/heap).
type timerHeap []*QP

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].timerIndex = i
	h[j].timerIndex = j
}
func (h *timerHeap) Push(x any) {
	qp := x.(*QP)
	qp.timerIndex = len(*h)
	*h = append(*h, qp)
}
func (h *timerHeap) Pop() any {
	old := *h
	qp := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	qp.timerIndex = -1
	return qp
}

// wireQPN converts a QP number for the wire package.
func wireQPN(q uint32) wire.QPN { return wire.QPN(q & wire.QPNMask) }
