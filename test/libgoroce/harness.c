/*
 * harness.c: a libibverbs program that checks libgoroce.so from the
 * application's side. Built and run by internal/nic's integration test and by
 * test/libgoroce/run.sh, under goroce-exec (or LD_PRELOAD) and a timeout.
 *
 *   harness loop DEV_A DEV_B [THREADS]  RC traffic between two devices in one
 *                                       process: SEND/RECV, WRITE(+IMM), READ,
 *                                       atomics, inline, completion events, UD,
 *                                       SRQ; THREADS pairs at once
 *   harness fork DEV_A DEV_B            traffic, fork, the child gets private
 *                                       copies and uses verbs on its own
 *                                       devices, the parent goes on
 *   harness twoproc DEV                 two processes on one device, connected
 *                                       to each other
 *   harness errors DEV                  verbs goroce lacks or refuses fail
 *                                       with libibverbs' errno
 *   harness freed DEV_A DEV_B           registered memory freed or remapped
 *                                       before deregistration: the peer's
 *                                       accesses complete, the process's new
 *                                       memory is untouched, the daemon goes on
 *   harness memrace DEV [ROUNDS]        threads increment counters on the pages
 *                                       of a buffer (malloc'ed, not page-aligned)
 *                                       while it is registered and deregistered
 *                                       ROUNDS times: no increment is lost, and
 *                                       a genuine fault reaches the program's
 *                                       SIGSEGV handler
 *   harness fatal DEV                   prints "fatal: ready", waits for a line
 *                                       on stdin (the test kills the daemon
 *                                       meanwhile), then checks that the dead
 *                                       device reports IBV_EVENT_DEVICE_FATAL
 *                                       and errors instead of hanging
 *
 * Exit status 0 means every check passed; failures print what and where.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define BUF 65536
#define CHECK(c)                                                                             \
	do {                                                                                 \
		if (!(c)) {                                                                  \
			fprintf(stderr, "%s:%d: check failed: %s (errno %d %s)\n", __FILE__,     \
				__LINE__, #c, errno, strerror(errno));                             \
			exit(1);                                                             \
		}                                                                            \
	} while (0)

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
	union ibv_gid gid;
};

/* What a peer needs to reach an end (exchanged in memory or on a socket). */
struct wire {
	uint32_t qpn;
	uint32_t rkey;
	uint64_t addr;
	union ibv_gid gid;
};

static struct ibv_context *open_dev(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	int i;

	CHECK(list);
	for (i = 0; list[i]; i++)
		if (strcmp(ibv_get_device_name(list[i]), name) == 0)
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	CHECK(ctx);
	return ctx;
}

static void make_end(struct end *e, struct ibv_context *ctx, struct ibv_pd *pd,
		     enum ibv_qp_type type)
{
	struct ibv_qp_init_attr ia;

	memset(e, 0, sizeof(*e));
	e->ctx = ctx;
	e->pd = pd;
	CHECK(e->ch = ibv_create_comp_channel(ctx));
	CHECK(e->cq = ibv_create_cq(ctx, 256, e, e->ch, 0));
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = e->cq;
	ia.qp_type = type;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 64;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 2;
	ia.cap.max_inline_data = 64;
	CHECK(e->qp = ibv_create_qp(pd, &ia));
	CHECK(ia.cap.max_send_wr >= 64 && ia.cap.max_inline_data >= 64);
	/* Heap memory, as most programs register. */
	CHECK(e->buf = malloc(BUF));
	memset(e->buf, 0, BUF);
	CHECK(e->mr = ibv_reg_mr(pd, e->buf, BUF,
				 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC));
	CHECK(ibv_query_gid(ctx, 1, 1, &e->gid) == 0);
}

static struct wire wire_of(struct end *e)
{
	struct wire w = {.qpn = e->qp->qp_num, .rkey = e->mr->rkey,
			 .addr = (uintptr_t)e->buf, .gid = e->gid};
	return w;
}

