/*
 * qp.c: queue pairs, shared receive queues, address handles, and the
 * posting fast paths.
 *
 * ibv_post_send checks each work request as goroce's verbs.QP.PostSend would
 * (so that errors come back from the call, as from a hardware provider),
 * writes it into the send ring and, only if the daemon's pump sleeps, rings
 * the QP's doorbell: one write() per post at low rates, none when the
 * daemon is busy. Receives take the same path through the receive ring.
 */
#include "shim.h"

#include <netinet/ip.h>
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

static void wq_init(struct gr_wq *q, char *ring, uint64_t off, uint32_t entries, uint32_t stride,
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

static int ring_fits(uint64_t size, uint64_t off, uint32_t entries, uint32_t stride)
{
	return entries && !(entries & (entries - 1)) &&
	       off + sizeof(struct gr_wq_hdr) + (uint64_t)entries * stride <= size;
}

GR_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct gr_context *ctx = to_ctx(pd->context);
	struct gr_create_qp_req req;
	struct gr_create_qp_resp resp;
	struct gr_qp *qp;
	int fds[2] = {-1, -1}, err;

	if (!attr->send_cq || !attr->recv_cq) {
		errno = EINVAL;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	memset(&req, 0, sizeof(req));
	req.pd = pd->handle;
	req.send_cq = ((struct gr_cq *)attr->send_cq)->handle;
	req.recv_cq = ((struct gr_cq *)attr->recv_cq)->handle;
	req.srq = attr->srq ? container_of(attr->srq, struct gr_srq, srq)->obj.handle : 0;
	req.qp_type = attr->qp_type;
	req.sq_sig_all = (uint32_t)attr->sq_sig_all;
	req.cap.max_send_wr = attr->cap.max_send_wr;
	req.cap.max_recv_wr = attr->srq ? 0 : attr->cap.max_recv_wr;
	req.cap.max_send_sge = attr->cap.max_send_sge;
	req.cap.max_recv_sge = attr->srq ? 0 : attr->cap.max_recv_sge;
	req.cap.max_inline_data = attr->cap.max_inline_data;
	err = gr_call(ctx, GR_OP_CREATE_QP, &req, sizeof(req), NULL, 0, NULL, 0, &resp,
		      sizeof(resp), fds, 2);
	if (!err && (!ring_fits(resp.ring_size, resp.sq_offset, resp.sq_entries, resp.sq_stride) ||
		     (!attr->srq && !ring_fits(resp.ring_size, resp.rq_offset, resp.rq_entries,
					       resp.rq_stride)))) {
		struct gr_handle d = {.handle = resp.handle};

		close(fds[0]);
		close(fds[1]);
		gr_call(ctx, GR_OP_DESTROY_QP, &d, sizeof(d), NULL, 0, NULL, 0, NULL, 0, NULL, 0);
		err = EIO;
	}
	if (err) {
		free(qp);
		errno = err;
		return NULL;
	}
	qp->ring = gr_map_ring(fds[0], resp.ring_size);
	if (!qp->ring) {
		struct gr_handle d = {.handle = resp.handle};

		err = errno;
		close(fds[1]);
		gr_call(ctx, GR_OP_DESTROY_QP, &d, sizeof(d), NULL, 0, NULL, 0, NULL, 0, NULL, 0);
		free(qp);
		errno = err;
		return NULL;
	}
	qp->ring_size = resp.ring_size;
	qp->db = fds[1];
	qp->cap = resp.cap;
	qp->max_inline = resp.cap.max_inline_data;
	qp->sq_sig_all = attr->sq_sig_all;
	qp->mtu_bytes = 128u << ctx->dev.port.active_mtu;
	wq_init(&qp->sq, qp->ring, resp.sq_offset, resp.sq_entries, resp.sq_stride,
		resp.cap.max_send_sge, resp.cap.max_send_wr);
	if (!attr->srq)
		wq_init(&qp->rq, qp->ring, resp.rq_offset, resp.rq_entries, resp.rq_stride,
			resp.cap.max_recv_sge, resp.cap.max_recv_wr);
	qp->qpx.qp_base.context = pd->context;
	qp->qpx.qp_base.qp_context = attr->qp_context;
	qp->qpx.qp_base.pd = pd;
	qp->qpx.qp_base.send_cq = attr->send_cq;
	qp->qpx.qp_base.recv_cq = attr->recv_cq;
	qp->qpx.qp_base.srq = attr->srq;
	qp->qpx.qp_base.handle = resp.handle;
	qp->qpx.qp_base.qp_num = resp.qp_num;
	qp->qpx.qp_base.state = IBV_QPS_RESET;
	qp->qpx.qp_base.qp_type = attr->qp_type;
	pthread_mutex_init(&qp->qpx.qp_base.mutex, NULL);
	pthread_cond_init(&qp->qpx.qp_base.cond, NULL);
	attr->cap.max_send_wr = resp.cap.max_send_wr;
	attr->cap.max_recv_wr = resp.cap.max_recv_wr;
	attr->cap.max_send_sge = resp.cap.max_send_sge;
	attr->cap.max_recv_sge = resp.cap.max_recv_sge;
	attr->cap.max_inline_data = resp.cap.max_inline_data;
	gr_obj_add(ctx, &qp->obj, resp.handle, GR_OBJ_QP, qp);
	return &qp->qpx.qp_base;
}

static void to_gr_ah(const struct ibv_ah_attr *a, struct gr_ah_attr *o)
{
	memset(o, 0, sizeof(*o));
	memcpy(o->dgid, a->grh.dgid.raw, 16);
	o->flow_label = a->grh.flow_label;
	o->sgid_index = a->grh.sgid_index;
	o->hop_limit = a->grh.hop_limit;
	o->traffic_class = a->grh.traffic_class;
	o->sl = a->sl;
	o->static_rate = a->static_rate;
	o->is_global = a->is_global;
	o->port_num = a->port_num;
	o->dlid = a->dlid;
	o->src_path_bits = a->src_path_bits;
}

static void from_gr_ah(const struct gr_ah_attr *a, struct ibv_ah_attr *o)
{
	memset(o, 0, sizeof(*o));
	memcpy(o->grh.dgid.raw, a->dgid, 16);
	o->grh.flow_label = a->flow_label;
	o->grh.sgid_index = (uint8_t)a->sgid_index;
	o->grh.hop_limit = (uint8_t)a->hop_limit;
	o->grh.traffic_class = (uint8_t)a->traffic_class;
	o->sl = (uint8_t)a->sl;
	o->static_rate = (uint8_t)a->static_rate;
	o->is_global = (uint8_t)a->is_global;
	o->port_num = (uint8_t)a->port_num;
	o->dlid = (uint16_t)a->dlid;
	o->src_path_bits = (uint8_t)a->src_path_bits;
}

static void cap_to_gr(const struct ibv_qp_cap *c, struct gr_qp_cap *o)
{
	o->max_send_wr = c->max_send_wr;
	o->max_recv_wr = c->max_recv_wr;
	o->max_send_sge = c->max_send_sge;
	o->max_recv_sge = c->max_recv_sge;
	o->max_inline_data = c->max_inline_data;
	o->pad = 0;
}

static void cap_from_gr(const struct gr_qp_cap *c, struct ibv_qp_cap *o)
{
	o->max_send_wr = c->max_send_wr;
	o->max_recv_wr = c->max_recv_wr;
	o->max_send_sge = c->max_send_sge;
	o->max_recv_sge = c->max_recv_sge;
	o->max_inline_data = c->max_inline_data;
}

GR_EXPORT int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *a, int mask)
{
	struct gr_qp *qp = container_of(ibqp, struct gr_qp, qpx.qp_base);
	struct gr_modify_qp_req req;
	struct gr_qp_attr *o = &req.attr;
	int err;

	memset(&req, 0, sizeof(req));
	req.handle = ibqp->handle;
	req.mask = (uint32_t)mask;
	o->qp_state = a->qp_state;
	o->cur_qp_state = a->cur_qp_state;
	o->path_mtu = a->path_mtu;
	o->path_mig_state = a->path_mig_state;
	o->qkey = a->qkey;
	o->rq_psn = a->rq_psn;
	o->sq_psn = a->sq_psn;
	o->dest_qp_num = a->dest_qp_num;
	o->qp_access_flags = a->qp_access_flags;
	o->pkey_index = a->pkey_index;
	o->en_sqd_async_notify = a->en_sqd_async_notify;
	o->max_rd_atomic = a->max_rd_atomic;
	o->max_dest_rd_atomic = a->max_dest_rd_atomic;
	o->min_rnr_timer = a->min_rnr_timer;
	o->port_num = a->port_num;
	o->timeout = a->timeout;
	o->retry_cnt = a->retry_cnt;
	o->rnr_retry = a->rnr_retry;
	o->rate_limit = a->rate_limit;
	cap_to_gr(&a->cap, &o->cap);
	to_gr_ah(&a->ah_attr, &o->ah_attr);
	err = gr_call(to_ctx(ibqp->context), GR_OP_MODIFY_QP, &req, sizeof(req), NULL, 0, NULL, 0,
		      NULL, 0, NULL, 0);
	if (err)
		return err;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		qp->max_rd_atomic = a->max_rd_atomic;
	if (mask & IBV_QP_STATE)
		ibqp->state = a->qp_state;
	return 0;
}

