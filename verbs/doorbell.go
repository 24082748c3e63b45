package verbs

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/netio"
	"github.com/goroce/goroce/internal/transport"
)

// The doorbell: how a PostSend hands its packets to the device (step 3 of
// engine_send.go's flow). A NIC's doorbell is a write to a register: the
// post returns and the NIC reads the work request while the application
// posts the next. goroce's send is a system call of several microseconds
// (on loopback it runs the receiver's stack too), so a PostSend that sends
// inline bounds the message rate of one poster at one syscall per message.
//
// So, like Linux TCP's autocorking, a post is corked when the device is
// already sending or the posts come faster than the kernel takes them: its
// packets join the device's pending batch and the doorbell's flusher
// goroutine sends every batch it finds in one SendBatch per source port
// (one sendmmsg, the equal-size packets of one QP one GSO datagram), while
// the poster goes on building the next. A post after an idle gap (longer
// than the last inline send took) still sends inline, before PostSend
// returns: a lone message pays no goroutine hand-off, so write_lat does not
// change.
//
// What a corked post keeps right:
//   - Zero copy: the QP's Output, which pins the payloads' MRs, goes with
//     the packets and returns to the pool once they are sent.
//   - Order: while a QP has packets corked (QP.corked), everything it
//     transmits is corked behind them, from any path (receive, timer), and
//     the flusher sends batches in order; replies then stay on the QP's
//     port, behind its requests.
//   - Completions: only RC QPs cork, whose requests complete when the peer
//     acknowledges them, so after they left. UC and UD complete a request
//     when its last packet is built, and the application may then reuse
//     the buffer: they send inline. So do sealed QPs, whose packets take
//     counters in send order.
//   - Teardown (step 6): Modify and Destroy wait until the QP's corked
//     packets have left (drain) before they change what the QP may send or
//     release its source port; so does the transport's own move to ERR,
//     before the flush completions return the buffers to the application.
//   - The retransmission timer is filed when the packets are corked, a few
//     microseconds before they leave: a little early, never late.
//   - Memory: at most maxCorked packets wait; a post that finds as many
//     waits for the flusher, so the Outputs and pins held stay bounded.

// doorbell is a device's batch of corked packets and its flusher.
type doorbell struct {
	outputs *outputPool // where sent Outputs go back

	mu      sync.Mutex
	sent    sync.Cond     // on mu: a batch has been sent (drain waits for it)
	pending corkBatch     // guarded by mu
	wake    chan struct{} // capacity 1: the flusher has work
	// busy is set, under mu, by the post that corks into an empty
	// doorbell and wakes the flusher, and cleared by the flusher, under
	// mu, when it finds nothing pending: while it is set, posts cork.
	busy atomic.Bool

	// lastEnd is when (clock) the device last finished a send; cost how
	// long the last send took (an inline post's, or a batch's). A post that comes less than
	// cost after lastEnd comes faster than the kernel takes them.
	lastEnd atomic.Int64
	cost    atomic.Int64

	sending corkBatch // flusher only

	// Tests only: clock replaces the monotonic clock, hold is called by
	// the flusher before it sends a batch, waiting by drain before it
	// waits.
	clock   func() int64
	hold    func()
	waiting func()
}

// corkBatch is what the flusher sends in one go: the messages of corked
// transmissions in order, and what each one holds.
type corkBatch struct {
	msgs  []netio.Message
	corks []cork
}

// cork is one corked transmission: a QP's packets, msgs of them, to send
// from sender, and the Output that holds them (and pins their payloads).
type cork struct {
	qp     *QP
	sender *netio.Sender
	out    *transport.Output
	msgs   int
}

// maxCorked bounds the packets that wait for the flusher, and so the
// Outputs (and pinned payloads) it holds: a post that finds as many waits
// until the flusher takes them. Four sendmmsg batches (netio's
// DefaultBatchSize): the poster is far ahead of the kernel by then.
const maxCorked = 4 * netio.DefaultBatchSize

// epoch is the origin of the doorbell's clock.
var epoch = time.Now()

// monotonic returns the nanoseconds since epoch on the monotonic clock.
func monotonic() int64 { return int64(time.Since(epoch)) }

func newDoorbell(outputs *outputPool) *doorbell {
	db := &doorbell{outputs: outputs, wake: make(chan struct{}, 1), clock: monotonic}
	db.sent.L = &db.mu
	return db
}

