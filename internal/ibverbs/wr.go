//go:build linux && cgo && goroce_ibverbs

package ibverbs

/*
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

// gr_send and gr_recv describe work requests in plain fields, with no
// unions, so Go can fill them in C memory directly; gr_post_sends turns n
// of them into a chain of struct ibv_send_wr (in C memory as well) and
// posts it in one call. SGEs are struct ibv_sge, max_sge per request.
struct gr_send {
	uint64_t wr_id, remote_addr, compare_add, swap;
	struct ibv_ah *ah;
	struct ibv_mw *mw; // BIND_MW: the window, bound to mr's bind_addr..+bind_length
	struct ibv_mr *mr;
	uint64_t bind_addr, bind_length;
	uint32_t opcode, flags, num_sge, rkey, imm, inv_rkey, remote_qpn, remote_qkey, bind_access;
};

struct gr_recv {
	uint64_t wr_id;
	uint32_t num_sge, pad;
};

static int gr_post_sends(struct ibv_qp *qp, struct gr_send *d, struct ibv_sge *sge, int max_sge,
			 struct ibv_send_wr *wr, int n, int *posted)
{
	struct ibv_send_wr *bad = NULL;
	int i, ret;

	for (i = 0; i < n; i++) {
		struct ibv_send_wr *w = &wr[i];

		memset(w, 0, sizeof(*w));
		w->wr_id = d[i].wr_id;
		w->opcode = d[i].opcode;
		w->send_flags = d[i].flags;
		w->num_sge = d[i].num_sge;
		w->sg_list = d[i].num_sge ? &sge[i * max_sge] : NULL;
		w->next = i + 1 < n ? &wr[i + 1] : NULL;
		switch (d[i].opcode) {
		case IBV_WR_SEND_WITH_IMM:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
			w->imm_data = htonl(d[i].imm);
			break;
		case IBV_WR_SEND_WITH_INV:
		case IBV_WR_LOCAL_INV:
			w->invalidate_rkey = d[i].inv_rkey;
			break;
		}
		if (d[i].opcode == IBV_WR_BIND_MW) {
			w->bind_mw.mw = d[i].mw;
			w->bind_mw.rkey = d[i].rkey;
			w->bind_mw.bind_info.mr = d[i].mr;
			w->bind_mw.bind_info.addr = d[i].bind_addr;
			w->bind_mw.bind_info.length = d[i].bind_length;
			w->bind_mw.bind_info.mw_access_flags = d[i].bind_access;
		} else if (d[i].ah) {
			w->wr.ud.ah = d[i].ah;
			w->wr.ud.remote_qpn = d[i].remote_qpn;
			w->wr.ud.remote_qkey = d[i].remote_qkey;
		} else if (d[i].opcode == IBV_WR_ATOMIC_CMP_AND_SWP || d[i].opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			w->wr.atomic.remote_addr = d[i].remote_addr;
			w->wr.atomic.rkey = d[i].rkey;
			w->wr.atomic.compare_add = d[i].compare_add;
			w->wr.atomic.swap = d[i].swap;
		} else {
			w->wr.rdma.remote_addr = d[i].remote_addr;
			w->wr.rdma.rkey = d[i].rkey;
		}
	}
	ret = ibv_post_send(qp, wr, &bad);
	*posted = ret && bad ? (int)(bad - wr) : (ret ? 0 : n);
	return ret;
}

static int gr_post_recvs(struct ibv_qp *qp, struct ibv_srq *srq, struct gr_recv *d, struct ibv_sge *sge,
			 int max_sge, struct ibv_recv_wr *wr, int n, int *posted)
{
	struct ibv_recv_wr *bad = NULL;
	int i, ret;

	for (i = 0; i < n; i++) {
		wr[i].wr_id = d[i].wr_id;
		wr[i].num_sge = d[i].num_sge;
		wr[i].sg_list = d[i].num_sge ? &sge[i * max_sge] : NULL;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
	}
	ret = srq ? ibv_post_srq_recv(srq, wr, &bad) : ibv_post_recv(qp, wr, &bad);
	*posted = ret && bad ? (int)(bad - wr) : (ret ? 0 : n);
	return ret;
}

#cgo noescape gr_post_sends
#cgo nocallback gr_post_sends
#cgo noescape gr_post_recvs
#cgo nocallback gr_post_recvs

static void *gr_calloc(size_t n, size_t size) { return calloc(n ? n : 1, size); }
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"
)

// More enumerations of verbs.h, for the work requests verbs converts.
const (
	WROpSendWithInv = C.IBV_WR_SEND_WITH_INV
	WROpLocalInv    = C.IBV_WR_LOCAL_INV
	WROpBindMW      = C.IBV_WR_BIND_MW
)

// SGE is a scatter/gather entry with struct ibv_sge's layout, so a slice of
// them is copied into the per-queue C array field by field without
// conversion.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// sgeLayout fails to compile if SGE and struct ibv_sge ever differ in size.
var _ [unsafe.Sizeof(SGE{}) - unsafe.Sizeof(C.struct_ibv_sge{})]byte
var _ [unsafe.Sizeof(C.struct_ibv_sge{}) - unsafe.Sizeof(SGE{})]byte

// SendRequest is a send work request of any opcode; SGEs are given apart
// (SetSend).
type SendRequest struct {
	WRID       uint64
	Opcode     int
	Flags      int
	RemoteAddr uint64 // RDMA and atomic target
	RKey       uint32 // RDMA and atomic target; BIND_MW: the window's new rkey
	Imm        uint32 // host order; *_WITH_IMM
	InvRKey    uint32 // SEND_WITH_INV, LOCAL_INV
	CompareAdd uint64
	Swap       uint64
	AH         *AH // UD only
	RemoteQPN  uint32
	RemoteQKey uint32
	// BIND_MW (type 2): MW bound to BindMR's BindAddr..+BindLength with
	// BindAccess, under the rkey RKey.
	MW         *MW
	BindMR     *MR
	BindAddr   uint64
	BindLength uint64
	BindAccess int
}

// workQueue is the C memory a queue's work requests are built in: slots
// descriptions, slots*maxSGE SGEs and slots verbs work requests,
// allocated once when the queue is created, so posting allocates nothing
// and no Go pointer is ever stored in C memory. Its user serialises access
// (one poster at a time per queue).
type workQueue struct {
	slots, maxSGE int
	sge           []C.struct_ibv_sge
	desc          unsafe.Pointer // struct gr_send or gr_recv [slots]
	wr            unsafe.Pointer // struct ibv_send_wr or ibv_recv_wr [slots]
}

// queueSlots bounds how many work requests one post call chains: a
// longer list is posted in several calls.
const queueSlots = 64

func newWorkQueue(depth, maxSGE int, descSize, wrSize C.size_t) (*workQueue, error) {
	q := &workQueue{slots: max(1, min(depth, queueSlots)), maxSGE: max(1, maxSGE)}
	sge := C.gr_calloc(C.size_t(q.slots*q.maxSGE), C.size_t(unsafe.Sizeof(C.struct_ibv_sge{})))
	q.desc = C.gr_calloc(C.size_t(q.slots), descSize)
	q.wr = C.gr_calloc(C.size_t(q.slots), wrSize)
	if sge == nil || q.desc == nil || q.wr == nil {
		C.free(sge)
		q.sge = nil
		q.free()
		return nil, fmt.Errorf("ibverbs: allocating a work queue of %d: %w", q.slots, syscall.ENOMEM)
	}
	q.sge = unsafe.Slice((*C.struct_ibv_sge)(sge), q.slots*q.maxSGE)
	return q, nil
}

func (q *workQueue) free() {
	if q == nil {
		return
	}
	if q.sge != nil {
		C.free(unsafe.Pointer(&q.sge[0]))
		q.sge = nil
	}
	C.free(q.desc)
	C.free(q.wr)
	q.desc, q.wr = nil, nil
}

// setSGEs copies sges into slot i's entries.
func (q *workQueue) setSGEs(i int, sges []SGE) error {
	if i < 0 || i >= q.slots {
		return fmt.Errorf("ibverbs: slot %d outside 0..%d", i, q.slots-1)
	}
	if len(sges) > q.maxSGE {
		return fmt.Errorf("ibverbs: %d SGEs, the queue takes %d: %w", len(sges), q.maxSGE, syscall.EINVAL)
	}
	dst := q.sge[i*q.maxSGE:]
	for j := range sges {
		dst[j].addr, dst[j].length, dst[j].lkey = C.uint64_t(sges[j].Addr), C.uint32_t(sges[j].Length), C.uint32_t(sges[j].LKey)
	}
	return nil
}

func newSendQueue(depth, maxSGE int) (*workQueue, error) {
	return newWorkQueue(depth, maxSGE, C.size_t(unsafe.Sizeof(C.struct_gr_send{})), C.size_t(unsafe.Sizeof(C.struct_ibv_send_wr{})))
}

func newRecvQueue(depth, maxSGE int) (*workQueue, error) {
	return newWorkQueue(depth, maxSGE, C.size_t(unsafe.Sizeof(C.struct_gr_recv{})), C.size_t(unsafe.Sizeof(C.struct_ibv_recv_wr{})))
}

// SendSlots is how many send work requests PostSends takes at once.
func (qp *QP) SendSlots() int { return qp.sq.slots }

// RecvSlots is how many receive work requests PostRecvs takes at once.
func (qp *QP) RecvSlots() int { return qp.rq.slots }

// SetSend fills send slot i with w and its SGEs. The caller serialises
// SetSend and PostSends on a QP.
func (qp *QP) SetSend(i int, w *SendRequest, sges []SGE) error {
	if err := qp.sq.setSGEs(i, sges); err != nil {
		return err
	}
	d := &unsafe.Slice((*C.struct_gr_send)(qp.sq.desc), qp.sq.slots)[i]
	d.wr_id, d.remote_addr = C.uint64_t(w.WRID), C.uint64_t(w.RemoteAddr)
	d.compare_add, d.swap = C.uint64_t(w.CompareAdd), C.uint64_t(w.Swap)
	d.opcode, d.flags, d.num_sge = C.uint32_t(w.Opcode), C.uint32_t(w.Flags), C.uint32_t(len(sges))
	d.rkey, d.imm, d.inv_rkey = C.uint32_t(w.RKey), C.uint32_t(w.Imm), C.uint32_t(w.InvRKey)
	d.ah = nil
	if w.AH != nil {
		d.ah = w.AH.ah
	}
	d.remote_qpn, d.remote_qkey = C.uint32_t(w.RemoteQPN), C.uint32_t(w.RemoteQKey)
	d.mw, d.mr = nil, nil
	if w.MW != nil {
		d.mw = w.MW.mw
	}
	if w.BindMR != nil {
		d.mr = w.BindMR.mr
	}
	d.bind_addr, d.bind_length, d.bind_access = C.uint64_t(w.BindAddr), C.uint64_t(w.BindLength), C.uint32_t(w.BindAccess)
	return nil
}

// PostSends posts slots 0..n-1 as one list (ibv_post_send) and returns how
// many the device took: on an error, those before the one it refused.
func (qp *QP) PostSends(n int) (int, error) {
	if n < 1 || n > qp.sq.slots {
		return 0, fmt.Errorf("ibverbs: PostSends(%d) outside 1..%d", n, qp.sq.slots)
	}
	var posted C.int
	ret := C.gr_post_sends(qp.qp, (*C.struct_gr_send)(qp.sq.desc), &qp.sq.sge[0], C.int(qp.sq.maxSGE),
		(*C.struct_ibv_send_wr)(qp.sq.wr), C.int(n), &posted)
	return int(posted), errnoOf("ibv_post_send", ret, nil)
}

// SetRecv fills receive slot i of q (a QP's or an SRQ's).
func (q *workQueue) setRecv(i int, wrID uint64, sges []SGE) error {
	if err := q.setSGEs(i, sges); err != nil {
		return err
	}
	d := &unsafe.Slice((*C.struct_gr_recv)(q.desc), q.slots)[i]
	d.wr_id, d.num_sge = C.uint64_t(wrID), C.uint32_t(len(sges))
	return nil
}

func (q *workQueue) postRecvs(qp *C.struct_ibv_qp, srq *C.struct_ibv_srq, n int) (int, error) {
	if n < 1 || n > q.slots {
		return 0, fmt.Errorf("ibverbs: PostRecvs(%d) outside 1..%d", n, q.slots)
	}
	var posted C.int
	ret := C.gr_post_recvs(qp, srq, (*C.struct_gr_recv)(q.desc), &q.sge[0], C.int(q.maxSGE),
		(*C.struct_ibv_recv_wr)(q.wr), C.int(n), &posted)
	call := "ibv_post_recv"
	if srq != nil {
		call = "ibv_post_srq_recv"
	}
	return int(posted), errnoOf(call, ret, nil)
}

// SetRecv fills receive slot i with a work request. The caller serialises
// SetRecv and PostRecvs on a QP.
func (qp *QP) SetRecv(i int, wrID uint64, sges []SGE) error { return qp.rq.setRecv(i, wrID, sges) }

// PostRecvs posts receive slots 0..n-1 (ibv_post_recv); see PostSends.
func (qp *QP) PostRecvs(n int) (int, error) { return qp.rq.postRecvs(qp.qp, nil, n) }

// SRQ is a shared receive queue.
type SRQ struct {
	srq *C.struct_ibv_srq
	rq  *workQueue
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(maxWR, maxSGE, limit int) (*SRQ, error) {
	var a C.struct_ibv_srq_init_attr
	a.attr.max_wr, a.attr.max_sge, a.attr.srq_limit = C.uint32_t(maxWR), C.uint32_t(maxSGE), C.uint32_t(limit)
	rq, err := newRecvQueue(maxWR, maxSGE)
	if err != nil {
		return nil, err
	}
	srq, err := C.ibv_create_srq(pd.pd, &a)
	if srq == nil {
		rq.free()
		return nil, nilErr("ibv_create_srq", err)
	}
	return &SRQ{srq: srq, rq: rq}, nil
}

// SetRecv fills receive slot i; see QP.SetRecv.
func (s *SRQ) SetRecv(i int, wrID uint64, sges []SGE) error { return s.rq.setRecv(i, wrID, sges) }

// RecvSlots is how many receive work requests PostRecvs takes at once.
func (s *SRQ) RecvSlots() int { return s.rq.slots }

// PostRecvs posts receive slots 0..n-1 (ibv_post_srq_recv).
func (s *SRQ) PostRecvs(n int) (int, error) { return s.rq.postRecvs(nil, s.srq, n) }

// Query returns the SRQ's max_wr, max_sge and srq_limit (ibv_query_srq).
func (s *SRQ) Query() (maxWR, maxSGE, limit int, err error) {
	var a C.struct_ibv_srq_attr
	if err := errnoOf("ibv_query_srq", C.ibv_query_srq(s.srq, &a), nil); err != nil {
		return 0, 0, 0, err
	}
	return int(a.max_wr), int(a.max_sge), int(a.srq_limit), nil
}

// Destroy destroys the SRQ; no QP may use it any more.
func (s *SRQ) Destroy() error {
	if err := errnoOf("ibv_destroy_srq", C.ibv_destroy_srq(s.srq), nil); err != nil {
		return err
	}
	s.rq.free()
	return nil
}
