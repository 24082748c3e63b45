/*
 * device.c: device discovery, contexts, device/port/GID/P_Key queries,
 * async events and the fork handler.
 *
 * A goroce device has no kernel entry: ibv_get_device_list asks goroce-nic,
 * and everything a query returns comes from the OPEN response, cached for
 * the context's life (a goroce port never changes).
 */
#include "shim.h"

#include <dlfcn.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SYSFS_PREFIX "/sys/class/infiniband/"

/* Devices live as long as the process: libibverbs keeps them while any
 * list or context refers to them, and names never change here. */
struct gr_device {
	struct ibv_device dev;
	struct gr_dev_info info;
	struct gr_device *next;
};

static pthread_mutex_t dev_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gr_device *devices;
static struct gr_context *contexts;

static struct gr_device *device_for(const struct gr_dev_info *in)
{
	struct gr_device *d;

	for (d = devices; d; d = d->next)
		if (strncmp(d->info.name, in->name, GR_NAME_MAX) == 0) {
			d->info = *in;
			return d;
		}
	d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->info = *in;
	d->info.name[GR_NAME_MAX - 1] = 0;
	d->dev.node_type = IBV_NODE_CA;
	d->dev.transport_type = IBV_TRANSPORT_IB;
	snprintf(d->dev.name, sizeof(d->dev.name), "%s", d->info.name);
	snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs-%.56s", d->info.name);
	snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "/sys/class/infiniband_verbs/uverbs-%s",
		 d->info.name);
	snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), SYSFS_PREFIX "%s", d->info.name);
	d->next = devices;
	devices = d;
	return d;
}

GR_EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
	size_t max = sizeof(struct gr_list_resp) + 256 * sizeof(struct gr_dev_info), got = 0;
	struct gr_list_resp *resp;
	struct ibv_device **list;
	struct gr_dev_info *info;
	int fd, err, n = 0;
	uint32_t i;

	if (num)
		*num = 0;
	resp = calloc(1, max);
	if (!resp) {
		errno = ENOMEM;
		return NULL;
	}
	fd = gr_connect();
	err = fd < 0 ? -fd : gr_call_var(fd, GR_OP_LIST, NULL, 0, resp, max, &got);
	if (fd >= 0)
		close(fd);
	if (err || got < sizeof(*resp)) {
		resp->count = 0;
		got = sizeof(*resp);
	}
	info = (struct gr_dev_info *)(resp + 1);
	if ((size_t)resp->count > (got - sizeof(*resp)) / sizeof(*info))
		resp->count = (uint32_t)((got - sizeof(*resp)) / sizeof(*info));
	list = calloc(resp->count + 1, sizeof(*list));
	if (!list) {
		free(resp);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&dev_mu);
	for (i = 0; i < resp->count; i++) {
		struct gr_device *d = device_for(&info[i]);

		if (d)
			list[n++] = &d->dev;
	}
	pthread_mutex_unlock(&dev_mu);
	free(resp);
	if (num)
		*num = n;
	return list;
}

GR_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

GR_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

GR_EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	return htobe64(container_of(device, struct gr_device, dev)->info.guid);
}

GR_EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	return (int)container_of(device, struct gr_device, dev)->info.index;
}

static uint32_t netdev_of(const uint8_t *g);
static int query_port_ex(struct ibv_context *c, uint8_t port, struct ibv_port_attr *attr,
			 size_t len);
static int query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
			   struct ibv_device_attr_ex *attr, size_t len);

