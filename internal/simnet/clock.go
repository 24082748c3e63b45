package simnet

import "time"

// epoch is where every Clock starts. It is a fixed instant (rather than the
// zero time.Time) so that timestamps written by a tap into a pcap file look
// like ordinary dates, and it carries no monotonic reading, so comparisons
// between virtual times never depend on the host's clock.
var epoch = time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)

// Epoch returns the instant at which every Clock starts:
// 2000-01-01 00:00:00 UTC.
func Epoch() time.Time { return epoch }

// Clock is a manual virtual clock. Time moves only when Advance or AdvanceTo
// is called (or when a Network delivers datagrams, see [Network.Deliver]);
// nothing in this package reads the wall clock.
//
// A Clock also runs timers ([Clock.AfterFunc]). They fire synchronously,
// inside Advance and AdvanceTo, in deadline order, ties broken by the order
// in which they were scheduled, and the clock reads exactly the timer's
// deadline while its function runs. That makes a run reproducible: the same
// calls in the same order fire the same timers at the same virtual instants.
//
// The zero Clock is ready to use and reads [Epoch]. A Clock is not safe for
// concurrent use; a simulation is driven by one goroutine.
type Clock struct {
	now    time.Duration // since epoch
	timers timerHeap
	seq    uint64 // insertion counter: the tie-breaker between equal deadlines
}

// Now returns the current virtual time.
func (c *Clock) Now() time.Time { return epoch.Add(c.now) }

// Since returns the virtual time elapsed since t.
func (c *Clock) Since(t time.Time) time.Duration { return c.now - t.Sub(epoch) }

// Advance moves the clock forward by d, firing every timer whose deadline is
// reached. Advance(0) fires timers that are already due. It panics if d is
// negative: virtual time never runs backwards.
func (c *Clock) Advance(d time.Duration) {
	if d < 0 {
		panic("simnet: Clock.Advance with negative duration " + d.String())
	}
	c.advance(c.now + d)
}

// AdvanceTo moves the clock forward to t, firing every timer whose deadline is
// at or before t. If t is not after the current time the clock keeps its time
// but still fires timers that are due; that lets a harness advance to
// "the earliest pending deadline" without first checking whether that
// deadline has already passed.
func (c *Clock) AdvanceTo(t time.Time) { c.advance(t.Sub(epoch)) }

// NextTimer returns the deadline of the earliest pending timer, and false if
// no timer is pending.
func (c *Clock) NextTimer() (time.Time, bool) {
	if len(c.timers) == 0 {
		return time.Time{}, false
	}
	return epoch.Add(c.timers[0].when), true
}

// advance fires the timers due at or before t, in order, then sets the clock
// to t unless a timer function already moved it further (a timer may itself
// advance the clock or deliver datagrams).
func (c *Clock) advance(t time.Duration) {
	for c.fireNext(t) {
	}
	c.now = max(c.now, t)
}

// fireNext fires the earliest timer if its deadline is at or before limit,
// and reports whether it did. Timers scheduled by the fired function are seen
// by the next call, so a chain of zero-delay timers runs to completion.
func (c *Clock) fireNext(limit time.Duration) bool {
	if len(c.timers) == 0 || c.timers[0].when > limit {
		return false
	}
	t := c.timers.pop()
	c.now = max(c.now, t.when)
	t.f()
	return true
}

// nextTimer is NextTimer in the clock's internal representation.
func (c *Clock) nextTimer() (time.Duration, bool) {
	if len(c.timers) == 0 {
		return 0, false
	}
	return c.timers[0].when, true
}

// AfterFunc schedules f to run on the clock's goroutine once the clock has
// advanced by d. A d of zero or less makes the timer due immediately: it
// fires on the next Advance or AdvanceTo, even one that does not move time.
// Timers due at the same instant fire in the order they were scheduled.
func (c *Clock) AfterFunc(d time.Duration, f func()) *Timer {
	if f == nil {
		panic("simnet: Clock.AfterFunc with nil function")
	}
	t := &Timer{c: c, f: f, index: -1}
	c.schedule(t, d)
	return t
}

func (c *Clock) schedule(t *Timer, d time.Duration) {
	t.when = c.now + max(d, 0)
	t.seq = c.seq
	c.seq++
	c.timers.push(t)
}

// Timer is a pending call scheduled with [Clock.AfterFunc].
type Timer struct {
	c     *Clock
	f     func()
	when  time.Duration
	seq   uint64
	index int // position in the clock's heap, -1 when not pending
}

// Stop cancels the timer. It reports whether the call stopped it, false if it
// had already fired or been stopped.
func (t *Timer) Stop() bool {
	if t.index < 0 {
		return false
	}
	t.c.timers.remove(t.index)
	return true
}

// Reset reschedules the timer to fire d from now, whether or not it is
// pending. It reports whether the timer was pending. A reset timer is ordered
// among timers with the same deadline as if it had just been scheduled.
func (t *Timer) Reset(d time.Duration) bool {
	pending := t.Stop()
	t.c.schedule(t, d)
	return pending
}

// timerHeap is a binary min-heap of timers ordered by (when, seq). Each timer
// records its index so that Stop is O(log n).
type timerHeap []*Timer

func (h timerHeap) less(i, j int) bool {
	if h[i].when != h[j].when {
		return h[i].when < h[j].when
	}
	return h[i].seq < h[j].seq
}

func (h timerHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *timerHeap) push(t *Timer) {
	t.index = len(*h)
	*h = append(*h, t)
	h.up(t.index)
}

func (h *timerHeap) pop() *Timer { return h.remove(0) }

func (h *timerHeap) remove(i int) *Timer {
	old := *h
	last := len(old) - 1
	t := old[i]
	if i != last {
		old.swap(i, last)
	}
	old[last] = nil
	*h = old[:last]
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
	t.index = -1
	return t
}

func (h timerHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

// down sifts element i towards the leaves and reports whether it moved.
func (h timerHeap) down(i int) bool {
	start := i
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			break
		}
		h.swap(i, m)
		i = m
	}
	return i > start
}
