/*
 * shim.h: libgoroce.so's internal declarations.
 *
 * libgoroce.so replaces libibverbs' public ABI (LD_PRELOAD, same symbol
 * versions) for programs run under goroce-exec. It builds the ibv_* objects
 * itself, fills the ops tables the static inline fast paths of verbs.h call,
 * and forwards control calls to goroce-nic; work requests and completions
 * travel through rings shared with the daemon (see proto.h).
 */
#ifndef GOROCE_SHIM_H
#define GOROCE_SHIM_H

#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <infiniband/verbs.h>

#include "proto.h"

#define GR_EXPORT __attribute__((visibility("default")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* conn.c: the control connection. */
int gr_connect(void);
int gr_call_fd(int fd, uint32_t op, const void *req, size_t reqlen, const void *extra,
	       size_t extralen, const int *fds, int nfds, void *resp, size_t resplen,
	       int *rfds, int nrfds);
int gr_call_var(int fd, uint32_t op, const void *req, size_t reqlen, void *resp, size_t max,
		size_t *gotlen);
void gr_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A registered object that events name by handle (CQ, QP, SRQ). */
struct gr_obj {
	uint32_t handle;
	uint32_t kind; /* enum gr_obj_kind */
	void *ptr;
	struct gr_obj *next;
};

/* An open device context. The struct verbs_context must come first: its
 * struct ibv_context is what the application holds. */
struct gr_context {
	struct verbs_context vctx;
	int sock;
	pthread_mutex_t call_mu; /* one request at a time on sock */
	int stale;		 /* inherited across fork: unusable */
	int dead;		 /* the daemon went away (gr_check_daemon) */
	int fatal_reported;	 /* IBV_EVENT_DEVICE_FATAL returned */
	struct gr_open_resp dev;
	uint32_t ifindex[GR_MAX_GIDS]; /* the netdev of each GID */
	pthread_mutex_t obj_mu;
	struct gr_obj *objs;
	struct gr_implicit *implicit; /* implicit on-demand regions (odp.c) */
	struct gr_mr *odp_mrs;	      /* explicit ones, for ibv_advise_mr */
	struct gr_context *next; /* all contexts, for fork */
};

static inline struct gr_context *to_ctx(struct ibv_context *c)
{
	return container_of(c, struct gr_context, vctx.context);
}

/* gr_gone reports a context whose verbs can no longer reach the daemon: the
 * parent's, in a child of fork, or one whose daemon died. */
static inline int gr_gone(struct gr_context *c)
{
	return c->stale || __atomic_load_n(&c->dead, __ATOMIC_RELAXED);
}

void gr_check_daemon(struct gr_context *ctx);

/* Send a request on the context's connection; returns 0 or an errno. */
int gr_call(struct gr_context *ctx, uint32_t op, const void *req, size_t reqlen,
	    const void *extra, size_t extralen, const int *fds, int nfds, void *resp,
	    size_t resplen, int *rfds, int nrfds);

void gr_obj_add(struct gr_context *ctx, struct gr_obj *o, uint32_t handle, uint32_t kind,
		void *ptr);
void gr_obj_del(struct gr_context *ctx, struct gr_obj *o);
void *gr_obj_find(struct gr_context *ctx, uint32_t handle, uint32_t kind);

/* device.c: contexts for the fork handler. query.c: queries. */
void gr_contexts_forked(void);
/* rdmacm.c: its fork handlers, called by device.c's. */
void gr_cm_prefork(void);
void gr_cm_postfork_parent(void);
void gr_cm_forked(void);
const struct gr_dev_info *gr_device_info(struct ibv_device *dev);
uint32_t gr_netdev_of(const uint8_t *gid);
int gr_query_port_ex(struct ibv_context *c, uint8_t port, struct ibv_port_attr *attr, size_t len);
int gr_query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
		       struct ibv_device_attr_ex *attr, size_t len);