GR_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct gr_device *d = container_of(device, struct gr_device, dev);
	struct gr_open_req req;
	struct gr_context *ctx;
	struct ibv_context *c;
	int fd, err, afd = -1;
	uint32_t i;

	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		errno = ENOMEM;
		return NULL;
	}
	fd = gr_connect();
	if (fd < 0) {
		free(ctx);
		errno = -fd == ENOENT || -fd == ECONNREFUSED ? ENODEV : -fd;
		return NULL;
	}
	memset(&req, 0, sizeof(req));
	memcpy(req.name, d->info.name, GR_NAME_MAX);
	err = gr_call_fd(fd, GR_OP_OPEN, &req, sizeof(req), NULL, 0, NULL, 0, &ctx->dev,
			 sizeof(ctx->dev), &afd, 1);
	if (err) {
		close(fd);
		free(ctx);
		errno = err;
		return NULL;
	}
	ctx->sock = fd;
	for (i = 0; i < ctx->dev.gid_count && i < GR_MAX_GIDS; i++)
		ctx->ifindex[i] = netdev_of(ctx->dev.gids[i]);
	pthread_mutex_init(&ctx->call_mu, NULL);
	pthread_mutex_init(&ctx->obj_mu, NULL);
	ctx->vctx.sz = sizeof(struct verbs_context);
	ctx->vctx.query_port = query_port_ex;
	ctx->vctx.query_device_ex = query_device_ex;
	c = &ctx->vctx.context;
	c->device = device;
	c->cmd_fd = fd;
	c->async_fd = afd;
	c->num_comp_vectors = (int)ctx->dev.attr.num_comp_vectors;
	c->abi_compat = __VERBS_ABI_IS_EXTENDED;
	pthread_mutex_init(&c->mutex, NULL);
	c->ops.poll_cq = gr_poll_cq;
	c->ops.req_notify_cq = gr_req_notify_cq;
	c->ops.post_send = gr_post_send;
	c->ops.post_recv = gr_post_recv;
	c->ops.post_srq_recv = gr_post_srq_recv;
	pthread_mutex_lock(&dev_mu);
	ctx->next = contexts;
	contexts = ctx;
	pthread_mutex_unlock(&dev_mu);
	return c;
}

/* ibv_close_device drops the session: the daemon destroys whatever the
 * context still holds, as the kernel does for a closed uverbs file. */
GR_EXPORT int ibv_close_device(struct ibv_context *c)
{
	struct gr_context *ctx = to_ctx(c), **p;

	pthread_mutex_lock(&dev_mu);
	for (p = &contexts; *p; p = &(*p)->next)
		if (*p == ctx) {
			*p = ctx->next;
			break;
		}
	pthread_mutex_unlock(&dev_mu);
	if (ctx->sock >= 0)
		close(ctx->sock);
	if (c->async_fd >= 0)
		close(c->async_fd);
	free(ctx);
	return 0;
}

/* In a forked child the parent's contexts are unusable (their objects are
 * the parent's): verbs on them fail with EIO, and the child's copy of the
 * connection is closed so that the daemon's session stays the parent's. */
void gr_contexts_forked(void)
{
	struct gr_context *ctx;

	pthread_mutex_init(&dev_mu, NULL);
	for (ctx = contexts; ctx; ctx = ctx->next) {
		ctx->stale = 1;
		pthread_mutex_init(&ctx->call_mu, NULL);
		pthread_mutex_init(&ctx->obj_mu, NULL);
		if (ctx->sock >= 0) {
			close(ctx->sock);
			ctx->sock = -1;
		}
	}
}

static void fill_device_attr(struct gr_context *ctx, struct ibv_device_attr *a)
{
	const struct gr_dev_attr *s = &ctx->dev.attr;

	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "%.*s", (int)sizeof(s->fw_ver), s->fw_ver);
	a->node_guid = htobe64(s->node_guid);
	a->sys_image_guid = htobe64(s->sys_image_guid);
	a->max_mr_size = s->max_mr_size;
	a->page_size_cap = s->page_size_cap;
	a->vendor_id = s->vendor_id;
	a->vendor_part_id = s->vendor_part_id;
	a->hw_ver = s->hw_ver;
	a->max_qp = (int)s->max_qp;
	a->max_qp_wr = (int)s->max_qp_wr;
	a->device_cap_flags = (unsigned int)s->device_cap_flags;
	a->max_sge = (int)s->max_sge;
	a->max_sge_rd = (int)s->max_sge_rd;
	a->max_cq = (int)s->max_cq;
	a->max_cqe = (int)s->max_cqe;
	a->max_mr = (int)s->max_mr;
	a->max_pd = (int)s->max_pd;
	a->max_qp_rd_atom = (int)s->max_qp_rd_atom;
	a->max_qp_init_rd_atom = (int)s->max_qp_init_rd_atom;
	a->max_res_rd_atom = (int)s->max_res_rd_atom;
	a->atomic_cap = (enum ibv_atomic_cap)s->atomic_cap;
	a->max_mw = (int)s->max_mw;
	a->max_ah = (int)s->max_ah;
	a->max_srq = (int)s->max_srq;
	a->max_srq_wr = (int)s->max_srq_wr;
	a->max_srq_sge = (int)s->max_srq_sge;
	a->max_pkeys = (uint16_t)s->max_pkeys;
	a->local_ca_ack_delay = (uint8_t)s->local_ca_ack_delay;
	a->phys_port_cnt = (uint8_t)s->phys_port_cnt;
}

GR_EXPORT int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *attr)
{
	fill_device_attr(to_ctx(c), attr);
	return 0;
}

