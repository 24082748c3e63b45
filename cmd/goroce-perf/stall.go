package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goroce/goroce/verbs"
)

// stall tracks progress and reports a run that has none for stallTimeout.
type stall struct {
	last  time.Time
	spins int
	busy  bool // --busy-poll: never yield or sleep
	// lookWrites: the device cannot tell when a peer's store lands
	// (MR.WaitRemoteWrite on a kernel device, whose NIC writes memory
	// behind the runtime's back): waitWrite looks again after idle.
	lookWrites bool

	// wctx bounds the waits of waitCQ; it is renewed every waitSlice,
	// so one context serves many waits.
	wctx    context.Context
	wcancel context.CancelFunc
}

// stallTimeout is how long a run waits without any progress (no
// completion, no byte changing) before it gives up on the peer.
const stallTimeout = 10 * time.Second

// newStall returns the progress tracker of a traffic loop, busy-polling
// with --busy-poll.
func (s *side) newStall() stall { return stall{busy: s.cfg.busyPoll, lookWrites: s.dev.Hardware()} }

func (st *stall) progress() { st.last, st.spins = time.Now(), 0 }

// idle is called when a poll found nothing. Unless busy polling, it sleeps
// at once: the device's receive goroutines wait for packets in Go's
// network poller, which a processor only consults when it has nothing else
// to run, so any waiting loop that keeps its processor (spinning, or
// yielding with runtime.Gosched, which never polls the network) delays
// every packet whenever all processors are busy: on two cores in
// --loopback mode, where both sides wait at once, 64 yields before the
// first sleep made write_lat's median half round trip 22 µs instead of
// 12 µs. Every few thousand rounds it checks ctx and the clock.
func (st *stall) idle(ctx context.Context, what string) error {
	st.spins++
	if st.busy {
		if st.spins%busyCheckRounds != 0 {
			return nil
		}
		return st.check(ctx, what)
	}
	time.Sleep(idleSleep)
	if st.spins%1024 != 0 {
		return nil
	}
	return st.check(ctx, what)
}

// idleSleep is the pause of a waiting loop after an empty poll, unless
// busy polling.
const idleSleep = time.Microsecond

// busyCheckRounds is how often a busy-polling loop looks at ctx and the
// clock: rarely enough to cost nothing next to the polls, often enough to
// notice a stall or an interrupt within a few milliseconds.
const busyCheckRounds = 1 << 14

// waitWrite waits, unless busy polling or on a kernel device (then it is
// idle), until the count of remote stores into mr differs from seen. It
// fails after stallTimeout without progress, or when ctx ends.
func (st *stall) waitWrite(ctx context.Context, mr *verbs.MR, seen uint64, what string) error {
	if st.busy || st.lookWrites {
		return st.idle(ctx, what)
	}
	return st.sliced(ctx, what, func(c context.Context) error {
		_, err := mr.WaitRemoteWrite(c, seen)
		return err
	})
}

// waitCQ waits for completions on cq and fails on an unsuccessful one.
// Unless busy polling, it parks in CQ.Wait, woken by the device when it
// adds a completion: no timer, no processor held. It fails after
// stallTimeout without progress, or when ctx ends.
func (st *stall) waitCQ(ctx context.Context, cq *verbs.CQ, wc []verbs.WorkCompletion, what string) (int, error) {
	if st.busy {
		for {
			n, err := pollAll(cq, wc)
			if n > 0 || err != nil {
				return n, err
			}
			if err := st.idle(ctx, what); err != nil {
				return 0, err
			}
		}
	}
	var n int
	err := st.sliced(ctx, what, func(c context.Context) (err error) {
		if n, err = cq.Wait(c, wc); n > 0 {
			return nil // completions come first, whatever the context
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	for _, c := range wc[:n] {
		if c.Status != verbs.WCSuccess {
			return 0, fmt.Errorf("completion error: %v (wr_id %#x, vendor_err %#x)", c.Status, c.WRID, c.VendorErr)
		}
	}
	return n, nil
}

// waitSlice is how long one wait context of waitCQ lasts: the longest a
// stalled run waits before it looks at the clock again.
const waitSlice = time.Second

// sliced runs wait with a context that ends after waitSlice at most, so
// that a stalled run is noticed: each time the slice runs out (not ctx) it
// fails after stallTimeout without progress, or renews the slice and waits
// again. It returns wait's first other result.
func (st *stall) sliced(ctx context.Context, what string, wait func(context.Context) error) error {
	for {
		if st.wctx == nil {
			st.wctx, st.wcancel = context.WithTimeout(ctx, waitSlice)
		}
		err := wait(st.wctx)
		if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return err
		}
		st.wcancel()
		st.wctx = nil
		if err := st.check(ctx, what); err != nil {
			return err
		}
	}
}

// done releases the wait context; a traffic loop defers it.
func (st *stall) done() {
	if st.wcancel != nil {
		st.wcancel()
		st.wctx, st.wcancel = nil, nil
	}
}

// check fails when ctx is done or the run has made no progress for
// stallTimeout.
func (st *stall) check(ctx context.Context, what string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if time.Since(st.last) > stallTimeout {
		return fmt.Errorf("no progress for %v waiting for %s: is the peer still there?", stallTimeout, what)
	}
	return nil
}
