/*
 * rdmacm_qp.c: librdmacm's QPs, SRQs and endpoints: rdma_create_qp(_ex),
 * rdma_create_srq(_ex), rdma_create_ep, rdma_get_request, and the QP
 * transitions this library makes for the application's connections.
 */
#include "rdmacm.h"

#include <stdlib.h>
#include <string.h>

/* gr_cm_modify_qp moves the ID's QP to state with the CM's attributes
 * (librdmacm's ucma_modify_qp_rtr/rts): the READ depths the application
 * chose replace the CM's unless they ask for the maximum. -1 with errno. */
int gr_cm_modify_qp(struct gr_cm_id *p, enum ibv_qp_state state, int resp_res, int init_depth)
{
	struct ibv_qp_attr attr;
	int mask, err;

	if (!p->id.qp)
		return 0;
	/* A connected QP gets the connection's rights (INIT to INIT) before
	 * RTR: rdma_create_qp moved it to INIT without any. */
	if (state == IBV_QPS_RTR && p->id.qp->qp_type != IBV_QPT_UD &&
	    gr_cm_modify_qp(p, IBV_QPS_INIT, -1, -1))
		return -1;
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = state;
	if (rdma_init_qp_attr(&p->id, &attr, &mask))
		return -1;
	if (state == IBV_QPS_RTR && resp_res != RDMA_MAX_RESP_RES && resp_res >= 0)
		attr.max_dest_rd_atomic = (uint8_t)resp_res;
	if (state == IBV_QPS_RTS && init_depth != RDMA_MAX_INIT_DEPTH && init_depth >= 0)
		attr.max_rd_atomic = (uint8_t)init_depth;
	err = ibv_modify_qp(p->id.qp, &attr, mask);
	return gr_cm_err(err);
}

/* gr_cm_qp_err moves the ID's QP to ERR (a disconnect or a failed
 * connection): its work requests flush. */
void gr_cm_qp_err(struct gr_cm_id *p)
{
	struct ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};

	if (p->id.qp)
		ibv_modify_qp(p->id.qp, &attr, IBV_QP_STATE);
}

/* gr_cm_default_pd is the protection domain of a device context that the
 * library allocates for IDs created without one (rdma_create_ep, a NULL
 * pd to rdma_create_qp), shared and kept as librdmacm's. */
struct ibv_pd *gr_cm_default_pd(struct ibv_context *c)
{
	static struct {
		struct ibv_context *c;
		struct ibv_pd *pd;
	} pds[16];
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	struct ibv_pd *pd = NULL;
	unsigned int i;

	pthread_mutex_lock(&mu);
	for (i = 0; i < sizeof(pds) / sizeof(pds[0]); i++) {
		if (pds[i].c == c) {
			pd = pds[i].pd;
			break;
		}
		if (!pds[i].c) {
			pd = ibv_alloc_pd(c);
			if (pd) {
				pds[i].c = c;
				pds[i].pd = pd;
			}
			break;
		}
	}
	pthread_mutex_unlock(&mu);
	return pd;
}

static void destroy_cqs(struct rdma_cm_id *id)
{
	if (!to_cm_id(id)->own_cqs)
		return;
	if (id->recv_cq && id->recv_cq != id->send_cq)
		ibv_destroy_cq(id->recv_cq);
	if (id->send_cq)
		ibv_destroy_cq(id->send_cq);
	if (id->recv_cq_channel)
		ibv_destroy_comp_channel(id->recv_cq_channel);
	if (id->send_cq_channel)
		ibv_destroy_comp_channel(id->send_cq_channel);
	id->recv_cq = id->send_cq = NULL;
	id->recv_cq_channel = id->send_cq_channel = NULL;
	to_cm_id(id)->own_cqs = 0;
}

/* create_cqs gives the ID the send and receive CQs an init attr leaves
 * out, each with its completion channel and the ID as its context
 * (rdma_verbs.h's rdma_get_send_comp and rdma_get_recv_comp wait on them). */