static void connect_rc(struct end *e, const struct wire *peer)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			    IBV_ACCESS_REMOTE_ATOMIC;
	CHECK(ibv_modify_qp(e->qp, &a,
			    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer->gid;
	a.ah_attr.grh.sgid_index = 1;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	CHECK(ibv_modify_qp(e->qp, &a,
			    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				    IBV_QP_MIN_RNR_TIMER) == 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 4;
	CHECK(ibv_modify_qp(e->qp, &a,
			    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0);
}

/* wait_wc polls cq until one completion arrives (bounded by the test's
 * timeout) and checks it. */
static void wait_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_opcode op, struct ibv_wc *out)
{
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	CHECK(n == 1);
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != wr_id || wc.opcode != op) {
		fprintf(stderr, "completion: wr_id %" PRIu64 " status %s opcode %d, want %" PRIu64
				" opcode %d\n",
			wc.wr_id, ibv_wc_status_str(wc.status), wc.opcode, wr_id, op);
		exit(1);
	}
	if (out)
		*out = wc;
}

/* wait_event blocks on the completion channel's fd with poll(), then takes
 * the event and the completion. */
static void wait_event(struct end *e, uint64_t wr_id, enum ibv_wc_opcode op)
{
	struct pollfd p = {.fd = e->ch->fd, .events = POLLIN};
	struct ibv_cq *cq;
	void *cq_ctx;

	CHECK(poll(&p, 1, 10000) == 1);
	CHECK(ibv_get_cq_event(e->ch, &cq, &cq_ctx) == 0);
	CHECK(cq == e->cq && cq_ctx == e);
	ibv_ack_cq_events(cq, 1);
	wait_wc(e->cq, wr_id, op, NULL);
}

static void post_recv(struct end *e, uint64_t wr_id, size_t off, uint32_t len)
{
	struct ibv_sge s = {.addr = (uintptr_t)e->buf + off, .length = len, .lkey = e->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &s, .num_sge = 1}, *bad;

	CHECK(ibv_post_recv(e->qp, &wr, &bad) == 0);
}

static void post_send(struct end *e, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;

	CHECK(ibv_post_send(e->qp, wr, &bad) == 0);
}

/* rc_traffic runs every operation from a to b and checks the bytes. */
static void rc_traffic(struct end *a, struct end *b, const struct wire *wb, int events)
{
	struct ibv_sge s;
	struct ibv_send_wr wr;
	struct ibv_wc wc;
	uint64_t *res;
	int i;

	/* SEND/RECV with two SGEs on the receive side. */
	for (i = 0; i < 100; i++)
		a->buf[i] = (char)(i * 7 + 1);
	post_recv(b, 11, 1000, 100);
	s = (struct ibv_sge){.addr = (uintptr_t)a->buf, .length = 100, .lkey = a->mr->lkey};
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 10;
	wr.sg_list = &s;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND_WITH_IMM;
	wr.imm_data = htobe32(0x12345678);
	wr.send_flags = IBV_SEND_SIGNALED;
	if (events) {
		CHECK(ibv_req_notify_cq(a->cq, 0) == 0);
		CHECK(ibv_req_notify_cq(b->cq, 0) == 0);
	}
	post_send(a, &wr);
	if (events) {
		wait_event(a, 10, IBV_WC_SEND);
		wait_event(b, 11, IBV_WC_RECV);
	} else {
		wait_wc(a->cq, 10, IBV_WC_SEND, NULL);
		while (ibv_poll_cq(b->cq, 1, &wc) == 0)
			;
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 11 && wc.byte_len == 100);
		CHECK((wc.wc_flags & IBV_WC_WITH_IMM) && be32toh(wc.imm_data) == 0x12345678);
		CHECK(wc.qp_num == b->qp->qp_num);
	}
	CHECK(memcmp(b->buf + 1000, a->buf, 100) == 0);

	/* RDMA WRITE of 40 KiB (several packets), then WRITE_WITH_IMM. */
	for (i = 0; i < 40960; i++)
		a->buf[8192 + i] = (char)(i ^ 0x5a);
	s = (struct ibv_sge){.addr = (uintptr_t)a->buf + 8192, .length = 40960, .lkey = a->mr->lkey};
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 20;
	wr.sg_list = &s;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = wb->addr + 16384;
	wr.wr.rdma.rkey = wb->rkey;
	post_send(a, &wr);
	wait_wc(a->cq, 20, IBV_WC_RDMA_WRITE, NULL);
	CHECK(memcmp(b->buf + 16384, a->buf + 8192, 40960) == 0);

	/* Inline WRITE from unregistered stack memory. */
	{
		char stack[48];

		memset(stack, 0x77, sizeof(stack));
		s = (struct ibv_sge){.addr = (uintptr_t)stack, .length = sizeof(stack), .lkey = 0};
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 21;
		wr.sg_list = &s;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
		wr.wr.rdma.remote_addr = wb->addr + 64;
		wr.wr.rdma.rkey = wb->rkey;
		post_send(a, &wr);
		memset(stack, 0, sizeof(stack)); /* inline: reusable at once */
		wait_wc(a->cq, 21, IBV_WC_RDMA_WRITE, NULL);
		for (i = 0; i < 48; i++)
			CHECK(b->buf[64 + i] == 0x77);
	}

	/* RDMA READ back what b holds. */
	memset(a->buf + 8192, 0, 40960);
	s = (struct ibv_sge){.addr = (uintptr_t)a->buf + 8192, .length = 40960, .lkey = a->mr->lkey};
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 30;
	wr.sg_list = &s;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = wb->addr + 16384;
	wr.wr.rdma.rkey = wb->rkey;
	post_send(a, &wr);
	wait_wc(a->cq, 30, IBV_WC_RDMA_READ, &wc);
	CHECK(wc.byte_len == 40960);
	CHECK(memcmp(b->buf + 16384, a->buf + 8192, 40960) == 0);

	/* Atomics on an 8-byte word of b. */
	res = (uint64_t *)(void *)(a->buf + 256);
	*(uint64_t *)(void *)(b->buf + 512) = 100;
	s = (struct ibv_sge){.addr = (uintptr_t)res, .length = 8, .lkey = a->mr->lkey};
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 40;
	wr.sg_list = &s;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.atomic.remote_addr = wb->addr + 512;
	wr.wr.atomic.rkey = wb->rkey;
	wr.wr.atomic.compare_add = 5;
	post_send(a, &wr);
	wait_wc(a->cq, 40, IBV_WC_FETCH_ADD, NULL);
	CHECK(*res == 100 && *(uint64_t *)(void *)(b->buf + 512) == 105);
	wr.wr_id = 41;
	wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	wr.wr.atomic.compare_add = 105;
	wr.wr.atomic.swap = 7;
	post_send(a, &wr);
	wait_wc(a->cq, 41, IBV_WC_COMP_SWAP, NULL);
	CHECK(*res == 105 && *(uint64_t *)(void *)(b->buf + 512) == 7);

	/* A chain of unsignaled writes ending with a signaled one. */
	{
		struct ibv_send_wr chain[8];
		struct ibv_sge cs[8];

		for (i = 0; i < 8; i++) {
			memset(a->buf + 4096 + i * 64, 'a' + i, 64);
			cs[i] = (struct ibv_sge){.addr = (uintptr_t)a->buf + 4096 + i * 64,
						 .length = 64, .lkey = a->mr->lkey};
			memset(&chain[i], 0, sizeof(chain[i]));
			chain[i].wr_id = 50 + i;
			chain[i].sg_list = &cs[i];
			chain[i].num_sge = 1;
			chain[i].opcode = IBV_WR_RDMA_WRITE;
			chain[i].wr.rdma.remote_addr = wb->addr + 4096 + i * 64;
			chain[i].wr.rdma.rkey = wb->rkey;
			chain[i].next = i < 7 ? &chain[i + 1] : NULL;
		}
		chain[7].send_flags = IBV_SEND_SIGNALED;
		post_send(a, &chain[0]);
		wait_wc(a->cq, 57, IBV_WC_RDMA_WRITE, NULL);
		CHECK(memcmp(b->buf + 4096, a->buf + 4096, 512) == 0);
	}
}