GR_EXPORT int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *a, int mask,
			   struct ibv_qp_init_attr *init)
{
	struct gr_qp *qp = container_of(ibqp, struct gr_qp, qpx.qp_base);
	struct gr_handle req = {.handle = ibqp->handle};
	struct gr_query_qp_resp resp;
	const struct gr_qp_attr *s = &resp.attr;
	int err;

	(void)mask;
	err = gr_call(to_ctx(ibqp->context), GR_OP_QUERY_QP, &req, sizeof(req), NULL, 0, NULL, 0,
		      &resp, sizeof(resp), NULL, 0);
	if (err)
		return err;
	memset(a, 0, sizeof(*a));
	a->qp_state = (enum ibv_qp_state)s->qp_state;
	a->cur_qp_state = (enum ibv_qp_state)s->cur_qp_state;
	a->path_mtu = (enum ibv_mtu)s->path_mtu;
	a->path_mig_state = (enum ibv_mig_state)s->path_mig_state;
	a->qkey = s->qkey;
	a->rq_psn = s->rq_psn;
	a->sq_psn = s->sq_psn;
	a->dest_qp_num = s->dest_qp_num;
	a->qp_access_flags = s->qp_access_flags;
	cap_from_gr(&s->cap, &a->cap);
	from_gr_ah(&s->ah_attr, &a->ah_attr);
	a->pkey_index = (uint16_t)s->pkey_index;
	a->en_sqd_async_notify = (uint8_t)s->en_sqd_async_notify;
	a->sq_draining = (uint8_t)s->sq_draining;
	a->max_rd_atomic = (uint8_t)s->max_rd_atomic;
	a->max_dest_rd_atomic = (uint8_t)s->max_dest_rd_atomic;
	a->min_rnr_timer = (uint8_t)s->min_rnr_timer;
	a->port_num = (uint8_t)s->port_num;
	a->timeout = (uint8_t)s->timeout;
	a->retry_cnt = (uint8_t)s->retry_cnt;
	a->rnr_retry = (uint8_t)s->rnr_retry;
	a->rate_limit = s->rate_limit;
	ibqp->state = a->qp_state;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = ibqp->qp_context;
		init->send_cq = ibqp->send_cq;
		init->recv_cq = ibqp->recv_cq;
		init->srq = ibqp->srq;
		cap_from_gr(&qp->cap, &init->cap);
		init->qp_type = ibqp->qp_type;
		init->sq_sig_all = qp->sq_sig_all;
	}
	return 0;
}

