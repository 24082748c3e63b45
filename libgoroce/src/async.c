/*
 * async.c: asynchronous events, read from the pipe whose read end is
 * ibv_context.async_fd.
 */
#include "shim.h"

#include <unistd.h>

/* Async events: the daemon writes struct gr_async_event records to the
 * context's async_fd; an event of an object destroyed since is skipped.
 * When the daemon goes away the pipe's write end closes: the reader gets
 * IBV_EVENT_DEVICE_FATAL once (a NIC that died), then errors. */
GR_EXPORT int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *event)
{
	struct gr_context *ctx = to_ctx(c);
	struct gr_async_event ev;

	for (;;) {
		ssize_t n = read(c->async_fd, &ev, sizeof(ev));
		void *obj;

		if (n == 0 && !ctx->stale) {
			__atomic_store_n(&ctx->dead, 1, __ATOMIC_RELAXED);
			if (!__atomic_exchange_n(&ctx->fatal_reported, 1, __ATOMIC_RELAXED)) {
				event->event_type = IBV_EVENT_DEVICE_FATAL;
				event->element.port_num = 0;
				return 0;
			}
			errno = EIO;
			return -1;
		}
		if (n != (ssize_t)sizeof(ev))
			return -1;
		event->event_type = (enum ibv_event_type)ev.event_type;
		if (ev.kind == GR_OBJ_NONE) {
			event->element.port_num = (int)ev.handle;
			return 0;
		}
		pthread_mutex_lock(&ctx->obj_mu);
		obj = gr_obj_find(ctx, (uint32_t)ev.handle, ev.kind);
		if (obj) {
			switch (ev.kind) {
			case GR_OBJ_CQ:
				((struct gr_cq *)obj)->async_events_reported++;
				event->element.cq = obj;
				break;
			case GR_OBJ_QP:
				((struct gr_qp *)obj)->events_reported++;
				event->element.qp = obj;
				break;
			case GR_OBJ_SRQ:
				((struct gr_srq *)obj)->events_reported++;
				event->element.srq = obj;
				break;
			}
		}
		pthread_mutex_unlock(&ctx->obj_mu);
		if (obj)
			return 0;
	}
}

GR_EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
	switch (event->event_type) {
	case IBV_EVENT_CQ_ERR: {
		struct ibv_cq *cq = event->element.cq;

		pthread_mutex_lock(&cq->mutex);
		cq->async_events_completed++;
		pthread_cond_signal(&cq->cond);
		pthread_mutex_unlock(&cq->mutex);
		return;
	}
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED: {
		struct ibv_qp *qp = event->element.qp;

		pthread_mutex_lock(&qp->mutex);
		qp->events_completed++;
		pthread_cond_signal(&qp->cond);
		pthread_mutex_unlock(&qp->mutex);
		return;
	}
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED: {
		struct ibv_srq *srq = event->element.srq;

		pthread_mutex_lock(&srq->mutex);
		srq->events_completed++;
		pthread_cond_signal(&srq->cond);
		pthread_mutex_unlock(&srq->mutex);
		return;
	}
	default:
		return;
	}
}
