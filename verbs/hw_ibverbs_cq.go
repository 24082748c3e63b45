//go:build linux && cgo && goroce_ibverbs

package verbs

// CQs on the hardware backend: polled into a per-CQ C array without
// allocation; CQ.Wait parks in Go's poller on a completion channel of the
// CQ's own.

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/ibverbs"
)

// ibvCQ is a CQ with a completion channel of its own, whose descriptor
// (a dup, in Go's poller) CQ.Wait parks on; or, created with a
// CompChannel, without (file nil): its events are GetEvent's.
type ibvCQ struct {
	cqe atomic.Int64 // the size asked for (CreateCQ, Resize)

	mu      sync.Mutex    // serialises polls: wcs is the CQ's one scratch array
	cq      *ibverbs.CQ   // nil once destroyed
	wcs     []ibverbs.WC  // converted into WorkCompletions
	waiting chan struct{} // one goroutine parks at a time
	// stopping asks a parked waiter to leave, for destroy.
	stopping atomic.Bool
	file     *os.File
	conn     syscall.RawConn
}

func (h *ibvDevice) createCQ(d *Device, cqe int, ch *CompChannel) (*CQ, error) {
	const op = "CreateCQ"
	if cqe < 1 || cqe > d.attr.MaxCQE {
		return nil, errorf(op, "cqe", ErrInvalidArgument, "%d outside 1..%d", cqe, d.attr.MaxCQE)
	}
	if ch != nil {
		return h.createCQOn(d, cqe, ch)
	}
	c, err := h.dev.CreateCQWithChannel(cqe)
	if err != nil {
		return nil, hwError(op, err)
	}
	hc := &ibvCQ{cq: c, wcs: make([]ibverbs.WC, 64), waiting: make(chan struct{}, 1)}
	if hc.file, hc.conn, err = pollerFile(c.Fd(), "cq-channel"); err != nil {
		_ = c.Destroy()
		return nil, hwError(op, err)
	}
	hc.cqe.Store(int64(cqe))
	cq := &CQ{dev: d, id: cqIDs.Add(1), hw: hc}
	if err := d.register(op, func() { d.cqs[cq] = struct{}{} }); err != nil {
		_ = hc.file.Close()
		_ = c.Destroy()
		return nil, err
	}
	h.trackCQ(c.Handle(), cq)
	return cq, nil
}

// createCQOn creates a CQ whose events go to ch.
func (h *ibvDevice) createCQOn(d *Device, cqe int, ch *CompChannel) (*CQ, error) {
	const op = "CreateCQ"
	hch, ok := ch.hw.(*ibvChannel)
	if !ok || ch.dev != d {
		return nil, newError(op, "channel", ErrInvalidArgument, "belongs to another device")
	}
	c, err := h.dev.CreateCQOn(cqe, hch.c)
	if err != nil {
		return nil, hwError(op, err)
	}
	hc := &ibvCQ{cq: c, wcs: make([]ibverbs.WC, 64), waiting: make(chan struct{}, 1)}
	hc.cqe.Store(int64(cqe))
	cq := &CQ{dev: d, id: cqIDs.Add(1), ch: ch, hw: hc}
	if err := d.register(op, func() { d.cqs[cq] = struct{}{} }); err != nil {
		_ = c.Destroy()
		return nil, err
	}
	h.trackCQ(c.Handle(), cq)
	return cq, nil
}

func (h *ibvCQ) size() int { return int(h.cqe.Load()) }

// resize resizes the CQ (ibv_resize_cq) with polls excluded: a provider
// may move the queue's memory (rxe maps a new one).
func (h *ibvCQ) resize(cqe int) error {
	const op = "ResizeCQ"
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cq == nil {
		return closedError(op, "cq")
	}
	if err := h.cq.Resize(cqe); err != nil {
		return hwError(op, err)
	}
	h.cqe.Store(int64(cqe))
	return nil
}