struct pair {
	struct ibv_context *ca, *cb;
	int events;
	pthread_t t;
};

static void *pair_run(void *arg)
{
	struct pair *p = arg;
	struct ibv_pd *pa = ibv_alloc_pd(p->ca), *pb = ibv_alloc_pd(p->cb);
	struct end a, b;
	struct wire wa, wb;
	int round;

	CHECK(pa && pb);
	make_end(&a, p->ca, pa, IBV_QPT_RC);
	make_end(&b, p->cb, pb, IBV_QPT_RC);
	wa = wire_of(&a);
	wb = wire_of(&b);
	connect_rc(&a, &wb);
	connect_rc(&b, &wa);
	for (round = 0; round < 3; round++) {
		rc_traffic(&a, &b, &wb, p->events);
		rc_traffic(&b, &a, &wa, p->events);
	}
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0);
	CHECK(ibv_dereg_mr(a.mr) == 0 && ibv_dereg_mr(b.mr) == 0);
	CHECK(ibv_destroy_cq(a.cq) == 0 && ibv_destroy_cq(b.cq) == 0);
	CHECK(ibv_destroy_comp_channel(a.ch) == 0 && ibv_destroy_comp_channel(b.ch) == 0);
	CHECK(ibv_dealloc_pd(pa) == 0 && ibv_dealloc_pd(pb) == 0);
	/* The buffers are private memory again and still hold their bytes
	 * (the last inline WRITE went from b to a). */
	CHECK(a.buf[64] == 0x77);
	free(a.buf);
	free(b.buf);
	return NULL;
}

/* ud_traffic sends datagrams from a UD QP on ca to one on cb through an AH. */
static void ud_traffic(struct ibv_context *ca, struct ibv_context *cb)
{
	struct ibv_pd *pa = ibv_alloc_pd(ca), *pb = ibv_alloc_pd(cb);
	struct end a, b;
	struct ibv_qp_attr at;
	struct ibv_ah_attr ah;
	struct ibv_ah *h;
	struct ibv_sge s;
	struct ibv_send_wr wr;
	struct ibv_wc wc;
	struct end *e[2] = {&a, &b};
	int i;

	make_end(&a, ca, pa, IBV_QPT_UD);
	make_end(&b, cb, pb, IBV_QPT_UD);
	for (i = 0; i < 2; i++) {
		memset(&at, 0, sizeof(at));
		at.qp_state = IBV_QPS_INIT;
		at.port_num = 1;
		at.qkey = 0x11111111;
		CHECK(ibv_modify_qp(e[i]->qp, &at,
				    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0);
		at.qp_state = IBV_QPS_RTR;
		CHECK(ibv_modify_qp(e[i]->qp, &at, IBV_QP_STATE) == 0);
		at.qp_state = IBV_QPS_RTS;
		at.sq_psn = 0;
		CHECK(ibv_modify_qp(e[i]->qp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
	}
	post_recv(&b, 70, 0, 40 + 512);
	memset(&ah, 0, sizeof(ah));
	ah.is_global = 1;
	ah.grh.dgid = b.gid;
	ah.grh.sgid_index = 1;
	ah.grh.hop_limit = 64;
	ah.port_num = 1;
	CHECK(h = ibv_create_ah(pa, &ah));
	memset(a.buf, 'u', 512);
	s = (struct ibv_sge){.addr = (uintptr_t)a.buf, .length = 512, .lkey = a.mr->lkey};
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 71;
	wr.sg_list = &s;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.ud.ah = h;
	wr.wr.ud.remote_qpn = b.qp->qp_num;
	wr.wr.ud.remote_qkey = 0x11111111;
	post_send(&a, &wr);
	wait_wc(a.cq, 71, IBV_WC_SEND, NULL);
	wait_wc(b.cq, 70, IBV_WC_RECV, &wc);
	CHECK(wc.byte_len == 40 + 512 && (wc.wc_flags & IBV_WC_GRH) && wc.src_qp == a.qp->qp_num);
	CHECK(memcmp(b.buf + 40, a.buf, 512) == 0);
	/* Answer through an AH made from the completion. */
	{
		struct ibv_ah *back = ibv_create_ah_from_wc(pb, &wc, (struct ibv_grh *)(void *)b.buf, 1);

		CHECK(back);
		CHECK(ibv_destroy_ah(back) == 0);
	}
	CHECK(ibv_destroy_ah(h) == 0);
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0);
	CHECK(ibv_dereg_mr(a.mr) == 0 && ibv_dereg_mr(b.mr) == 0);
	CHECK(ibv_destroy_cq(a.cq) == 0 && ibv_destroy_cq(b.cq) == 0);
	CHECK(ibv_destroy_comp_channel(a.ch) == 0 && ibv_destroy_comp_channel(b.ch) == 0);
	CHECK(ibv_dealloc_pd(pa) == 0 && ibv_dealloc_pd(pb) == 0);
	free(a.buf);
	free(b.buf);
}

static int cmd_loop(const char *da, const char *db, int threads)
{
	struct ibv_context *ca = open_dev(da), *cb = open_dev(db);
	struct pair p[16];
	int i;

	if (threads < 1 || threads > 16)
		threads = 1;
	for (i = 0; i < threads; i++) {
		p[i].ca = ca;
		p[i].cb = cb;
		p[i].events = i % 2;
		CHECK(pthread_create(&p[i].t, NULL, pair_run, &p[i]) == 0);
	}
	for (i = 0; i < threads; i++)
		pthread_join(p[i].t, NULL);
	ud_traffic(ca, cb);
	CHECK(ibv_close_device(ca) == 0 && ibv_close_device(cb) == 0);
	printf("loop: %d thread(s) ok\n", threads);
	return 0;
}

/* cmd_fork: the child of fork gets private copies of registered memory and
 * uses verbs on devices it opens itself; the parent's objects keep working. */
static int cmd_fork(const char *da, const char *db)
{
	struct ibv_context *ca = open_dev(da), *cb = open_dev(db);
	struct pair p = {.ca = ca, .cb = cb};
	struct ibv_pd *pd = ibv_alloc_pd(ca);
	struct ibv_mr *mr;
	cpu_set_t all, one;
	char *page;
	pid_t pid;
	int st;

	CHECK(pd);
	/* A registered anonymous mapping, written before the fork. */
	page = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(page != MAP_FAILED);
	strcpy(page, "before fork");
	CHECK(mr = ibv_reg_mr(pd, page, 8192, IBV_ACCESS_LOCAL_WRITE));
	pair_run(&p);
	/* One CPU for both: after fork the parent runs on and writes before
	 * the child is scheduled, the order in which a copy taken in the
	 * child (not before fork) would show the parent's write. */
	CHECK(sched_getaffinity(0, sizeof(all), &all) == 0);
	CPU_ZERO(&one);
	CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &one);
	CHECK(sched_setaffinity(0, sizeof(one), &one) == 0);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		/* The child's copy is private and taken at fork: the parent's
		 * write below must not show here, and the child's must not
		 * show there. */
		struct ibv_pd *stale;

		CHECK(strcmp(page, "before fork") == 0);
		strcpy(page, "child");
		usleep(200000);
		CHECK(strcmp(page, "child") == 0);
		errno = 0;
		stale = ibv_alloc_pd(ca);
		CHECK(stale == NULL && errno == EIO); /* the parent's context */
		{
			struct ibv_context *c2a = open_dev(da), *c2b = open_dev(db);
			struct pair q = {.ca = c2a, .cb = c2b, .events = 1};

			pair_run(&q);
			CHECK(ibv_close_device(c2a) == 0 && ibv_close_device(c2b) == 0);
		}
		_exit(0);
	}
	strcpy(page, "parent");
	CHECK(sched_setaffinity(0, sizeof(all), &all) == 0);
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(strcmp(page, "parent") == 0);
	p.events = 1;
	pair_run(&p); /* still working after the fork */
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(strcmp(page, "parent") == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ca) == 0 && ibv_close_device(cb) == 0);
	printf("fork: ok\n");
	return 0;
}

