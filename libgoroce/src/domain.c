/*
 * domain.c: thread domains and parent domains (ibv_alloc_td,
 * ibv_alloc_parent_domain).
 *
 * A parent domain stands for its protection domain wherever a PD is taken
 * (QPs, SRQs, memory regions and windows, address handles, extended CQs):
 * its ibv_pd carries the protection domain's handle, so the daemon never
 * sees the difference. A thread domain is a hint that one thread uses the
 * objects, which lets a NIC drop locks; goroce keeps its locks (they are
 * uncontended then). The allocators of a parent domain are accepted and not
 * called: a provider calls them for the buffers it allocates (its queues),
 * and goroce's queues are rings the daemon allocates and shares, which an
 * application allocator cannot provide (ibv_alloc_parent_domain(3) lets a
 * provider fall back to its own allocation for any resource).
 */
#include "shim.h"

#include <stdlib.h>

struct ibv_td *gr_alloc_td(struct ibv_context *c, struct ibv_td_init_attr *attr)
{
	struct ibv_td *td;

	if (attr->comp_mask) {
		errno = EINVAL;
		return NULL;
	}
	td = gr_calloc(1, sizeof(*td));
	if (!td) {
		errno = ENOMEM;
		return NULL;
	}
	td->context = c;
	return td;
}

int gr_dealloc_td(struct ibv_td *td)
{
	gr_free(td);
	return 0;
}

struct ibv_pd *gr_alloc_parent_domain(struct ibv_context *c,
				      struct ibv_parent_domain_init_attr *attr)
{
	struct gr_pd *inner, *pd;

	if (attr->comp_mask & ~(uint32_t)(IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
					 IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!attr->pd || attr->pd->context != c || gr_is_parent_domain(attr->pd) ||
	    (attr->td && attr->td->context != c) ||
	    ((attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) &&
	     (!attr->alloc || !attr->free))) {
		errno = EINVAL;
		return NULL;
	}
	pd = gr_calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	inner = container_of(attr->pd, struct gr_pd, pd);
	pd->pd.context = c;
	pd->pd.handle = attr->pd->handle;
	pd->inner = inner;
	pd->td = attr->td;
	__atomic_add_fetch(&inner->parents, 1, __ATOMIC_RELAXED);
	return &pd->pd;
}

int gr_is_parent_domain(const struct ibv_pd *pd)
{
	return container_of(pd, struct gr_pd, pd)->inner != NULL;
}
