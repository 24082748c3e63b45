/*
 * qp_ex.c: extended QPs (ibv_create_qp_ex) and the ibv_wr_* API of
 * struct ibv_qp_ex.
 *
 * The builders write straight into the send ring, as ibv_post_send does: a
 * batch holds the send queue's lock from ibv_wr_start to ibv_wr_complete (or
 * ibv_wr_abort), each builder starts the next slot past the ones published,
 * and the setters fill the slot being built. A request is checked when the
 * next one starts or the batch completes; an error (or a full queue) makes
 * ibv_wr_complete return it and post nothing of the batch, as mlx5 does.
 * After an error the builders write into a scratch slot, so that nothing
 * past the queue is touched.
 */
#include "shim.h"

#include <stdlib.h>
#include <string.h>

/* The operations goroce implements, and those valid per QP type. */
#define EX_OPS_RC                                                                          \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND | \
	 IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |                             \
	 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |             \
	 IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV |    \
	 IBV_QP_EX_WITH_ATOMIC_WRITE)
#define EX_OPS_UC                                                                          \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND | \
	 IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_BIND_MW)
#define EX_OPS_UD (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM)

static inline struct gr_qp *ex_qp(struct ibv_qp_ex *qpx)
{
	return container_of(qpx, struct gr_qp, qpx);
}

static uint64_t swqe_len(struct gr_qp *qp, const struct gr_swqe *w)
{
	const struct gr_sge *sge = (const struct gr_sge *)(w + 1);
	uint64_t len = 0;
	uint32_t i;

	if (w->send_flags & IBV_SEND_INLINE)
		return w->inline_len;
	for (i = 0; i < w->num_sge && i < qp->cap.max_send_sge; i++)
		len += sge[i].length;
	return len;
}

/* ex_finish checks the request being built, if any. */
static void ex_finish(struct gr_qp *qp)
{
	struct gr_swqe *w = qp->ex.cur;
	int err;

	if (!w)
		return;
	qp->ex.cur = NULL;
	if (qp->ex.err)
		return;
	err = gr_check_swqe(qp, w, swqe_len(qp, w), qp->ex.ah, qp->ex.mw);
	if (!err && !(w->send_flags & IBV_SEND_INLINE))
		err = gr_odp_translate(to_ctx(qp->qpx.qp_base.context), (struct gr_sge *)(w + 1),
				       w->num_sge);
	if (err)
		qp->ex.err = err;
}

/* ex_next starts a request of opcode in the next slot of the batch. */
static struct gr_swqe *ex_next(struct gr_qp *qp, uint32_t opcode, uint64_t op_flag)
{
	struct gr_swqe *w;

	ex_finish(qp);
	if (!qp->ex.err && !(qp->send_ops & op_flag))
		qp->ex.err = EINVAL;
	if (!qp->ex.err &&
	    qp->sq.prod + qp->ex.n - __atomic_load_n(&qp->sq.hdr->done, __ATOMIC_ACQUIRE) >= qp->sq.cap)
		qp->ex.err = ENOMEM;
	if (qp->ex.err) {
		w = (struct gr_swqe *)qp->ex.scratch;
	} else {
		w = (struct gr_swqe *)gr_sq_slot(qp, qp->sq.prod + qp->ex.n);
		qp->ex.n++;
	}
	memset(w, 0, sizeof(*w));
	w->wr_id = qp->qpx.wr_id;
	w->send_flags = qp->qpx.wr_flags;
	w->opcode = opcode;
	qp->ex.cur = w;
	qp->ex.ah = NULL;
	qp->ex.mw = NULL;
	return w;
}

static void wr_start(struct ibv_qp_ex *qpx)
{
	struct gr_qp *qp = ex_qp(qpx);

	pthread_spin_lock(&qp->sq.lock);
	qp->ex.n = 0;
	qp->ex.err = gr_gone(to_ctx(qpx->qp_base.context)) ? EIO : 0;
	qp->ex.cur = NULL;
}

static int wr_complete(struct ibv_qp_ex *qpx)
{
	struct gr_qp *qp = ex_qp(qpx);
	int err;

	ex_finish(qp);
	err = qp->ex.err;
	if (!err && qp->ex.n) {
		qp->sq.prod += qp->ex.n;
		gr_wq_publish(&qp->sq);
		gr_ring_doorbell(qp->sq.hdr, qp->db);
	}
	qp->ex.n = 0;
	pthread_spin_unlock(&qp->sq.lock);
	return err;
}

static void wr_abort(struct ibv_qp_ex *qpx)
{
	struct gr_qp *qp = ex_qp(qpx);

	qp->ex.n = 0;
	qp->ex.cur = NULL;
	pthread_spin_unlock(&qp->sq.lock);
}

