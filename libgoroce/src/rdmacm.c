/*
 * rdmacm.c: librdmacm's event channels, IDs and events (see rdmacm.h).
 *
 * One connection to the daemon per process carries every CM request, one
 * at a time (gr_cm_mu). IDs are found by the daemon's handle: an event
 * of an ID destroyed here after the daemon wrote it is dropped when read.
 * A synchronous ID (rdma_create_id without a channel, rdma_create_ep) has
 * a channel of its own, and each call on it waits for its event, as
 * librdmacm's do.
 */
#include "rdmacm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

pthread_mutex_t gr_cm_mu = PTHREAD_MUTEX_INITIALIZER;
static int cm_sock = -1;
static struct gr_cm_id *cm_ids;

#define GR_CM_MAX_DEVICES 64
static struct ibv_context *cm_contexts[GR_CM_MAX_DEVICES];

int gr_cm_err(int err)
{
	if (!err)
		return 0;
	errno = err;
	return -1;
}

/* gr_cm_call sends a request on the CM connection; the caller holds
 * gr_cm_mu. Returns 0 or an errno. */
int gr_cm_call(uint32_t op, struct gr_cm_req *req, struct gr_cm_resp *resp, int *rfd)
{
	struct gr_cm_resp scratch;
	int err;

	if (cm_sock < 0) {
		cm_sock = gr_connect();
		if (cm_sock < 0) {
			err = -cm_sock;
			cm_sock = -1;
			return err == ENOENT || err == ECONNREFUSED ? ENODEV : err;
		}
	}
	err = gr_call_fd(cm_sock, op, req, sizeof(*req), NULL, 0, NULL, 0, resp ? resp : &scratch,
			 sizeof(scratch), rfd, rfd ? 1 : 0);
	if (err == EIO || err == ECONNRESET || err == EPIPE) {
		close(cm_sock); /* the daemon is gone: its objects with it */
		cm_sock = -1;
	}
	return err;
}

/* gr_cm_id_call runs op on p's daemon ID and takes the ID's new
 * description; the caller holds gr_cm_mu. */
int gr_cm_id_call(struct gr_cm_id *p, uint32_t op, struct gr_cm_req *req)
{
	struct gr_cm_resp resp;
	int err;

	if (p->stale)
		return EIO;
	req->id = p->handle;
	err = gr_cm_call(op, req, &resp, NULL);
	if (!err)
		gr_cm_set_info(p, &resp.info);
	else
		gr_debug("CM operation %u on id %u: %s", op, p->handle, strerror(err));
	return err;
}

/* cm_context returns the process's context of the daemon's device index,
 * opening it on first use. The caller holds gr_cm_mu. */
static struct ibv_context *cm_context(int index)
{
	struct ibv_device **list;
	char name[32];
	int i, n;

	if (index < 0 || index >= GR_CM_MAX_DEVICES)
		return NULL;
	if (cm_contexts[index])
		return cm_contexts[index];
	snprintf(name, sizeof(name), "goroce%d", index);
	list = ibv_get_device_list(&n);
	if (!list)
		return NULL;
	for (i = 0; i < n; i++)
		if (strcmp(list[i]->name, name) == 0)
			cm_contexts[index] = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	return cm_contexts[index];
}

struct ibv_context *gr_cm_context(int index)
{
	struct ibv_context *c;

	pthread_mutex_lock(&gr_cm_mu);
	c = cm_context(index);
	pthread_mutex_unlock(&gr_cm_mu);
	return c;
}

/* gr_cm_set_info takes the daemon's description of an ID: device (then
 * id->verbs), addresses, and the path RoCE derives from them. */
