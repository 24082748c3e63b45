/*
 * cq.c: completion channels and completion queues.
 *
 * A CQ is a ring the daemon fills with completions in struct ibv_wc's
 * layout; ibv_poll_cq copies them out with no system call. ibv_req_notify_cq
 * only stores the request in the ring's header: the daemon, after it
 * publishes completions, reads it and writes the channel's pipe.
 */
#include "shim.h"

#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

void *gr_map_ring(int fd, size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

GR_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c)
{
	struct gr_channel *ch = gr_calloc(1, sizeof(*ch));
	struct gr_handle resp;
	int err, fd = -1;

	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	err = gr_call(to_ctx(c), GR_OP_CREATE_CHANNEL, NULL, 0, NULL, 0, NULL, 0, &resp,
		      sizeof(resp), &fd, 1);
	if (err) {
		gr_free(ch);
		errno = err;
		return NULL;
	}
	ch->ch.context = c;
	ch->ch.fd = fd;
	ch->ch.refcnt = 0;
	ch->handle = resp.handle;
	return &ch->ch;
}

GR_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct gr_channel *ch = container_of(channel, struct gr_channel, ch);
	struct gr_context *ctx = to_ctx(channel->context);
	struct gr_handle req = {.handle = ch->handle};
	int err = 0;

	pthread_mutex_lock(&channel->context->mutex);
	if (channel->refcnt) {
		pthread_mutex_unlock(&channel->context->mutex);
		return EBUSY;
	}
	pthread_mutex_unlock(&channel->context->mutex);
	if (!gr_gone(ctx))
		err = gr_call(ctx, GR_OP_DESTROY_CHANNEL, &req, sizeof(req), NULL, 0, NULL, 0, NULL,
			      0, NULL, 0);
	if (err && gr_gone(ctx))
		err = 0; /* the daemon is gone, and the object with it */
	if (err)
		return err;
	close(channel->fd);
	gr_free(ch);
	return 0;
}

static int cq_attach_ring(struct gr_cq *cq, int fd, const struct gr_create_cq_resp *r)
{
	void *ring;

	if (r->entries == 0 || (r->entries & (r->entries - 1)) ||
	    r->ring_size < sizeof(struct gr_cq_hdr) + (uint64_t)r->entries * sizeof(struct gr_cqe)) {
		close(fd);
		return EIO;
	}
	ring = gr_map_ring(fd, r->ring_size);
	if (!ring)
		return errno;
	cq->ring = ring;
	cq->ring_size = r->ring_size;
	cq->hdr = ring;
	cq->cqes = (struct gr_cqe *)((char *)ring + sizeof(struct gr_cq_hdr));
	cq->mask = r->entries - 1;
	cq->cons = __atomic_load_n(&cq->hdr->cons, __ATOMIC_ACQUIRE);
	return 0;
}

/* gr_create_cq creates a CQ; the extended ones (cq_ex.c) then fill the
 * struct ibv_cq_ex part. */
struct gr_cq *gr_create_cq(struct ibv_context *c, int cqe, void *cq_context,
			   struct ibv_comp_channel *channel, int comp_vector)
{
	struct gr_context *ctx = to_ctx(c);
	struct gr_create_cq_req req;
	struct gr_create_cq_resp resp;
	struct gr_cq *cq;
	int err, fd = -1;

	if (cqe <= 0 || (uint32_t)cqe > ctx->dev.attr.max_cqe || comp_vector < 0 ||
	    comp_vector >= c->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	cq = gr_calloc(1, sizeof(*cq));
	if (!cq) {
		errno = ENOMEM;
		return NULL;
	}
	memset(&req, 0, sizeof(req));
	req.cqe = (uint32_t)cqe;
	req.channel = channel ? container_of(channel, struct gr_channel, ch)->handle : 0;
	req.comp_vector = (uint32_t)comp_vector;
	err = gr_call(ctx, GR_OP_CREATE_CQ, &req, sizeof(req), NULL, 0, NULL, 0, &resp,
		      sizeof(resp), &fd, 1);
	if (!err)
		err = cq_attach_ring(cq, fd, &resp);
	if (err) {
		gr_free(cq);
		errno = err;
		return NULL;
	}
	cq->handle = resp.handle;
	pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
	cq->cq.context = c;
	cq->cq.channel = channel;
	cq->cq.cq_context = cq_context;
	cq->cq.handle = resp.handle;
	cq->cq.cqe = (int)resp.cqe;
	pthread_mutex_init(&cq->cq.mutex, NULL);
	pthread_cond_init(&cq->cq.cond, NULL);
	if (channel) {
		pthread_mutex_lock(&c->mutex);
		channel->refcnt++;
		pthread_mutex_unlock(&c->mutex);
	}
	gr_obj_add(ctx, &cq->obj, resp.handle, GR_OBJ_CQ, cq);
	return cq;
}

GR_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context,
				       struct ibv_comp_channel *channel, int comp_vector)
{
	struct gr_cq *cq = gr_create_cq(c, cqe, cq_context, channel, comp_vector);

