package cm

import (
	"net/netip"
	"sync"

	"github.com/goroce/goroce/internal/gsi"
)

// rxMAD is a MAD waiting for the agent's goroutine.
type rxMAD struct {
	from netip.AddrPort
	mad  [gsi.MADSize]byte
}

// rxQueueMax bounds the MADs waiting for the agent: beyond it a flood is
// dropped at the door (and counted) instead of growing memory. It is large
// enough for a burst of thousands of DREQs (an application closing all its
// connections at once, or a peer's process exiting) to be taken whole:
// a DREQ dropped here is resent only after the CM's response timeout,
// seconds later. At most 4096 × 272 bytes, 1.1 MB, held only while a
// burst lasts (the kernel posts 512 MAD buffers on QP 1 by default, but
// its CM queues work items for what they receive without a bound).
const rxQueueMax = 4096

// rxQueueIdle is the capacity the queue keeps once drained.
const rxQueueIdle = 64

// rxQueue is the agent's FIFO of received MADs: pushed by the device's
// receive path, taken in batches by the agent's goroutine. It grows with a
// burst, up to rxQueueMax, and gives the memory back once drained.
type rxQueue struct {
	mu    sync.Mutex
	items []rxMAD // items[head:] wait
	head  int
	ready chan struct{} // holds a token while items wait
}

func newRxQueue() *rxQueue {
	return &rxQueue{items: make([]rxMAD, 0, rxQueueIdle), ready: make(chan struct{}, 1)}
}

// push queues a copy of b from from; false if the queue is full.
func (q *rxQueue) push(from netip.AddrPort, b []byte) bool {
	q.mu.Lock()
	if len(q.items)-q.head >= rxQueueMax {
		q.mu.Unlock()
		return false
	}
	if len(q.items) == cap(q.items) && q.head > 0 {
		// Reuse the taken front before growing.
		n := copy(q.items, q.items[q.head:])
		q.items = q.items[:n]
		q.head = 0
	}
	q.items = append(q.items, rxMAD{from: from})
	copy(q.items[len(q.items)-1].mad[:], b)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return true
}

// pop takes the oldest MAD into m; false if none waits.
func (q *rxQueue) pop(m *rxMAD) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.items) {
		return false
	}
	*m = q.items[q.head]
	q.head++
	if q.head == len(q.items) {
		q.head = 0
		if cap(q.items) > rxQueueIdle {
			q.items = make([]rxMAD, 0, rxQueueIdle)
		} else {
			q.items = q.items[:0]
		}
	}
	return true
}

// len returns the number of MADs waiting.
func (q *rxQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) - q.head
}