void gr_cm_set_info(struct gr_cm_id *p, const struct gr_cm_id_info *in)
{
	struct rdma_cm_id *id = &p->id;
	struct ibv_context *c;
	struct ibv_sa_path_rec *r = &p->path;

	if (in->src.family)
		gr_cm_from_addr(&in->src, &id->route.addr.src_storage);
	if (in->dst.family)
		gr_cm_from_addr(&in->dst, &id->route.addr.dst_storage);
	if (in->device >= 0 && in->device != p->device) {
		c = cm_context(in->device);
		if (c) {
			p->device = in->device;
			id->verbs = c;
			id->port_num = 1;
			/* librdmacm gives every ID on a device the device's
			 * protection domain (pyverbs' CMID.pd is it). */
			if (!id->pd)
				id->pd = gr_cm_default_pd(c);
		}
	}
	if (!id->verbs || !in->dst.family)
		return;
	/* RoCE's GIDs are the IP addresses (IPv4-mapped). */
	memset(r, 0, sizeof(*r));
	gr_cm_to_gid(&in->src, r->sgid.raw);
	gr_cm_to_gid(&in->dst, r->dgid.raw);
	memcpy(id->route.addr.addr.ibaddr.sgid.raw, r->sgid.raw, 16);
	memcpy(id->route.addr.addr.ibaddr.dgid.raw, r->dgid.raw, 16);
	id->route.addr.addr.ibaddr.pkey = htobe16(0xffff);
	r->pkey = htobe16(0xffff);
	r->hop_limit = 64;
	r->reversible = 1;
	r->numb_path = 1;
	r->mtu_selector = 2;
	r->mtu = to_ctx(id->verbs)->dev.port.active_mtu;
	r->packet_life_time_selector = 2;
	r->packet_life_time = 16;
	id->route.path_rec = r;
	id->route.num_paths = 1;
}

/* ---- event channels ---- */

static struct gr_cm_channel *channel_create(void)
{
	struct gr_cm_channel *ch = calloc(1, sizeof(*ch));
	struct gr_cm_req req;
	struct gr_cm_resp resp;
	int fd = -1, err;

	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	memset(&req, 0, sizeof(req));
	pthread_mutex_lock(&gr_cm_mu);
	err = gr_cm_call(GR_OP_CM_CREATE_CHANNEL, &req, &resp, &fd);
	pthread_mutex_unlock(&gr_cm_mu);
	if (err || fd < 0) {
		free(ch);
		errno = err ? err : EIO;
		return NULL;
	}
	ch->ch.fd = fd;
	ch->handle = resp.info.id;
	return ch;
}

GR_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct gr_cm_channel *ch = channel_create();

	return ch ? &ch->ch : NULL;
}

GR_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct gr_cm_channel *ch = container_of(channel, struct gr_cm_channel, ch);
	struct gr_cm_req req;

	memset(&req, 0, sizeof(req));
	req.id = ch->handle;
	pthread_mutex_lock(&gr_cm_mu);
	gr_cm_call(GR_OP_CM_DESTROY_CHANNEL, &req, NULL, NULL);
	pthread_mutex_unlock(&gr_cm_mu);
	close(ch->ch.fd);
	free(ch);
}

/* ---- IDs ---- */

static struct gr_cm_id *id_find(uint32_t handle)
{
	struct gr_cm_id *p;

	for (p = cm_ids; p; p = p->next)
		if (p->handle == handle && !p->stale)
			return p;
	return NULL;
}

static void id_unlink(struct gr_cm_id *p)
{
	struct gr_cm_id **pp;

	for (pp = &cm_ids; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			return;
		}
}

static struct gr_cm_id *id_alloc(struct rdma_event_channel *channel, void *context,
				 enum rdma_port_space ps, enum ibv_qp_type qp_type)
{
	struct gr_cm_id *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->device = -1;
	p->id.channel = channel;
	p->id.context = context;
	p->id.ps = ps;
	p->id.qp_type = qp_type;
	pthread_cond_init(&p->cond, NULL);
	return p;
}

/* id_register makes p known by handle; the caller holds gr_cm_mu. */
static void id_register(struct gr_cm_id *p, const struct gr_cm_id_info *in)
{
	p->handle = in->id;
	gr_cm_set_info(p, in);
	p->next = cm_ids;
	cm_ids = p;
}

static int create_id(struct rdma_event_channel *channel, struct rdma_cm_id **out, void *context,
		     enum rdma_port_space ps, enum ibv_qp_type qp_type)
{
	struct gr_cm_channel *own = NULL;
	struct gr_cm_req req;
	struct gr_cm_resp resp;
	struct gr_cm_id *p;
	int err;

	if (!out || (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IPOIB))
		return gr_cm_err(ps == RDMA_PS_IB ? EOPNOTSUPP : EINVAL);
	if (!channel) {
		own = channel_create();
		if (!own)
			return -1;
		channel = &own->ch;
	}
	p = id_alloc(channel, context, ps, qp_type);
	if (!p) {
		if (own)
			rdma_destroy_event_channel(&own->ch);
		return gr_cm_err(ENOMEM);
	}
	p->sync = own != NULL;
	memset(&req, 0, sizeof(req));
	req.arg = container_of(channel, struct gr_cm_channel, ch)->handle;
	req.arg2 = ps;
	pthread_mutex_lock(&gr_cm_mu);
	err = gr_cm_call(GR_OP_CM_CREATE_ID, &req, &resp, NULL);
	if (!err)
		id_register(p, &resp.info);
	pthread_mutex_unlock(&gr_cm_mu);
	if (err) {
		free(p);
		if (own)
			rdma_destroy_event_channel(&own->ch);
		return gr_cm_err(err);
	}
	*out = &p->id;
	return 0;
}