static int create_cqs(struct rdma_cm_id *id, uint32_t send_size, uint32_t recv_size)
{
	if (recv_size && !id->recv_cq) {
		id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->recv_cq_channel)
			goto err;
		id->recv_cq = ibv_create_cq(id->verbs, (int)recv_size, id, id->recv_cq_channel, 0);
		to_cm_id(id)->own_cqs = 1;
		if (!id->recv_cq)
			goto err;
	}
	if (send_size && !id->send_cq) {
		id->send_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->send_cq_channel)
			goto err;
		id->send_cq = ibv_create_cq(id->verbs, (int)send_size, id, id->send_cq_channel, 0);
		to_cm_id(id)->own_cqs = 1;
		if (!id->send_cq)
			goto err;
	}
	return 0;
err:
	destroy_cqs(id);
	return gr_cm_err(errno ? errno : ENOMEM);
}

/* init_qp moves a new QP as rdma_create_qp does: a connected one to INIT
 * (rights come with the connection), a UD one through to RTS. */
static int init_qp(struct gr_cm_id *p)
{
	if (gr_cm_modify_qp(p, IBV_QPS_INIT, -1, -1))
		return -1;
	if (p->id.qp->qp_type != IBV_QPT_UD)
		return 0;
	if (gr_cm_modify_qp(p, IBV_QPS_RTR, -1, -1))
		return -1;
	return gr_cm_modify_qp(p, IBV_QPS_RTS, -1, -1);
}

GR_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_qp *qp;
	int err;

	if (!id->verbs || id->qp || !attr)
		return gr_cm_err(EINVAL);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		if (!id->pd)
			id->pd = gr_cm_default_pd(id->verbs);
		if (!id->pd)
			return -1;
		attr->pd = id->pd;
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
	} else if (attr->pd->context != id->verbs) {
		return gr_cm_err(EINVAL);
	}
	if ((id->recv_cq && attr->recv_cq && id->recv_cq != attr->recv_cq) ||
	    (id->send_cq && attr->send_cq && id->send_cq != attr->send_cq))
		return gr_cm_err(EINVAL);
	if (create_cqs(id, attr->send_cq ? 0 : attr->cap.max_send_wr,
		       attr->recv_cq ? 0 : attr->cap.max_recv_wr))
		return -1;
	if (!attr->send_cq)
		attr->send_cq = id->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = id->recv_cq;
	if (id->srq && !attr->srq)
		attr->srq = id->srq;
	qp = ibv_create_qp_ex(id->verbs, attr);
	if (!qp) {
		err = errno;
		destroy_cqs(id);
		return gr_cm_err(err ? err : ENOMEM);
	}
	id->qp = qp;
	if (init_qp(to_cm_id(id))) {
		err = errno;
		id->qp = NULL;
		ibv_destroy_qp(qp);
		destroy_cqs(id);
		return gr_cm_err(err);
	}
	id->pd = attr->pd;
	return 0;
}

GR_EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
			     struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex ex;
	int ret;

	if (!qp_init_attr)
		return gr_cm_err(EINVAL);
	memset(&ex, 0, sizeof(ex));
	memcpy(&ex, qp_init_attr, sizeof(*qp_init_attr));
	ex.comp_mask = IBV_QP_INIT_ATTR_PD;
	ex.pd = pd ? pd : id->pd;
	ret = rdma_create_qp_ex(id, &ex);
	if (ret)
		return ret;
	memcpy(qp_init_attr, &ex, sizeof(*qp_init_attr));
	return 0;
}

GR_EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (id->qp)
		ibv_destroy_qp(id->qp);
	id->qp = NULL;
	destroy_cqs(id);
}

GR_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	struct ibv_srq_init_attr a;
	struct ibv_pd *pd;

	if (!id->verbs || id->srq || !attr)
		return gr_cm_err(EINVAL);
	if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type != IBV_SRQT_BASIC)
		return gr_cm_err(EOPNOTSUPP); /* XRC and tag matching */
	pd = (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) && attr->pd ? attr->pd : id->pd;
	if (!pd)
		pd = id->pd = gr_cm_default_pd(id->verbs);
	if (!pd)
		return -1;
	if (create_cqs(id, 0, attr->attr.max_wr))
		return -1;
	memset(&a, 0, sizeof(a));
	a.srq_context = attr->srq_context;
	a.attr = attr->attr;
	id->srq = ibv_create_srq(pd, &a);
	if (!id->srq)
		return -1;
	id->pd = pd;
	attr->attr = a.attr;
	return 0;
}