func (h *ibvCQ) reqNotify(solicitedOnly bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cq == nil {
		return closedError("ReqNotifyCQ", "cq")
	}
	if err := h.cq.ReqNotify(solicitedOnly); err != nil {
		return hwError("ReqNotifyCQ", err)
	}
	return nil
}

func (h *ibvCQ) poll(wc []WorkCompletion) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cq == nil {
		return 0, closedError("PollCQ", "cq")
	}
	n, err := h.cq.Poll(h.wcs[:min(len(wc), len(h.wcs))])
	if err != nil {
		return 0, hwError("PollCQ", err)
	}
	for i := range n {
		w := &h.wcs[i]
		wc[i] = WorkCompletion{WRID: w.WRID, Status: WCStatus(w.Status), Opcode: WCOpcode(w.Opcode),
			VendorErr: w.VendorErr, ByteLen: w.ByteLen, QPNum: w.QPNum, SrcQP: w.SrcQP, WCFlags: WCFlags(w.Flags),
			PKeyIndex: w.PKeyIndex, SLID: w.SLID, SL: w.SL, DLIDPathBits: w.DLIDBits}
		if wc[i].WCFlags&WCWithImm != 0 {
			wc[i].ImmData = w.Imm
		}
		if wc[i].WCFlags&WCWithInv != 0 {
			wc[i].InvalidatedRKey = w.InvRKey
		}
	}
	return n, nil
}

// park arms the CQ and waits, in Go's poller, until its channel reports an
// event, ctx ends or the CQ is destroyed; like the software park it
// returns completions only if it found some before waiting.
func (h *ibvCQ) park(ctx context.Context, wc []WorkCompletion) (int, error) {
	select {
	case h.waiting <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-h.waiting }()
	h.mu.Lock()
	c := h.cq
	h.mu.Unlock()
	if c == nil {
		return 0, closedError("WaitCQ", "cq")
	}
	if h.file == nil {
		// Its events are the channel's (GetEvent): poll, a little
		// later.
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		time.Sleep(50 * time.Microsecond)
		return 0, nil
	}
	if err := c.ReqNotify(false); err != nil {
		return 0, hwError("WaitCQ", err)
	}
	if n, err := h.poll(wc); n > 0 || err != nil {
		return n, err
	}
	stop := context.AfterFunc(ctx, func() { _ = h.file.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		_ = h.file.SetReadDeadline(time.Time{})
		if h.stopping.Load() {
			return 0, nil // destroy sets stopping before the deadline
		}
		var evErr error
		err := h.conn.Read(func(uintptr) bool {
			got, err := c.TakeEvent()
			evErr = err
			return got || err != nil
		})
		switch {
		case evErr != nil:
			return 0, hwError("WaitCQ", evErr)
		case err == nil:
			return 0, nil
		case errors.Is(err, os.ErrClosed):
			return 0, closedError("WaitCQ", "cq")
		case !errors.Is(err, os.ErrDeadlineExceeded):
			return 0, hwError("WaitCQ", err)
		}
		// A deadline: this ctx's (checked above), or a stale one set
		// by an earlier park's context after that park returned.
	}
}

// destroy wakes a parked waiter (stopping, then a deadline), waits for it
// to leave, then destroys the CQ and its channel; the waiter comes back to
// find the CQ gone, or still there if the device refused (EBUSY while QPs
// use it).
func (h *ibvCQ) destroy(cq *CQ) error {
	const op = "DestroyCQ"
	h.stopping.Store(true)
	if h.file != nil {
		_ = h.file.SetReadDeadline(time.Unix(1, 0))
	}
	h.waiting <- struct{}{}
	h.stopping.Store(false)
	defer func() { <-h.waiting }()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cq == nil {
		return closedError(op, "cq")
	}
	handle := h.cq.Handle()
	if err := h.cq.Destroy(); err != nil {
		return hwError(op, err)
	}
	h.cq = nil
	cq.dev.hw.(*ibvDevice).trackCQ(handle, nil)
	if h.file != nil {
		_ = h.file.Close()
	}
	d := cq.dev
	d.unregister(func() { delete(d.cqs, cq) })
	return nil
}