/* maps.c: one entry of /proc/self/maps. */
struct gr_vma {
	uintptr_t start, end;
	int prot;
	int shared;
	int huge; /* anonymous hugetlb */
	uint64_t off;
	dev_t dev;
	ino_t ino;
};
int gr_read_maps(struct gr_vma **out);
struct gr_vma *gr_vma_at(struct gr_vma *v, int n, uintptr_t a);

/* alloc.c: the library's own objects, on pages no program buffer spans
 * (never malloc: a registered buffer's pages are swapped, see swap.c). */
void *gr_malloc(size_t n);
void *gr_calloc(size_t n, size_t size);
void *gr_realloc(void *p, size_t n);
void gr_free(void *p);
void gr_alloc_prefork(void);
void gr_alloc_postfork(void);

/* swap.c: replacing live pages with a copy, no concurrent write lost:
 * gr_swap_begin (signals blocked, faulting threads wait), gr_swap_move
 * (write-protect, copy, mremap), gr_swap_end. */
struct gr_swap {
	sigset_t old;
};
void gr_swap_begin(struct gr_swap *w, uintptr_t start, uintptr_t end);
int gr_swap_move(void *tmp, const void *src, void *dst, size_t len);
void gr_swap_end(struct gr_swap *w);

/* mem.c: application memory shared with the daemon in place. */
struct gr_seg;
struct gr_share {
	struct gr_seg **segs; /* references taken, one per piece */
	int nsegs;
	struct gr_piece *pieces;
	int *fds; /* pieces[i].fd_index indexes this */
	int nfds;
	uint64_t view_start;
};
int gr_mem_share(void *addr, size_t len, int writable, struct gr_share *out);
void gr_mem_unshare(struct gr_share *s);
void gr_mem_forked(void);
void gr_mem_prefork(void);
void gr_mem_postfork_parent(void);

/* Objects. */
struct gr_pd {
	struct ibv_pd pd;
	struct gr_pd *inner; /* a parent domain's protection domain (domain.c) */
	struct ibv_td *td;
	int parents; /* parent domains over this protection domain */
};

int gr_is_parent_domain(const struct ibv_pd *pd);

struct gr_implicit;

struct gr_mr {
	struct ibv_mr mr;
	struct gr_share share;
	unsigned int access;
	struct gr_implicit *implicit; /* an implicit on-demand region (odp.c) */
	struct gr_mr *odp_next;	      /* the context's on-demand regions */
};

int gr_reg_implicit(struct ibv_pd *pd, unsigned int access, struct gr_mr *mr);
int gr_dereg_implicit(struct gr_mr *mr);
struct gr_mr *gr_odp_mr_of(struct gr_context *ctx, uint32_t lkey);

struct gr_channel {
	struct ibv_comp_channel ch;
	uint32_t handle;
};

struct gr_cq {
	struct ibv_cq_ex cq; /* begins with struct ibv_cq's layout */
	struct gr_obj obj;
	uint32_t handle;
	pthread_spinlock_t lock;
	struct gr_cqe *cur; /* the entry an extended poll reads (cq_ex.c) */
	int polling;	    /* between ibv_start_poll and ibv_end_poll */
	void *ring;
	size_t ring_size;
	struct gr_cq_hdr *hdr;
	struct gr_cqe *cqes;
	uint64_t mask;
	uint64_t cons;
	uint32_t empty_polls; /* consecutive empty polls, see cq.c */
	uint32_t comp_events_reported;
	uint32_t async_events_reported;
};

/* A work queue as the shim produces into it. */
struct gr_wq {
	struct gr_wq_hdr *hdr;
	char *slots;
	uint64_t mask;
	uint32_t stride;
	uint32_t max_sge;
	uint32_t cap; /* the queue's capacity: prod - done stays below it */
	uint64_t prod;
	pthread_spinlock_t lock;
};

struct gr_srq {
	struct ibv_srq srq;
	struct gr_obj obj;
	void *ring;
	size_t ring_size;
	struct gr_wq q;
	int db;
	uint32_t srq_limit;
	uint32_t events_reported;
};

/* The ibv_wr_* batch being built (qp_ex.c), under the send queue's lock
 * from ibv_wr_start to ibv_wr_complete. */
