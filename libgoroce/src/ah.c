/*
 * ah.c: address handles, and address vectors converted to the daemon's.
 */
#include "shim.h"

#include <netinet/ip.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void gr_to_ah_attr(const struct ibv_ah_attr *a, struct gr_ah_attr *o)
{
	memset(o, 0, sizeof(*o));
	memcpy(o->dgid, a->grh.dgid.raw, 16);
	o->flow_label = a->grh.flow_label;
	o->sgid_index = a->grh.sgid_index;
	o->hop_limit = a->grh.hop_limit;
	o->traffic_class = a->grh.traffic_class;
	o->sl = a->sl;
	o->static_rate = a->static_rate;
	o->is_global = a->is_global;
	o->port_num = a->port_num;
	o->dlid = a->dlid;
	o->src_path_bits = a->src_path_bits;
}

void gr_from_ah_attr(const struct gr_ah_attr *a, struct ibv_ah_attr *o)
{
	memset(o, 0, sizeof(*o));
	memcpy(o->grh.dgid.raw, a->dgid, 16);
	o->grh.flow_label = a->flow_label;
	o->grh.sgid_index = (uint8_t)a->sgid_index;
	o->grh.hop_limit = (uint8_t)a->hop_limit;
	o->grh.traffic_class = (uint8_t)a->traffic_class;
	o->sl = (uint8_t)a->sl;
	o->static_rate = (uint8_t)a->static_rate;
	o->is_global = (uint8_t)a->is_global;
	o->port_num = (uint8_t)a->port_num;
	o->dlid = (uint16_t)a->dlid;
	o->src_path_bits = (uint8_t)a->src_path_bits;
}

GR_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct gr_create_ah_req req;
	struct gr_handle resp;
	struct gr_ah *ah;
	int err;

	ah = gr_calloc(1, sizeof(*ah));
	if (!ah) {
		errno = ENOMEM;
		return NULL;
	}
	memset(&req, 0, sizeof(req));
	req.pd = pd->handle;
	gr_to_ah_attr(attr, &req.attr);
	err = gr_call(to_ctx(pd->context), GR_OP_CREATE_AH, &req, sizeof(req), NULL, 0, NULL, 0,
		      &resp, sizeof(resp), NULL, 0);
	if (err) {
		gr_free(ah);
		errno = err;
		return NULL;
	}
	ah->ah.context = pd->context;
	ah->ah.pd = pd;
	ah->ah.handle = resp.handle;
	return &ah->ah;
}

GR_EXPORT int ibv_destroy_ah(struct ibv_ah *ibah)
{
	struct gr_context *ctx = to_ctx(ibah->context);
	struct gr_handle req = {.handle = ibah->handle};
	int err = 0;

	if (!gr_gone(ctx))
		err = gr_call(ctx, GR_OP_DESTROY_AH, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0,
			      NULL, 0);
	if (err && gr_gone(ctx))
		err = 0; /* the daemon is gone, and the object with it */
	if (!err)
		gr_free(container_of(ibah, struct gr_ah, ah));
	return err;
}

/* find_gid returns the index of gid in the context's table, or -1. */
static int find_gid(struct gr_context *ctx, const uint8_t *gid)
{
	uint32_t i;

	for (i = 0; i < ctx->dev.gid_count; i++)
		if (memcmp(ctx->dev.gids[i], gid, 16) == 0)
			return (int)i;
	return -1;
}

/* ibv_init_ah_from_wc: the GRH area of a RoCEv2 receive holds the packet's
 * IPv4 header in bytes 20-39, or its IPv6 header in all 40. */
GR_EXPORT int ibv_init_ah_from_wc(struct ibv_context *c, uint8_t port, struct ibv_wc *wc,
				  struct ibv_grh *grh, struct ibv_ah_attr *ah)
{
	struct gr_context *ctx = to_ctx(c);
	uint8_t local[16];
	int idx;

	memset(ah, 0, sizeof(*ah));
	ah->dlid = wc->slid;
	ah->sl = wc->sl;
	ah->src_path_bits = wc->dlid_path_bits;
	ah->port_num = port;
	if (!(wc->wc_flags & IBV_WC_GRH))
		return 0;
	ah->is_global = 1;
	ah->grh.flow_label = be32toh(grh->version_tclass_flow) & 0xFFFFF;
	if ((be32toh(grh->version_tclass_flow) >> 28) != 6) {
		const struct iphdr *ip = (const struct iphdr *)((const char *)grh + 20);

		if (ip->version != 4) {
			errno = EPROTONOSUPPORT;
			return -1;
		}
		memset(local, 0, 10);
		local[10] = local[11] = 0xff;
		memcpy(local + 12, &ip->daddr, 4);
		memset(ah->grh.dgid.raw, 0, 10);
		ah->grh.dgid.raw[10] = ah->grh.dgid.raw[11] = 0xff;
		memcpy(ah->grh.dgid.raw + 12, &ip->saddr, 4);
		ah->grh.hop_limit = ip->ttl;
		ah->grh.traffic_class = ip->tos;
	} else {
		memcpy(local, grh->dgid.raw, 16);
		ah->grh.dgid = grh->sgid;
		ah->grh.hop_limit = grh->hop_limit;
		ah->grh.traffic_class = (be32toh(grh->version_tclass_flow) >> 20) & 0xFF;
	}
	idx = find_gid(ctx, local);
	if (idx < 0) {
		errno = EINVAL;
		return -1;
	}
	ah->grh.sgid_index = (uint8_t)idx;
	return 0;
}

GR_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
					       struct ibv_grh *grh, uint8_t port)
{
	struct ibv_ah_attr attr;

	if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &attr))
		return NULL;
	return ibv_create_ah(pd, &attr);
}
