/*
 * rdmacm_event.c: librdmacm's events: rdma_get_cm_event reads the
 * daemon's record from the channel's socket, makes a connection
 * request's ID, completes an active connection whose QP this library
 * moves, and hands the application struct rdma_cm_event; also
 * rdma_get_devices and the calls goroce answers with EOPNOTSUPP.
 */
#include "rdmacm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- events ---- */

static void ud_param(struct gr_cm_evt *e, const struct gr_cm_param *s)
{
	struct rdma_ud_param *u = &e->ev.param.ud;

	u->private_data_len = (uint8_t)(s->private_data_len > 255 ? 255 : s->private_data_len);
	memcpy(e->private_data, s->private_data, sizeof(e->private_data));
	u->private_data = u->private_data_len ? e->private_data : NULL;
	gr_from_ah_attr(&s->ah_attr, &u->ah_attr);
	u->qp_num = s->qp_num;
	u->qkey = s->qkey;
}

static void conn_param(struct gr_cm_evt *e, const struct gr_cm_param *s)
{
	struct rdma_conn_param *c = &e->ev.param.conn;

	c->private_data_len = (uint8_t)(s->private_data_len > 255 ? 255 : s->private_data_len);
	memcpy(e->private_data, s->private_data, sizeof(e->private_data));
	c->private_data = c->private_data_len ? e->private_data : NULL;
	c->responder_resources = s->responder_resources;
	c->initiator_depth = s->initiator_depth;
	c->flow_control = s->flow_control;
	c->retry_count = s->retry_count;
	c->rnr_retry_count = s->rnr_retry_count;
	c->srq = s->srq;
	c->qp_num = s->qp_num;
}

/* conn_request makes the ID of a connection request; the caller holds
 * gr_cm_mu. A request whose listener is gone here is destroyed. */
static struct gr_cm_id *conn_request(struct gr_cm_evt *e, const struct gr_cm_event *w)
{
	struct gr_cm_id *l = gr_cm_id_find(w->listen), *p;
	struct gr_cm_req req;

	p = l ? gr_cm_id_alloc(l->id.channel, l->id.context, l->id.ps, l->id.qp_type) : NULL;
	if (!p) {
		memset(&req, 0, sizeof(req));
		req.id = w->info.id;
		gr_cm_call(GR_OP_CM_DESTROY_ID, &req, NULL, NULL);
		return NULL;
	}
	gr_cm_id_register(p, &w->info);
	/* From this side's point of view: what the peer asks it to serve,
	 * and what it may issue to the peer. */
	p->responder_resources = w->param.responder_resources;
	p->initiator_depth = w->param.initiator_depth;
	e->ev.listen_id = &l->id;
	return p;
}

/* conn_response completes an active connection whose QP this library
 * moves (librdmacm's ucma_process_conn_resp): RTR, RTS, then the RTU;
 * the application sees ESTABLISHED, or CONNECT_ERROR after a REJ. */
static void conn_response(struct gr_cm_evt *e, struct gr_cm_id *p)
{
	const struct rdma_conn_param *c = &e->ev.param.conn;

	if (gr_cm_modify_qp(p, IBV_QPS_RTR, c->responder_resources, c->initiator_depth) ||
	    gr_cm_modify_qp(p, IBV_QPS_RTS, c->responder_resources, c->initiator_depth) ||
	    rdma_establish(&p->id)) {
		e->ev.status = errno ? -errno : -EINVAL;
		gr_cm_qp_err(p);
		rdma_reject(&p->id, NULL, 0);
		e->ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
		return;
	}
	e->ev.event = RDMA_CM_EVENT_ESTABLISHED;
}

/* read_event reads one event from the channel's socket; -1 with errno on
 * failure (EAGAIN on a non-blocking channel with none). */
static int read_event(struct rdma_event_channel *channel, struct gr_cm_event *w)
{
	ssize_t n;

	do
		n = recv(channel->fd, w, sizeof(*w), 0);
	while (n < 0 && errno == EINTR);
	if (n == 0)
		return gr_cm_err(ENODEV); /* the daemon is gone */
	if (n < 0)
		return -1;
	if ((size_t)n != sizeof(*w))
		return gr_cm_err(EPROTO);
	return 0;
}

/* orphaned_wait is where a thread reading a channel destroyed meanwhile
 * stays: the kernel's rdma_cm never wakes such a read, since the channel's
 * IDs and their events are gone with it (a destroyed ID's event is never
 * delivered). pause() is a cancellation point, so pthread_cancel ends it. */
static void orphaned_wait(void)
{
	gr_debug("rdma_get_cm_event: the event channel was destroyed while this thread read it: "
		 "it waits, as on a kernel rdma_cm file");
	for (;;)
		pause();
}

/* get_event is rdma_get_cm_event for a channel the caller counts itself a
 * reader of. */
