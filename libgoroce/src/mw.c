/*
 * mw.c: memory windows (ibv_alloc_mw, ibv_dealloc_mw and ibv_bind_mw, which
 * verbs.h reaches through the context's ops).
 *
 * A bind is a work request like any other: a BIND_MW slot in the QP's send
 * ring naming the window and the region by handle, executed in order with
 * the QP's other requests. A type 2 window is bound with a BIND_MW work
 * request (post.c, qp_ex.c), a type 1 window with ibv_bind_mw, which picks
 * the window's next rkey as rxe does (ibv_inc_rkey) and returns it in
 * mw->rkey at once; the daemon's verbs.QP.BindMW hands out the same one.
 */
#include "shim.h"

#include <stdlib.h>
#include <string.h>

struct ibv_mw *gr_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct gr_alloc_mw_req req = {.pd = pd->handle, .type = (uint32_t)type};
	struct gr_alloc_mw_resp resp;
	struct ibv_mw *mw;
	int err;

	mw = gr_calloc(1, sizeof(*mw));
	if (!mw) {
		errno = ENOMEM;
		return NULL;
	}
	err = gr_call(to_ctx(pd->context), GR_OP_ALLOC_MW, &req, sizeof(req), NULL, 0, NULL, 0,
		      &resp, sizeof(resp), NULL, 0);
	if (err) {
		gr_free(mw);
		errno = err;
		return NULL;
	}
	mw->context = pd->context;
	mw->pd = pd;
	mw->rkey = resp.rkey;
	mw->handle = resp.handle;
	mw->type = type;
	return mw;
}

int gr_dealloc_mw(struct ibv_mw *mw)
{
	struct gr_context *ctx = to_ctx(mw->context);
	struct gr_handle req = {.handle = mw->handle};
	int err = 0;

	if (!gr_gone(ctx))
		err = gr_call(ctx, GR_OP_DEALLOC_MW, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0,
			      NULL, 0);
	if (err && gr_gone(ctx))
		err = 0; /* the daemon is gone, and the object with it */
	if (!err)
		gr_free(mw);
	return err;
}

/* gr_bind_mw binds a type 1 window; verbs.h's ibv_bind_mw has checked the
 * type and that the region is in the window's PD. */
int gr_bind_mw(struct ibv_qp *ibqp, struct ibv_mw *mw, struct ibv_mw_bind *bind)
{
	struct gr_qp *qp = container_of(ibqp, struct gr_qp, qpx.qp_base);
	struct gr_swqe *w;
	uint32_t rkey = ibv_inc_rkey(mw->rkey);
	int err;

	if (gr_gone(to_ctx(ibqp->context)))
		return EIO;
	if (bind->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED)
		return EINVAL; /* a type 1 window cannot be zero-based */
	pthread_spin_lock(&qp->sq.lock);
	if (gr_wq_full(&qp->sq)) {
		pthread_spin_unlock(&qp->sq.lock);
		return ENOMEM;
	}
	w = (struct gr_swqe *)gr_sq_slot(qp, qp->sq.prod);
	memset(w, 0, sizeof(*w));
	w->wr_id = bind->wr_id;
	w->opcode = IBV_WR_BIND_MW;
	w->send_flags = bind->send_flags;
	gr_bind_to_swqe(w, mw, rkey, &bind->bind_info);
	err = gr_check_swqe(qp, w, 0, NULL, mw);
	if (!err) {
		qp->sq.prod++;
		gr_wq_publish(&qp->sq);
		gr_ring_doorbell(qp->sq.hdr, qp->db);
		mw->rkey = rkey;
	}
	pthread_spin_unlock(&qp->sq.lock);
	return err;
}
