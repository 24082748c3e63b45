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
	wake   chan struct{} // capacity 1: the earliest deadline changed

	async *asyncQueue // asynchronous events for GetAsyncEvent

	// pending lists the QPs whose output the receive goroutine sends at
	// the end of the batch (transmitAfterBatch); only that goroutine
	// touches it.
	pending []*QP
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
// faults unless nil, and starts its goroutines.
func startEngine(d *Device, faults *netio.Faults, noOffload bool) (*engine, error) {
	conn, err := netio.Open(netio.Config{Addr: d.addr, Port: d.udpPort, Faults: faults, NoGSO: noOffload, NoGRO: noOffload})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &engine{dev: d, conn: conn, cancel: cancel, wake: make(chan struct{}, 1), async: newAsyncQueue()}
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
	qp.tq.HandlePacket(p, e.rxNow(), &qp.out)
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
func (e *engine) EndBatch() {
	for i, qp := range e.pending {
		qp.xmu.Lock()
		if !qp.closed.Load() {
			qp.transmitLocked()
		}
		qp.xmu.Unlock()
		e.pending[i] = nil
	}
	e.pending = e.pending[:0]
	e.nowUses = 0
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
	qp.tq.HandlePacketFrom(p, &nh, time.Now(), &qp.out)
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
	if e.timers[0] == qp {
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
		if len(e.timers) > 0 {
			if d := time.Until(e.timers[0].deadline); d <= 0 {
				due = heap.Pop(&e.timers).(*QP)
			} else {
				wait = d
			}
		}
		e.tmu.Unlock()

		if due != nil {
			due.xmu.Lock()
			if due.tq != nil && !due.closed.Load() {
				raceSync()
				due.tq.OnTimer(time.Now(), &due.out)
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
