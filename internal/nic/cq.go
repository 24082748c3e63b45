package nic

import (
	"context"
	"encoding/binary"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nicproto"
	"github.com/goroce/goroce/verbs"
)

// chanObj is a completion channel: a pipe whose read end is the
// application's ibv_comp_channel.fd; the daemon writes one
// struct gr_comp_event per event.
type chanObj struct {
	h     uint32
	w     int
	users atomic.Int32 // CQs attached
}

func (c *chanObj) close() { unix.Close(c.w) }

// post writes one event for the CQ; an application that lets its channel
// fill up (8,192 unread events) loses the newest, as it has not read the
// older ones either.
func (c *chanObj) post(cqHandle uint32) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(cqHandle))
	unix.Write(c.w, b[:])
}

func (s *session) createChannel(_ []byte, _ []int) (reply, error) {
	r, w, err := newEventPipe()
	if err != nil {
		return reply{}, err
	}
	s.mu.Lock()
	c := &chanObj{h: s.newHandle(), w: w}
	s.chans[c.h] = c
	s.mu.Unlock()
	return reply{body: []any{nicproto.Handle{Handle: c.h}}, fds: []int{r}, closeAfter: []int{r}}, nil
}

func (s *session) destroyChannel(body []byte, _ []int) (reply, error) {
	var req nicproto.Handle
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.chans[req.Handle]
	if c == nil {
		return reply{}, errInval
	}
	if c.users.Load() > 0 {
		return reply{}, errBusy
	}
	delete(s.chans, req.Handle)
	c.close()
	return reply{}, nil
}

// cqObj is a CQ and its ring. The mover goroutine copies the verbs CQ's
// completions into the ring, so the ring and the verbs CQ together hold up
// to twice cqe completions before the verbs CQ overruns.
type cqObj struct {
	h     uint32
	sess  *session
	cq    *verbs.CQ
	ch    *chanObj
	users atomic.Int32 // QPs using the CQ

	mu      sync.Mutex // producers of ring entries
	r       *ring
	hdr     *nicproto.CQHdr
	cqes    []nicproto.CQE
	entries uint64

	cancel context.CancelFunc
	done   chan struct{}
}

func newCQRing(entries int) (*ring, error) {
	return newRing("goroce-cq", nicproto.CQHdrSize+entries*nicproto.CQESize)
}

func (c *cqObj) attach(r *ring, entries int) {
	c.r = r
	c.hdr = (*nicproto.CQHdr)(r.at(0))
	c.cqes = unsafe.Slice((*nicproto.CQE)(r.at(nicproto.CQHdrSize)), entries)
	c.entries = uint64(entries)
}

func (s *session) createCQ(body []byte, _ []int) (reply, error) {
	var req nicproto.CreateCQReq
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	var ch *chanObj
	if req.Channel != 0 {
		s.mu.RLock()
		ch = s.chans[req.Channel]
		s.mu.RUnlock()
		if ch == nil {
			return reply{}, errInval
		}
	}
	max := s.dev.dev.Query().MaxCQE
	if req.CQE == 0 || int64(req.CQE) > int64(max) {
		return reply{}, errInval
	}
	cq, err := s.dev.dev.CreateCQ(int(req.CQE), nil, int(req.CompVector))
	if err != nil {
		return reply{}, err
	}
	entries := nicproto.Entries(cq.Size())
	r, err := newCQRing(entries)
	if err != nil {
		cq.Destroy()
		return reply{}, err
	}
	c := &cqObj{sess: s, cq: cq, ch: ch}
	c.attach(r, entries)
	if ch != nil {
		ch.users.Add(1)
	}
	s.mu.Lock()
	c.h = s.newHandle()
	s.cqs[c.h] = c
	s.mu.Unlock()
	s.dev.owners.Store(cq, owner{sess: s, kind: nicproto.ObjCQ, handle: c.h})
	c.start()
	resp := nicproto.CreateCQResp{Handle: c.h, CQE: uint32(cq.Size()), Entries: uint32(entries), RingSize: uint64(len(r.mem))}
	fd := r.fd
	r.fd = -1
	return reply{body: []any{resp}, fds: []int{fd}, closeAfter: []int{fd}}, nil
}

func (c *cqObj) start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done = cancel, make(chan struct{})
	go c.move(ctx)
}

func (c *cqObj) stop() {
	c.cancel()
	<-c.done
}

