//go:build linux

package nic

import (
	"os"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/internal/nicproto"
	"github.com/goroce/goroce/verbs"
)

// qpObj is a QP, its shared ring (send queue, then receive queue) and the
// pump goroutine that drains the ring into verbs.
type qpObj struct {
	h      uint32
	sess   *session
	qp     *verbs.QP
	pd     *pdObj
	sendCQ *cqObj
	recvCQ *cqObj
	srq    *srqObj
	sigAll bool

	r  *ring
	sq *wq
	rq *wq // nil with an SRQ

	// inline is a region over the send slots, in the QP's PD, through
	// which verbs reads the inline data of IBV_SEND_INLINE requests.
	inline *verbs.MR

	mu     sync.Mutex // the send ring's draining, against modify and destroy
	rmu    sync.Mutex // the receive ring's draining (pump and FeedRecv); after mu
	swr    []verbs.SendWR
	rwrs   []verbs.RecvWR
	broken atomic.Bool // a request verbs refused moved the QP to ERR

	db       *os.File
	dbFD     int
	pumpDone chan struct{}

	// life lets the CQ sinks write the ring's done indices without racing
	// dropQP's unmap: they hold it shared, dropQP sets gone exclusively.
	// feed does the same for FeedRecv, which may complete work into a CQ
	// (and so reach life) while it holds feed.
	life    sync.RWMutex
	gone    bool
	feed    sync.RWMutex
	feeding atomic.Bool // the rings are set up and not yet released
}

// The most send work requests the pump hands to verbs in one PostSendList.
const sendBatch = 64

func (s *session) createQP(body []byte, _ []int) (reply, error) {
	var req nicproto.CreateQPReq
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	s.mu.RLock()
	pd, scq, rcq := s.pds[req.PD], s.cqs[req.SendCQ], s.cqs[req.RecvCQ]
	var srq *srqObj
	if req.SRQ != 0 {
		srq = s.srqs[req.SRQ]
	}
	s.mu.RUnlock()
	if pd == nil || scq == nil || rcq == nil || (req.SRQ != 0 && srq == nil) {
		return reply{}, errInval
	}
	q := &qpObj{sess: s, pd: pd, sendCQ: scq, recvCQ: rcq, srq: srq, sigAll: req.SQSigAll != 0}
	init := verbs.QPInitAttr{
		QPType: verbs.QPType(req.QPType), SendCQ: scq.cq, RecvCQ: rcq.cq, SQSigAll: req.SQSigAll != 0,
		RecvFeeder: q,
		Cap: verbs.QPCap{MaxSendWR: int(req.Cap.MaxSendWR), MaxRecvWR: int(req.Cap.MaxRecvWR),
			MaxSendSGE: int(req.Cap.MaxSendSGE), MaxRecvSGE: int(req.Cap.MaxRecvSGE),
			MaxInlineData: int(req.Cap.MaxInlineData)},
	}
	if srq != nil {
		init.SRQ = srq.srq
	}
	qp, err := pd.pd.CreateQP(init)
	if err != nil {
		return reply{}, err
	}
	q.qp = qp
	resp, fds, err := q.setup()
	if err != nil {
		q.release()
		return reply{}, err
	}
	scq.users.Add(1)
	rcq.users.Add(1)
	if srq != nil {
		srq.users.Add(1)
	}
	s.mu.Lock()
	q.h = s.newHandle()
	s.qps[q.h] = q
	s.setQPNumLocked(qp.QPN(), q)
	s.mu.Unlock()
	s.dev.owners.Store(qp, owner{sess: s, kind: nicproto.ObjQP, handle: q.h})
	resp.Handle = q.h
	q.feeding.Store(true)
	go q.pump()
	return reply{body: []any{resp}, fds: fds, closeAfter: fds[:1]}, nil
}

// setup allocates the ring, the inline region and the doorbell.
func (q *qpObj) setup() (nicproto.CreateQPResp, []int, error) {
	c := q.qp.Cap()
	sqEntries := nicproto.Entries(max(c.MaxSendWR, 1))
	sqStride := nicproto.SendStride(c.MaxSendSGE, c.MaxInlineData)
	rqEntries, rqStride := 0, 0
	if q.srq == nil {
		rqEntries = nicproto.Entries(max(c.MaxRecvWR, 1))
		rqStride = nicproto.RecvStride(c.MaxRecvSGE)
	}
	sqOff := 0
	rqOff := sqOff + nicproto.WQHdrSize + sqEntries*sqStride
	size := rqOff + nicproto.WQHdrSize + rqEntries*rqStride
	r, err := newRing("goroce-qp", size)
	if err != nil {
		return nicproto.CreateQPResp{}, nil, err
	}
	q.r = r
	q.sq = newWQ(r, sqOff, sqEntries, sqStride, c.MaxSendSGE)
	if q.srq == nil {
		q.rq = newWQ(r, rqOff, rqEntries, rqStride, c.MaxRecvSGE)
	}
	// The inline data and ATOMIC_WRITE's operand stay in the send slots,
	// which verbs reads through a region of the QP's PD.
	slots := r.mem[sqOff+nicproto.WQHdrSize : rqOff]
	if q.inline, err = q.pd.pd.RegMR(slots, verbs.AccessLocalWrite); err != nil {
		return nicproto.CreateQPResp{}, nil, err
	}
	q.swr = make([]verbs.SendWR, sendBatch)
	for i := range q.swr {
		q.swr[i].SGList = make([]verbs.SGE, 0, max(c.MaxSendSGE, 1))
	}
	if q.srq == nil {
		q.rwrs = make([]verbs.RecvWR, min(sendBatch, rqEntries))
		for i := range q.rwrs {
			q.rwrs[i].SGList = make([]verbs.SGE, 0, max(c.MaxRecvSGE, 1))
		}
	}
	db, dbFD, err := newEventfd("goroce-qp-doorbell")
	if err != nil {
		return nicproto.CreateQPResp{}, nil, err
	}
	q.db, q.dbFD, q.pumpDone = db, dbFD, make(chan struct{})
	resp := nicproto.CreateQPResp{
		QPNum: q.qp.QPN(),
		Cap: nicproto.QPCap{MaxSendWR: uint32(c.MaxSendWR), MaxRecvWR: uint32(c.MaxRecvWR),
			MaxSendSGE: uint32(c.MaxSendSGE), MaxRecvSGE: uint32(c.MaxRecvSGE), MaxInlineData: uint32(c.MaxInlineData)},
		SQEntries: uint32(sqEntries), RQEntries: uint32(rqEntries),
		SQStride: uint32(sqStride), RQStride: uint32(rqStride),
		SQOffset: uint64(sqOff), RQOffset: uint64(rqOff), RingSize: uint64(len(r.mem)),
	}
	ringFD := r.fd
	r.fd = -1
	return resp, []int{ringFD, dbFD}, nil
}