GR_EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id,
			     void *context, enum rdma_port_space ps)
{
	return create_id(channel, id, context, ps, ps == RDMA_PS_TCP ? IBV_QPT_RC : IBV_QPT_UD);
}

/* gr_cm_create_sync_id is rdma_create_ep's: a synchronous ID of a QP type. */
int gr_cm_create_sync_id(struct rdma_cm_id **id, enum rdma_port_space ps, enum ibv_qp_type t)
{
	return create_id(NULL, id, NULL, ps, t);
}

GR_EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct gr_cm_id *p = to_cm_id(id);
	struct gr_cm_req req;

	if (id->event && p->sync) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	memset(&req, 0, sizeof(req));
	pthread_mutex_lock(&gr_cm_mu);
	if (!p->stale) {
		req.id = p->handle;
		gr_cm_call(GR_OP_CM_DESTROY_ID, &req, NULL, NULL);
	}
	id_unlink(p);
	/* rdma_destroy_id returns once every event reported for the ID has
	 * been acknowledged. */
	while (p->events_completed != p->events_reported)
		pthread_cond_wait(&p->cond, &gr_cm_mu);
	pthread_mutex_unlock(&gr_cm_mu);
	if (p->sync)
		rdma_destroy_event_channel(id->channel);
	pthread_cond_destroy(&p->cond);
	free(p);
	return 0;
}

GR_EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct gr_cm_req req;
	int err;

	if (!addr || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6))
		return gr_cm_err(addr && addr->sa_family == AF_IB ? EAFNOSUPPORT : EINVAL);
	memset(&req, 0, sizeof(req));
	gr_cm_to_addr(addr, &req.src);
	pthread_mutex_lock(&gr_cm_mu);
	err = gr_cm_id_call(to_cm_id(id), GR_OP_CM_BIND_ADDR, &req);
	pthread_mutex_unlock(&gr_cm_mu);
	return gr_cm_err(err);
}

/* sync_complete waits, for a synchronous ID, for the event the call just
 * made will report, and turns a failure into errno as librdmacm does. */
static int sync_complete(struct rdma_cm_id *id)
{
	struct rdma_cm_event *ev;

	if (!to_cm_id(id)->sync)
		return 0;
	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	if (rdma_get_cm_event(id->channel, &ev))
		return -1;
	id->event = ev;
	if (ev->status) {
		if (ev->event == RDMA_CM_EVENT_REJECTED)
			return gr_cm_err(ECONNREFUSED);
		return gr_cm_err(ev->status < 0 ? -ev->status : ev->status);
	}
	return 0;
}

GR_EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr,
				struct sockaddr *dst_addr, int timeout_ms)
{
	struct gr_cm_req req;
	int err;

	if (!dst_addr || (dst_addr->sa_family != AF_INET && dst_addr->sa_family != AF_INET6))
		return gr_cm_err(dst_addr && dst_addr->sa_family == AF_IB ? EAFNOSUPPORT : EINVAL);
	if (src_addr && src_addr->sa_family && src_addr->sa_family != dst_addr->sa_family &&
	    src_addr->sa_family != AF_INET6)
		return gr_cm_err(EINVAL);
	memset(&req, 0, sizeof(req));
	if (src_addr && src_addr->sa_family)
		gr_cm_to_addr(src_addr, &req.src);
	gr_cm_to_addr(dst_addr, &req.dst);
	req.arg = timeout_ms > 0 ? (uint32_t)timeout_ms : 0;
	pthread_mutex_lock(&gr_cm_mu);
	err = gr_cm_id_call(to_cm_id(id), GR_OP_CM_RESOLVE_ADDR, &req);
	pthread_mutex_unlock(&gr_cm_mu);
	if (err)
		return gr_cm_err(err);
	return sync_complete(id);
}

