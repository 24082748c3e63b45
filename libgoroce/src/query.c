/*
 * query.c: device, port, GID and P_Key queries, answered from the OPEN
 * response the context caches (a goroce port never changes).
 */
#include "shim.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

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

/* The extended capability bits of FLUSH (rdma-core 45's
 * IBV_DEVICE_FLUSH_GLOBAL and _PERSISTENT): goroce's engine has it, but
 * rdma-core 44's ABI, which libgoroce implements, cannot express it. */
#define GR_DEVICE_FLUSH (3ULL << 38)

/* On-demand paging: every operation on every transport, implicit regions
 * included (odp.c); no XRC. */
#define GR_ODP_TRANSPORT                                                                  \
	(IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV)

int gr_query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
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
	a.device_cap_flags_ex = ctx->dev.attr.device_cap_flags & ~GR_DEVICE_FLUSH;
	a.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
	a.odp_caps.per_transport_caps.rc_odp_caps = GR_ODP_TRANSPORT | IBV_ODP_SUPPORT_WRITE |
						    IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC;
	a.odp_caps.per_transport_caps.uc_odp_caps = GR_ODP_TRANSPORT | IBV_ODP_SUPPORT_WRITE;
	a.odp_caps.per_transport_caps.ud_odp_caps = GR_ODP_TRANSPORT;
	a.phys_port_cnt_ex = ctx->dev.attr.phys_port_cnt;
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

int gr_query_port_ex(struct ibv_context *c, uint8_t port, struct ibv_port_attr *attr,
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
	return gr_query_port_ex(c, port, (struct ibv_port_attr *)attr,
				offsetof(struct ibv_port_attr, port_cap_flags2));
}

/* netdev_of returns the index of the interface holding a GID's address (as
 * the kernel reports the netdev of a RoCE GID), or 0. */
uint32_t gr_netdev_of(const uint8_t *g)
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