	return cq ? ibv_cq_ex_to_cq(&cq->cq) : NULL;
}

/* ibv_resize_cq: the daemon may hand over a new ring holding the pending
 * completions; polls wait on the CQ's lock meanwhile. */
GR_EXPORT int ibv_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	struct gr_cq *cq = (struct gr_cq *)ibcq;
	struct gr_context *ctx = to_ctx(ibcq->context);
	struct gr_resize_cq_req req = {.handle = cq->handle, .cqe = (uint32_t)cqe};
	struct gr_create_cq_resp resp;
	void *old = cq->ring;
	size_t old_size = cq->ring_size;
	int err, fd = -1;

	if (cqe <= 0)
		return EINVAL;
	pthread_spin_lock(&cq->lock);
	__atomic_store_n(&cq->hdr->cons, cq->cons, __ATOMIC_RELEASE);
	err = gr_call(ctx, GR_OP_RESIZE_CQ, &req, sizeof(req), NULL, 0, NULL, 0, &resp,
		      sizeof(resp), &fd, 1);
	if (!err)
		err = cq_attach_ring(cq, fd, &resp);
	if (!err) {
		munmap(old, old_size);
		ibcq->cqe = (int)resp.cqe;
	}
	pthread_spin_unlock(&cq->lock);
	return err;
}

/*
 * gr_cq_clean removes the completions of QP qpn from the CQ, as providers
 * do when a QP moves to RESET (mlx5_cq_clean): its work requests are gone,
 * and their completions must not meet the QP's new life. The entries
 * between the consumer and producer indices are the shim's to rewrite (the
 * daemon only writes past the producer index): the others are packed
 * towards the producer and the consumer index moves past the removed ones.
 */
void gr_cq_clean(struct ibv_cq *ibcq, uint32_t qpn)
{
	struct gr_cq *cq = (struct gr_cq *)ibcq;
	uint64_t prod, i, dst;

	pthread_spin_lock(&cq->lock);
	prod = __atomic_load_n(&cq->hdr->prod, __ATOMIC_ACQUIRE);
	if (prod - cq->cons <= cq->mask + 1) {
		dst = prod;
		for (i = prod; i-- > cq->cons;) {
			struct gr_cqe *e = &cq->cqes[i & cq->mask];

			if (e->qp_num == qpn)
				continue;
			dst--;
			if (dst != i)
				cq->cqes[dst & cq->mask] = *e;
		}
		cq->cons = dst;
		__atomic_store_n(&cq->hdr->cons, cq->cons, __ATOMIC_RELEASE);
	}
	pthread_spin_unlock(&cq->lock);
}

GR_EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
	struct gr_cq *cq = (struct gr_cq *)ibcq;
	struct gr_context *ctx = to_ctx(ibcq->context);
	struct gr_handle req = {.handle = cq->handle};
	int err = 0;

	if (!gr_gone(ctx))
		err = gr_call(ctx, GR_OP_DESTROY_CQ, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0,
			      NULL, 0);
	if (err && gr_gone(ctx))
		err = 0; /* the daemon is gone, and the object with it */
	if (err)
		return err;
	gr_obj_del(ctx, &cq->obj);
	if (ibcq->channel) {
		pthread_mutex_lock(&ibcq->context->mutex);
		ibcq->channel->refcnt--;
		pthread_mutex_unlock(&ibcq->context->mutex);
	}
	/* As libibverbs: wait until every reported event is acknowledged. */
	pthread_mutex_lock(&ibcq->mutex);
	while (ibcq->comp_events_completed != cq->comp_events_reported ||
	       ibcq->async_events_completed != cq->async_events_reported)
		pthread_cond_wait(&ibcq->cond, &ibcq->mutex);
	pthread_mutex_unlock(&ibcq->mutex);
	munmap(cq->ring, cq->ring_size);
	gr_free(cq);
	return 0;
}

