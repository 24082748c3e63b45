/*
 * device.c: device discovery, contexts, sysfs reads and the fork handler.
 *
 * A goroce device has no kernel entry: ibv_get_device_list asks goroce-nic,
 * and everything a query returns comes from the OPEN response, cached for
 * the context's life (a goroce port never changes).
 */
#include "shim.h"

#include <dlfcn.h>
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
	d = gr_calloc(1, sizeof(*d));
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

/* gr_device_info returns what the daemon said of a goroce device, NULL
 * for another. */
const struct gr_dev_info *gr_device_info(struct ibv_device *dev)
{
	struct gr_device *d;

	pthread_mutex_lock(&dev_mu);
	for (d = devices; d; d = d->next)
		if (&d->dev == dev)
			break;
	pthread_mutex_unlock(&dev_mu);
	return d ? &d->info : NULL;
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
	resp = gr_calloc(1, max);
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
	list = gr_calloc(resp->count + 1, sizeof(*list));
	if (!list) {
		gr_free(resp);
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
	gr_free(resp);
	if (num)
		*num = n;
	return list;
}

GR_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	gr_free(list);
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


GR_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct gr_device *d = container_of(device, struct gr_device, dev);
	struct gr_open_req req;
	struct gr_context *ctx;
	struct ibv_context *c;
	int fd, err, afd = -1;
	uint32_t i;

	ctx = gr_calloc(1, sizeof(*ctx));
	if (!ctx) {
		errno = ENOMEM;
		return NULL;
	}
	fd = gr_connect();
	if (fd < 0) {
		gr_free(ctx);
		errno = -fd == ENOENT || -fd == ECONNREFUSED ? ENODEV : -fd;
		return NULL;
	}
	memset(&req, 0, sizeof(req));
	memcpy(req.name, d->info.name, GR_NAME_MAX);
	err = gr_call_fd(fd, GR_OP_OPEN, &req, sizeof(req), NULL, 0, NULL, 0, &ctx->dev,
			 sizeof(ctx->dev), &afd, 1);
	if (err) {
		close(fd);
		gr_free(ctx);
		errno = err;
		return NULL;
	}
	ctx->sock = fd;
	for (i = 0; i < ctx->dev.gid_count && i < GR_MAX_GIDS; i++)
		ctx->ifindex[i] = gr_netdev_of(ctx->dev.gids[i]);
	pthread_mutex_init(&ctx->call_mu, NULL);
	pthread_mutex_init(&ctx->obj_mu, NULL);
	ctx->vctx.sz = sizeof(struct verbs_context);
	ctx->vctx.query_port = gr_query_port_ex;
	ctx->vctx.query_device_ex = gr_query_device_ex;
	ctx->vctx.create_cq_ex = gr_create_cq_ex;
	ctx->vctx.create_qp_ex = gr_create_qp_ex;
	ctx->vctx.alloc_td = gr_alloc_td;
	ctx->vctx.dealloc_td = gr_dealloc_td;
	ctx->vctx.alloc_parent_domain = gr_alloc_parent_domain;
	ctx->vctx.advise_mr = gr_advise_mr;
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
	c->ops.alloc_mw = gr_alloc_mw;
	c->ops.dealloc_mw = gr_dealloc_mw;
	c->ops.bind_mw = gr_bind_mw;
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
	gr_free(ctx);
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
	gr_cm_prefork();
	pthread_mutex_lock(&dev_mu);
	gr_mem_prefork();
	gr_alloc_prefork();
}

static void postfork_parent(void)
{
	gr_alloc_postfork();
	gr_mem_postfork_parent();
	pthread_mutex_unlock(&dev_mu);
	gr_cm_postfork_parent();
}

static void postfork_child(void)
{
	gr_alloc_postfork();
	gr_mem_forked();
	gr_contexts_forked();
	gr_cm_forked();
}

__attribute__((constructor)) static void gr_init(void)
{
	pthread_atfork(prefork, postfork_parent, postfork_child);
}