GR_EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	struct gr_cm_req req;
	int err;

	memset(&req, 0, sizeof(req));
	req.arg = timeout_ms > 0 ? (uint32_t)timeout_ms : 0;
	pthread_mutex_lock(&gr_cm_mu);
	err = gr_cm_id_call(to_cm_id(id), GR_OP_CM_RESOLVE_ROUTE, &req);
	pthread_mutex_unlock(&gr_cm_mu);
	if (err)
		return gr_cm_err(err);
	return sync_complete(id);
}

GR_EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct gr_cm_req req;
	int err;

	memset(&req, 0, sizeof(req));
	req.arg = (uint32_t)backlog;
	pthread_mutex_lock(&gr_cm_mu);
	err = gr_cm_id_call(to_cm_id(id), GR_OP_CM_LISTEN, &req);
	pthread_mutex_unlock(&gr_cm_mu);
	if (!err) /* scripts wait for this line (GOROCE_DEBUG=1) to start a client */
		gr_debug("rdma_listen on port %u", be16toh(rdma_get_src_port(id)));
	return gr_cm_err(err);
}

static void to_cm_param(const struct rdma_conn_param *c, struct gr_cm_param *o)
{
	o->private_data_len = c->private_data ? c->private_data_len : 0;
	if (o->private_data_len)
		memcpy(o->private_data, c->private_data, o->private_data_len);
	o->responder_resources = c->responder_resources;
	o->initiator_depth = c->initiator_depth;
	o->flow_control = c->flow_control;
	o->retry_count = c->retry_count;
	o->rnr_retry_count = c->rnr_retry_count;
	o->srq = c->srq;
	o->qp_num = c->qp_num;
}

static int is_ud(struct rdma_cm_id *id)
{
	return id->ps == RDMA_PS_UDP || id->ps == RDMA_PS_IPOIB;
}

GR_EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct gr_cm_req req;
	int err;

	memset(&req, 0, sizeof(req));
	if (conn_param) {
		to_cm_param(conn_param, &req.param);
	} else {
		req.param.responder_resources = RDMA_MAX_RESP_RES;
		req.param.initiator_depth = RDMA_MAX_INIT_DEPTH;
		req.param.retry_count = 7;
		req.param.rnr_retry_count = 7;
	}
	if (id->qp) {
		req.param.qp_num = id->qp->qp_num;
		req.param.srq = id->qp->srq != NULL;
	} else if (!conn_param && !is_ud(id)) {
		return gr_cm_err(EINVAL);
	}
	pthread_mutex_lock(&gr_cm_mu);
	err = gr_cm_id_call(to_cm_id(id), GR_OP_CM_CONNECT, &req);
	pthread_mutex_unlock(&gr_cm_mu);
	if (err)
		return gr_cm_err(err);
	return sync_complete(id);
}

GR_EXPORT int rdma_establish(struct rdma_cm_id *id)
{
	struct gr_cm_req req;
	int err;

	memset(&req, 0, sizeof(req));
	pthread_mutex_lock(&gr_cm_mu);
	err = gr_cm_id_call(to_cm_id(id), GR_OP_CM_ESTABLISH, &req);
	pthread_mutex_unlock(&gr_cm_mu);
	return gr_cm_err(err);
}

GR_EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct gr_cm_id *p = to_cm_id(id);
	struct gr_cm_req req;
	int resp_res, init_depth, err;

	memset(&req, 0, sizeof(req));
	if (conn_param) {
		to_cm_param(conn_param, &req.param);
	} else {
		req.param.responder_resources = p->responder_resources;
		req.param.initiator_depth = p->initiator_depth;
		req.param.rnr_retry_count = 7;
	}
	resp_res = req.param.responder_resources;
	init_depth = req.param.initiator_depth;
	if (id->qp) {
		req.param.qp_num = id->qp->qp_num;
		req.param.srq = id->qp->srq != NULL;
		if (!is_ud(id)) {
			/* The QP must be in RTS before the REP goes out. */
			if (gr_cm_modify_qp(p, IBV_QPS_RTR, resp_res, init_depth) ||
			    gr_cm_modify_qp(p, IBV_QPS_RTS, resp_res, init_depth)) {
				err = errno;
				rdma_reject(id, NULL, 0);
				return gr_cm_err(err);
			}
		}
	} else if (!conn_param) {
		return gr_cm_err(EINVAL);
	}
	pthread_mutex_lock(&gr_cm_mu);
	err = gr_cm_id_call(p, GR_OP_CM_ACCEPT, &req);
	pthread_mutex_unlock(&gr_cm_mu);
	if (err) {
		gr_cm_qp_err(p);
		return gr_cm_err(err);
	}
	if (is_ud(id))
		return 0;
	return sync_complete(id);
}

