package simnet

import "time"

// event is one copy of a datagram in flight.
type event struct {
	at   time.Duration // arrival, since epoch
	seq  uint64        // send order
	buf  []byte        // pooled copy of the datagram
	link *link
	fate Fate // FateDuplicate and FateCorrupted, decided at Send
}

// eventQueue is a binary min-heap of events ordered by (at, seq). It holds
// events by value and is hand-written rather than built on container/heap,
// whose Push(any) would box, and so allocate, every event.
type eventQueue []event

func (q eventQueue) less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}

// next returns the arrival time of the earliest event.
func (q eventQueue) next() (time.Duration, bool) {
	if len(q) == 0 {
		return 0, false
	}
	return q[0].at, true
}

func (q *eventQueue) push(e event) {
	*q = append(*q, e)
	h := *q
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

// pop removes and returns the earliest event. The queue must not be empty.
func (q *eventQueue) pop() event {
	h := *q
	e := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = event{} // drop references to the buffer and link
	h = h[:last]
	*q = h
	i := 0
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		m := l
		if r := l + 1; r < len(h) && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	return e
}
