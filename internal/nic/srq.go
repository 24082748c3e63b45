//go:build linux

package nic

import (
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nicproto"
	"github.com/goroce/goroce/verbs"
)

// srqObj is a shared receive queue and its ring. Its receives complete out
// of order (whichever QP takes one), so each one drained into verbs holds a
// slot of the daemon's until its completion; done counts completions.
type srqObj struct {
	h     uint32
	sess  *session
	srq   *verbs.SRQ
	users atomic.Int32

	r   *ring
	w   *wq
	mu  sync.Mutex // the pump's draining, against destroy
	rwr verbs.RecvWR

	smu      sync.Mutex
	free     []uint32
	inUse    []bool
	wrid     []atomic.Uint64
	starving bool // the pump waits for a slot
	done     uint64

	db       *os.File
	dbFD     int
	pumpDone chan struct{}
}

func (s *session) createSRQ(body []byte, _ []int) (reply, error) {
	var req nicproto.CreateSRQReq
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	pd := s.pd(req.PD)
	if pd == nil {
		return reply{}, errInval
	}
	srq, err := pd.pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: int(req.MaxWR), MaxSGE: int(req.MaxSGE), SRQLimit: int(req.SRQLimit)})
	if err != nil {
		return reply{}, err
	}
	attr, _ := srq.Query()
	maxSGE := max(int(req.MaxSGE), 1)
	entries := nicproto.Entries(attr.MaxWR)
	stride := nicproto.RecvStride(maxSGE)
	r, err := newRing("goroce-srq", nicproto.WQHdrSize+entries*stride)
	if err != nil {
		srq.Destroy()
		return reply{}, err
	}
	db, dbFD, err := newEventfd("goroce-srq-doorbell")
	if err != nil {
		r.unmap()
		srq.Destroy()
		return reply{}, err
	}
	o := &srqObj{sess: s, srq: srq, r: r, w: newWQ(r, 0, entries, stride, maxSGE),
		free: make([]uint32, entries), inUse: make([]bool, entries), wrid: make([]atomic.Uint64, entries),
		db: db, dbFD: dbFD, pumpDone: make(chan struct{})}
	for i := range o.free {
		o.free[i] = uint32(entries - 1 - i)
	}
	o.rwr.SGList = make([]verbs.SGE, 0, maxSGE)
	s.mu.Lock()
	o.h = s.newHandle()
	s.srqs[o.h] = o
	s.mu.Unlock()
	s.dev.owners.Store(srq, owner{sess: s, kind: nicproto.ObjSRQ, handle: o.h})
	go o.pump()
	resp := nicproto.CreateSRQResp{Handle: o.h, MaxWR: uint32(attr.MaxWR), MaxSGE: uint32(maxSGE),
		Entries: uint32(entries), Stride: uint32(stride), RingSize: uint64(len(r.mem))}
	fd := r.fd
	r.fd = -1
	return reply{body: []any{resp}, fds: []int{fd, dbFD}, closeAfter: []int{fd}}, nil
}

func (s *session) srqByHandle(h uint32) *srqObj {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.srqs[h]
}

// modifySRQ arms the limit or resizes within the ring (a larger ring would
// need the client to remap it; not done yet).
func (s *session) modifySRQ(body []byte, _ []int) (reply, error) {
	var req nicproto.ModifySRQReq
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	o := s.srqByHandle(req.Handle)
	if o == nil {
		return reply{}, errInval
	}
	mask := verbs.SRQAttrMask(req.Mask)
	if mask&verbs.SRQMaxWR != 0 && uint64(req.MaxWR) > o.w.entries {
		return reply{}, errInval
	}
	if err := o.srq.Modify(&verbs.SRQAttr{MaxWR: int(req.MaxWR), SRQLimit: int(req.SRQLimit)}, mask); err != nil {
		return reply{}, err
	}
	return reply{}, nil
}