static void wr_send(struct ibv_qp_ex *qpx)
{
	ex_next(ex_qp(qpx), IBV_WR_SEND, IBV_QP_EX_WITH_SEND);
}

static void wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm)
{
	ex_next(ex_qp(qpx), IBV_WR_SEND_WITH_IMM, IBV_QP_EX_WITH_SEND_WITH_IMM)->imm_data =
		be32toh(imm);
}

static void wr_send_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	ex_next(ex_qp(qpx), IBV_WR_SEND_WITH_INV, IBV_QP_EX_WITH_SEND_WITH_INV)->imm_data = rkey;
}

static void wr_send_tso(struct ibv_qp_ex *qpx, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	ex_next(ex_qp(qpx), IBV_WR_TSO, IBV_QP_EX_WITH_TSO);
}

static void remote(struct gr_swqe *w, uint32_t rkey, uint64_t addr)
{
	w->rkey = rkey;
	w->remote_addr = addr;
}

static void wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr)
{
	remote(ex_next(ex_qp(qpx), IBV_WR_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE), rkey, addr);
}

static void wr_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, __be32 imm)
{
	struct gr_swqe *w =
		ex_next(ex_qp(qpx), IBV_WR_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM);

	remote(w, rkey, addr);
	w->imm_data = be32toh(imm);
}

static void wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr)
{
	remote(ex_next(ex_qp(qpx), IBV_WR_RDMA_READ, IBV_QP_EX_WITH_RDMA_READ), rkey, addr);
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr,
			      uint64_t compare, uint64_t swap)
{
	struct gr_swqe *w =
		ex_next(ex_qp(qpx), IBV_WR_ATOMIC_CMP_AND_SWP, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP);

	remote(w, rkey, addr);
	w->compare_add = compare;
	w->swap = swap;
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr,
				uint64_t add)
{
	struct gr_swqe *w =
		ex_next(ex_qp(qpx), IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD);

	remote(w, rkey, addr);
	w->compare_add = add;
}

/* ATOMIC_WRITE: the 8 bytes are copied into the slot now, in memory order. */
static void wr_atomic_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr,
			    const void *atomic_wr)
{
	struct gr_swqe *w = ex_next(ex_qp(qpx), IBV_WR_ATOMIC_WRITE, IBV_QP_EX_WITH_ATOMIC_WRITE);

	remote(w, rkey, addr);
	memcpy(&w->compare_add, atomic_wr, 8);
}

static void wr_local_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	ex_next(ex_qp(qpx), IBV_WR_LOCAL_INV, IBV_QP_EX_WITH_LOCAL_INV)->imm_data = rkey;
}

static void wr_bind_mw(struct ibv_qp_ex *qpx, struct ibv_mw *mw, uint32_t rkey,
		       const struct ibv_mw_bind_info *info)
{
	struct gr_qp *qp = ex_qp(qpx);
	struct gr_swqe *w = ex_next(qp, IBV_WR_BIND_MW, IBV_QP_EX_WITH_BIND_MW);

	if (mw && mw->type != IBV_MW_TYPE_2 && !qp->ex.err)
		qp->ex.err = EINVAL; /* a type 1 window is bound with ibv_bind_mw */
	gr_bind_to_swqe(w, mw, rkey, info);
	qp->ex.mw = mw;
}

static void wr_set_ud_addr(struct ibv_qp_ex *qpx, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct gr_qp *qp = ex_qp(qpx);

	if (!qp->ex.cur)
		return;
	qp->ex.cur->ah = ah ? ah->handle : 0;
	qp->ex.cur->remote_qpn = qpn;
	qp->ex.cur->remote_qkey = qkey;
	qp->ex.ah = ah;
}

static void wr_set_xrc_srqn(struct ibv_qp_ex *qpx, uint32_t srqn)
{
	struct gr_qp *qp = ex_qp(qpx);

	if (!qp->ex.err)
		qp->ex.err = EOPNOTSUPP; /* no XRC */
}

/* set_inline copies the buffers into the slot's inline area. */
static void set_inline(struct gr_qp *qp, size_t n, const struct ibv_data_buf *bufs)
{
	struct gr_swqe *w = qp->ex.cur;
	char *data;
	uint64_t len = 0;
	size_t i;

	if (!w)
		return;
	for (i = 0; i < n; i++)
		len += bufs[i].length;
	if (len > qp->max_inline) {
		if (!qp->ex.err)
			qp->ex.err = EINVAL;
		return;
	}
	data = (char *)((struct gr_sge *)(w + 1) + qp->sq.max_sge);
	if (w != (struct gr_swqe *)qp->ex.scratch)
		for (i = 0; i < n; i++) {
			memcpy(data, bufs[i].addr, bufs[i].length);
			data += bufs[i].length;
		}
	w->send_flags |= IBV_SEND_INLINE;
	w->inline_len = (uint32_t)len;
	w->num_sge = 0;
}