// release frees what setup built and the verbs QP; the pump must be stopped.
func (q *qpObj) release() {
	if q.qp != nil {
		q.qp.Destroy()
	}
	if q.inline != nil {
		q.inline.Dereg()
	}
	if q.db != nil {
		q.db.Close()
	}
	if q.r != nil {
		q.r.unmap()
	}
}

func (s *session) qpByHandle(body []byte) (*qpObj, error) {
	var req nicproto.Handle
	if _, err := nicproto.Decode(body, &req); err != nil {
		return nil, errInval
	}
	s.mu.RLock()
	q := s.qps[req.Handle]
	s.mu.RUnlock()
	if q == nil {
		return nil, errInval
	}
	return q, nil
}

func (s *session) modifyQP(body []byte, _ []int) (reply, error) {
	var req nicproto.ModifyQPReq
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	s.mu.RLock()
	q := s.qps[req.Handle]
	s.mu.RUnlock()
	if q == nil {
		return reply{}, errInval
	}
	attr := s.srv.fromQPAttr(&req.Attr)
	mask := verbs.QPAttrMask(req.Mask)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.rmu.Lock()
	defer q.rmu.Unlock()
	if err := q.qp.Modify(&attr, mask); err != nil {
		return reply{}, err
	}
	if mask&verbs.QPAttrState != 0 && attr.QPState == verbs.QPStateReset {
		q.sq.reset()
		if q.rq != nil {
			q.rq.reset()
		}
		q.broken.Store(false)
	}
	return reply{}, nil
}

func (s *session) queryQP(body []byte, _ []int) (reply, error) {
	q, err := s.qpByHandle(body)
	if err != nil {
		return reply{}, err
	}
	attr, _, err := q.qp.Query(0)
	if err != nil {
		return reply{}, err
	}
	resp := nicproto.QueryQPResp{Attr: toQPAttr(&attr)}
	if q.sigAll {
		resp.SQSigAll = 1
	}
	return reply{body: []any{resp}}, nil
}

func (s *session) destroyQP(body []byte, _ []int) (reply, error) {
	q, err := s.qpByHandle(body)
	if err != nil {
		return reply{}, err
	}
	s.dropQP(q)
	return reply{}, nil
}

// dropQP stops the pump, destroys the QP and forgets it: completions of it
// still in its CQs are dropped by the movers.
func (s *session) dropQP(q *qpObj) {
	s.mu.Lock()
	delete(s.qps, q.h)
	s.setQPNumLocked(q.qp.QPN(), nil)
	s.mu.Unlock()
	s.dev.owners.Delete(q.qp)
	q.db.Close()
	<-q.pumpDone
	q.feed.Lock()
	q.feeding.Store(false)
	q.feed.Unlock()
	q.life.Lock()
	q.gone = true
	q.life.Unlock()
	q.release()
	q.sendCQ.users.Add(-1)
	q.recvCQ.users.Add(-1)
	if q.srq != nil {
		q.srq.users.Add(-1)
	}
}

// complete maps a verbs completion's work request ID back to the
// application's, retiring the queue entries up to it.
func (q *qpObj) complete(wrid uint64) (uint64, bool) {
	q.life.RLock()
	defer q.life.RUnlock()
	if q.gone {
		return 0, false
	}
	pos := wrid &^ wridKind
	switch wrid & wridKind {
	case wridSend:
		return q.sq.complete(pos)
	case wridRecv:
		if q.rq != nil {
			return q.rq.complete(pos)
		}
	case wridSRQ:
		if q.srq != nil {
			return q.srq.complete(pos)
		}
	}
	return 0, false
}

// FeedRecv hands the receives the client published to verbs before the
// QP handles a message (verbs.RecvFeeder): a receive the client posted
// before the message arrived is found even if the pump has not run since,
// as a NIC finds a WQE whose doorbell was rung. Without it a datagram
// could be dropped, or an RC message RNR-NAKed, for want of a receive the
// application did post.
func (q *qpObj) FeedRecv() {
	if !q.feeding.Load() || (!(q.rq != nil && q.rq.hasWork()) && !(q.srq != nil && q.srq.w.hasWork())) {
		return
	}
	q.feed.RLock()
	defer q.feed.RUnlock()
	if !q.feeding.Load() {
		return
	}
	if q.rq != nil {
		q.rmu.Lock()
		q.drainRecv()
		q.rmu.Unlock()
	} else {
		q.srq.mu.Lock()
		q.srq.drain()
		q.srq.mu.Unlock()
	}
}
