/*
 * post.c: the posting fast paths and the work queue rings.
 *
 * ibv_post_send checks each work request as goroce's verbs.QP.PostSend would
 * (so that errors come back from the call, as from a hardware provider),
 * writes it into the send ring and, only if the daemon's pump sleeps, rings
 * the QP's doorbell: one write() per post at low rates, none when the
 * daemon is busy. Receives take the same path through the receive ring.
 */
#include "shim.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_MESSAGE (1ULL << 31)

void gr_ring_doorbell(struct gr_wq_hdr *hdr, int db)
{
	static const uint64_t one = 1;

	if (__atomic_load_n(&hdr->need_doorbell, __ATOMIC_SEQ_CST)) {
		ssize_t n;

		do
			n = write(db, &one, sizeof(one));
		while (n < 0 && errno == EINTR);
	}
}

void gr_wq_init(struct gr_wq *q, char *ring, uint64_t off, uint32_t entries, uint32_t stride,
		    uint32_t max_sge, uint32_t cap)
{
	q->hdr = (struct gr_wq_hdr *)(ring + off);
	q->slots = ring + off + sizeof(struct gr_wq_hdr);
	q->mask = entries - 1;
	q->stride = stride;
	q->max_sge = max_sge;
	q->cap = cap;
	q->prod = __atomic_load_n(&q->hdr->prod, __ATOMIC_ACQUIRE);
	pthread_spin_init(&q->lock, PTHREAD_PROCESS_PRIVATE);
}

int gr_wq_full(struct gr_wq *q)
{
	return q->prod - __atomic_load_n(&q->hdr->done, __ATOMIC_ACQUIRE) >= q->cap;
}

/* Publish the slots written, then read need_doorbell: the daemon sets
 * need_doorbell before it looks at prod a last time, so one of the two
 * sees the other. */
void gr_wq_publish(struct gr_wq *q)
{
	__atomic_store_n(&q->hdr->prod, q->prod, __ATOMIC_SEQ_CST);
}

int gr_ring_fits(uint64_t size, uint64_t off, uint32_t entries, uint32_t stride)
{
	return entries && !(entries & (entries - 1)) &&
	       off + sizeof(struct gr_wq_hdr) + (uint64_t)entries * stride <= size;
}

/* send opcode rules, as verbs.QP.PostSend checks them. */
enum { OK_RC = 1, OK_UC = 2, OK_UD = 4, INLINE = 8, ATOMIC = 16, NOSUP = 32, NODATA = 64 };

static const uint8_t send_rules[] = {
	[IBV_WR_RDMA_WRITE] = OK_RC | OK_UC | INLINE,
	[IBV_WR_RDMA_WRITE_WITH_IMM] = OK_RC | OK_UC | INLINE,
	[IBV_WR_SEND] = OK_RC | OK_UC | OK_UD | INLINE,
	[IBV_WR_SEND_WITH_IMM] = OK_RC | OK_UC | OK_UD | INLINE,
	[IBV_WR_RDMA_READ] = OK_RC,
	[IBV_WR_ATOMIC_CMP_AND_SWP] = OK_RC | ATOMIC,
	[IBV_WR_ATOMIC_FETCH_AND_ADD] = OK_RC | ATOMIC,
	[IBV_WR_LOCAL_INV] = OK_RC | NODATA,
	[IBV_WR_BIND_MW] = OK_RC | OK_UC | NODATA,
	[IBV_WR_SEND_WITH_INV] = OK_RC | OK_UC | INLINE,
	[IBV_WR_TSO] = NOSUP,
	[IBV_WR_DRIVER1] = NOSUP,
	[12] = 0,
	[13] = 0,
	[14] = 0, /* IBV_WR_FLUSH: not in rdma-core 44's verbs.h */
	[IBV_WR_ATOMIC_WRITE] = OK_RC | NODATA, /* its 8 bytes travel in the slot */
};

/*
 * gr_check_swqe checks a send work request written into its slot, as
 * verbs.QP.PostSend would check it, so that errors come back from the call
 * with libibverbs' errno. len is its message length; ah and mw the objects
 * it names, if any.
 */