static void wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr, size_t length)
{
	struct ibv_data_buf b = {.addr = addr, .length = length};

	set_inline(ex_qp(qpx), 1, &b);
}

static void wr_set_inline_data_list(struct ibv_qp_ex *qpx, size_t n,
				    const struct ibv_data_buf *bufs)
{
	set_inline(ex_qp(qpx), n, bufs);
}

static void wr_set_sge_list(struct ibv_qp_ex *qpx, size_t n, const struct ibv_sge *sg)
{
	struct gr_qp *qp = ex_qp(qpx);
	struct gr_swqe *w = qp->ex.cur;
	struct gr_sge *sge;
	size_t i;

	if (!w)
		return;
	if (n > qp->cap.max_send_sge) {
		if (!qp->ex.err)
			qp->ex.err = EINVAL;
		return;
	}
	if (w->send_flags & IBV_SEND_INLINE) {
		/* IBV_SEND_INLINE in wr_flags: the buffers' bytes now. */
		struct ibv_data_buf bufs[n ? n : 1];

		for (i = 0; i < n; i++) {
			bufs[i].addr = (void *)(uintptr_t)sg[i].addr;
			bufs[i].length = sg[i].length;
		}
		set_inline(qp, n, bufs);
		return;
	}
	sge = (struct gr_sge *)(w + 1);
	for (i = 0; i < n; i++) {
		sge[i].addr = sg[i].addr;
		sge[i].length = sg[i].length;
		sge[i].lkey = sg[i].lkey;
	}
	w->num_sge = (uint32_t)n;
}

static void wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge s = {.addr = addr, .length = length, .lkey = lkey};

	wr_set_sge_list(qpx, 1, &s);
}

/* gr_qp_ex_init fills the builders of a QP created with
 * IBV_QP_INIT_ATTR_SEND_OPS_FLAGS; returns 0 or an errno. */
int gr_qp_ex_init(struct gr_qp *qp, uint64_t send_ops)
{
	uint64_t valid;

	switch (qp->qpx.qp_base.qp_type) {
	case IBV_QPT_RC:
		valid = EX_OPS_RC;
		break;
	case IBV_QPT_UC:
		valid = EX_OPS_UC;
		break;
	default:
		valid = EX_OPS_UD;
	}
	if (send_ops & ~valid)
		return EOPNOTSUPP;
	qp->ex.scratch = gr_calloc(1, qp->sq.stride);
	if (!qp->ex.scratch)
		return ENOMEM;
	qp->send_ops = send_ops;
	qp->is_ex = 1;
	qp->qpx.wr_start = wr_start;
	qp->qpx.wr_complete = wr_complete;
	qp->qpx.wr_abort = wr_abort;
	qp->qpx.wr_send = wr_send;
	qp->qpx.wr_send_imm = wr_send_imm;
	qp->qpx.wr_send_inv = wr_send_inv;
	qp->qpx.wr_send_tso = wr_send_tso;
	qp->qpx.wr_rdma_write = wr_rdma_write;
	qp->qpx.wr_rdma_write_imm = wr_rdma_write_imm;
	qp->qpx.wr_rdma_read = wr_rdma_read;
	qp->qpx.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	qp->qpx.wr_atomic_fetch_add = wr_atomic_fetch_add;
	qp->qpx.wr_atomic_write = wr_atomic_write;
	qp->qpx.wr_local_inv = wr_local_inv;
	qp->qpx.wr_bind_mw = wr_bind_mw;
	qp->qpx.wr_set_ud_addr = wr_set_ud_addr;
	qp->qpx.wr_set_xrc_srqn = wr_set_xrc_srqn;
	qp->qpx.wr_set_inline_data = wr_set_inline_data;
	qp->qpx.wr_set_inline_data_list = wr_set_inline_data_list;
	qp->qpx.wr_set_sge = wr_set_sge;
	qp->qpx.wr_set_sge_list = wr_set_sge_list;
	return 0;
}

/* ibv_qp_to_qp_ex: the extended QP of one created with send operations. */
GR_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *ibqp)
{
	struct gr_qp *qp = container_of(ibqp, struct gr_qp, qpx.qp_base);

	if (!qp->is_ex) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return &qp->qpx;
}
