/*
 * qp.c: queue pairs: create, modify, query, destroy.
 */
#include "shim.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* create_qp creates a QP; with is_ex, one whose ibv_qp_ex builders
 * (send_ops) are usable. */
static struct ibv_qp *create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr, int is_ex,
				uint64_t send_ops)
{
	struct gr_context *ctx = to_ctx(pd->context);
	struct gr_create_qp_req req;
	struct gr_create_qp_resp resp;
	struct gr_qp *qp;
	int fds[2] = {-1, -1}, err;

	if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UC &&
	    attr->qp_type != IBV_QPT_UD) {
		errno = EOPNOTSUPP; /* no raw packet, XRC or driver QPs */
		return NULL;
	}
	if (!attr->send_cq || !attr->recv_cq) {
		errno = EINVAL;
		return NULL;
	}
	qp = gr_calloc(1, sizeof(*qp));
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
	if (!err && (!gr_ring_fits(resp.ring_size, resp.sq_offset, resp.sq_entries, resp.sq_stride) ||
		     (!attr->srq && !gr_ring_fits(resp.ring_size, resp.rq_offset, resp.rq_entries,
					       resp.rq_stride)))) {
		struct gr_handle d = {.handle = resp.handle};

		close(fds[0]);
		close(fds[1]);
		gr_call(ctx, GR_OP_DESTROY_QP, &d, sizeof(d), NULL, 0, NULL, 0, NULL, 0, NULL, 0);
		err = EIO;
	}
	if (err) {
		gr_free(qp);
		errno = err;
		return NULL;
	}
	qp->ring = gr_map_ring(fds[0], resp.ring_size);
	if (!qp->ring) {
		struct gr_handle d = {.handle = resp.handle};

		err = errno;
		close(fds[1]);
		gr_call(ctx, GR_OP_DESTROY_QP, &d, sizeof(d), NULL, 0, NULL, 0, NULL, 0, NULL, 0);
		gr_free(qp);
		errno = err;
		return NULL;
	}
	qp->ring_size = resp.ring_size;
	qp->db = fds[1];
	qp->cap = resp.cap;
	qp->max_inline = resp.cap.max_inline_data;
	qp->sq_sig_all = attr->sq_sig_all;
	qp->mtu_bytes = 128u << ctx->dev.port.active_mtu;
	gr_wq_init(&qp->sq, qp->ring, resp.sq_offset, resp.sq_entries, resp.sq_stride,
		resp.cap.max_send_sge, resp.cap.max_send_wr);
	if (!attr->srq)
		gr_wq_init(&qp->rq, qp->ring, resp.rq_offset, resp.rq_entries, resp.rq_stride,
			resp.cap.max_recv_sge, resp.cap.max_recv_wr);
	qp->qpx.qp_base.qp_type = attr->qp_type;
	if (is_ex && (err = gr_qp_ex_init(qp, send_ops)) != 0) {
		struct gr_handle d = {.handle = resp.handle};

		gr_call(ctx, GR_OP_DESTROY_QP, &d, sizeof(d), NULL, 0, NULL, 0, NULL, 0, NULL, 0);
		munmap(qp->ring, qp->ring_size);
		close(qp->db);
		gr_free(qp);
		errno = err;
		return NULL;
	}
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

GR_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	return create_qp(pd, attr, 0, 0);
}

/* The supported parts of struct ibv_qp_init_attr_ex: a PD, and the send
 * operations of struct ibv_qp_ex; no XRC, creation flags, TSO or RSS. */
struct ibv_qp *gr_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *attr)
{
	uint32_t mask = attr->comp_mask;

	if (!(mask & IBV_QP_INIT_ATTR_PD) || !attr->pd || attr->pd->context != c) {
		errno = (mask & IBV_QP_INIT_ATTR_XRCD) ? EOPNOTSUPP : EINVAL;
		return NULL;
	}
	if (mask & ~(uint32_t)(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
			       IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ||
	    ((mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags) ||
	    ((mask & IBV_QP_INIT_ATTR_MAX_TSO_HEADER) && attr->max_tso_header)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return create_qp(attr->pd, (struct ibv_qp_init_attr *)attr,
			 (mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0,
			 (mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ? attr->send_ops_flags : 0);
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
	/* On-demand is what every region is (odp.c): accepted, not passed on. */
	o->qp_access_flags = a->qp_access_flags & ~(unsigned int)IBV_ACCESS_ON_DEMAND;
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
	gr_to_ah_attr(&a->ah_attr, &o->ah_attr);
	err = gr_call(to_ctx(ibqp->context), GR_OP_MODIFY_QP, &req, sizeof(req), NULL, 0, NULL, 0,
		      NULL, 0, NULL, 0);
	if (err)
		return err;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		qp->max_rd_atomic = a->max_rd_atomic;
	if (mask & IBV_QP_STATE)
		ibqp->state = a->qp_state;
	if ((mask & IBV_QP_STATE) && a->qp_state == IBV_QPS_RESET) {
		gr_cq_clean(ibqp->send_cq, ibqp->qp_num);
		if (ibqp->recv_cq != ibqp->send_cq)
			gr_cq_clean(ibqp->recv_cq, ibqp->qp_num);
	}
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
	gr_from_ah_attr(&s->ah_attr, &a->ah_attr);
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

	if (!gr_gone(ctx))
		err = gr_call(ctx, GR_OP_DESTROY_QP, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0,
			      NULL, 0);
	if (err && gr_gone(ctx))
		err = 0; /* the daemon is gone, and the object with it */
	if (err)
		return err;
	gr_obj_del(ctx, &qp->obj);
	pthread_mutex_lock(&ibqp->mutex);
	while (ibqp->events_completed != qp->events_reported)
		pthread_cond_wait(&ibqp->cond, &ibqp->mutex);
	pthread_mutex_unlock(&ibqp->mutex);
	munmap(qp->ring, qp->ring_size);
	close(qp->db);
	gr_free(qp->ex.scratch);
	gr_free(qp);
	return 0;
}
