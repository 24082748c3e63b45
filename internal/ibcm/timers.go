package ibcm

import (
	"container/heap"
	"net/netip"
	"time"

	"github.com/goroce/goroce/internal/mad"
)

// timerHeap orders the records that have a timer by deadline; each record
// has at most one timer (retransmission, accept wait or timewait).
type timerHeap []*conn

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].deadline.Equal(h[j].deadline) {
		return h[i].id < h[j].id // deterministic order for equal deadlines
	}
	return h[i].deadline.Before(h[j].deadline)
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}
func (h *timerHeap) Push(x any) {
	c := x.(*conn)
	c.heapIdx = len(*h)
	*h = append(*h, c)
}
func (h *timerHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	c.heapIdx = -1
	return c
}

// schedule sets c's timer, replacing any it had.
func (m *Manager) schedule(c *conn, kind timerKind, at time.Time) {
	c.timer, c.deadline = kind, at
	if c.heapIdx >= 0 {
		heap.Fix(&m.timers, c.heapIdx)
		return
	}
	heap.Push(&m.timers, c)
}

// unschedule cancels c's timer.
func (m *Manager) unschedule(c *conn) {
	if c.heapIdx >= 0 {
		heap.Remove(&m.timers, c.heapIdx)
	}
	c.timer = timerNone
}

// startPending sends a request MAD of c (REQ, REP, DREQ, SIDR_REQ) and
// keeps it for retransmission every timeout, at most retries more times
// and until the total timeout.
func (m *Manager) startPending(c *conn, b []byte, timeout time.Duration, retries int, now time.Time, out *Output) {
	p := &pending{attr: mad.AttrID(uint16(b[16])<<8 | uint16(b[17])), timeout: timeout,
		interval: timeout, retries: retries, end: now.Add(m.cfg.TotalTimeout)}
	copy(p.mad[:], b)
	c.pend = p
	out.send(c.peer, b)
	m.counters.Sent[p.attr-mad.AttrREQ]++
	m.schedule(c, timerRetransmit, m.next(p, now))
}

// next returns when p is next due: after its interval, but not after its
// total timeout.
func (m *Manager) next(p *pending, now time.Time) time.Time {
	t := now.Add(p.interval)
	if t.After(p.end) {
		return p.end
	}
	return t
}

// retransmit resends c's pending MAD, or times it out.
func (m *Manager) retransmit(c *conn, now time.Time, out *Output) {
	p := c.pend
	if p == nil {
		return
	}
	if p.retries <= 0 || !now.Before(p.end) {
		m.counters.Timeouts++
		m.timeout(c, p.attr, now, out)
		return
	}
	p.retries--
	p.sent++
	// The kernel's MAD layer since 6.14 (set_next_timeout): the first
	// LinearTimeouts retries wait the timeout, each later one twice the
	// one before, up to MaxInterval.
	if m.cfg.LinearTimeouts > 0 && p.sent >= m.cfg.LinearTimeouts {
		p.interval = min(2*p.interval, m.cfg.MaxInterval)
	}
	out.send(c.peer, p.mad[:])
	m.counters.Resent++
	m.schedule(c, timerRetransmit, m.next(p, now))
}

// extend applies an MRA to c's pending MAD: its next retransmission waits
// the service time plus the path's ACK timeout, once per message (the
// kernel's ib_modify_mad since 6.14: MRA "applied only once", the
// backoff restarted, the total timeout extended by as much).
func (m *Manager) extend(c *conn, serviceTimeout uint8, now time.Time) bool {
	p := c.pend
	if p == nil || p.mraSeen {
		return false
	}
	wait := IBATime(serviceTimeout) + IBATime(c.avTimeout)
	p.mraSeen = true
	p.end = p.end.Add(wait)
	p.interval, p.sent = p.timeout, 0
	m.schedule(c, timerRetransmit, now.Add(wait))
	return true
}

// timeout handles a request MAD that went unanswered.
func (m *Manager) timeout(c *conn, attr mad.AttrID, now time.Time, out *Output) {
	switch attr {
	case mad.AttrREQ, mad.AttrREP:
		// IBA's answer to a silent peer (the kernel sends it only when the
		// ID is destroyed while waiting): REJ "timeout" with our CA GUID as
		// the ARI, by which the peer finds its side of the connection.
		m.sendREJ(out, c, mad.RejectTimeout, m.guidARI(), nil)
		m.event(out, c, Event{Type: EventTimeout, Unanswered: attr})
		m.free(c)
	case mad.AttrDREQ:
		m.event(out, c, Event{Type: EventTimeout, Unanswered: attr})
		m.enterTimewait(c, now)
	case mad.AttrSIDRREQ:
		m.event(out, c, Event{Type: EventTimeout, Unanswered: attr})
		m.free(c)
	}
}

// guidARI is the ARI of a timeout REJ: the local CA GUID, big-endian.
func (m *Manager) guidARI() []byte {
	g := m.cfg.CAGUID
	return []byte{byte(g >> 56), byte(g >> 48), byte(g >> 40), byte(g >> 32),
		byte(g >> 24), byte(g >> 16), byte(g >> 8), byte(g)}
}

// The half-open and timewait lists, oldest first, for eviction.

// joinHalfOpen counts c, a new passive request from its peer.
func (m *Manager) joinHalfOpen(c *conn) {
	c.halfOpen = true
	m.halfOpen++
	m.perSource[c.peer]++
	c.prev, c.next = m.hoTail, nil
	if m.hoTail != nil {
		m.hoTail.next = c
	} else {
		m.hoHead = c
	}
	m.hoTail = c
}

func (m *Manager) leaveHalfOpen(c *conn) {
	if !c.halfOpen {
		return
	}
	c.halfOpen = false
	m.halfOpen--
	if n := m.perSource[c.peer] - 1; n > 0 {
		m.perSource[c.peer] = n
	} else {
		delete(m.perSource, c.peer)
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		m.hoHead = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		m.hoTail = c.prev
	}
	c.prev, c.next = nil, nil
}

func (m *Manager) joinTimewait(c *conn) {
	c.twPrev, c.twNext = m.twTail, nil
	if m.twTail != nil {
		m.twTail.twNext = c
	} else {
		m.twHead = c
	}
	m.twTail = c
}

func (m *Manager) leaveTimewait(c *conn) {
	if c.state != StateTimewait {
		return
	}
	if c.twPrev != nil {
		c.twPrev.twNext = c.twNext
	} else if m.twHead == c {
		m.twHead = c.twNext
	}
	if c.twNext != nil {
		c.twNext.twPrev = c.twPrev
	} else if m.twTail == c {
		m.twTail = c.twPrev
	}
	c.twPrev, c.twNext = nil, nil
}

// admit checks the limits for a new passive request from peer: false drops
// it (per-source limit); at the HalfOpen limit it evicts the oldest
// half-open request first.
func (m *Manager) admit(peer netip.Addr, out *Output) bool {
	if m.perSource[peer] >= m.cfg.Limits.HalfOpenPerSource {
		m.counters.Limited++
		return false
	}
	if m.halfOpen >= m.cfg.Limits.HalfOpen {
		m.counters.Evicted++
		m.abandon(m.hoHead, out)
	}
	return true
}
