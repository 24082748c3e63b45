/*
 * mr.c: protection domains and memory regions.
 */
#include "shim.h"

#include <stdlib.h>
#include <string.h>

/* verbs.h wraps these in macros; here are the exported functions. */
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

GR_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
	struct gr_pd *pd = gr_calloc(1, sizeof(*pd));
	struct gr_handle resp;
	int err;

	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	err = gr_call(to_ctx(c), GR_OP_ALLOC_PD, NULL, 0, NULL, 0, NULL, 0, &resp, sizeof(resp),
		      NULL, 0);
	if (err) {
		gr_free(pd);
		errno = err;
		return NULL;
	}
	pd->pd.context = c;
	pd->pd.handle = resp.handle;
	return &pd->pd;
}

GR_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct gr_handle req = {.handle = pd->handle};
	struct gr_context *ctx = to_ctx(pd->context);
	struct gr_pd *p = container_of(pd, struct gr_pd, pd);
	int err = 0;

	if (p->inner) { /* a parent domain */
		__atomic_sub_fetch(&p->inner->parents, 1, __ATOMIC_RELAXED);
		gr_free(p);
		return 0;
	}
	if (__atomic_load_n(&p->parents, __ATOMIC_RELAXED))
		return EBUSY;
	if (!gr_gone(ctx))
		err = gr_call(ctx, GR_OP_DEALLOC_PD, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0,
			      NULL, 0);
	if (err && gr_gone(ctx))
		err = 0; /* the daemon is gone, and the object with it */
	if (!err)
		gr_free(container_of(pd, struct gr_pd, pd));
	return err;
}

#define GR_ACCESS_WRITE                                                                    \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)

/* share_and_send shares [addr, addr+length) and sends op with its pieces. */
static int share_and_send(struct gr_context *ctx, uint32_t op, struct gr_reg_mr_req *req,
			  struct gr_share *sh, void *addr, size_t length, unsigned int access,
			  struct gr_reg_mr_resp *resp)
{
	int err;

	err = gr_mem_share(addr, length, (access & GR_ACCESS_WRITE) != 0, sh);
	if (err)
		return err == E2BIG ? ENOMEM : err;
	req->addr = (uintptr_t)addr;
	req->length = length;
	req->view_start = sh->view_start;
	req->npieces = (uint32_t)sh->nsegs;
	err = gr_call(ctx, op, req, sizeof(*req), sh->pieces,
		      sizeof(struct gr_piece) * (size_t)sh->nsegs, sh->fds, sh->nfds, resp,
		      sizeof(*resp), NULL, 0);
	if (err)
		gr_mem_unshare(sh);
	return err;
}

GR_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
					  uint64_t iova, unsigned int access)
{
	struct gr_context *ctx = to_ctx(pd->context);
	struct gr_reg_mr_req req;
	struct gr_reg_mr_resp resp;
	struct gr_mr *mr;
	int err;

	if ((!length || !addr) &&
	    !(!addr && length == SIZE_MAX && (access & IBV_ACCESS_ON_DEMAND))) {
		errno = EINVAL;
		return NULL;
	}
	mr = gr_calloc(1, sizeof(*mr));
	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	mr->mr.context = pd->context;
	mr->mr.pd = pd;
	mr->mr.addr = addr;
	mr->mr.length = length;
	mr->access = access;
	if (!addr) {
		err = gr_reg_implicit(pd, access, mr);
		if (err) {
			gr_free(mr);
			errno = err;
			return NULL;
		}
		return &mr->mr;
	}
	memset(&req, 0, sizeof(req));
	req.pd = pd->handle;
	/* On-demand and the optional flags (relaxed ordering) are what every
	 * goroce region is anyway: see odp.c. */
	req.access = access & ~(unsigned int)(IBV_ACCESS_ON_DEMAND | IBV_ACCESS_OPTIONAL_RANGE);
	req.iova = iova;
	err = share_and_send(ctx, GR_OP_REG_MR, &req, &mr->share, addr, length, access, &resp);
	if (err) {
		gr_free(mr);
		errno = err;
		return NULL;
	}
	mr->mr.handle = resp.handle;
	mr->mr.lkey = resp.lkey;
	mr->mr.rkey = resp.rkey;
	if (access & IBV_ACCESS_ON_DEMAND) {
		pthread_mutex_lock(&ctx->obj_mu);
		mr->odp_next = ctx->odp_mrs;
		ctx->odp_mrs = mr;
		pthread_mutex_unlock(&ctx->obj_mu);
	}
	return &mr->mr;
}

/* gr_odp_mr_of returns the explicit on-demand region of lkey, or NULL; the
 * caller holds ctx->obj_mu. */
struct gr_mr *gr_odp_mr_of(struct gr_context *ctx, uint32_t lkey)
{
	struct gr_mr *mr;