static int get_event(struct gr_cm_channel *ch, struct rdma_cm_event **event)
{
	struct rdma_event_channel *channel = &ch->ch;
	struct gr_cm_event w;
	struct gr_cm_evt *e;
	struct gr_cm_id *p;
	int failed, orphaned;
	uint32_t reported, acked;

	for (;;) {
		failed = read_event(channel, &w);
		pthread_mutex_lock(&gr_cm_mu);
		orphaned = ch->orphaned;
		pthread_mutex_unlock(&gr_cm_mu);
		if (orphaned)
			orphaned_wait();
		if (failed)
			return -1;
		e = gr_calloc(1, sizeof(*e));
		if (!e)
			return gr_cm_err(ENOMEM);
		pthread_mutex_lock(&gr_cm_mu);
		if (w.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
			p = conn_request(e, &w);
		} else {
			p = gr_cm_id_find(w.info.id);
			if (p)
				gr_cm_set_info(p, &w.info);
		}
		if (!p) { /* an ID destroyed meanwhile */
			pthread_mutex_unlock(&gr_cm_mu);
			gr_debug("rdma_get_cm_event: dropped %s of destroyed id %u",
				 rdma_event_str((enum rdma_cm_event_type)w.type), w.info.id);
			gr_free(e);
			continue;
		}
		p->events_reported++;
		reported = p->events_reported;
		acked = p->events_completed;
		pthread_mutex_unlock(&gr_cm_mu);
		e->owner = p;
		e->ev.id = &p->id;
		e->ev.event = (enum rdma_cm_event_type)w.type;
		e->ev.status = w.status;
		if (gr_cm_is_ud(&p->id))
			ud_param(e, &w.param);
		else
			conn_param(e, &w.param);
		switch (e->ev.event) {
		case RDMA_CM_EVENT_CONNECT_RESPONSE:
			if (p->id.qp)
				conn_response(e, p);
			break;
		case RDMA_CM_EVENT_REJECTED:
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_CONNECT_ERROR:
			gr_cm_qp_err(p);
			break;
		default:
			break;
		}
		gr_debug("rdma_get_cm_event: %s, status %d, id %u (%u reported, %u acknowledged)",
			 rdma_event_str(e->ev.event), e->ev.status, p->handle, reported, acked);
		*event = &e->ev;
		return 0;
	}
}

GR_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct gr_cm_channel *ch;
	int ret, err;

	if (!channel || !event)
		return gr_cm_err(EINVAL);
	ch = container_of(channel, struct gr_cm_channel, ch);
	pthread_mutex_lock(&gr_cm_mu);
	ch->readers++;
	pthread_mutex_unlock(&gr_cm_mu);
	ret = get_event(ch, event);
	err = errno;
	pthread_mutex_lock(&gr_cm_mu);
	ch->readers--;
	pthread_mutex_unlock(&gr_cm_mu);
	errno = err;
	return ret;
}

GR_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	struct gr_cm_evt *e = container_of(event, struct gr_cm_evt, ev);

	if (!event)
		return gr_cm_err(EINVAL);
	pthread_mutex_lock(&gr_cm_mu);
	e->owner->events_completed++;
	pthread_cond_broadcast(&e->owner->cond);
	pthread_mutex_unlock(&gr_cm_mu);
	gr_free(e);
	return 0;
}

GR_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
		"RDMA_CM_EVENT_ADDR_RESOLVED",	  "RDMA_CM_EVENT_ADDR_ERROR",
		"RDMA_CM_EVENT_ROUTE_RESOLVED",	  "RDMA_CM_EVENT_ROUTE_ERROR",
		"RDMA_CM_EVENT_CONNECT_REQUEST",  "RDMA_CM_EVENT_CONNECT_RESPONSE",
		"RDMA_CM_EVENT_CONNECT_ERROR",	  "RDMA_CM_EVENT_UNREACHABLE",
		"RDMA_CM_EVENT_REJECTED",	  "RDMA_CM_EVENT_ESTABLISHED",
		"RDMA_CM_EVENT_DISCONNECTED",	  "RDMA_CM_EVENT_DEVICE_REMOVAL",
		"RDMA_CM_EVENT_MULTICAST_JOIN",	  "RDMA_CM_EVENT_MULTICAST_ERROR",
		"RDMA_CM_EVENT_ADDR_CHANGE",	  "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};

	if ((unsigned int)event < sizeof(names) / sizeof(names[0]))
		return names[event];
	return "UNKNOWN EVENT";
}

GR_EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_context **out;
	struct ibv_device **list;
	int i, n, got = 0, idx;

	list = ibv_get_device_list(&n);
	if (!list)
		return NULL;
	out = gr_calloc((size_t)n + 1, sizeof(*out));
	for (i = 0; out && i < n; i++)
		if (sscanf(list[i]->name, "goroce%d", &idx) == 1 && gr_cm_context(idx))
			out[got++] = gr_cm_context(idx);
	ibv_free_device_list(list);
	if (num_devices)
		*num_devices = got;
	if (!out)
		errno = ENOMEM;
	return out;
}

GR_EXPORT void rdma_free_devices(struct ibv_context **list)
{
	gr_free(list); /* the contexts stay open, as librdmacm's */
}

/* goroce has no multicast; ECE is not negotiated. */
GR_EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	return gr_cm_err(EOPNOTSUPP);
}

GR_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id,
				     struct rdma_cm_join_mc_attr_ex *mc_join_attr, void *context)
{
	return gr_cm_err(EOPNOTSUPP);
}

GR_EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	return gr_cm_err(EOPNOTSUPP);
}

GR_EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	return gr_cm_err(EOPNOTSUPP);
}

GR_EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	return gr_cm_err(EOPNOTSUPP);
}