int gr_check_swqe(struct gr_qp *qp, const struct gr_swqe *w, uint64_t len, const struct ibv_ah *ah,
		  const struct ibv_mw *mw)
{
	struct ibv_qp *ibqp = &qp->qpx.qp_base;
	unsigned int op = w->opcode;
	uint8_t r, type_ok;

	if (ibqp->state < IBV_QPS_RTS || ibqp->state > IBV_QPS_ERR)
		return EINVAL;
	if (op >= sizeof(send_rules) || !(r = send_rules[op]))
		return EINVAL;
	type_ok = ibqp->qp_type == IBV_QPT_RC ? OK_RC : ibqp->qp_type == IBV_QPT_UC ? OK_UC : OK_UD;
	if (!(r & type_ok))
		return EINVAL;
	if (r & NOSUP)
		return EOPNOTSUPP;
	if (w->send_flags & ~(unsigned)(IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED |
					IBV_SEND_INLINE | IBV_SEND_IP_CSUM))
		return EINVAL;
	if (w->send_flags & IBV_SEND_IP_CSUM)
		return EOPNOTSUPP;
	if (w->num_sge > qp->cap.max_send_sge || len > MAX_MESSAGE)
		return EINVAL;
	if ((r & ATOMIC) && (len != 8 || w->num_sge != 1))
		return EINVAL;
	if ((r & NODATA) && (w->num_sge || (w->send_flags & IBV_SEND_INLINE)))
		return EINVAL;
	if ((w->send_flags & IBV_SEND_INLINE) && (!(r & INLINE) || len > qp->max_inline))
		return EINVAL;
	if (ibqp->qp_type == IBV_QPT_UC && op == IBV_WR_SEND_WITH_INV)
		return EOPNOTSUPP;
	if ((op == IBV_WR_RDMA_READ || (r & ATOMIC)) && qp->max_rd_atomic == 0)
		return EINVAL;
	if (op == IBV_WR_BIND_MW &&
	    (!mw || mw->pd->handle != ibqp->pd->handle || (w->mr == 0 && w->length) ||
	     (w->access & IBV_ACCESS_ZERO_BASED && mw->type == IBV_MW_TYPE_1)))
		return EINVAL;
	if (ibqp->qp_type == IBV_QPT_UD &&
	    (!ah || ah->pd->handle != ibqp->pd->handle || w->remote_qpn > 0xFFFFFF || len > qp->mtu_bytes))
		return EINVAL;
	return 0;
}

/* gr_sq_slot returns the send slot of position pos. */
char *gr_sq_slot(struct gr_qp *qp, uint64_t pos)
{
	return qp->sq.slots + (pos & qp->sq.mask) * qp->sq.stride;
}

/* write_send converts wr into the next free send slot and checks it. */
static int write_send(struct gr_qp *qp, struct ibv_send_wr *wr)
{
	char *slot = gr_sq_slot(qp, qp->sq.prod);
	struct gr_swqe *w = (struct gr_swqe *)slot;
	struct gr_sge *sge = (struct gr_sge *)(slot + sizeof(*w));
	const struct ibv_mw *mw = NULL;
	uint64_t len = 0;
	int i, err;

	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->cap.max_send_sge)
		return EINVAL;
	if (wr->opcode == IBV_WR_ATOMIC_WRITE)
		return EOPNOTSUPP; /* struct ibv_send_wr has no operand for it: ibv_wr_atomic_write */
	memset(w, 0, sizeof(*w));
	w->wr_id = wr->wr_id;
	w->opcode = wr->opcode;
	w->send_flags = wr->send_flags;
	w->num_sge = (uint32_t)wr->num_sge;
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_SEND_WITH_IMM:
		w->imm_data = be32toh(wr->imm_data);
		break;
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_LOCAL_INV:
		w->imm_data = wr->invalidate_rkey;
		break;
	default:
		break;
	}
	switch (wr->opcode) {
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		w->remote_addr = wr->wr.atomic.remote_addr;
		w->rkey = wr->wr.atomic.rkey;
		w->compare_add = wr->wr.atomic.compare_add;
		w->swap = wr->wr.atomic.swap;
		break;
	case IBV_WR_BIND_MW:
		mw = wr->bind_mw.mw;
		if (mw && mw->type != IBV_MW_TYPE_2)
			return EINVAL; /* a type 1 window is bound with ibv_bind_mw */
		gr_bind_to_swqe(w, mw, wr->bind_mw.rkey, &wr->bind_mw.bind_info);
		break;
	default:
		if (qp->qpx.qp_base.qp_type == IBV_QPT_UD) {
			w->ah = wr->wr.ud.ah ? wr->wr.ud.ah->handle : 0;
			w->remote_qpn = wr->wr.ud.remote_qpn;
			w->remote_qkey = wr->wr.ud.remote_qkey;
		} else {
			w->remote_addr = wr->wr.rdma.remote_addr;
			w->rkey = wr->wr.rdma.rkey;
		}
	}
	for (i = 0; i < wr->num_sge; i++)
		len += wr->sg_list[i].length;
	if (wr->send_flags & IBV_SEND_INLINE) {
		char *data = (char *)(sge + qp->sq.max_sge);

		if (len > qp->max_inline)
			return EINVAL;
		for (i = 0; i < wr->num_sge; i++) {
			memcpy(data, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
			data += wr->sg_list[i].length;
		}
		w->inline_len = (uint32_t)len;
		w->num_sge = 0;
	} else {
		for (i = 0; i < wr->num_sge; i++) {
			sge[i].addr = wr->sg_list[i].addr;
			sge[i].length = wr->sg_list[i].length;
			sge[i].lkey = wr->sg_list[i].lkey;
		}
	}
	err = gr_check_swqe(qp, w, len, qp->qpx.qp_base.qp_type == IBV_QPT_UD ? wr->wr.ud.ah : NULL, mw);
	if (!err && (wr->send_flags & IBV_SEND_INLINE))
		w->num_sge = 0;
	if (!err && !(wr->send_flags & IBV_SEND_INLINE))
		err = gr_odp_translate(to_ctx(qp->qpx.qp_base.context), sge, w->num_sge);
	return err;
}

