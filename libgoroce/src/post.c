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

static int wq_full(struct gr_wq *q)
{
	return q->prod - __atomic_load_n(&q->hdr->done, __ATOMIC_ACQUIRE) >= q->cap;
}

/* Publish the slots written, then read need_doorbell: the daemon sets
 * need_doorbell before it looks at prod a last time, so one of the two
 * sees the other. */
static void wq_publish(struct gr_wq *q)
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
	[IBV_WR_BIND_MW] = OK_RC | OK_UC | NOSUP, /* memory windows: not yet */
	[IBV_WR_SEND_WITH_INV] = OK_RC | OK_UC | INLINE,
	[IBV_WR_TSO] = NOSUP,
	[IBV_WR_DRIVER1] = NOSUP,
	[12] = 0,
	[13] = 0,
	[14] = OK_RC | NOSUP, /* IBV_WR_FLUSH: only through ibv_wr_flush */
	[15] = OK_RC | NOSUP, /* IBV_WR_ATOMIC_WRITE: only through ibv_wr_atomic_write */
};

static int check_send(struct gr_qp *qp, struct ibv_send_wr *wr, uint64_t *lenp)
{
	struct ibv_qp *ibqp = &qp->qpx.qp_base;
	unsigned int op = wr->opcode;
	uint8_t r, type_ok;
	uint64_t len = 0;
	int i;

	if (ibqp->state < IBV_QPS_RTS || ibqp->state > IBV_QPS_ERR)
		return EINVAL;
	if (op >= sizeof(send_rules) || !(r = send_rules[op]))
		return EINVAL;
	type_ok = ibqp->qp_type == IBV_QPT_RC ? OK_RC :
		  ibqp->qp_type == IBV_QPT_UC ? OK_UC : OK_UD;
	if (!(r & type_ok))
		return EINVAL;
	if (r & NOSUP)
		return EOPNOTSUPP;
	if (wr->send_flags & ~(unsigned)(IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED |
					 IBV_SEND_INLINE | IBV_SEND_IP_CSUM))
		return EINVAL;
	if (wr->send_flags & IBV_SEND_IP_CSUM)
		return EOPNOTSUPP;
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->cap.max_send_sge)
		return EINVAL;
	for (i = 0; i < wr->num_sge; i++)
		len += wr->sg_list[i].length;
	if (len > MAX_MESSAGE)
		return EINVAL;
	if ((r & ATOMIC) && (len != 8 || wr->num_sge != 1))
		return EINVAL;
	if ((r & NODATA) && (wr->num_sge || (wr->send_flags & IBV_SEND_INLINE)))
		return EINVAL;
	if (wr->send_flags & IBV_SEND_INLINE) {
		if (!(r & INLINE) || len > qp->max_inline)
			return EINVAL;
	}
	if (ibqp->qp_type == IBV_QPT_UC && op == IBV_WR_SEND_WITH_INV)
		return EOPNOTSUPP;
	if ((op == IBV_WR_RDMA_READ || (r & ATOMIC)) && qp->max_rd_atomic == 0)
		return EINVAL;
	if (ibqp->qp_type == IBV_QPT_UD) {
		if (!wr->wr.ud.ah || wr->wr.ud.ah->pd != ibqp->pd || wr->wr.ud.remote_qpn > 0xFFFFFF ||
		    len > qp->mtu_bytes)
			return EINVAL;
	}
	*lenp = len;
	return 0;
}

static void write_send(struct gr_qp *qp, struct ibv_send_wr *wr, uint64_t len)
{
	char *slot = qp->sq.slots + (qp->sq.prod & qp->sq.mask) * qp->sq.stride;
	struct gr_swqe *w = (struct gr_swqe *)slot;
	struct gr_sge *sge = (struct gr_sge *)(slot + sizeof(*w));
	int i;

	w->wr_id = wr->wr_id;
	w->opcode = wr->opcode;
	w->send_flags = wr->send_flags;
	w->num_sge = (uint32_t)wr->num_sge;
	w->inline_len = 0;
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
		w->imm_data = 0;
	}
	if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		w->remote_addr = wr->wr.atomic.remote_addr;
		w->rkey = wr->wr.atomic.rkey;
		w->compare_add = wr->wr.atomic.compare_add;
		w->swap = wr->wr.atomic.swap;
	} else if (qp->qpx.qp_base.qp_type == IBV_QPT_UD) {
		w->ah = wr->wr.ud.ah->handle;
		w->remote_qpn = wr->wr.ud.remote_qpn;
		w->remote_qkey = wr->wr.ud.remote_qkey;
	} else {
		w->remote_addr = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
	}
	if (wr->send_flags & IBV_SEND_INLINE) {
		char *data = (char *)(sge + qp->sq.max_sge);

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
	qp->sq.prod++;
}

int gr_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct gr_qp *qp = container_of(ibqp, struct gr_qp, qpx.qp_base);
	uint64_t start, len;
	int err = 0;

	if (unlikely(to_ctx(ibqp->context)->stale)) {
		*bad = wr;
		return EIO;
	}
	pthread_spin_lock(&qp->sq.lock);
	start = qp->sq.prod;
	for (; wr; wr = wr->next) {
		err = check_send(qp, wr, &len);
		if (!err && wq_full(&qp->sq))
			err = ENOMEM;
		if (err) {
			*bad = wr;
			break;
		}
		write_send(qp, wr, len);
	}
	if (qp->sq.prod != start) {
		wq_publish(&qp->sq);
		gr_ring_doorbell(qp->sq.hdr, qp->db);
	}
	pthread_spin_unlock(&qp->sq.lock);
	return err;
}

/* write_recv checks a receive request and writes it into q. */
static int write_recv(struct gr_wq *q, struct ibv_recv_wr *wr)
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
	if (wq_full(q))
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
	q->prod++;
	return 0;
}

static int post_recv_list(struct gr_wq *q, int db, struct ibv_recv_wr *wr,
			  struct ibv_recv_wr **bad)
{
	uint64_t start;
	int err = 0;

	pthread_spin_lock(&q->lock);
	start = q->prod;
	for (; wr; wr = wr->next) {
		err = write_recv(q, wr);
		if (err) {
			*bad = wr;
			break;
		}
	}
	if (q->prod != start) {
		wq_publish(q);
		gr_ring_doorbell(q->hdr, db);
	}
	pthread_spin_unlock(&q->lock);
	return err;
}

int gr_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct gr_qp *qp = container_of(ibqp, struct gr_qp, qpx.qp_base);

	if (unlikely(to_ctx(ibqp->context)->stale) || ibqp->srq || ibqp->state == IBV_QPS_RESET) {
		*bad = wr;
		return to_ctx(ibqp->context)->stale ? EIO : EINVAL;
	}
	return post_recv_list(&qp->rq, qp->db, wr, bad);
}

int gr_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct gr_srq *srq = container_of(ibsrq, struct gr_srq, srq);

	if (unlikely(to_ctx(ibsrq->context)->stale)) {
		*bad = wr;
		return EIO;
	}
	return post_recv_list(&srq->q, srq->db, wr, bad);
}