static int reject(struct rdma_cm_id *id, const void *data, uint8_t len, uint32_t vendor)
{
	struct gr_cm_req req;
	int err;

	memset(&req, 0, sizeof(req));
	if (data && len) {
		memcpy(req.param.private_data, data, len);
		req.param.private_data_len = len;
	}
	req.arg = vendor;
	pthread_mutex_lock(&gr_cm_mu);
	err = gr_cm_id_call(to_cm_id(id), GR_OP_CM_REJECT, &req);
	pthread_mutex_unlock(&gr_cm_mu);
	return gr_cm_err(err);
}

GR_EXPORT int rdma_reject(struct rdma_cm_id *id, const void *private_data,
			  uint8_t private_data_len)
{
	return reject(id, private_data, private_data_len, 0);
}

GR_EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data,
			      uint8_t private_data_len)
{
	return reject(id, private_data, private_data_len, 1);
}

GR_EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
	struct gr_cm_req req;
	int err;

	/* The QP first, as librdmacm's: its work requests flush. */
	gr_cm_qp_err(to_cm_id(id));
	memset(&req, 0, sizeof(req));
	pthread_mutex_lock(&gr_cm_mu);
	err = gr_cm_id_call(to_cm_id(id), GR_OP_CM_DISCONNECT, &req);
	pthread_mutex_unlock(&gr_cm_mu);
	return gr_cm_err(err);
}

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
		own = channel_create();
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
	/* Events already in the old channel's socket are dropped when read:
	 * the ID is no longer there. */
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
	struct gr_cm_id *l = id_find(w->listen), *p;
	struct gr_cm_req req;

	p = l ? id_alloc(l->id.channel, l->id.context, l->id.ps, l->id.qp_type) : NULL;
	if (!p) {
		memset(&req, 0, sizeof(req));
		req.id = w->info.id;
		gr_cm_call(GR_OP_CM_DESTROY_ID, &req, NULL, NULL);
		return NULL;
	}
	id_register(p, &w->info);
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

GR_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct gr_cm_event w;
	struct gr_cm_evt *e;
	struct gr_cm_id *p;

	if (!channel || !event)
		return gr_cm_err(EINVAL);
	for (;;) {
		if (read_event(channel, &w))
			return -1;
		e = calloc(1, sizeof(*e));
		if (!e)
			return gr_cm_err(ENOMEM);
		pthread_mutex_lock(&gr_cm_mu);
		if (w.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
			p = conn_request(e, &w);
		} else {
			p = id_find(w.info.id);
			if (p)
				gr_cm_set_info(p, &w.info);
		}
		if (!p) { /* an ID destroyed meanwhile */
			pthread_mutex_unlock(&gr_cm_mu);
			free(e);
			continue;
		}
		p->events_reported++;
		pthread_mutex_unlock(&gr_cm_mu);
		e->owner = p;
		e->ev.id = &p->id;
		e->ev.event = (enum rdma_cm_event_type)w.type;
		e->ev.status = w.status;
		if (is_ud(&p->id))
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
		gr_debug("rdma_get_cm_event: %s, status %d, id %u", rdma_event_str(e->ev.event),
			 e->ev.status, p->handle);
		*event = &e->ev;
		return 0;
	}
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
	free(e);
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
	out = calloc((size_t)n + 1, sizeof(*out));
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
	free(list); /* the contexts stay open, as librdmacm's */
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

/* fork: the child's copies of the CM connection and of the IDs are the
 * parent's (the daemon's objects stay the parent's): the child's calls on
 * them fail with EIO, and its own IDs and channels get a connection of its
 * own. Its contexts are the parent's too (device.c), so new ones open. */
static void cm_prefork(void)
{
	pthread_mutex_lock(&gr_cm_mu);
}

static void cm_postfork_parent(void)
{
	pthread_mutex_unlock(&gr_cm_mu);
}

static void cm_postfork_child(void)
{
	struct gr_cm_id *p;

	pthread_mutex_init(&gr_cm_mu, NULL);
	if (cm_sock >= 0)
		close(cm_sock);
	cm_sock = -1;
	for (p = cm_ids; p; p = p->next)
		p->stale = 1;
	memset(cm_contexts, 0, sizeof(cm_contexts));
}

__attribute__((constructor)) static void gr_cm_init(void)
{
	pthread_atfork(cm_prefork, cm_postfork_parent, cm_postfork_child);
}