/* gr_bind_to_swqe fills the bind part of a BIND_MW slot. */
void gr_bind_to_swqe(struct gr_swqe *w, const struct ibv_mw *mw, uint32_t rkey,
		     const struct ibv_mw_bind_info *b)
{
	w->mw = mw ? mw->handle : 0;
	w->rkey = rkey;
	w->mr = b->mr ? b->mr->handle : 0;
	w->remote_addr = b->addr;
	w->length = b->length;
	w->access = b->mw_access_flags;
}

int gr_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct gr_qp *qp = container_of(ibqp, struct gr_qp, qpx.qp_base);
	uint64_t start;
	int err = 0;

	if (unlikely(gr_gone(to_ctx(ibqp->context)))) {
		*bad = wr;
		return EIO;
	}
	pthread_spin_lock(&qp->sq.lock);
	start = qp->sq.prod;
	for (; wr; wr = wr->next) {
		err = gr_wq_full(&qp->sq) ? ENOMEM : write_send(qp, wr);
		if (err) {
			*bad = wr;
			break;
		}
		qp->sq.prod++;
	}
	if (qp->sq.prod != start) {
		gr_wq_publish(&qp->sq);
		gr_ring_doorbell(qp->sq.hdr, qp->db);
	}
	pthread_spin_unlock(&qp->sq.lock);
	return err;
}

/* write_recv checks a receive request and writes it into q. */
static int write_recv(struct gr_context *ctx, struct gr_wq *q, struct ibv_recv_wr *wr)
{
	char *slot;
	struct gr_rwqe *w;
	struct gr_sge *sge;
	uint64_t len = 0;
	int i;

	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->max_sge)
		return EINVAL;
	for (i = 0; i < wr->num_sge; i++)
		len += wr->sg_list[i].length;
	if (len >= MAX_MESSAGE)
		return EINVAL;
	if (gr_wq_full(q))
		return ENOMEM;
	slot = q->slots + (q->prod & q->mask) * q->stride;
	w = (struct gr_rwqe *)slot;
	sge = (struct gr_sge *)(slot + sizeof(*w));
	w->wr_id = wr->wr_id;
	w->num_sge = (uint32_t)wr->num_sge;
	for (i = 0; i < wr->num_sge; i++) {
		sge[i].addr = wr->sg_list[i].addr;
		sge[i].length = wr->sg_list[i].length;
		sge[i].lkey = wr->sg_list[i].lkey;
	}
	i = gr_odp_translate(ctx, sge, w->num_sge);
	if (i)
		return i;
	q->prod++;
	return 0;
}

static int post_recv_list(struct gr_context *ctx, struct gr_wq *q, int db,
			  struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	uint64_t start;
	int err = 0;

	pthread_spin_lock(&q->lock);
	start = q->prod;
	for (; wr; wr = wr->next) {
		err = write_recv(ctx, q, wr);
		if (err) {
			*bad = wr;
			break;
		}
	}
	if (q->prod != start) {
		gr_wq_publish(q);
		gr_ring_doorbell(q->hdr, db);
	}
	pthread_spin_unlock(&q->lock);
	return err;
}

int gr_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct gr_qp *qp = container_of(ibqp, struct gr_qp, qpx.qp_base);

	if (unlikely(gr_gone(to_ctx(ibqp->context))) || ibqp->srq || ibqp->state == IBV_QPS_RESET) {
		*bad = wr;
		return gr_gone(to_ctx(ibqp->context)) ? EIO : EINVAL;
	}
	return post_recv_list(to_ctx(ibqp->context), &qp->rq, qp->db, wr, bad);
}

int gr_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct gr_srq *srq = container_of(ibsrq, struct gr_srq, srq);

	if (unlikely(gr_gone(to_ctx(ibsrq->context)))) {
		*bad = wr;
		return EIO;
	}
	return post_recv_list(to_ctx(ibsrq->context), &srq->q, srq->db, wr, bad);
}