GR_EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd,
			      struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex ex;
	int ret;

	if (!attr)
		return gr_cm_err(EINVAL);
	memset(&ex, 0, sizeof(ex));
	ex.srq_context = attr->srq_context;
	ex.attr = attr->attr;
	ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
	ex.srq_type = IBV_SRQT_BASIC;
	ex.pd = pd;
	ret = rdma_create_srq_ex(id, &ex);
	if (!ret)
		attr->attr = ex.attr;
	return ret;
}

GR_EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (id->srq)
		ibv_destroy_srq(id->srq);
	id->srq = NULL;
	if (!id->qp)
		destroy_cqs(id);
}

/* rdma_create_ep: a synchronous ID, bound (passive, RAI_PASSIVE) or
 * resolved to the destination with its QP (active). */
GR_EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
			     struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cm_id;
	struct gr_cm_id *p;
	int err;

	if (!id || !res)
		return gr_cm_err(EINVAL);
	if (res->ai_family == AF_IB)
		return gr_cm_err(EAFNOSUPPORT);
	if (gr_cm_create_sync_id(&cm_id, (enum rdma_port_space)res->ai_port_space,
				 (enum ibv_qp_type)res->ai_qp_type))
		return -1;
	p = to_cm_id(cm_id);
	if (res->ai_flags & RAI_PASSIVE) {
		if (rdma_bind_addr(cm_id, res->ai_src_addr))
			goto err;
		if (pd)
			cm_id->pd = pd;
		if (qp_init_attr) {
			p->qp_init_attr = gr_malloc(sizeof(*qp_init_attr));
			if (!p->qp_init_attr) {
				errno = ENOMEM;
				goto err;
			}
			*p->qp_init_attr = *qp_init_attr;
			p->qp_init_attr->qp_type = (enum ibv_qp_type)res->ai_qp_type;
		}
		*id = cm_id;
		return 0;
	}
	if (rdma_resolve_addr(cm_id, res->ai_src_len ? res->ai_src_addr : NULL, res->ai_dst_addr,
			      2000) ||
	    rdma_resolve_route(cm_id, 2000))
		goto err;
	if (qp_init_attr) {
		qp_init_attr->qp_type = (enum ibv_qp_type)res->ai_qp_type;
		if (rdma_create_qp(cm_id, pd, qp_init_attr))
			goto err;
	}
	*id = cm_id;
	return 0;
err:
	err = errno;
	rdma_destroy_ep(cm_id);
	return gr_cm_err(err);
}

GR_EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	struct gr_cm_id *p = to_cm_id(id);

	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	gr_free(p->qp_init_attr);
	p->qp_init_attr = NULL;
	rdma_destroy_id(id);
}

/* rdma_get_request waits for a connection request on a synchronous
 * listener; the new ID is synchronous too, with the QP rdma_create_ep's
 * attributes asked for. */
GR_EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct gr_cm_id *l = to_cm_id(listen);
	struct rdma_cm_event *ev;
	struct ibv_qp_init_attr attr;
	int err;

	if (!l->sync)
		return gr_cm_err(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	if (rdma_get_cm_event(listen->channel, &ev))
		return -1;
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		err = ECONNREFUSED;
	else if (ev->status)
		err = ev->status < 0 ? -ev->status : ev->status;
	else if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
		err = EINVAL;
	else
		err = 0;
	if (!err && gr_cm_migrate(ev->id, NULL, 0))
		err = errno;
	if (!err && l->qp_init_attr) {
		attr = *l->qp_init_attr;
		if (rdma_create_qp(ev->id, listen->pd, &attr))
			err = errno;
	}
	if (err) {
		rdma_ack_cm_event(ev);
		return gr_cm_err(err);
	}
	*id = ev->id;
	(*id)->event = ev;
	return 0;
}