GR_EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp)
{
	struct gr_qp *qp = container_of(ibqp, struct gr_qp, qpx.qp_base);
	struct gr_context *ctx = to_ctx(ibqp->context);
	struct gr_handle req = {.handle = ibqp->handle};
	int err = 0;

	if (!ctx->stale)
		err = gr_call(ctx, GR_OP_DESTROY_QP, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0,
			      NULL, 0);
	if (err)
		return err;
	gr_obj_del(ctx, &qp->obj);
	pthread_mutex_lock(&ibqp->mutex);
	while (ibqp->events_completed != qp->events_reported)
		pthread_cond_wait(&ibqp->cond, &ibqp->mutex);
	pthread_mutex_unlock(&ibqp->mutex);
	munmap(qp->ring, qp->ring_size);
	close(qp->db);
	free(qp);
	return 0;
}

GR_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	(void)qp;
	return NULL; /* no extended QPs yet: ibv_create_qp_ex is not supported */
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

GR_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct gr_context *ctx = to_ctx(pd->context);
	struct gr_create_srq_req req;
	struct gr_create_srq_resp resp;
	struct gr_srq *srq;
	int fds[2] = {-1, -1}, err;

	srq = calloc(1, sizeof(*srq));
	if (!srq) {
		errno = ENOMEM;
		return NULL;
	}
	req.pd = pd->handle;
	req.max_wr = attr->attr.max_wr;
	req.max_sge = attr->attr.max_sge;
	req.srq_limit = attr->attr.srq_limit;
	err = gr_call(ctx, GR_OP_CREATE_SRQ, &req, sizeof(req), NULL, 0, NULL, 0, &resp,
		      sizeof(resp), fds, 2);
	if (!err && !ring_fits(resp.ring_size, 0, resp.entries, resp.stride)) {
		close(fds[0]);
		fds[0] = -1;
		err = EIO;
	}
	if (!err && !(srq->ring = gr_map_ring(fds[0], resp.ring_size)))
		err = errno ? errno : EIO;
	if (err) {
		if (fds[1] >= 0) {
			struct gr_handle d = {.handle = resp.handle};

			close(fds[1]);
			gr_call(ctx, GR_OP_DESTROY_SRQ, &d, sizeof(d), NULL, 0, NULL, 0, NULL, 0,
				NULL, 0);
		}
		free(srq);
		errno = err;
		return NULL;
	}
	srq->ring_size = resp.ring_size;
	srq->db = fds[1];
	wq_init(&srq->q, srq->ring, 0, resp.entries, resp.stride, resp.max_sge, resp.max_wr);
	srq->srq.context = pd->context;
	srq->srq.srq_context = attr->srq_context;
	srq->srq.pd = pd;
	srq->srq.handle = resp.handle;
	pthread_mutex_init(&srq->srq.mutex, NULL);
	pthread_cond_init(&srq->srq.cond, NULL);
	attr->attr.max_wr = resp.max_wr;
	attr->attr.max_sge = resp.max_sge;
	gr_obj_add(ctx, &srq->obj, resp.handle, GR_OBJ_SRQ, srq);
	return &srq->srq;
}

