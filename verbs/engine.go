package verbs

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/netio"
	"github.com/goroce/goroce/internal/transport"
)

// engine is the device's software NIC: its UDP sockets, the receive
// goroutines (one per receive queue) that run the responder and completer
// of the addressed QP inline, the timer goroutine that runs
// retransmission, RNR waits and paced READ replies, and the doorbell's
// flusher, which sends the packets of posts that came back to back
// (doorbell.go). Its data path is told as a flow in engine_send.go (what
// leaves), engine_recv.go (what arrives) and engine_timers.go.
//
// Lock order: QP.xmu, then engine.tmu, the output pool's lock, the
// doorbell's lock, a reply batch's lock or engine.cmu; none of these is held while a QP's xmu is
// taken, and the flusher takes no QP's xmu.
type engine struct {
	dev    *Device
	conn   *netio.Conn // the first receive queue's: every QP's source port is one of its Senders
	cancel context.CancelFunc
	done   sync.WaitGroup

	// atomics serialises atomic operations across every QP of the device
	// (ATOMIC_HCA).
	atomics transport.AtomicLocks

	// tmu guards the timer heap and the sleep state (engine_timers.go).
	tmu    sync.Mutex
	timers timerHeap     // QPs with a pending deadline, earliest first
	wake   chan struct{} // capacity 1: a deadline earlier than the sleep's end
	// sleeping and sleepUntil say whether and until when the timer
	// goroutine sleeps: schedule wakes it only for a deadline before
	// sleepUntil.
	sleeping   bool
	sleepUntil time.Time

	async *asyncQueue // asynchronous events for GetAsyncEvent

	// rxqs are the receive queues (engine_recv.go): rxqs[0] receives
	// on conn; with DeviceConfig.ReceiveQueues, each other one on a
	// socket of conn's receive group, served by its own goroutine.
	rxqs []*rxQueue
	// outputs lends QPs the buffers the transport builds packets in,
	// seals those sealed packets wait in (seal.go).
	outputs outputPool
	seals   sealPool
	// doorbell corks the packets of posts that come back to back and
	// sends them in batches (doorbell.go).
	doorbell *doorbell

	unknownQP   atomic.Uint64 // packets for no live RC QP of this device
	wrongSource atomic.Uint64 // packets from another address than the QP's peer
	wrongPort   atomic.Uint64 // packets from the peer's address and another UDP port
	replayed    atomic.Uint64 // sealed packets whose counter was seen or too old
	authFail    atomic.Uint64 // sealed packets that did not authenticate

	// sealedQPs counts the QPs with packet keys.
	sealedQPs atomic.Int32

	// cmu guards retired, the summed counters of destroyed QPs, and each
	// QP's folded flag. It is never held across QPs, so Device.Counters
	// does not hold up traffic.
	cmu     sync.Mutex
	retired Counters
}

// startEngine opens the device's sockets, queues of them on its port
// (DeviceConfig.ReceiveQueues), with the fault-injection tap faults unless
// nil, and starts its goroutines. perQPReplies keeps each reply on its
// QP's source port (DeviceConfig.PerQPReplyPort); ect sends ECT(0)
// (CongestionControl).
func startEngine(d *Device, faults *netio.Faults, noOffload, perQPReplies, ect bool, queues int) (*engine, error) {
	conns, err := netio.OpenGroup(netio.Config{Addr: d.addr, Port: d.udpPort, Faults: faults, NoGSO: noOffload, NoGRO: noOffload, ECT: ect}, queues)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &engine{dev: d, conn: conns[0], cancel: cancel, wake: make(chan struct{}, 1), async: newAsyncQueue()}
	e.doorbell = newDoorbell(&e.outputs)
	e.done.Add(2 + len(conns))
	go func() {
		defer e.done.Done()
		e.doorbell.run(ctx)
	}()
	// Every queue exists before any receives: a packet steered by
	// another QP's may need another queue's reply batch (homeReplies).
	for i, c := range conns {
		q := &rxQueue{e: e, conn: c, index: uint32(i)}
		if !perQPReplies {
			q.replies = &replyBatch{sender: c.ReplySender()}
		}
		e.rxqs = append(e.rxqs, q)
	}
	for _, q := range e.rxqs {
		go func() {
			defer e.done.Done()
			_ = q.conn.Serve(ctx, q)
		}()
	}
	go func() {
		defer e.done.Done()
		e.runTimers(ctx)
	}()
	return e, nil
}

// poll receives, on the caller's goroutine, what the receive queues'
// sockets hold (netio.Conn.Poll), and reports whether a queue's receive
// goroutine was reading instead.
func (e *engine) poll() (busy bool) {
	for _, q := range e.rxqs {
		if _, b := q.conn.Poll(); b {
			busy = true
		}
	}
	return busy
}

// stop ends the goroutines and closes the sockets. QPs must be destroyed
// first, so that no call into the transport is left waiting for a lock.
func (e *engine) stop() {
	e.cancel()
	for _, q := range e.rxqs {
		_ = q.conn.Close()
	}
	e.done.Wait()
	e.async.close()
}

// netCounters returns the counts of the device's sockets, summed over its
// receive queues (conn's senders count on conn).
func (e *engine) netCounters() *netio.Counters {
	if len(e.rxqs) == 1 {
		return e.conn.Counters()
	}
	sum := new(netio.Counters)
	for _, q := range e.rxqs {
		q.conn.Counters().AddTo(sum)
	}
	return sum
}