// resizeCQ resizes the verbs CQ and, when the ring no longer fits, moves the
// pending completions to a new ring the client maps in place of the old one.
// The client holds its CQ lock across the call, so nothing consumes meanwhile.
func (s *session) resizeCQ(body []byte, _ []int) (reply, error) {
	var req nicproto.ResizeCQReq
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	s.mu.RLock()
	c := s.cqs[req.Handle]
	s.mu.RUnlock()
	if c == nil {
		return reply{}, errInval
	}
	c.stop()
	defer c.start()
	c.mu.Lock()
	defer c.mu.Unlock()
	prod, cons := c.hdr.Prod, atomic.LoadUint64(&c.hdr.Cons)
	pending := prod - cons
	if pending > c.entries {
		pending = 0
	}
	if int64(req.CQE) < int64(pending) {
		return reply{}, errInval
	}
	if err := c.cq.Resize(int(req.CQE)); err != nil {
		return reply{}, err
	}
	entries := nicproto.Entries(c.cq.Size())
	r, err := newCQRing(entries)
	if err != nil {
		return reply{}, err
	}
	old, oldHdr := c.r, c.hdr
	oldCQEs, oldEntries := c.cqes, c.entries
	c.attach(r, entries)
	for i := uint64(0); i < pending; i++ {
		c.cqes[i] = oldCQEs[(cons+i)%oldEntries]
	}
	c.hdr.Prod = pending
	c.hdr.Arm = atomic.LoadUint32(&oldHdr.Arm)
	old.unmap()
	resp := nicproto.CreateCQResp{Handle: c.h, CQE: uint32(c.cq.Size()), Entries: uint32(entries), RingSize: uint64(len(r.mem))}
	fd := r.fd
	r.fd = -1
	return reply{body: []any{resp}, fds: []int{fd}, closeAfter: []int{fd}}, nil
}

func (s *session) destroyCQ(body []byte, _ []int) (reply, error) {
	var req nicproto.Handle
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	s.mu.RLock()
	c := s.cqs[req.Handle]
	s.mu.RUnlock()
	if c == nil {
		return reply{}, errInval
	}
	if c.users.Load() > 0 {
		return reply{}, errBusy
	}
	if err := s.dropCQ(c); err != nil {
		return reply{}, err
	}
	return reply{}, nil
}

func (s *session) dropCQ(c *cqObj) error {
	c.stop()
	if err := c.cq.Destroy(); err != nil {
		c.start()
		return err
	}
	s.dev.owners.Delete(c.cq)
	s.mu.Lock()
	delete(s.cqs, c.h)
	s.mu.Unlock()
	if c.ch != nil {
		c.ch.users.Add(-1)
	}
	c.r.unmap()
	return nil
}

// move is the CQ's mover: it waits for completions in the verbs CQ and
// copies as many as the ring has room for.
func (c *cqObj) move(ctx context.Context) {
	defer close(c.done)
	wc := make([]verbs.WorkCompletion, 64)
	backoff := 20 * time.Microsecond
	for {
		space := c.space()
		if space == 0 {
			// The application is not polling: wait for it without a
			// doorbell of its own (a full CQ is the application's
			// problem, not a path to make fast).
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Millisecond)
			continue
		}
		backoff = 20 * time.Microsecond
		n, err := c.cq.Wait(ctx, wc[:min(space, uint64(len(wc)))])
		if err != nil {
			return
		}
		c.mu.Lock()
		for i := range n {
			c.push(&wc[i])
		}
		c.mu.Unlock()
		c.notify()
	}
}

// space returns the free entries of the ring; a consumer index the client
// corrupted counts as a full ring.
func (c *cqObj) space() uint64 {
	used := c.hdr.Prod - atomic.LoadUint64(&c.hdr.Cons)
	if used > c.entries {
		return 0
	}
	return c.entries - used
}

// push translates one completion into the ring. The work request's ID was
// replaced by its queue position when posted (see wq.go); the position gives
// back the application's wr_id and frees the queue slots up to it. A
// completion of a QP destroyed since, or from before a reset, is dropped, as
// providers clean those from their CQs. The caller holds c.mu.
func (c *cqObj) push(wc *verbs.WorkCompletion) {
	// The session's lock is held until the QP's ring is written: dropQP
	// unmaps the ring only after it removed the QP under the write lock.
	c.sess.mu.RLock()
	q := c.sess.qpByNum[wc.QPNum]
	var wrid uint64
	ok := q != nil
	if ok {
		wrid, ok = q.complete(wc.WRID)
	}
	c.sess.mu.RUnlock()
	if !ok {
		return
	}
	e := &c.cqes[c.hdr.Prod%c.entries]
	*e = nicproto.CQE{
		WRID: wrid, Status: uint32(wc.Status), Opcode: uint32(wc.Opcode), VendorErr: wc.VendorErr,
		ByteLen: wc.ByteLen, QPNum: wc.QPNum, SrcQP: wc.SrcQP, WCFlags: uint32(wc.WCFlags),
		PKeyIndex: wc.PKeyIndex, SLID: wc.SLID, SL: wc.SL, DLIDPathBits: wc.DLIDPathBits,
	}
	switch {
	case wc.WCFlags&verbs.WCWithImm != 0:
		e.ImmData = bits.ReverseBytes32(wc.ImmData) // ibv_wc.imm_data is big-endian
	case wc.WCFlags&verbs.WCWithInv != 0:
		e.ImmData = wc.InvalidatedRKey
	}
	atomic.StoreUint64(&c.hdr.Prod, c.hdr.Prod+1)
}

// notify reports a completion event if the application armed the CQ. The
// ring's producer index is published before arm is read, and the shim arms
// before it polls, so either the event fires or the poll sees the entry.
func (c *cqObj) notify() {
	if c.ch == nil || atomic.LoadUint32(&c.hdr.Arm) == 0 {
		return
	}
	if atomic.SwapUint32(&c.hdr.Arm, 0) != 0 {
		c.ch.post(c.h)
	}
}