GR_EXPORT int ibv_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int mask)
{
	struct gr_srq *srq = container_of(ibsrq, struct gr_srq, srq);
	struct gr_modify_srq_req req = {.handle = srq->obj.handle, .mask = (uint32_t)mask,
					.max_wr = attr->max_wr, .srq_limit = attr->srq_limit};
	int err;

	err = gr_call(to_ctx(ibsrq->context), GR_OP_MODIFY_SRQ, &req, sizeof(req), NULL, 0, NULL,
		      0, NULL, 0, NULL, 0);
	if (!err && (mask & IBV_SRQ_MAX_WR)) {
		pthread_spin_lock(&srq->q.lock);
		srq->q.cap = attr->max_wr;
		pthread_spin_unlock(&srq->q.lock);
	}
	return err;
}

GR_EXPORT int ibv_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
	struct gr_srq *srq = container_of(ibsrq, struct gr_srq, srq);
	struct gr_handle req = {.handle = srq->obj.handle};
	struct gr_query_srq_resp resp;
	int err;

	err = gr_call(to_ctx(ibsrq->context), GR_OP_QUERY_SRQ, &req, sizeof(req), NULL, 0, NULL, 0,
		      &resp, sizeof(resp), NULL, 0);
	if (err)
		return err;
	attr->max_wr = resp.max_wr;
	attr->max_sge = resp.max_sge;
	attr->srq_limit = resp.srq_limit;
	return 0;
}

GR_EXPORT int ibv_destroy_srq(struct ibv_srq *ibsrq)
{
	struct gr_srq *srq = container_of(ibsrq, struct gr_srq, srq);
	struct gr_context *ctx = to_ctx(ibsrq->context);
	struct gr_handle req = {.handle = srq->obj.handle};
	int err = 0;

	if (!ctx->stale)
		err = gr_call(ctx, GR_OP_DESTROY_SRQ, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0,
			      NULL, 0);
	if (err)
		return err;
	gr_obj_del(ctx, &srq->obj);
	pthread_mutex_lock(&ibsrq->mutex);
	while (ibsrq->events_completed != srq->events_reported)
		pthread_cond_wait(&ibsrq->cond, &ibsrq->mutex);
	pthread_mutex_unlock(&ibsrq->mutex);
	munmap(srq->ring, srq->ring_size);
	close(srq->db);
	free(srq);
	return 0;
}