// ringLocked transmits what a post built (PostSend, PostSendList): corked
// if the QP may cork and the device is busy or the posts come back to
// back, else inline, timing the send for the next post's decision. The
// caller holds xmu.
func (qp *QP) ringLocked() {
	db := qp.dev.eng.doorbell
	if qp.qpType != QPTypeRC || qp.sealer != nil || qp.corked.Load() > 0 {
		qp.transmitLocked() // corks anyway behind corked packets
		return
	}
	now := db.clock()
	if db.busy.Load() || now-db.lastEnd.Load() < db.cost.Load() {
		qp.corkAllLocked()
		return
	}
	qp.transmitLocked()
	end := db.clock()
	db.cost.Store(end - now)
	db.lastEnd.Store(end)
}

// corkAllLocked transmits what qp.out holds through the doorbell, and then
// does what transmitLocked does after a send. The caller holds xmu.
func (qp *QP) corkAllLocked() {
	if qp.out != nil && qp.out.Len() > 0 && qp.sender != nil {
		qp.dev.eng.doorbell.cork(qp)
	}
	qp.afterTransmitLocked()
}

// cork moves qp's packets and their Output into the pending batch and
// wakes the flusher if it was idle. The caller holds qp.xmu.
func (db *doorbell) cork(qp *QP) {
	pkts := qp.out.Packets()
	db.mu.Lock()
	for len(db.pending.msgs) >= maxCorked {
		db.sent.Wait() // the flusher is behind: wait for it
	}
	for i := range pkts {
		db.pending.msgs = appendMessage(db.pending.msgs, qp.peer, pkts[i].Bytes, pkts[i].Payload)
	}
	n := len(db.pending.corks)
	db.pending.corks = slices.Grow(db.pending.corks, 1)[:n+1]
	c := &db.pending.corks[n] // in place, as appendMessage
	c.qp, c.sender, c.out, c.msgs = qp, qp.sender, qp.out, len(pkts)
	qp.corked.Add(1)
	qp.out = nil // the doorbell's until sent
	start := !db.busy.Load()
	db.busy.Store(true)
	db.mu.Unlock()
	if start {
		select {
		case db.wake <- struct{}{}:
		default:
		}
	}
}

// run is the flusher: it sends what is pending whenever woken, until ctx
// ends, and then once more.
func (db *doorbell) run(ctx context.Context) {
	for {
		select {
		case <-db.wake:
			db.flush()
		case <-ctx.Done():
			db.flush()
			return
		}
	}
}

// flush sends pending batches until none is left, then marks the doorbell
// idle.
func (db *doorbell) flush() {
	for {
		db.mu.Lock()
		db.sent.Broadcast() // the batch sent last, if any
		if len(db.pending.corks) == 0 {
			db.busy.Store(false)
			db.lastEnd.Store(db.clock())
			db.mu.Unlock()
			return
		}
		db.pending, db.sending = db.sending, db.pending
		db.mu.Unlock()
		// The batch's send time is the cost too: one send the
		// scheduler stretched (a preemption) must not keep the device
		// corking, and a lone post's batch, one packet, resets it.
		start := db.clock()
		db.send(&db.sending)
		db.cost.Store(db.clock() - start)
	}
}

// send sends batch b, one SendBatch per run of transmissions from one
// source port, returns the Outputs (unpinning the payloads) and empties b.
// A packet the socket refuses counts as lost, as in transmitLocked.
func (db *doorbell) send(b *corkBatch) {
	if db.hold != nil {
		db.hold()
	}
	from := 0
	for i := 0; i < len(b.corks); {
		s, n := b.corks[i].sender, 0
		for ; i < len(b.corks) && b.corks[i].sender == s; i++ {
			n += b.corks[i].msgs
		}
		_, _ = s.SendBatch(b.msgs[from : from+n])
		from += n
	}
	for i := range b.corks {
		c := &b.corks[i]
		db.outputs.put(c.out)
		c.qp.corked.Add(-1)
	}
	clear(b.msgs) // no references to sent packets and released Outputs
	clear(b.corks)
	b.msgs, b.corks = b.msgs[:0], b.corks[:0]
}

// drain waits until qp has no packet corked: what it posted has left, and
// its source port may be released (step 6). The flusher takes no QP's
// lock, so the caller may hold xmu, which keeps qp from corking more.
func (db *doorbell) drain(qp *QP) {
	if qp.corked.Load() == 0 {
		return
	}
	db.mu.Lock()
	for qp.corked.Load() > 0 {
		if db.waiting != nil {
			db.waiting()
		}
		db.sent.Wait()
	}
	db.mu.Unlock()
}
