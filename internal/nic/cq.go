//go:build linux

package nic

import (
	"encoding/binary"
	"math/bits"
	"sync"
	"sync/atomic"
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

// cqObj is a CQ and its ring. The verbs CQ hands its completions to the
// cqObj (a verbs.CompletionSink) on the goroutine that produced them, which
// writes them straight into the ring: the ring is the CQ's only storage, so
// a full ring overruns the CQ as a full hardware CQ does.
type cqObj struct {
	h     uint32
	sess  *session
	cq    *verbs.CQ
	ch    *chanObj
	users atomic.Int32 // QPs using the CQ

	// mu guards the ring's geometry (replaced by resize) against
	// DeliverCompletion, which the verbs CQ calls under its own lock: mu
	// is always taken after that lock, never before.
	mu      sync.Mutex
	r       *ring
	hdr     *nicproto.CQHdr
	cqes    []nicproto.CQE
	entries uint64
	// due: completions were delivered since the last NotifyCompletions;
	// dueSolicited: one of them satisfies a solicited-only arm. Guarded
	// by mu.
	due, dueSolicited bool
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
	if err := cq.SetSink(c); err != nil {
		r.unmap()
		cq.Destroy()
		return reply{}, err
	}
	if ch != nil {
		ch.users.Add(1)
	}
	s.mu.Lock()
	c.h = s.newHandle()
	s.cqs[c.h] = c
	s.mu.Unlock()
	s.dev.owners.Store(cq, owner{sess: s, kind: nicproto.ObjCQ, handle: c.h})
	resp := nicproto.CreateCQResp{Handle: c.h, CQE: uint32(cq.Size()), Entries: uint32(entries), RingSize: uint64(len(r.mem))}
	fd := r.fd
	r.fd = -1
	return reply{body: []any{resp}, fds: []int{fd}, closeAfter: []int{fd}}, nil
}

// resizeCQ moves the pending completions to a new ring the client maps in
// place of the old one. The client holds its CQ lock across the call, so
// nothing consumes meanwhile. The new size must hold what the CQ holds and
// what may still complete into it soon: the send work requests outstanding
// on its QPs (a client that resizes right after posting would otherwise see
// a check pass or fail depending on how fast the sends completed).
func (s *session) resizeCQ(body []byte, _ []int) (reply, error) {
	var req nicproto.ResizeCQReq
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	s.mu.RLock()
	c := s.cqs[req.Handle]
	var outstanding uint64
	for _, q := range s.qps {
		if q.sendCQ == c {
			outstanding += q.sq.outstanding()
		}
	}
	s.mu.RUnlock()
	if c == nil {
		return reply{}, errInval
	}
	max := s.dev.dev.Query().MaxCQE
	if req.CQE == 0 || int64(req.CQE) > int64(max) {
		return reply{}, errInval
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	prod, cons := c.hdr.Prod, atomic.LoadUint64(&c.hdr.Cons)
	pending := prod - cons
	if pending > c.entries {
		pending = 0
	}
	if uint64(req.CQE) < pending+outstanding {
		return reply{}, errInval
	}
	entries := nicproto.Entries(int(req.CQE))
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
	resp := nicproto.CreateCQResp{Handle: c.h, CQE: req.CQE, Entries: uint32(entries), RingSize: uint64(len(r.mem))}
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

// dropCQ destroys the verbs CQ, after which no completion reaches the ring
// (DeliverCompletion runs under the verbs CQ's lock), and unmaps the ring.
func (s *session) dropCQ(c *cqObj) error {
	if err := c.cq.Destroy(); err != nil {
		return err
	}
	s.dev.owners.Delete(c.cq)
	s.mu.Lock()
	delete(s.cqs, c.h)
	s.mu.Unlock()
	if c.ch != nil {
		c.ch.users.Add(-1)
	}
	c.mu.Lock()
	c.r.unmap()
	c.mu.Unlock()
	return nil
}

// DeliverCompletion translates one completion into the ring (the verbs
// CQ's sink). The work request's ID was replaced by its queue position when
// posted (see wq.go); the position gives back the application's wr_id and
// frees the queue slots up to it. A completion of a QP destroyed since, or
// from before a reset, is dropped (accepted and forgotten), as providers
// clean those from their CQs. A full ring, or a consumer index the client
// corrupted, refuses the completion: the CQ overruns.
func (c *cqObj) DeliverCompletion(wc verbs.WorkCompletion) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.r.mem == nil {
		return false
	}
	q := c.sess.qpByNum(wc.QPNum)
	if q == nil {
		return true
	}
	wrid, ok := q.complete(wc.WRID)
	if !ok {
		return true
	}
	if c.hdr.Prod-atomic.LoadUint64(&c.hdr.Cons) >= c.entries {
		return false
	}
	e := &c.cqes[c.hdr.Prod%c.entries]
	*e = nicproto.CQE{
		WRID: wrid, Status: uint32(wc.Status), Opcode: uint32(wc.Opcode), VendorErr: wc.VendorErr,
		ByteLen: wc.ByteLen, QPNum: wc.QPNum, SrcQP: wc.SrcQP, WCFlags: uint32(wc.WCFlags),
		PKeyIndex: wc.PKeyIndex, SLID: wc.SLID, SL: wc.SL, DLIDPathBits: wc.DLIDPathBits,
	}
	if wc.Solicited {
		e.Solicited = 1
	}
	c.due = true
	c.dueSolicited = c.dueSolicited || wc.Solicited || wc.Status != verbs.WCSuccess
	switch {
	case wc.WCFlags&verbs.WCWithImm != 0:
		e.ImmData = bits.ReverseBytes32(wc.ImmData) // ibv_wc.imm_data is big-endian
	case wc.WCFlags&verbs.WCWithInv != 0:
		e.ImmData = wc.InvalidatedRKey
	}
	atomic.StoreUint64(&c.hdr.Prod, c.hdr.Prod+1)
	return true
}

// NotifyCompletions reports a completion event for the completions
// delivered since the last call if the application armed the CQ for them:
// any completion for GR_ARM_NEXT, a solicited or unsuccessful one for
// GR_ARM_SOLICITED (the IBA's rule, as verbs.CQ.ReqNotify). The verbs CQ
// calls it once the receive batch that made them has sent its replies
// (verbs.CompletionNotifier), so the application cannot answer a message
// before its ACK leaves. The ring's producer index is published before arm
// is read, and the shim arms before it polls, so either the event fires or
// the poll sees the entry.
func (c *cqObj) NotifyCompletions() {
	c.mu.Lock()
	defer c.mu.Unlock()
	solicited := c.dueSolicited
	if !c.due || c.ch == nil || c.r.mem == nil {
		return
	}
	c.due, c.dueSolicited = false, false
	for {
		arm := atomic.LoadUint32(&c.hdr.Arm)
		switch {
		case arm == 0:
			return
		case arm == nicproto.ArmSolicited && !solicited:
			return
		}
		if atomic.CompareAndSwapUint32(&c.hdr.Arm, arm, 0) {
			c.ch.post(c.h)
			return
		}
	}
}
