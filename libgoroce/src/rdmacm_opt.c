/*
 * rdmacm_opt.c: the calls on an ID besides connecting: rdma_migrate_id,
 * rdma_set_option, rdma_notify, rdma_init_qp_attr, rdma_get_src_port and
 * rdma_get_dst_port.
 */
#include "rdmacm.h"

#include <string.h>

/* gr_cm_migrate moves the ID to channel (NULL: a private one, making it
 * synchronous). wait: first let the events reported for it be
 * acknowledged, as rdma_migrate_id does (rdma_get_request migrates a
 * request's ID whose event the caller still holds). */
int gr_cm_migrate(struct rdma_cm_id *id, struct rdma_event_channel *channel, int wait)
{
	struct gr_cm_id *p = to_cm_id(id);
	struct rdma_event_channel *old = id->channel;
	struct gr_cm_channel *own = NULL;
	struct gr_cm_req req;
	int err, was_sync = p->sync;

	if (!channel) {
		own = gr_cm_channel_create();
		if (!own)
			return -1;
		channel = &own->ch;
	}
	memset(&req, 0, sizeof(req));
	req.arg = container_of(channel, struct gr_cm_channel, ch)->handle;
	pthread_mutex_lock(&gr_cm_mu);
	err = gr_cm_id_call(p, GR_OP_CM_MIGRATE, &req);
	if (!err) {
		while (wait && p->events_completed != p->events_reported)
			pthread_cond_wait(&p->cond, &gr_cm_mu);
		id->channel = channel;
		p->sync = own != NULL;
	}
	pthread_mutex_unlock(&gr_cm_mu);
	if (err) {
		if (own)
			rdma_destroy_event_channel(&own->ch);
		return gr_cm_err(err);
	}
	/* The daemon moved the ID's queued events; those it had already
	 * written into the old channel's socket are still read from there
	 * (a private channel's go with it). */
	if (was_sync && old != channel)
		rdma_destroy_event_channel(old);
	return 0;
}

GR_EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	return gr_cm_migrate(id, channel, 1);
}

GR_EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval,
			      size_t optlen)
{
	struct gr_cm_req req;
	int err;

	if (!optval)
		return gr_cm_err(EINVAL);
	memset(&req, 0, sizeof(req));
	req.arg = (uint32_t)level;
	req.arg2 = (uint32_t)optname;
	if (level == RDMA_OPTION_ID && (optname == RDMA_OPTION_ID_TOS ||
					optname == RDMA_OPTION_ID_ACK_TIMEOUT)) {
		if (optlen != sizeof(uint8_t))
			return gr_cm_err(EINVAL);
		req.arg3 = *(uint8_t *)optval;
	} else if (level == RDMA_OPTION_ID) {
		if (optlen != sizeof(int))
			return gr_cm_err(EINVAL);
		req.arg3 = (uint32_t) * (int *)optval;
	}
	pthread_mutex_lock(&gr_cm_mu);
	err = gr_cm_id_call(to_cm_id(id), GR_OP_CM_SET_OPTION, &req);
	pthread_mutex_unlock(&gr_cm_mu);
	return gr_cm_err(err);
}

GR_EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	/* goroce tells its CM of a QP's first packet itself (COMM_EST). */
	return gr_cm_err(event == IBV_EVENT_COMM_EST ? 0 : EINVAL);
}

GR_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr,
				int *qp_attr_mask)
{
	struct gr_cm_req req;
	struct gr_cm_resp resp;
	const struct gr_qp_attr *s = &resp.attr;
	struct gr_cm_id *p = to_cm_id(id);
	int err;

	memset(&req, 0, sizeof(req));
	req.id = p->handle;
	req.arg = qp_attr->qp_state;
	pthread_mutex_lock(&gr_cm_mu);
	err = p->stale ? EIO : gr_cm_call(GR_OP_CM_INIT_QP_ATTR, &req, &resp, NULL);
	pthread_mutex_unlock(&gr_cm_mu);
	if (err)
		return gr_cm_err(err);
	qp_attr->qp_state = (enum ibv_qp_state)s->qp_state;
	qp_attr->path_mtu = (enum ibv_mtu)s->path_mtu;
	qp_attr->qkey = s->qkey;
	qp_attr->rq_psn = s->rq_psn;
	qp_attr->sq_psn = s->sq_psn;
	qp_attr->dest_qp_num = s->dest_qp_num;
	qp_attr->qp_access_flags = s->qp_access_flags;
	qp_attr->pkey_index = (uint16_t)s->pkey_index;
	qp_attr->max_rd_atomic = (uint8_t)s->max_rd_atomic;
	qp_attr->max_dest_rd_atomic = (uint8_t)s->max_dest_rd_atomic;
	qp_attr->min_rnr_timer = (uint8_t)s->min_rnr_timer;
	qp_attr->port_num = (uint8_t)s->port_num;
	qp_attr->timeout = (uint8_t)s->timeout;
	qp_attr->retry_cnt = (uint8_t)s->retry_cnt;
	qp_attr->rnr_retry = (uint8_t)s->rnr_retry;
	gr_from_ah_attr(&s->ah_attr, &qp_attr->ah_attr);
	*qp_attr_mask = (int)resp.mask;
	return 0;
}

GR_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	const struct sockaddr *sa = &id->route.addr.src_addr;

	return sa->sa_family == AF_INET6 ? id->route.addr.src_sin6.sin6_port
	       : sa->sa_family == AF_INET ? id->route.addr.src_sin.sin_port : 0;
}

GR_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	const struct sockaddr *sa = &id->route.addr.dst_addr;

	return sa->sa_family == AF_INET6 ? id->route.addr.dst_sin6.sin6_port
	       : sa->sa_family == AF_INET ? id->route.addr.dst_sin.sin_port : 0;
}