static int query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
			   struct ibv_device_attr_ex *attr, size_t len)
{
	struct ibv_device_attr_ex a;
	struct gr_context *ctx = to_ctx(c);

	if (in && in->comp_mask)
		return EINVAL;
	if (len < sizeof(a.orig_attr))
		return EINVAL;
	memset(&a, 0, sizeof(a));
	fill_device_attr(ctx, &a.orig_attr);
	a.device_cap_flags_ex = ctx->dev.attr.device_cap_flags;
	a.max_dm_size = 0;
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

static void fill_port_attr(struct gr_context *ctx, struct ibv_port_attr *a)
{
	const struct gr_port_attr *s = &ctx->dev.port;

	memset(a, 0, sizeof(*a));
	a->state = (enum ibv_port_state)s->state;
	a->max_mtu = (enum ibv_mtu)s->max_mtu;
	a->active_mtu = (enum ibv_mtu)s->active_mtu;
	a->gid_tbl_len = (int)s->gid_tbl_len;
	a->port_cap_flags = s->port_cap_flags;
	a->max_msg_sz = s->max_msg_sz;
	a->bad_pkey_cntr = s->bad_pkey_cntr;
	a->qkey_viol_cntr = s->qkey_viol_cntr;
	a->pkey_tbl_len = (uint16_t)s->pkey_tbl_len;
	a->lid = (uint16_t)s->lid;
	a->sm_lid = (uint16_t)s->sm_lid;
	a->lmc = (uint8_t)s->lmc;
	a->max_vl_num = (uint8_t)s->max_vl_num;
	a->sm_sl = (uint8_t)s->sm_sl;
	a->subnet_timeout = (uint8_t)s->subnet_timeout;
	a->init_type_reply = (uint8_t)s->init_type_reply;
	a->active_width = (uint8_t)s->active_width;
	a->active_speed = (uint8_t)s->active_speed;
	a->phys_state = (uint8_t)s->phys_state;
	a->link_layer = (uint8_t)s->link_layer;
}

static int query_port_ex(struct ibv_context *c, uint8_t port, struct ibv_port_attr *attr,
			 size_t len)
{
	struct ibv_port_attr a;

	if (port != 1)
		return EINVAL;
	fill_port_attr(to_ctx(c), &a);
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

/* The exported ibv_query_port takes libibverbs' older, shorter structure. */
#undef ibv_query_port
GR_EXPORT int ibv_query_port(struct ibv_context *c, uint8_t port,
			      struct _compat_ibv_port_attr *attr)
{
	return query_port_ex(c, port, (struct ibv_port_attr *)attr,
			     offsetof(struct ibv_port_attr, port_cap_flags2));
}

/* netdev_of returns the index of the interface holding a GID's address (as
 * the kernel reports the netdev of a RoCE GID), or 0. */
static uint32_t netdev_of(const uint8_t *g)
{
	struct ifaddrs *ifa, *i;
	uint32_t idx = 0;

	if (getifaddrs(&ifa) != 0)
		return 0;
	for (i = ifa; i; i = i->ifa_next) {
		if (!i->ifa_addr)
			continue;
		if (i->ifa_addr->sa_family == AF_INET &&
		    memcmp(g, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12) == 0 &&
		    memcmp(&((struct sockaddr_in *)i->ifa_addr)->sin_addr, g + 12, 4) == 0)
			break;
		if (i->ifa_addr->sa_family == AF_INET6 &&
		    memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, g, 16) == 0)
			break;
	}
	if (i)
		idx = if_nametoindex(i->ifa_name);
	freeifaddrs(ifa);
	return idx;
}

static int gid_entry(struct gr_context *ctx, uint32_t port, uint32_t index,
		     struct ibv_gid_entry *e)
{
	if (port != 1 || index >= ctx->dev.port.gid_tbl_len)
		return EINVAL;
	if (index >= ctx->dev.gid_count)
		return ENODATA;
	memset(e, 0, sizeof(*e));
	memcpy(e->gid.raw, ctx->dev.gids[index], 16);
	e->gid_index = index;
	e->port_num = port;
	e->gid_type = ctx->dev.gid_types[index];
	e->ndev_ifindex = ctx->ifindex[index];
	return 0;
}

GR_EXPORT int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid)
{
	struct ibv_gid_entry e;
	int err;

	if (index < 0) {
		errno = EINVAL;
		return -1;
	}
	err = gid_entry(to_ctx(c), port, (uint32_t)index, &e);
	if (err == ENODATA) {
		memset(gid, 0, sizeof(*gid));
		return 0;
	}
	if (err) {
		errno = err;
		return -1;
	}
	*gid = e.gid;
	return 0;
}