func (s *session) querySRQ(body []byte, _ []int) (reply, error) {
	var req nicproto.Handle
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	o := s.srqByHandle(req.Handle)
	if o == nil {
		return reply{}, errInval
	}
	a, err := o.srq.Query()
	if err != nil {
		return reply{}, err
	}
	return reply{body: []any{nicproto.QuerySRQResp{MaxWR: uint32(a.MaxWR), MaxSGE: uint32(o.w.maxSGE), SRQLimit: uint32(a.SRQLimit)}}}, nil
}

func (s *session) destroySRQ(body []byte, _ []int) (reply, error) {
	var req nicproto.Handle
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	o := s.srqByHandle(req.Handle)
	if o == nil {
		return reply{}, errInval
	}
	if o.users.Load() > 0 {
		return reply{}, errBusy
	}
	s.dropSRQ(o)
	return reply{}, nil
}

func (s *session) dropSRQ(o *srqObj) {
	s.mu.Lock()
	delete(s.srqs, o.h)
	s.mu.Unlock()
	s.dev.owners.Delete(o.srq)
	o.db.Close()
	<-o.pumpDone
	o.srq.Destroy()
	o.r.unmap()
}

func (o *srqObj) pump() {
	defer close(o.pumpDone)
	var b [8]byte
	for {
		o.mu.Lock()
		o.drain()
		o.mu.Unlock()
		o.w.sleep(true)
		if o.w.hasWork() && !o.isStarving() {
			o.w.sleep(false)
			continue
		}
		_, err := o.db.Read(b[:])
		o.w.sleep(false)
		if err != nil {
			return
		}
	}
}

func (o *srqObj) isStarving() bool {
	o.smu.Lock()
	defer o.smu.Unlock()
	return o.starving
}

// drain hands published slots to verbs while the daemon has slots to track
// them. The caller holds o.mu.
func (o *srqObj) drain() {
	n, _ := o.w.pending() // a claim past the ring is skipped: the SRQ's own loss
	start := o.w.drained.Load()
	for i := range n {
		pos := start + i
		o.smu.Lock()
		if len(o.free) == 0 {
			o.starving = true
			o.smu.Unlock()
			return
		}
		slot := o.free[len(o.free)-1]
		o.free = o.free[:len(o.free)-1]
		o.inUse[slot] = true
		o.smu.Unlock()
		src := o.w.slot(pos)
		w := *(*nicproto.RWQE)(src)
		o.w.publishDrained(pos + 1)
		ok := int(w.NumSGE) <= o.w.maxSGE
		if ok {
			o.wrid[slot].Store(w.WRID)
			o.rwr.WRID = wridSRQ | uint64(slot)
			o.rwr.SGList = o.rwr.SGList[:0]
			for _, e := range o.w.sges(src, nicproto.RWQESize)[:w.NumSGE] {
				o.rwr.SGList = append(o.rwr.SGList, verbs.SGE{Addr: e.Addr, Length: e.Length, LKey: e.LKey})
			}
			ok = o.srq.PostRecv(&o.rwr) == nil
		}
		if !ok {
			// Dropped, as a NIC drops a malformed WQE; libgoroce's
			// checks make it impossible.
			o.release(slot)
		}
	}
}

func (o *srqObj) release(slot uint32) {
	o.smu.Lock()
	o.inUse[slot] = false
	o.free = append(o.free, slot)
	o.smu.Unlock()
}

// complete returns the wr_id of slot and frees it, waking a pump that
// waits for a slot.
func (o *srqObj) complete(pos uint64) (uint64, bool) {
	o.smu.Lock()
	defer o.smu.Unlock()
	if pos >= uint64(len(o.inUse)) || !o.inUse[pos] {
		return 0, false
	}
	o.inUse[pos] = false
	o.free = append(o.free, uint32(pos))
	o.done++
	atomic.StoreUint64(&o.w.hdr.Done, o.done)
	if o.starving {
		o.starving = false
		var one = [8]byte{1}
		unix.Write(o.dbFD, one[:])
	}
	return o.wrid[pos].Load(), true
}