/* cmd_twoproc: a parent and its child each open the same device and connect
 * a QP to the other's, exchanging addresses on a socketpair. */
static int cmd_twoproc(const char *dev)
{
	int sv[2], st, i, child;
	pid_t pid;

	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	pid = fork();
	CHECK(pid >= 0);
	child = pid == 0;
	{
		int fd = sv[child ? 1 : 0];
		struct ibv_context *c = open_dev(dev);
		struct ibv_pd *pd = ibv_alloc_pd(c);
		struct end e;
		struct wire me, peer;
		struct ibv_sge s;
		struct ibv_send_wr wr;
		char ok;

		CHECK(pd);
		make_end(&e, c, pd, IBV_QPT_RC);
		me = wire_of(&e);
		CHECK(write(fd, &me, sizeof(me)) == sizeof(me));
		CHECK(read(fd, &peer, sizeof(peer)) == sizeof(peer));
		connect_rc(&e, &peer);
		post_recv(&e, 1, 0, 256);
		CHECK(write(fd, "r", 1) == 1 && read(fd, &ok, 1) == 1); /* both receives posted */
		for (i = 0; i < 256; i++)
			e.buf[1024 + i] = (char)(child ? i : 255 - i);
		s = (struct ibv_sge){.addr = (uintptr_t)e.buf + 1024, .length = 256, .lkey = e.mr->lkey};
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 2;
		wr.sg_list = &s;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_SIGNALED;
		post_send(&e, &wr);
		{
			/* The send's and the receive's completions, in either order. */
			struct ibv_wc wc[2];
			int got = 0, n;

			while (got < 2) {
				CHECK((n = ibv_poll_cq(e.cq, 2 - got, wc + got)) >= 0);
				got += n;
			}
			CHECK(wc[0].status == IBV_WC_SUCCESS && wc[1].status == IBV_WC_SUCCESS);
			CHECK(wc[0].wr_id + wc[1].wr_id == 3);
		}
		for (i = 0; i < 256; i++)
			CHECK((unsigned char)e.buf[i] == (unsigned char)(child ? 255 - i : i));
		/* And a WRITE into the other process's memory. */
		memset(e.buf + 2048, child ? 'c' : 'p', 100);
		s = (struct ibv_sge){.addr = (uintptr_t)e.buf + 2048, .length = 100, .lkey = e.mr->lkey};
		wr.wr_id = 3;
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.wr.rdma.remote_addr = peer.addr + 4096;
		wr.wr.rdma.rkey = peer.rkey;
		post_send(&e, &wr);
		wait_wc(e.cq, 3, IBV_WC_RDMA_WRITE, NULL);
		CHECK(write(fd, "w", 1) == 1 && read(fd, &ok, 1) == 1);
		for (i = 0; i < 100; i++)
			CHECK(e.buf[4096 + i] == (child ? 'p' : 'c'));
		CHECK(ibv_close_device(c) == 0); /* leaves the objects to the daemon to clean */
		if (child)
			_exit(0);
	}
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	printf("twoproc: ok\n");
	return 0;
}

