package verbs

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/netio"
	"github.com/goroce/goroce/internal/transport"
)

// engine is the device's software NIC: its UDP socket, the receive
// goroutine that runs the responder and completer of the addressed QP
// inline, the timer goroutine that runs retransmission, RNR waits and
// paced READ replies, and the doorbell's flusher, which sends the packets
// of posts that came back to back (doorbell.go). Its data path is told as
// a flow in engine_send.go (what leaves), engine_recv.go (what arrives)
// and engine_timers.go.
//
// Lock order: QP.xmu, then engine.tmu, the output pool's lock, the
// doorbell's lock or engine.cmu; none of these is held while a QP's xmu is
// taken, and the flusher takes no QP's xmu.
type engine struct {
	dev    *Device
	conn   *netio.Conn
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

	// pending lists the QPs whose output waits for the end of the receive
	// batch (transmitAfterBatch). Receive goroutine only.
	pending []*QP
	// replies gathers the replies of the batch, sent from the device's
	// port (replyBatch); nil with DeviceConfig.PerQPReplyPort. Receive
	// goroutine only.
	replies *replyBatch

	// outputs lends QPs the buffers the transport builds packets in,
	// seals those sealed packets wait in (seal.go).
	outputs outputPool
	seals   sealPool
	// doorbell corks the packets of posts that come back to back and
	// sends them in batches (doorbell.go).
	doorbell *doorbell
	// now and nowUses are rxNow's clock reading and how many packets
	// used it. Receive goroutine only.
	now     time.Time
	nowUses int

	unknownQP   atomic.Uint64 // packets for no live RC QP of this device
	wrongSource atomic.Uint64 // packets from another address than the QP's peer
	wrongPort   atomic.Uint64 // packets from the peer's address and another UDP port
	replayed    atomic.Uint64 // sealed packets whose counter was seen or too old
	authFail    atomic.Uint64 // sealed packets that did not authenticate

	// sealedQPs counts the QPs with packet keys; unsealQP is the one
	// Sealed found for Unseal. Receive goroutine only.
	sealedQPs atomic.Int32
	unsealQP  *QP

	// cmu guards retired, the summed counters of destroyed QPs, and each
	// QP's folded flag. It is never held across QPs, so Device.Counters
	// does not hold up traffic.
	cmu     sync.Mutex
	retired Counters
}

// startEngine opens the device's socket, with the fault-injection tap
// faults unless nil, and starts its goroutines. perQPReplies keeps each
// reply on its QP's source port (DeviceConfig.PerQPReplyPort); ect sends
// ECT(0) (CongestionControl).
func startEngine(d *Device, faults *netio.Faults, noOffload, perQPReplies, ect bool) (*engine, error) {
	conn, err := netio.Open(netio.Config{Addr: d.addr, Port: d.udpPort, Faults: faults, NoGSO: noOffload, NoGRO: noOffload, ECT: ect})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &engine{dev: d, conn: conn, cancel: cancel, wake: make(chan struct{}, 1), async: newAsyncQueue()}
	if !perQPReplies {
		e.replies = &replyBatch{sender: conn.ReplySender()}
	}
	e.doorbell = newDoorbell(&e.outputs)
	e.done.Add(3)
	go func() {
		defer e.done.Done()
		e.doorbell.run(ctx)
	}()
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

// stop ends the goroutines and closes the socket. QPs must be destroyed
// first, so that no call into the transport is left waiting for a lock.
func (e *engine) stop() {
	e.cancel()
	_ = e.conn.Close()
	e.done.Wait()
	e.async.close()
}