struct gr_wr_batch {
	uint64_t n;	       /* slots built past the published ones */
	int err;	       /* the first error, reported by ibv_wr_complete */
	struct gr_swqe *cur;   /* the request being built, or NULL */
	const struct ibv_ah *ah;
	const struct ibv_mw *mw;
	char *scratch; /* a slot to build into after an error */
};

struct gr_qp {
	struct ibv_qp_ex qpx; /* begins with struct ibv_qp */
	struct gr_obj obj;
	void *ring;
	size_t ring_size;
	struct gr_wq sq;
	struct gr_wq rq;
	int db;
	struct gr_qp_cap cap;
	uint32_t max_inline;
	uint32_t max_rd_atomic;
	uint32_t mtu_bytes; /* the port's active MTU: the largest UD message */
	int sq_sig_all;
	uint32_t events_reported;
	int is_ex;	   /* created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS */
	uint64_t send_ops; /* its IBV_QP_EX_WITH_* */
	struct gr_wr_batch ex;
};

struct gr_ah {
	struct ibv_ah ah;
};

/* cq.c, cq_ex.c */
struct gr_cq *gr_create_cq(struct ibv_context *c, int cqe, void *cq_context,
			   struct ibv_comp_channel *channel, int comp_vector);
void gr_empty_poll(struct gr_cq *cq);
void gr_cq_clean(struct ibv_cq *cq, uint32_t qpn);
struct ibv_cq_ex *gr_create_cq_ex(struct ibv_context *c, struct ibv_cq_init_attr_ex *attr);

/* qp.c, mw.c, domain.c, odp.c: verbs reached through struct verbs_context
 * and the context's ops. */
struct ibv_qp *gr_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *attr);
struct ibv_mw *gr_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int gr_dealloc_mw(struct ibv_mw *mw);
int gr_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind);
struct ibv_td *gr_alloc_td(struct ibv_context *c, struct ibv_td_init_attr *attr);
int gr_dealloc_td(struct ibv_td *td);
struct ibv_pd *gr_alloc_parent_domain(struct ibv_context *c,
				      struct ibv_parent_domain_init_attr *attr);
int gr_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
		 struct ibv_sge *sg_list, uint32_t num_sge);

/* Fast paths (qp.c, cq.c), reached through ibv_context.ops. */
int gr_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int gr_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int gr_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int gr_poll_cq(struct ibv_cq *cq, int ne, struct ibv_wc *wc);
int gr_req_notify_cq(struct ibv_cq *cq, int solicited_only);

/* post.c, qp_ex.c: send slots. */
int gr_check_swqe(struct gr_qp *qp, const struct gr_swqe *w, uint64_t len, const struct ibv_ah *ah,
		  const struct ibv_mw *mw);
char *gr_sq_slot(struct gr_qp *qp, uint64_t pos);
void gr_bind_to_swqe(struct gr_swqe *w, const struct ibv_mw *mw, uint32_t rkey,
		     const struct ibv_mw_bind_info *b);
int gr_wq_full(struct gr_wq *q);
void gr_wq_publish(struct gr_wq *q);
int gr_qp_ex_init(struct gr_qp *qp, uint64_t send_ops);

/* odp.c: implicit on-demand regions, whose lkey a posted SGE may name. */
int gr_odp_translate(struct gr_context *ctx, struct gr_sge *sge, uint32_t n);

/* Shared helpers. */
void *gr_map_ring(int fd, size_t size);
void gr_ring_doorbell(struct gr_wq_hdr *hdr, int db);
void gr_wq_init(struct gr_wq *q, char *ring, uint64_t off, uint32_t entries, uint32_t stride,
		uint32_t max_sge, uint32_t cap);
int gr_ring_fits(uint64_t size, uint64_t off, uint32_t entries, uint32_t stride);
void gr_to_ah_attr(const struct ibv_ah_attr *a, struct gr_ah_attr *o);
void gr_from_ah_attr(const struct gr_ah_attr *a, struct ibv_ah_attr *o);

#endif
