package verbs

import (
	"context"
	"runtime"
	"time"
)

// cqWait holds the goroutines blocked in Wait on one CQ. It is guarded by
// CQ.mu.
type cqWait struct {
	waiters int           // goroutines parked in Wait
	wake    chan struct{} // capacity 1; made by the first Wait that parks
}

// wakeWaiterLocked wakes one goroutine parked in Wait, or leaves a token for
// the next one to park. The caller holds cq.mu: push calls it after adding a
// completion and destroy after closing the CQ.
func (cq *CQ) wakeWaiterLocked() {
	if cq.wait.waiters == 0 {
		return
	}
	select {
	case cq.wait.wake <- struct{}{}:
	default:
	}
}

// Wait is Poll that blocks until the CQ holds at least one completion: it
// moves up to len(wc) completions into wc and returns how many, at least
// one. It parks the goroutine as soon as the CQ is empty, and the device
// wakes it when it adds a completion, so a waiting goroutine burns no CPU,
// takes no timer and never keeps the device's receive goroutine from
// running. It returns ctx.Err() when ctx ends first (a completion already
// queued is returned even if ctx is done) and ErrClosed once the CQ is
// destroyed.
//
// Wait needs no completion channel and does not arm the CQ: it neither
// consumes nor raises completion events, so it can be mixed with ReqNotify
// and GetEvent on the same CQ. Several goroutines may wait on one CQ; each
// completion goes to one of them.
//
// Parking at once is the fastest wait where processors are few: the
// device's receive goroutine waits for packets in Go's network poller,
// which the runtime consults when a processor runs out of work, so any
// waiter that holds its processor (spinning, or yielding with
// runtime.Gosched, which does not poll the network) delays the packet that
// would end its wait whenever every processor is busy. On two cores an
// 8-byte WRITE-with-immediate ping-pong between two devices in one process
// took about 30 µs a round trip with Wait, against about 45 µs sleeping on
// a completion channel and more with a 5 µs spin before parking (verbs'
// BenchmarkRCWriteLatency8BWait).
func (cq *CQ) Wait(ctx context.Context, wc []WorkCompletion) (int, error) {
	return cq.WaitSpin(ctx, wc, 0)
}

// WaitSpin is Wait that first polls the empty CQ for up to spin, yielding
// the processor between polls, before it parks; a negative spin never
// parks, polling in a tight loop like perftest's latency tests. Spinning
// saves the wake-up of a parked goroutine only while a processor is left
// for the device's receive goroutine (GOMAXPROCS above the number of
// spinning waiters, and cores to run them); otherwise it delays the very
// completion it waits for, and a busy loop can starve the device long
// enough for the transport's retries to run out. The busy loop checks ctx
// every few thousand polls.
func (cq *CQ) WaitSpin(ctx context.Context, wc []WorkCompletion, spin time.Duration) (int, error) {
	const op = "WaitCQ"
	if len(wc) == 0 {
		return 0, newError(op, "wc", ErrInvalidArgument, "no room for a completion")
	}
	var start time.Time
	for round := 0; ; round++ {
		n, err := cq.Poll(wc)
		if n > 0 || err != nil {
			return n, err
		}
		switch {
		case spin < 0:
			if round%busyCtxRounds == 0 {
				if err := ctx.Err(); err != nil {
					return 0, err
				}
			}
			continue
		case spin > 0 && round == 0:
			start = time.Now()
			runtime.Gosched()
			continue
		case spin > 0 && time.Since(start) < spin:
			runtime.Gosched()
			continue
		}
		n, err = cq.park(ctx, wc)
		if n > 0 || err != nil {
			return n, err
		}
	}
}

// busyCtxRounds is how often a busy WaitSpin looks at its context.
const busyCtxRounds = 4096

// park blocks until a completion is added, ctx ends or the CQ is destroyed.
// It returns completions only when the CQ turned out not to be empty before
// parking; after a wake-up it returns 0 and nil, and the caller polls again.
func (cq *CQ) park(ctx context.Context, wc []WorkCompletion) (int, error) {
	if cq.hw != nil {
		return hwPark(cq, ctx, wc)
	}
	cq.mu.Lock()
	switch {
	case cq.closed:
		cq.wakeWaiterLocked() // pass the news on to the next waiter
		cq.mu.Unlock()
		return 0, closedError("WaitCQ", "cq")
	case cq.count > 0:
		cq.mu.Unlock()
		return cq.Poll(wc)
	}
	if err := ctx.Err(); err != nil {
		cq.mu.Unlock()
		return 0, err
	}
	if cq.wait.wake == nil {
		cq.wait.wake = make(chan struct{}, 1)
	}
	wake := cq.wait.wake
	cq.wait.waiters++
	cq.mu.Unlock()

	var err error
	select {
	case <-wake:
	case <-ctx.Done():
		err = ctx.Err()
	}

	cq.mu.Lock()
	cq.wait.waiters--
	if cq.count > 1 || cq.closed {
		// One token may stand for several completions, or for the
		// CQ's end: hand it on to another waiter.
		cq.wakeWaiterLocked()
	}
	queued := cq.count > 0
	cq.mu.Unlock()
	if err != nil && queued {
		return cq.Poll(wc)
	}
	return 0, err
}
