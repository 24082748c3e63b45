/*
 * srq.c: shared receive queues.
 */
#include "shim.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

GR_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct gr_context *ctx = to_ctx(pd->context);
	struct gr_create_srq_req req;
	struct gr_create_srq_resp resp;
	struct gr_srq *srq;
	int fds[2] = {-1, -1}, err;

	srq = gr_calloc(1, sizeof(*srq));
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
	if (!err && !gr_ring_fits(resp.ring_size, 0, resp.entries, resp.stride)) {
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
		gr_free(srq);
		errno = err;
		return NULL;
	}
	srq->ring_size = resp.ring_size;
	srq->db = fds[1];
	gr_wq_init(&srq->q, srq->ring, 0, resp.entries, resp.stride, resp.max_sge, resp.max_wr);
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

	if (!gr_gone(ctx))
		err = gr_call(ctx, GR_OP_DESTROY_SRQ, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0,
			      NULL, 0);
	if (err && gr_gone(ctx))
		err = 0; /* the daemon is gone, and the object with it */
	if (err)
		return err;
	gr_obj_del(ctx, &srq->obj);
	pthread_mutex_lock(&ibsrq->mutex);
	while (ibsrq->events_completed != srq->events_reported)
		pthread_cond_wait(&ibsrq->cond, &ibsrq->mutex);
	pthread_mutex_unlock(&ibsrq->mutex);
	munmap(srq->ring, srq->ring_size);
	close(srq->db);
	gr_free(srq);
	return 0;
}