#define EXPECT_ERR(call, want)                                                               \
	do {                                                                                 \
		int _r = (call);                                                             \
		if (_r != (want)) {                                                          \
			fprintf(stderr, "%s:%d: %s returned %d, want %d\n", __FILE__, __LINE__,  \
				#call, _r, want);                                            \
			exit(1);                                                             \
		}                                                                            \
	} while (0)
#define EXPECT_NULL(call, want)                                                              \
	do {                                                                                 \
		errno = 0;                                                                   \
		if ((call) != NULL || errno != (want)) {                                     \
			fprintf(stderr, "%s:%d: %s: errno %d, want NULL and %d\n", __FILE__,     \
				__LINE__, #call, errno, want);                               \
			exit(1);                                                             \
		}                                                                            \
	} while (0)

static int cmd_errors(const char *dev)
{
	struct ibv_context *c = open_dev(dev);
	struct ibv_pd *pd = ibv_alloc_pd(c);
	struct end e;
	struct ibv_port_attr pa;
	struct ibv_device_attr_ex dx;
	struct ibv_send_wr wr, *bad;
	struct ibv_recv_wr rwr, *rbad;
	struct ibv_sge s[4];
	struct ibv_cq_init_attr_ex cqx;
	char onstack[64];
	int i, posted;

	CHECK(pd);
	make_end(&e, c, pd, IBV_QPT_RC);
	CHECK(ibv_query_port(c, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE);
	EXPECT_ERR(ibv_query_port(c, 2, &pa), EINVAL);
	CHECK(ibv_query_device_ex(c, NULL, &dx) == 0 && dx.orig_attr.phys_port_cnt == 1);
	/* What goroce lacks answers with the errno libibverbs documents. */
	EXPECT_NULL(ibv_alloc_mw(pd, (enum ibv_mw_type)3), EINVAL);
	memset(&cqx, 0, sizeof(cqx));
	cqx.cqe = 16;
	cqx.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
	EXPECT_NULL(ibv_create_cq_ex(c, &cqx), EOPNOTSUPP);
	cqx.wc_flags = IBV_WC_STANDARD_FLAGS;
	cqx.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
	cqx.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
	EXPECT_NULL(ibv_create_cq_ex(c, &cqx), EOPNOTSUPP);
	{
		struct ibv_qp_init_attr_ex qx;

		memset(&qx, 0, sizeof(qx));
		qx.qp_type = IBV_QPT_RC;
		qx.send_cq = qx.recv_cq = e.cq;
		qx.cap.max_send_wr = 1;
		qx.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		qx.pd = pd;
		qx.send_ops_flags = IBV_QP_EX_WITH_TSO;
		EXPECT_NULL(ibv_create_qp_ex(c, &qx), EOPNOTSUPP);
		qx.qp_type = IBV_QPT_RAW_PACKET;
		qx.comp_mask = IBV_QP_INIT_ATTR_PD;
		EXPECT_NULL(ibv_create_qp_ex(c, &qx), EOPNOTSUPP);
		qx.qp_type = IBV_QPT_XRC_SEND;
		EXPECT_NULL(ibv_create_qp_ex(c, &qx), EOPNOTSUPP);
	}
	EXPECT_NULL(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, 0, IBV_ACCESS_LOCAL_WRITE), EOPNOTSUPP);
	EXPECT_ERR(ibv_attach_mcast(e.qp, &e.gid, 0), EOPNOTSUPP);
	EXPECT_NULL(ibv_reg_mr(pd, NULL, 4096, IBV_ACCESS_LOCAL_WRITE), EINVAL);
	/* Unmapped memory cannot be registered. */
	{
		char *hole = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				  -1, 0);

		CHECK(hole != MAP_FAILED);
		munmap(hole, 8192);
		EXPECT_NULL(ibv_reg_mr(pd, hole, 8192, IBV_ACCESS_LOCAL_WRITE), EFAULT);
	}
	/* Read-only memory cannot take write access but can be registered
	 * for reading; a stack buffer can be registered. */
	{
		char *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		struct ibv_mr *m;

		CHECK(ro != MAP_FAILED);
		EXPECT_NULL(ibv_reg_mr(pd, ro, 4096, IBV_ACCESS_LOCAL_WRITE), EFAULT);
		CHECK(m = ibv_reg_mr(pd, ro, 4096, 0));
		CHECK(ibv_dereg_mr(m) == 0);
		CHECK(m = ibv_reg_mr(pd, onstack, sizeof(onstack), IBV_ACCESS_LOCAL_WRITE));
		strcpy(onstack, "still usable");
		CHECK(ibv_dereg_mr(m) == 0);
		CHECK(strcmp(onstack, "still usable") == 0);
	}
	/* Overlapping registrations of one buffer, released in any order. */
	{
		struct ibv_mr *m1, *m2, *m3;

		CHECK(m1 = ibv_reg_mr(pd, e.buf + 100, 10000, IBV_ACCESS_LOCAL_WRITE));
		CHECK(m2 = ibv_reg_mr(pd, e.buf + 5000, 20000, IBV_ACCESS_LOCAL_WRITE));
		CHECK(m3 = ibv_reg_mr_iova2(pd, e.buf, 100, 0x1000, IBV_ACCESS_LOCAL_WRITE));
		CHECK(ibv_dereg_mr(m2) == 0 && ibv_dereg_mr(m3) == 0 && ibv_dereg_mr(m1) == 0);
		e.buf[5000] = 1;
	}
	/* Posting in RESET, too many SGEs, a full queue. */
	memset(&wr, 0, sizeof(wr));
	for (i = 0; i < 4; i++)
		s[i] = (struct ibv_sge){.addr = (uintptr_t)e.buf, .length = 8, .lkey = e.mr->lkey};
	wr.sg_list = s;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	EXPECT_ERR(ibv_post_send(e.qp, &wr, &bad), EINVAL);
	CHECK(bad == &wr);
	memset(&rwr, 0, sizeof(rwr));
	rwr.sg_list = s;
	rwr.num_sge = 1;
	EXPECT_ERR(ibv_post_recv(e.qp, &rwr, &rbad), EINVAL); /* RESET */
	{
		struct wire self = wire_of(&e);

		connect_rc(&e, &self); /* connected to itself */
	}
	wr.num_sge = 3;
	EXPECT_ERR(ibv_post_send(e.qp, &wr, &bad), EINVAL);
	wr.num_sge = 1;
	wr.opcode = IBV_WR_TSO;
	EXPECT_ERR(ibv_post_send(e.qp, &wr, &bad), EINVAL);
	wr.opcode = IBV_WR_BIND_MW; /* with data and no window */
	EXPECT_ERR(ibv_post_send(e.qp, &wr, &bad), EINVAL);
	wr.opcode = IBV_WR_ATOMIC_WRITE; /* only through ibv_wr_atomic_write */
	EXPECT_ERR(ibv_post_send(e.qp, &wr, &bad), EOPNOTSUPP);
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_INLINE;
	s[0].length = 1000;
	EXPECT_ERR(ibv_post_send(e.qp, &wr, &bad), EINVAL); /* over max_inline_data */
	s[0].length = 8;
	wr.send_flags = 0;
	rwr.num_sge = 3;
	EXPECT_ERR(ibv_post_recv(e.qp, &rwr, &rbad), EINVAL);
	rwr.num_sge = 1;
	for (posted = 0; posted < 10000; posted++)
		if (ibv_post_recv(e.qp, &rwr, &rbad))
			break;
	CHECK(posted >= 64 && posted < 10000); /* a full queue stops it */
	EXPECT_ERR(ibv_post_recv(e.qp, &rwr, &rbad), ENOMEM);
	/* A resized CQ keeps working: a SEND to itself. */
	CHECK(ibv_resize_cq(e.cq, 1000) == 0 && e.cq->cqe >= 1000);
	wr.wr_id = 77;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	post_send(&e, &wr);
	{
		struct ibv_wc wc[2];
		int got = 0, n;

		while (got < 2) {
			CHECK((n = ibv_poll_cq(e.cq, 2 - got, wc + got)) >= 0);
			got += n;
		}
		CHECK(wc[0].status == IBV_WC_SUCCESS && wc[1].status == IBV_WC_SUCCESS);
	}
	/* A WRITE with a bad rkey: the requester's completion says so, and
	 * the responder (the same QP) raises an async event on async_fd. */
	{
		struct pollfd p = {.fd = c->async_fd, .events = POLLIN};
		struct ibv_async_event ev;
		struct ibv_wc wc;

		wr.wr_id = 78;
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.wr.rdma.remote_addr = (uintptr_t)e.buf;
		wr.wr.rdma.rkey = e.mr->rkey ^ 0x80;
		post_send(&e, &wr);
		/* The QP, its own responder, goes to ERR: the receives posted
		 * above flush, and the WRITE fails (or flushes, if the ERR
		 * state overtook the NAK). */
		do {
			while (ibv_poll_cq(e.cq, 1, &wc) == 0)
				;
			CHECK(wc.status != IBV_WC_SUCCESS);
		} while (wc.wr_id != 78);
		CHECK(wc.status == IBV_WC_REM_ACCESS_ERR || wc.status == IBV_WC_WR_FLUSH_ERR);
		CHECK(poll(&p, 1, 10000) == 1);
		CHECK(ibv_get_async_event(c, &ev) == 0);
		CHECK(ev.event_type == IBV_EVENT_QP_ACCESS_ERR && ev.element.qp == e.qp);
		ibv_ack_async_event(&ev);
	}
	/* Destroying a CQ in use fails; so does a PD with objects. */
	EXPECT_ERR(ibv_destroy_cq(e.cq), EBUSY);
	EXPECT_ERR(ibv_dealloc_pd(pd), EBUSY);
	CHECK(ibv_close_device(c) == 0);
	printf("errors: ok\n");
	return 0;
}

/* rdma_op posts one signaled RDMA operation from a to [raddr, raddr+len)
 * of rkey and returns its completion status. */
static enum ibv_wc_status rdma_op(struct end *a, enum ibv_wr_opcode op, uint64_t raddr,
				  uint32_t rkey, uint32_t len, uint64_t wr_id)
{
	struct ibv_sge s = {.addr = (uintptr_t)a->buf, .length = len, .lkey = a->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &s, .num_sge = 1, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED};
	struct ibv_wc wc;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	post_send(a, &wr);
	while (ibv_poll_cq(a->cq, 1, &wc) == 0)
		;
	CHECK(wc.wr_id == wr_id);
	return wc.status;
}

static int cmd_freed(const char *da, const char *db)
{
	struct ibv_context *ca = open_dev(da), *cb = open_dev(db);
	struct ibv_pd *pa = ibv_alloc_pd(ca), *pb = ibv_alloc_pd(cb);
	struct end a, b;
	struct wire wa, wb;
	const size_t big = 1 << 20; /* above malloc's mmap threshold */
	char *heap, *mapped, *fresh;
	uintptr_t heap_addr; /* what the peer was told: the address, not the pointer */
	struct ibv_mr *mh, *mm;
	int i;

	CHECK(pa && pb);
	make_end(&a, ca, pa, IBV_QPT_RC);
	make_end(&b, cb, pb, IBV_QPT_RC);
	wa = wire_of(&a);
	wb = wire_of(&b);
	connect_rc(&a, &wb);
	connect_rc(&b, &wa);
	memset(a.buf, 'w', 4096);

	/* Freed heap memory (malloc gives it back to the kernel): the peer's
	 * WRITE and READ complete, as on hardware, whose pinned pages outlive
	 * the free; nothing the process maps afterwards sees them. */
	CHECK(heap = malloc(big));
	memset(heap, 0, big);
	CHECK(mh = ibv_reg_mr(pb, heap, big, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						     IBV_ACCESS_REMOTE_READ));
	heap_addr = (uintptr_t)heap;
	free(heap);
	CHECK(fresh = malloc(big));
	memset(fresh, 0, big);
	CHECK(rdma_op(&a, IBV_WR_RDMA_WRITE, heap_addr, mh->rkey, 4096, 1) == IBV_WC_SUCCESS);
	CHECK(rdma_op(&a, IBV_WR_RDMA_READ, heap_addr + big - 4096, mh->rkey, 4096, 2) ==
	      IBV_WC_SUCCESS);
	for (i = 0; i < (int)big; i++)
		CHECK(fresh[i] == 0);
	CHECK(ibv_dereg_mr(mh) == 0);
	free(fresh);

	/* A registered mapping replaced by a new one at the same address:
	 * the peer still reaches the old pages, the new ones stay zero. */
	mapped = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(mapped != MAP_FAILED);
	CHECK(mm = ibv_reg_mr(pb, mapped, big, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
	CHECK(mmap(mapped, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
		   0) == mapped);
	CHECK(rdma_op(&a, IBV_WR_RDMA_WRITE, (uintptr_t)mapped + 8192, mm->rkey, 4096, 3) ==
	      IBV_WC_SUCCESS);
	for (i = 0; i < (int)big; i++)
		CHECK(mapped[i] == 0);
	/* Unmapped altogether, then deregistered: nothing breaks. */
	CHECK(munmap(mapped, big) == 0);
	CHECK(rdma_op(&a, IBV_WR_RDMA_WRITE, (uintptr_t)mapped, mm->rkey, 4096, 4) == IBV_WC_SUCCESS);
	CHECK(ibv_dereg_mr(mm) == 0);

	/* The daemon is unharmed: new memory registers and traffic flows. */
	rc_traffic(&a, &b, &wb, 0);
	printf("freed: ok\n");
	return 0;
}

/*
 * memrace: registration must not lose a write another thread makes to the
 * pages a buffer spans. A malloc'ed block holds counters before, inside and
 * after a registered buffer that is not page-aligned (so they share its first
 * and last pages); worker threads increment them (each its own plain
 * counters, all of them one atomic counter) while the main thread registers
 * and deregisters the buffer ROUNDS times. Every count must be exact.
 * Then a genuine segmentation fault still reaches the application's handler,
 * whether the handler was installed before the library's first registration
 * or after it.
 */
#define RACE_WORKERS 2
static struct {
	char *blk;
	volatile long *plain[RACE_WORKERS][3]; /* before, inside, after the buffer */
	long *shared;                          /* incremented atomically by all */
	long done[RACE_WORKERS];               /* each worker's own count */
	int stop;
} race;

static void *race_worker(void *arg)
{
	long w = (long)arg, n = 0;
	int k;

	while (!__atomic_load_n(&race.stop, __ATOMIC_RELAXED)) {
		for (k = 0; k < 3; k++)
			(*race.plain[w][k])++;
		__atomic_fetch_add(race.shared, 1, __ATOMIC_RELAXED);
		n++;
	}
	race.done[w] = n;
	return NULL;
}

static sigjmp_buf fault_jmp;
static volatile int fault_seen;

static void fault_handler(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	(void)uc;
	fault_seen++;
	siglongjmp(fault_jmp, 1);
}

/* genuine_fault writes a read-only page and reports whether the
 * application's handler caught it. */
static int genuine_fault(void)
{
	char *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int seen = fault_seen;

	CHECK(ro != MAP_FAILED);
	if (sigsetjmp(fault_jmp, 1) == 0)
		*(volatile char *)ro = 1;
	munmap(ro, 4096);
	return fault_seen == seen + 1;
}

static void install_fault_handler(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = fault_handler;
	sa.sa_flags = SA_SIGINFO;
	CHECK(sigaction(SIGSEGV, &sa, NULL) == 0);
}

static void reg_dereg(struct ibv_pd *pd, char *buf, size_t len)
{
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);

	CHECK(mr);
	CHECK(ibv_dereg_mr(mr) == 0);
}

static int cmd_memrace(const char *dev, int rounds)
{
	struct ibv_context *c = open_dev(dev);
	struct ibv_pd *pd = ibv_alloc_pd(c);
	const size_t off = 1000, len = 5000; /* spans parts of two or three pages */
	pthread_t th[RACE_WORKERS];
	long total = 0;
	char *buf;
	int i, w;

	CHECK(pd);
	install_fault_handler();
	CHECK(race.blk = malloc(4 * 4096));
	memset(race.blk, 0, 4 * 4096);
	/* off bytes into the block's first whole page. */
	buf = (char *)(((uintptr_t)race.blk + 4095) & ~4095UL) + off;
	CHECK((uintptr_t)buf % 4096 != 0);
	race.shared = (long *)(buf - 64);
	for (w = 0; w < RACE_WORKERS; w++) {
		/* Same page as the buffer's first byte, inside it, same page
		 * as its last byte. */
		race.plain[w][0] = (volatile long *)(buf - 128 - 64 * w);
		race.plain[w][1] = (volatile long *)(buf + len / 2 + 64 * w);
		race.plain[w][2] = (volatile long *)(buf + len + 64 + 64 * w);
		CHECK(((uintptr_t)race.plain[w][0] & ~4095UL) == ((uintptr_t)buf & ~4095UL));
		CHECK(((uintptr_t)race.plain[w][2] & ~4095UL) ==
		      ((uintptr_t)(buf + len - 1) & ~4095UL));
	}
	for (w = 0; w < RACE_WORKERS; w++)
		CHECK(pthread_create(&th[w], NULL, race_worker, (void *)(long)w) == 0);
	for (i = 0; i < rounds; i++)
		reg_dereg(pd, buf, len);
	__atomic_store_n(&race.stop, 1, __ATOMIC_RELAXED);
	for (w = 0; w < RACE_WORKERS; w++) {
		CHECK(pthread_join(th[w], NULL) == 0);
		total += race.done[w];
	}
	for (w = 0; w < RACE_WORKERS; w++) {
		int k;

		for (k = 0; k < 3; k++)
			if (*race.plain[w][k] != race.done[w]) {
				fprintf(stderr, "memrace: worker %d counter %d: %ld, incremented %ld times\n",
					w, k, *race.plain[w][k], race.done[w]);
				exit(1);
			}
	}
	if (*race.shared != total) {
		fprintf(stderr, "memrace: atomic counter %ld, incremented %ld times\n", *race.shared,
			total);
		exit(1);
	}
	printf("memrace: %d registrations, %ld increments per worker, none lost\n", rounds,
	       race.done[0]);

	/* Faults that are not the library's reach the program's handler,
	 * installed before the first registration or after one. */
	CHECK(genuine_fault());
	install_fault_handler();
	CHECK(genuine_fault());
	reg_dereg(pd, buf, len);
	CHECK(genuine_fault());
	free(race.blk);
	CHECK(ibv_dealloc_pd(pd) == 0 && ibv_close_device(c) == 0);
	printf("memrace: ok\n");
	return 0;
}

static int cmd_fatal(const char *dev)
{
	struct ibv_context *c = open_dev(dev);
	struct ibv_pd *pd = ibv_alloc_pd(c);
	struct pollfd p;
	struct ibv_async_event ev;
	struct ibv_send_wr wr, *bad;
	struct ibv_cq *cq;
	struct ibv_wc wc;
	struct end e;
	struct wire self;
	void *cq_ctx;
	char line[16];
	long i;
	int n;

	CHECK(pd);
	make_end(&e, c, pd, IBV_QPT_RC);
	self = wire_of(&e);
	connect_rc(&e, &self);
	post_recv(&e, 1, 0, 64);
	CHECK(ibv_req_notify_cq(e.cq, 0) == 0);
	printf("fatal: ready\n");
	CHECK(fgets(line, sizeof(line), stdin) != NULL);

	/* The daemon is gone: a spinning poll ends with an error, async_fd
	 * turns readable with DEVICE_FATAL; posts, control verbs and a wait
	 * on the completion channel fail. */
	for (i = 0; (n = ibv_poll_cq(e.cq, 1, &wc)) == 0; i++)
		CHECK(i < 100000000);
	CHECK(n < 0);
	p = (struct pollfd){.fd = c->async_fd, .events = POLLIN};
	CHECK(poll(&p, 1, 10000) == 1);
	CHECK(ibv_get_async_event(c, &ev) == 0 && ev.event_type == IBV_EVENT_DEVICE_FATAL);
	ibv_ack_async_event(&ev);
	CHECK(ibv_get_async_event(c, &ev) == -1);
	memset(&wr, 0, sizeof(wr));
	wr.opcode = IBV_WR_SEND;
	EXPECT_ERR(ibv_post_send(e.qp, &wr, &bad), EIO);
	EXPECT_NULL(ibv_alloc_pd(c), EIO);
	CHECK(ibv_get_cq_event(e.ch, &cq, &cq_ctx) == -1);
	/* Teardown still works, and frees what the process holds. */
	CHECK(ibv_destroy_qp(e.qp) == 0 && ibv_dereg_mr(e.mr) == 0);
	CHECK(ibv_destroy_cq(e.cq) == 0 && ibv_destroy_comp_channel(e.ch) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0 && ibv_close_device(c) == 0);
	printf("fatal: ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc >= 4 && strcmp(argv[1], "loop") == 0)
		return cmd_loop(argv[2], argv[3], argc > 4 ? atoi(argv[4]) : 1);
	if (argc == 4 && strcmp(argv[1], "fork") == 0)
		return cmd_fork(argv[2], argv[3]);
	if (argc == 3 && strcmp(argv[1], "twoproc") == 0)
		return cmd_twoproc(argv[2]);
	if (argc == 3 && strcmp(argv[1], "errors") == 0)
		return cmd_errors(argv[2]);
	if (argc == 4 && strcmp(argv[1], "freed") == 0)
		return cmd_freed(argv[2], argv[3]);
	if (argc >= 3 && strcmp(argv[1], "memrace") == 0)
		return cmd_memrace(argv[2], argc > 3 ? atoi(argv[3]) : 2000);
	if (argc == 3 && strcmp(argv[1], "fatal") == 0)
		return cmd_fatal(argv[2]);
	fprintf(stderr, "usage: harness loop|fork|freed DEV_A DEV_B [THREADS] | "
			"twoproc|errors|fatal DEV | memrace DEV [ROUNDS]\n");
	return 2;
}
