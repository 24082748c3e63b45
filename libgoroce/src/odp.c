/*
 * odp.c: on-demand paging (IBV_ACCESS_ON_DEMAND), implicit regions and
 * ibv_advise_mr.
 *
 * Any goroce region behaves as an on-demand one where it matters: nothing
 * is pinned or locked, its pages are shared with the daemon in place
 * (mem.c), and a page the daemon touches is simply there. So an explicit
 * on-demand region is registered like any other, and prefetching it has
 * nothing to do.
 *
 * An implicit region (ibv_reg_mr(pd, NULL, SIZE_MAX, ... | ON_DEMAND))
 * covers the whole address space for local access. Its keys are those of a
 * one-page anchor region with no remote rights; the memory a work request
 * names through its lkey is faulted in when the request is posted (or
 * prefetched with ibv_advise_mr): the pages the SGE covers are registered as
 * a child region with the implicit region's rights, and the slot the daemon
 * reads names the child's lkey. Children live until the implicit region is
 * deregistered. An address the process cannot share (unmapped, or
 * read-only for a region with write rights) keeps the anchor's lkey, so the
 * request completes with a local protection error, as a failed page fault
 * does on a NIC. Remote access through an implicit region's rkey is refused
 * (README: semantic differences).
 */
#include "shim.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct gr_child {
	uintptr_t start, end;
	struct ibv_mr *mr;
};

struct gr_implicit {
	struct gr_mr *mr; /* the application's ibv_mr: the anchor's keys */
	struct ibv_mr *anchor;
	void *anchor_page;
	unsigned int access; /* the children's rights */
	pthread_mutex_t mu;
	struct gr_child *children;
	int n, cap;
	struct gr_implicit *next;
};

/* gr_reg_implicit registers an implicit on-demand region. */
int gr_reg_implicit(struct ibv_pd *pd, unsigned int access, struct gr_mr *mr)
{
	struct gr_context *ctx = to_ctx(pd->context);
	struct gr_implicit *im = gr_calloc(1, sizeof(*im));
	long page = sysconf(_SC_PAGESIZE);

	if (!im)
		return ENOMEM;
	im->access = access & ~(unsigned int)IBV_ACCESS_ON_DEMAND;
	im->anchor_page = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (im->anchor_page == MAP_FAILED) {
		gr_free(im);
		return ENOMEM;
	}
	im->anchor = ibv_reg_mr(pd, im->anchor_page, (size_t)page, IBV_ACCESS_LOCAL_WRITE);
	if (!im->anchor) {
		int err = errno;

		munmap(im->anchor_page, (size_t)page);
		gr_free(im);
		return err;
	}
	pthread_mutex_init(&im->mu, NULL);
	im->mr = mr;
	mr->implicit = im;
	mr->mr.handle = im->anchor->handle;
	mr->mr.lkey = im->anchor->lkey;
	mr->mr.rkey = im->anchor->rkey;
	pthread_mutex_lock(&ctx->obj_mu);
	im->next = ctx->implicit;
	__atomic_store_n(&ctx->implicit, im, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&ctx->obj_mu);
	return 0;
}

/* gr_dereg_implicit deregisters an implicit region and its children. */
int gr_dereg_implicit(struct gr_mr *mr)
{
	struct gr_context *ctx = to_ctx(mr->mr.context);
	struct gr_implicit *im = mr->implicit, **p;
	int i, err;

	pthread_mutex_lock(&ctx->obj_mu);
	for (p = &ctx->implicit; *p; p = &(*p)->next)
		if (*p == im) {
			*p = im->next;
			break;
		}
	pthread_mutex_unlock(&ctx->obj_mu);
	for (i = 0; i < im->n; i++)
		ibv_dereg_mr(im->children[i].mr);
	err = ibv_dereg_mr(im->anchor);
	munmap(im->anchor_page, (size_t)sysconf(_SC_PAGESIZE));
	gr_free(im->children);
	gr_free(im);
	return err;
}

/* fault returns the lkey of a child covering [a, a+len), registering one
 * if none does; 0 if the range cannot be registered. The caller holds
 * im->mu. */