GR_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct gr_create_ah_req req;
	struct gr_handle resp;
	struct gr_ah *ah;
	int err;

	ah = calloc(1, sizeof(*ah));
	if (!ah) {
		errno = ENOMEM;
		return NULL;
	}
	memset(&req, 0, sizeof(req));
	req.pd = pd->handle;
	to_gr_ah(attr, &req.attr);
	err = gr_call(to_ctx(pd->context), GR_OP_CREATE_AH, &req, sizeof(req), NULL, 0, NULL, 0,
		      &resp, sizeof(resp), NULL, 0);
	if (err) {
		free(ah);
		errno = err;
		return NULL;
	}
	ah->ah.context = pd->context;
	ah->ah.pd = pd;
	ah->ah.handle = resp.handle;
	return &ah->ah;
}

GR_EXPORT int ibv_destroy_ah(struct ibv_ah *ibah)
{
	struct gr_context *ctx = to_ctx(ibah->context);
	struct gr_handle req = {.handle = ibah->handle};
	int err = 0;

	if (!ctx->stale)
		err = gr_call(ctx, GR_OP_DESTROY_AH, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0,
			      NULL, 0);
	if (!err)
		free(container_of(ibah, struct gr_ah, ah));
	return err;
}

/* find_gid returns the index of gid in the context's table, or -1. */
static int find_gid(struct gr_context *ctx, const uint8_t *gid)
{
	uint32_t i;

	for (i = 0; i < ctx->dev.gid_count; i++)
		if (memcmp(ctx->dev.gids[i], gid, 16) == 0)
			return (int)i;
	return -1;
}

/* ibv_init_ah_from_wc: the GRH area of a RoCEv2 receive holds the packet's
 * IPv4 header in bytes 20-39, or its IPv6 header in all 40. */
GR_EXPORT int ibv_init_ah_from_wc(struct ibv_context *c, uint8_t port, struct ibv_wc *wc,
				  struct ibv_grh *grh, struct ibv_ah_attr *ah)
{
	struct gr_context *ctx = to_ctx(c);
	uint8_t local[16];
	int idx;

	memset(ah, 0, sizeof(*ah));
	ah->dlid = wc->slid;
	ah->sl = wc->sl;
	ah->src_path_bits = wc->dlid_path_bits;
	ah->port_num = port;
	if (!(wc->wc_flags & IBV_WC_GRH))
		return 0;
	ah->is_global = 1;
	ah->grh.flow_label = be32toh(grh->version_tclass_flow) & 0xFFFFF;
	if ((be32toh(grh->version_tclass_flow) >> 28) != 6) {
		const struct iphdr *ip = (const struct iphdr *)((const char *)grh + 20);

		if (ip->version != 4) {
			errno = EPROTONOSUPPORT;
			return -1;
		}
		memset(local, 0, 10);
		local[10] = local[11] = 0xff;
		memcpy(local + 12, &ip->daddr, 4);
		memset(ah->grh.dgid.raw, 0, 10);
		ah->grh.dgid.raw[10] = ah->grh.dgid.raw[11] = 0xff;
		memcpy(ah->grh.dgid.raw + 12, &ip->saddr, 4);
		ah->grh.hop_limit = ip->ttl;
		ah->grh.traffic_class = ip->tos;
	} else {
		memcpy(local, grh->dgid.raw, 16);
		ah->grh.dgid = grh->sgid;
		ah->grh.hop_limit = grh->hop_limit;
		ah->grh.traffic_class = (be32toh(grh->version_tclass_flow) >> 20) & 0xFF;
	}
	idx = find_gid(ctx, local);
	if (idx < 0) {
		errno = EINVAL;
		return -1;
	}
	ah->grh.sgid_index = (uint8_t)idx;
	return 0;
}

GR_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
					       struct ibv_grh *grh, uint8_t port)
{
	struct ibv_ah_attr attr;

	if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &attr))
		return NULL;
	return ibv_create_ah(pd, &attr);
}
