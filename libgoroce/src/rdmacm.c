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

struct gr_cm_channel *gr_cm_channel_create(void)
{
	struct gr_cm_channel *ch = gr_calloc(1, sizeof(*ch));
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
		gr_free(ch);
		errno = err ? err : EIO;
		return NULL;
	}
	ch->ch.fd = fd;
	ch->handle = resp.info.id;
	return ch;
}

GR_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct gr_cm_channel *ch = gr_cm_channel_create();

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
	/* A thread still reading the channel (rping's CM thread, which older
	 * rpings never stop) keeps waiting, as on a kernel rdma_cm file that a
	 * blocked read holds open: the socket is not closed under it, where
	 * its next read would fail with EBADF or read whatever file took the
	 * number. The readers own the channel now (rdmacm_event.c). */
	if (ch->readers > 0) {
		ch->orphaned = 1;
		pthread_mutex_unlock(&gr_cm_mu);
		return;
	}
	pthread_mutex_unlock(&gr_cm_mu);
	close(ch->ch.fd);
	gr_free(ch);
}

/* ---- IDs ---- */

struct gr_cm_id *gr_cm_id_find(uint32_t handle)
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

struct gr_cm_id *gr_cm_id_alloc(struct rdma_event_channel *channel, void *context,
				 enum rdma_port_space ps, enum ibv_qp_type qp_type)
{
	struct gr_cm_id *p = gr_calloc(1, sizeof(*p));

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
void gr_cm_id_register(struct gr_cm_id *p, const struct gr_cm_id_info *in)
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
		own = gr_cm_channel_create();
		if (!own)
			return -1;
		channel = &own->ch;
	}
	p = gr_cm_id_alloc(channel, context, ps, qp_type);
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
		gr_cm_id_register(p, &resp.info);
	pthread_mutex_unlock(&gr_cm_mu);
	if (err) {
		gr_free(p);
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
	if (p->events_completed != p->events_reported)
		gr_debug("rdma_destroy_id: id %u waits for %u of %u events to be acknowledged",
			 p->handle, p->events_reported - p->events_completed, p->events_reported);
	while (p->events_completed != p->events_reported)
		pthread_cond_wait(&p->cond, &gr_cm_mu);
	pthread_mutex_unlock(&gr_cm_mu);
	if (p->sync)
		rdma_destroy_event_channel(id->channel);
	pthread_cond_destroy(&p->cond);
	gr_free(p);
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

int gr_cm_is_ud(struct rdma_cm_id *id)
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
	} else if (!conn_param && !gr_cm_is_ud(id)) {
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
		if (!gr_cm_is_ud(id)) {
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
	if (gr_cm_is_ud(id))
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

/* fork: the child's copies of the CM connection and of the IDs are the
 * parent's (the daemon's objects stay the parent's): the child's calls on
 * them fail with EIO, and its own IDs and channels get a connection of its
 * own. Its contexts are the parent's too (device.c), so new ones open.
 * device.c's fork handlers call these first (prepare) and last, so that
 * gr_cm_mu is taken before the device list's lock, as cm_context does. */
void gr_cm_prefork(void)
{
	pthread_mutex_lock(&gr_cm_mu);
}

void gr_cm_postfork_parent(void)
{
	pthread_mutex_unlock(&gr_cm_mu);
}

void gr_cm_forked(void)
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