static uint32_t fault(struct gr_implicit *im, uintptr_t a, uint64_t len)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t s = a & ~(page - 1), e;
	struct ibv_mr *mr;
	int i;

	if (len == 0)
		len = 1;
	if (a + len < a)
		return 0;
	e = (a + len + page - 1) & ~(page - 1);
	for (i = 0; i < im->n; i++)
		if (im->children[i].start <= a && a + len <= im->children[i].end)
			return im->children[i].mr->lkey;
	if (im->n == im->cap) {
		struct gr_child *c = gr_realloc(im->children, sizeof(*c) * (size_t)(im->cap ? im->cap * 2 : 8));

		if (!c)
			return 0;
		im->children = c;
		im->cap = im->cap ? im->cap * 2 : 8;
	}
	mr = ibv_reg_mr(im->mr->mr.pd, (void *)s, e - s, (int)im->access);
	if (!mr) {
		gr_debug("implicit region: cannot fault in %#lx-%#lx: %s", (unsigned long)s,
			 (unsigned long)e, strerror(errno));
		return 0;
	}
	im->children[im->n++] = (struct gr_child){.start = s, .end = e, .mr = mr};
	return mr->lkey;
}

static struct gr_implicit *implicit_of(struct gr_context *ctx, uint32_t lkey)
{
	struct gr_implicit *im;

	for (im = __atomic_load_n(&ctx->implicit, __ATOMIC_ACQUIRE); im; im = im->next)
		if (im->mr->mr.lkey == lkey)
			return im;
	return NULL;
}

/* gr_odp_translate points the SGEs that name an implicit region at its
 * children, faulting them in. Nothing to do (one load) when the context
 * has no implicit region. */
int gr_odp_translate(struct gr_context *ctx, struct gr_sge *sge, uint32_t n)
{
	uint32_t i;

	if (likely(!__atomic_load_n(&ctx->implicit, __ATOMIC_ACQUIRE)))
		return 0;
	pthread_mutex_lock(&ctx->obj_mu);
	for (i = 0; i < n; i++) {
		struct gr_implicit *im = implicit_of(ctx, sge[i].lkey);
		uint32_t lkey;

		if (!im)
			continue;
		pthread_mutex_lock(&im->mu);
		lkey = fault(im, (uintptr_t)sge[i].addr, sge[i].length);
		pthread_mutex_unlock(&im->mu);
		if (lkey)
			sge[i].lkey = lkey;
	}
	pthread_mutex_unlock(&ctx->obj_mu);
	return 0;
}

/* gr_advise_mr (ibv_advise_mr): prefetching faults the pages of implicit
 * regions in; an explicit on-demand region's pages are always there. The
 * SGEs must name on-demand regions of the PD. */
int gr_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
		 struct ibv_sge *sg_list, uint32_t num_sge)
{
	struct gr_context *ctx = to_ctx(pd->context);
	uint32_t i;
	int err = 0;

	if ((advice != IBV_ADVISE_MR_ADVICE_PREFETCH &&
	     advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
	     advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) ||
	    flags & ~(uint32_t)IBV_ADVISE_MR_FLAG_FLUSH || !num_sge || !sg_list)
		return EINVAL;
	pthread_mutex_lock(&ctx->obj_mu);
	for (i = 0; i < num_sge && !err; i++) {
		struct gr_implicit *im = implicit_of(ctx, sg_list[i].lkey);
		struct gr_mr *mr = gr_odp_mr_of(ctx, sg_list[i].lkey);

		if (im) {
			if (im->mr->mr.pd->handle != pd->handle) {
				err = EINVAL;
				break;
			}
			if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
				continue;
			pthread_mutex_lock(&im->mu);
			if (!fault(im, (uintptr_t)sg_list[i].addr, sg_list[i].length))
				err = EFAULT;
			pthread_mutex_unlock(&im->mu);
		} else if (!mr || mr->mr.pd->handle != pd->handle ||
			   sg_list[i].addr < (uintptr_t)mr->mr.addr ||
			   sg_list[i].addr + sg_list[i].length >
				   (uintptr_t)mr->mr.addr + mr->mr.length) {
			err = EINVAL;
		}
	}
	pthread_mutex_unlock(&ctx->obj_mu);
	return err;
}
