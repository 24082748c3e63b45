//go:build linux && cgo && goroce_ibverbs

package verbs

// Completion channels on the hardware backend: an ibv_comp_channel whose
// descriptor (a dup) is in Go's poller. GetEvent acknowledges each event
// as it takes it, so AckEvents has nothing to do and destroying a CQ never
// blocks on unacknowledged events, as on goroce devices it does not.

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/ibverbs"
)

type ibvChannel struct {
	dev *ibvDevice
	c   *ibverbs.CompChannel

	waiting  chan struct{} // one GetEvent reads at a time
	stopping atomic.Bool   // destroy asks the reader to step aside
	closed   bool          // guarded by waiting
	file     *os.File
	conn     syscall.RawConn
}

func (h *ibvDevice) createChannel(d *Device) (*CompChannel, error) {
	const op = "CreateCompChannel"
	c, err := h.dev.CreateCompChannel()
	if err != nil {
		return nil, hwError(op, err)
	}
	hc := &ibvChannel{dev: h, c: c, waiting: make(chan struct{}, 1)}
	if hc.file, hc.conn, err = pollerFile(c.Fd(), "comp-channel"); err != nil {
		_ = c.Destroy()
		return nil, hwError(op, err)
	}
	ch := &CompChannel{dev: d, wake: make(chan struct{}, 1), done: make(chan struct{}), hw: hc}
	if err := d.register(op, func() { d.channels[ch] = struct{}{} }); err != nil {
		_ = hc.file.Close()
		_ = c.Destroy()
		return nil, err
	}
	return ch, nil
}

// getEvent returns the CQ of the next event: one already there even if
// ctx has ended, as on goroce devices.
func (h *ibvChannel) getEvent(ctx context.Context) (*CQ, error) {
	for {
		cq, again, err := h.getEventOnce(ctx)
		if !again {
			return cq, err
		}
	}
}

// getEventOnce waits for an event as the channel's one reader; again
// reports that destroy asked it to step aside (it then finds the channel
// closed, or still there if destroy failed).
func (h *ibvChannel) getEventOnce(ctx context.Context) (cq *CQ, again bool, err error) {
	const op = "GetCQEvent"
	select {
	case h.waiting <- struct{}{}:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	defer func() { <-h.waiting }()
	if h.closed {
		return nil, false, closedError(op, "channel")
	}
	var handle uintptr
	var got bool
	var takeErr error
	take := func(uintptr) bool {
		handle, got, takeErr = h.c.TakeEvent()
		return got || takeErr != nil
	}
	stop := context.AfterFunc(ctx, func() { _ = h.file.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	for {
		take(0)
		switch {
		case takeErr != nil:
			return nil, false, hwError(op, takeErr)
		case got:
			return h.cqOf(handle), false, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		_ = h.file.SetReadDeadline(time.Time{})
		if h.stopping.Load() {
			return nil, true, nil // destroy sets stopping before the deadline
		}
		rerr := h.conn.Read(take)
		switch {
		case takeErr != nil:
			return nil, false, hwError(op, takeErr)
		case got:
			return h.cqOf(handle), false, nil
		case rerr == nil, errors.Is(rerr, os.ErrDeadlineExceeded):
			// Readable without an event for us, or a deadline: this
			// ctx's, destroy's or a stale one. Look again.
		case errors.Is(rerr, os.ErrClosed):
			return nil, false, closedError(op, "channel")
		default:
			return nil, false, hwError(op, rerr)
		}
	}
}

func (h *ibvChannel) cqOf(handle uintptr) *CQ {
	h.dev.mu.Lock()
	defer h.dev.mu.Unlock()
	return h.dev.cqs[handle]
}

// destroy moves the reader aside, then destroys the channel: ErrBusy while
// CQs use it.
func (h *ibvChannel) destroy(ch *CompChannel) error {
	const op = "DestroyCompChannel"
	h.stopping.Store(true)
	_ = h.file.SetReadDeadline(time.Unix(1, 0))
	h.waiting <- struct{}{}
	h.stopping.Store(false)
	defer func() { <-h.waiting }()
	if h.closed {
		return closedError(op, "channel")
	}
	if err := h.c.Destroy(); err != nil {
		return hwError(op, err)
	}
	h.closed = true
	_ = h.file.Close()
	d := ch.dev
	d.unregister(func() { delete(d.channels, ch) })
	return nil
}