	for (mr = ctx->odp_mrs; mr; mr = mr->odp_next)
		if (mr->mr.lkey == lkey)
			return mr;
	return NULL;
}

static void forget_odp(struct gr_context *ctx, struct gr_mr *mr)
{
	struct gr_mr **p;

	pthread_mutex_lock(&ctx->obj_mu);
	for (p = &ctx->odp_mrs; *p; p = &(*p)->odp_next)
		if (*p == mr) {
			*p = mr->odp_next;
			break;
		}
	pthread_mutex_unlock(&ctx->obj_mu);
}

GR_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
					 uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned int)access);
}

GR_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}

GR_EXPORT int ibv_dereg_mr(struct ibv_mr *ibmr)
{
	struct gr_mr *mr = container_of(ibmr, struct gr_mr, mr);
	struct gr_context *ctx = to_ctx(ibmr->context);
	struct gr_handle req = {.handle = ibmr->handle};
	int err;

	if (ctx->stale) {
		/* A child of fork: the region is the parent's. */
		gr_free(mr);
		return 0;
	}
	if (mr->implicit) {
		err = gr_dereg_implicit(mr);
		if (!err)
			gr_free(mr);
		return err;
	}
	err = gr_gone(ctx) ? 0 :
			     gr_call(ctx, GR_OP_DEREG_MR, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0,
				     NULL, 0);
	if (err && !gr_gone(ctx))
		return err;
	if (mr->access & IBV_ACCESS_ON_DEMAND)
		forget_odp(ctx, mr);
	gr_mem_unshare(&mr->share);
	gr_free(mr);
	return 0;
}

GR_EXPORT int ibv_rereg_mr(struct ibv_mr *ibmr, int flags, struct ibv_pd *pd, void *addr,
			   size_t length, int access)
{
	struct gr_mr *mr = container_of(ibmr, struct gr_mr, mr);
	struct gr_context *ctx = to_ctx(ibmr->context);
	struct gr_reg_mr_req req;
	struct gr_reg_mr_resp resp;
	struct gr_share sh;
	int err;

	if (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!length || !addr)) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	if (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS)) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	if (mr->implicit) {
		errno = EOPNOTSUPP;
		return IBV_REREG_MR_ERR_INPUT;
	}
	memset(&req, 0, sizeof(req));
	req.handle = ibmr->handle;
	req.flags = (uint32_t)flags;
	req.access = (uint32_t)access & ~(uint32_t)(IBV_ACCESS_ON_DEMAND | IBV_ACCESS_OPTIONAL_RANGE);
	if (flags & IBV_REREG_MR_CHANGE_PD)
		req.pd = pd->handle;
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		unsigned int acc = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? (unsigned)access : mr->access;

		req.iova = (uintptr_t)addr;
		err = share_and_send(ctx, GR_OP_REREG_MR, &req, &sh, addr, length, acc, &resp);
		if (!err) {
			gr_mem_unshare(&mr->share);
			mr->share = sh;
		}
	} else {
		err = gr_call(ctx, GR_OP_REREG_MR, &req, sizeof(req), NULL, 0, NULL, 0, &resp,
			      sizeof(resp), NULL, 0);
	}
	if (err) {
		errno = err;
		return IBV_REREG_MR_ERR_CMD;
	}
	if (flags & IBV_REREG_MR_CHANGE_PD)
		ibmr->pd = pd;
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		ibmr->addr = addr;
		ibmr->length = length;
	}
	if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
		if (mr->access & IBV_ACCESS_ON_DEMAND)
			forget_odp(ctx, mr);
		mr->access = (unsigned int)access;
		if (mr->access & IBV_ACCESS_ON_DEMAND) {
			pthread_mutex_lock(&ctx->obj_mu);
			mr->odp_next = ctx->odp_mrs;
			ctx->odp_mrs = mr;
			pthread_mutex_unlock(&ctx->obj_mu);
		}
	}
	ibmr->lkey = resp.lkey;
	ibmr->rkey = resp.rkey;
	return 0;
}

GR_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
					   uint64_t iova, int fd, int access)
{
	(void)pd, (void)offset, (void)length, (void)iova, (void)fd, (void)access;
	errno = EOPNOTSUPP;
	return NULL;
}

/* Fork: registered pages behave as pinned pages do since Linux 5.12
 * (FOLL_PIN): the child gets a copy, so no ibv_fork_init is needed. */
GR_EXPORT int ibv_fork_init(void)
{
	return 0;
}

GR_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

GR_EXPORT int ibv_dontfork_range(void *base, size_t size)
{
	(void)base, (void)size;
	return 0;
}

GR_EXPORT int ibv_dofork_range(void *base, size_t size)
{
	(void)base, (void)size;
	return 0;
}
