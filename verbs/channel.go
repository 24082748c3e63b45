package verbs

import (
	"context"
	"sync"
)

// CompChannel is a completion event channel (struct ibv_comp_channel):
// armed CQs attached to it report completion events through it, and a
// consumer waits for them with GetEvent instead of polling.
//
// Go has no file descriptor to poll here, so waiting takes a context: a
// blocked GetEvent returns when an event arrives, when the context is done,
// or when the channel is destroyed. One event is reported per ReqNotify;
// events of one channel are returned in the order they occurred.
//
// A program that waits on one CQ does not need a channel: CQ.Wait blocks
// until a completion arrives, with no arming, and is faster.
type CompChannel struct {
	dev *Device

	mu         sync.Mutex
	closed     bool
	head, tail *CQ // FIFO of CQs with pending events
	cqs        int // CQs using the channel

	wake chan struct{} // capacity 1: "the FIFO may be non-empty"
	done chan struct{} // closed by Destroy

	hw hwChannel // the hardware backend's; nil on a goroce device
}

// CreateCompChannel creates a completion channel (ibv_create_comp_channel).
func (d *Device) CreateCompChannel() (*CompChannel, error) {
	const op = "CreateCompChannel"
	if d.hw != nil {
		return d.hw.createChannel(d)
	}
	ch := &CompChannel{dev: d, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if err := d.register(op, func() { d.channels[ch] = struct{}{} }); err != nil {
		return nil, err
	}
	return ch, nil
}

// GetEvent waits for the next completion event and returns the CQ that
// produced it (ibv_get_cq_event). Each returned event must eventually be
// acknowledged with the CQ's AckEvents; re-arm the CQ with ReqNotify to get
// another one. If an event is pending GetEvent returns it even when ctx is
// already done. It returns ctx.Err() when ctx ends first and ErrClosed when
// the channel is destroyed.
func (ch *CompChannel) GetEvent(ctx context.Context) (*CQ, error) {
	if ch.hw != nil {
		return ch.hw.getEvent(ctx)
	}
	for {
		ch.mu.Lock()
		if ch.closed {
			ch.mu.Unlock()
			return nil, closedError("GetCQEvent", "channel")
		}
		if cq := ch.head; cq != nil {
			ch.head = cq.evNext
			if ch.head == nil {
				ch.tail = nil
			}
			cq.evNext, cq.evQueued = nil, false
			cq.evPending--
			if cq.evPending > 0 {
				// Requeue at the tail so the CQ's next event comes
				// after events other CQs raised meanwhile.
				ch.appendLocked(cq)
			}
			cq.evDelivered++
			more := ch.head != nil
			ch.mu.Unlock()
			if more {
				ch.signal() // pass the wake-up on to another waiter
			}
			return cq, nil
		}
		ch.mu.Unlock()

		select {
		case <-ch.wake:
		case <-ch.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Destroy destroys the channel (ibv_destroy_comp_channel). It fails with
// ErrBusy while CQs use it. Blocked GetEvent calls return ErrClosed.
func (ch *CompChannel) Destroy() error {
	if ch.hw != nil {
		return ch.hw.destroy(ch)
	}
	return ch.destroy(false)
}

// destroy destroys the channel; force (Device.Close) skips the busy check.
func (ch *CompChannel) destroy(force bool) error {
	const op = "DestroyCompChannel"
	ch.mu.Lock()
	if ch.closed {
		ch.mu.Unlock()
		return closedError(op, "channel")
	}
	if !force && ch.cqs > 0 {
		n := ch.cqs
		ch.mu.Unlock()
		return errorf(op, "channel", ErrBusy, "%d CQs use it", n)
	}
	ch.closed = true
	ch.head, ch.tail = nil, nil
	close(ch.done)
	ch.mu.Unlock()
	ch.dev.unregister(func() { delete(ch.dev.channels, ch) })
	return nil
}

// notify queues one event for cq. The caller holds cq.mu.
func (ch *CompChannel) notify(cq *CQ) {
	ch.mu.Lock()
	if ch.closed {
		ch.mu.Unlock()
		return
	}
	cq.evPending++
	if !cq.evQueued {
		ch.appendLocked(cq)
	}
	ch.mu.Unlock()
	ch.signal()
}

// signal wakes one waiter, or leaves a token for the next one.
func (ch *CompChannel) signal() {
	select {
	case ch.wake <- struct{}{}:
	default:
	}
}

func (ch *CompChannel) appendLocked(cq *CQ) {
	cq.evQueued = true
	if ch.tail == nil {
		ch.head = cq
	} else {
		ch.tail.evNext = cq
	}
	ch.tail = cq
}

// dequeueLocked drops cq's pending events (when cq is destroyed).
func (ch *CompChannel) dequeueLocked(cq *CQ) {
	cq.evPending = 0
	if !cq.evQueued {
		return
	}
	var prev *CQ
	for c := ch.head; c != nil; prev, c = c, c.evNext {
		if c != cq {
			continue
		}
		if prev == nil {
			ch.head = c.evNext
		} else {
			prev.evNext = c.evNext
		}
		if ch.tail == c {
			ch.tail = prev
		}
		break
	}
	cq.evNext, cq.evQueued = nil, false
}

// attach records a CQ using the channel.
func (ch *CompChannel) attach(op string) error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return closedError(op, "channel")
	}
	ch.cqs++
	return nil
}

// detach drops a CQ recorded by attach.
func (ch *CompChannel) detach() {
	ch.mu.Lock()
	ch.cqs--
	ch.mu.Unlock()
}