/*
 * A program that spins on ibv_poll_cq holds a CPU the daemon may need to
 * produce the very completion it waits for (a NIC has its own silicon; goroce
 * shares the machine's cores). After GR_SPIN_POLLS empty polls in a row, each
 * empty poll yields the CPU: free when nothing else is runnable, and the
 * daemon's threads run at once when they are. GOROCE_POLL_YIELD=0 turns it off.
 */
#define GR_SPIN_POLLS 64

/* Every GR_ALIVE_POLLS empty polls in a row, a poll also looks whether the
 * daemon is still there (one poll() of the control socket), so that a
 * program waiting for a completion that will never come gets an error. */
#define GR_ALIVE_POLLS 4096

static int poll_yield = -1;

void gr_empty_poll(struct gr_cq *cq)
{
	if (unlikely(poll_yield < 0)) {
		const char *e = getenv("GOROCE_POLL_YIELD");

		poll_yield = !(e && strcmp(e, "0") == 0);
	}
	++cq->empty_polls;
	if (poll_yield && cq->empty_polls > GR_SPIN_POLLS)
		sched_yield();
	if (unlikely(cq->empty_polls % GR_ALIVE_POLLS == 0))
		gr_check_daemon(to_ctx(cq->cq.context));
}

int gr_poll_cq(struct ibv_cq *ibcq, int ne, struct ibv_wc *wc)
{
	struct gr_cq *cq = (struct gr_cq *)ibcq;
	uint64_t cons, prod;
	int n = 0;

	if (unlikely(to_ctx(ibcq->context)->stale))
		return -1;
	pthread_spin_lock(&cq->lock);
	cons = cq->cons;
	prod = __atomic_load_n(&cq->hdr->prod, __ATOMIC_ACQUIRE);
	while (n < ne && cons != prod) {
		memcpy(&wc[n], &cq->cqes[cons & cq->mask], sizeof(*wc));
		cons++;
		n++;
	}
	if (n) {
		cq->cons = cons;
		cq->empty_polls = 0;
		__atomic_store_n(&cq->hdr->cons, cons, __ATOMIC_RELEASE);
	}
	pthread_spin_unlock(&cq->lock);
	if (!n) {
		gr_empty_poll(cq);
		/* What the ring holds is returned first, then the error. */
		if (unlikely(gr_gone(to_ctx(ibcq->context))))
			return -1;
	}
	return n;
}

int gr_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct gr_cq *cq = (struct gr_cq *)ibcq;
	uint32_t none = 0;

	if (unlikely(gr_gone(to_ctx(ibcq->context))))
		return EIO;
	/* Ordered before the application's next poll: either the daemon
	 * sees the request, or the poll sees the completion. A request for
	 * every completion overrides a solicited-only one, not the reverse. */
	if (solicited_only)
		__atomic_compare_exchange_n(&cq->hdr->arm, &none, GR_ARM_SOLICITED, 0,
					    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	else
		__atomic_store_n(&cq->hdr->arm, GR_ARM_NEXT, __ATOMIC_SEQ_CST);
	return 0;
}

GR_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cqp,
			       void **cq_context)
{
	struct gr_context *ctx = to_ctx(channel->context);
	struct gr_comp_event ev;

	for (;;) {
		struct gr_cq *cq;

		if (read(channel->fd, &ev, sizeof(ev)) != (ssize_t)sizeof(ev))
			return -1;
		pthread_mutex_lock(&ctx->obj_mu);
		cq = gr_obj_find(ctx, (uint32_t)ev.cq_handle, GR_OBJ_CQ);
		if (cq)
			cq->comp_events_reported++;
		pthread_mutex_unlock(&ctx->obj_mu);
		if (!cq)
			continue; /* the CQ was destroyed since */
		*cqp = (struct ibv_cq *)&cq->cq;
		*cq_context = cq->cq.cq_context;
		return 0;
	}
}

GR_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}