GR_EXPORT int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index,
				struct ibv_gid_entry *entry, uint32_t flags, size_t size)
{
	struct ibv_gid_entry e;
	int err;

	if (flags || size < sizeof(e))
		return EINVAL;
	err = gid_entry(to_ctx(c), port, index, &e);
	if (err)
		return err;
	memcpy(entry, &e, sizeof(e));
	return 0;
}

GR_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *c, struct ibv_gid_entry *entries,
				       size_t max, uint32_t flags, size_t size)
{
	struct gr_context *ctx = to_ctx(c);
	size_t n = 0;
	uint32_t i;

	if (flags || size < sizeof(struct ibv_gid_entry))
		return -EINVAL;
	for (i = 0; i < ctx->dev.gid_count; i++) {
		if (n == max)
			return -EINVAL;
		gid_entry(ctx, 1, i, (struct ibv_gid_entry *)((char *)entries + n * size));
		n++;
	}
	return (ssize_t)n;
}

/* enum ibv_gid_type_sysfs of rdma-core's driver.h. */
enum { GR_GID_TYPE_SYSFS_IB_ROCE_V1, GR_GID_TYPE_SYSFS_ROCE_V2 };

GR_EXPORT int ibv_query_gid_type(struct ibv_context *c, uint8_t port, unsigned int index,
				 int *type)
{
	struct ibv_gid_entry e;
	int err = gid_entry(to_ctx(c), port, index, &e);

	if (err == ENODATA) {
		*type = GR_GID_TYPE_SYSFS_IB_ROCE_V1;
		return 0;
	}
	if (err) {
		errno = err;
		return -1;
	}
	*type = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? GR_GID_TYPE_SYSFS_ROCE_V2
						   : GR_GID_TYPE_SYSFS_IB_ROCE_V1;
	return 0;
}

GR_EXPORT int ibv_query_pkey(struct ibv_context *c, uint8_t port, int index, __be16 *pkey)
{
	struct gr_context *ctx = to_ctx(c);

	if (port != 1 || index < 0 || (uint32_t)index >= ctx->dev.port.pkey_tbl_len) {
		errno = EINVAL;
		return -1;
	}
	*pkey = htobe16((uint16_t)ctx->dev.pkey);
	return 0;
}

GR_EXPORT int ibv_get_pkey_index(struct ibv_context *c, uint8_t port, __be16 pkey)
{
	struct gr_context *ctx = to_ctx(c);

	if (port == 1 && be16toh(pkey) == (uint16_t)ctx->dev.pkey)
		return 0;
	return -EINVAL;
}

/* Async events: the daemon writes struct gr_async_event records to the
 * context's async_fd; an event of an object destroyed since is skipped. */
GR_EXPORT int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *event)
{
	struct gr_context *ctx = to_ctx(c);
	struct gr_async_event ev;

	for (;;) {
		ssize_t n = read(c->async_fd, &ev, sizeof(ev));
		void *obj;

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

/* Sysfs reads of a goroce device are answered here, without touching
 * /sys (there is nothing there); other paths go to libibverbs. */
GR_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	static int (*real)(const char *, const char *, char *, size_t);
	const char *val = NULL;
	struct gr_device *d;
	int n;

	pthread_mutex_lock(&dev_mu);
	for (d = devices; d; d = d->next)
		if (strcmp(dir, d->dev.ibdev_path) == 0)
			break;
	pthread_mutex_unlock(&dev_mu);
	if (d) {
		if (strcmp(file, "board_id") == 0)
			val = "goroce";
		else if (strcmp(file, "node_desc") == 0)
			val = "goroce software RoCE";
		else if (strcmp(file, "hca_type") == 0)
			val = "goroce";
		if (!val) {
			errno = ENOENT;
			return -1;
		}
		n = snprintf(buf, size, "%s\n", val);
		return n < (int)size ? n : (int)size;
	}
	if (!real)
		real = dlvsym(RTLD_NEXT, "ibv_read_sysfs_file", "IBVERBS_1.0");
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	return real(dir, file, buf, size);
}

static void prefork(void)
{
	pthread_mutex_lock(&dev_mu);
	gr_mem_prefork();
}

static void postfork_parent(void)
{
	gr_mem_postfork_parent();
	pthread_mutex_unlock(&dev_mu);
}

static void postfork_child(void)
{
	gr_mem_forked();
	gr_contexts_forked();
}

__attribute__((constructor)) static void gr_init(void)
{
	pthread_atfork(prefork, postfork_parent, postfork_child);
}
