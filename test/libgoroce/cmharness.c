/*
 * cmharness.c: librdmacm on goroce, what the tools do not show: errors
 * with librdmacm's errno, private data both ways, rejections, a
 * non-blocking pollable event channel, and fork. Built against Debian's
 * librdmacm-dev, run under goroce-exec (goroce0 = 127.0.0.1, goroce1 =
 * 127.0.0.2):
 *
 *   cmharness errors PORT [SERVER_IP CLIENT_IP]   (default 127.0.0.1 127.0.0.2)
 *                            calls that must fail, and how
 *   cmharness connect PORT   a listener and a client in one process:
 *                            reject with data, then accept with data,
 *                            traffic, disconnect
 *   cmharness fork PORT      the parent's IDs in a child, and the child's own
 *   cmharness orphan PORT    a channel destroyed while a thread reads it
 *
 * Prints "MODE: ok" and exits 0, or says what failed and exits 1.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *mode;
static const char *server_ip = "127.0.0.1"; /* goroce0 */
static const char *client_ip = "127.0.0.2"; /* goroce1 */

#define CHECK(cond, ...)                                                          \
	do {                                                                      \
		if (!(cond)) {                                                    \
			fprintf(stderr, "%s: line %d: ", mode, __LINE__);         \
			fprintf(stderr, __VA_ARGS__);                             \
			fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno)); \
			exit(1);                                                  \
		}                                                                 \
	} while (0)

static struct sockaddr_in addr(const char *ip, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};

	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

/* expect waits for the next event on ch, which must be of type t. */
static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type t)
{
	struct rdma_cm_event *ev;

	CHECK(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event");
	CHECK(ev->event == t, "event %s (status %d), want %s", rdma_event_str(ev->event),
	      ev->status, rdma_event_str(t));
	return ev;
}

static void errors(int port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id, *id2;
	struct sockaddr_in a;
	struct rdma_cm_event *ev;
	struct rdma_addrinfo *res;
	struct pollfd pfd;
	uint8_t tos = 0;
	int v = 1;

	CHECK(ch, "rdma_create_event_channel");
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	/* No device has that loopback address (librdmacm: ENODEV, the
	 * interface has no RDMA device). */
	a = addr("127.0.0.99", port);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&a) == -1 && errno == ENODEV, "bind 127.0.0.99");
	CHECK(rdma_connect(id, NULL) == -1 && errno == EINVAL, "connect before resolving");
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&a, NULL) == -1 && errno == EOPNOTSUPP,
	      "multicast");
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 4) == -1 && errno == EINVAL,
	      "TOS of 4 bytes");
	CHECK(rdma_set_option(id, 7, 0, &v, sizeof(v)) == -1 && errno == ENOSYS, "unknown level");
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &v, sizeof(v)) == 0,
	      "REUSEADDR");
	CHECK(rdma_getaddrinfo("no-such-host.invalid", "1", NULL, &res) != 0, "getaddrinfo");

	/* A port is bound once. */
	a = addr(server_ip, port);
	CHECK(rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_bind_addr(id2, (struct sockaddr *)&a) == 0, "bind");
	CHECK(rdma_listen(id2, 4) == 0, "listen");
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&a) == -1 && errno == EADDRINUSE, "bind twice");

	/* Non-blocking: nothing yet, then the fd turns readable. */
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0, "O_NONBLOCK");
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN, "empty non-blocking channel");
	a = addr(server_ip, port + 1); /* nobody listens there */
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) == 0, "resolve_addr");
	pfd.fd = ch->fd;
	pfd.events = POLLIN;
	CHECK(poll(&pfd, 1, 10000) == 1 && (pfd.revents & POLLIN), "poll");
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) & ~O_NONBLOCK) == 0, "blocking");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(id->verbs && strcmp(ibv_get_device_name(id->verbs->device), "goroce0") == 0,
	      "id->verbs is goroce0");
	CHECK(rdma_resolve_route(id, 2000) == 0, "resolve_route");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	CHECK(id->route.num_paths == 1 && id->route.path_rec, "a path");
	/* A port nobody listens on: REJ "invalid service ID" (8). */
	{
		struct rdma_conn_param p = {.qp_num = 0x1234, .retry_count = 1};

		CHECK(rdma_connect(id, &p) == 0, "connect");
	}
	ev = expect(ch, RDMA_CM_EVENT_REJECTED);
	CHECK(ev->status == 8, "REJ reason %d, want 8", ev->status);
	rdma_ack_cm_event(ev);
	CHECK(rdma_destroy_id(id) == 0 && rdma_destroy_id(id2) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

/* qp_for gives a connected ID a QP with the library's CQs and PD. */
static void qp_for(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr attr = {.qp_type = IBV_QPT_RC,
					.cap = {.max_send_wr = 4, .max_recv_wr = 4,
						.max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = 64}};

	CHECK(rdma_create_qp(id, NULL, &attr) == 0, "rdma_create_qp");
	CHECK(id->send_cq && id->recv_cq && id->pd && id->qp->state == IBV_QPS_INIT,
	      "QP in INIT with the library's CQs");
}

static void connect_test(int port)
{
	struct rdma_event_channel *sch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
	struct rdma_cm_id *l, *c, *s;
	struct sockaddr_in la = addr(server_ip, port), src = addr(client_ip, 0);
	struct rdma_conn_param p;
	struct rdma_cm_event *ev;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	char buf[64] = "hello over RDMA", rbuf[64];
	int round, n;

	CHECK(sch && cch, "channels");
	CHECK(rdma_create_id(sch, &l, NULL, RDMA_PS_TCP) == 0, "listener");
	CHECK(rdma_bind_addr(l, (struct sockaddr *)&la) == 0 && rdma_listen(l, 4) == 0, "listen");
	CHECK(ntohs(rdma_get_src_port(l)) == port, "listener's port");
	for (round = 0; round < 2; round++) {
		CHECK(rdma_create_id(cch, &c, NULL, RDMA_PS_TCP) == 0, "client");
		CHECK(rdma_resolve_addr(c, (struct sockaddr *)&src, (struct sockaddr *)&la, 2000) == 0,
		      "resolve");
		rdma_ack_cm_event(expect(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
		CHECK(strcmp(ibv_get_device_name(c->verbs->device), "goroce1") == 0, "client on goroce1");
		CHECK(rdma_resolve_route(c, 2000) == 0, "route");
		rdma_ack_cm_event(expect(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));
		qp_for(c);
		memset(&p, 0, sizeof(p));
		p.private_data = round ? "again" : "first";
		p.private_data_len = 6;
		p.responder_resources = p.initiator_depth = 1;
		p.retry_count = 7;
		p.rnr_retry_count = 7;
		CHECK(rdma_connect(c, &p) == 0, "connect");
		ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
		CHECK(ev->listen_id == l && ev->id != l, "request's IDs");
		CHECK(ev->param.conn.private_data_len >= 6 &&
			      strcmp(ev->param.conn.private_data, round ? "again" : "first") == 0,
		      "request's private data");
		CHECK(ntohs(rdma_get_dst_port(ev->id)) == ntohs(rdma_get_src_port(c)), "ports");
		s = ev->id;
		rdma_ack_cm_event(ev);
		if (round == 0) {
			CHECK(rdma_reject(s, "go away", 8) == 0, "reject");
			ev = expect(cch, RDMA_CM_EVENT_REJECTED);
			CHECK(ev->status == 28 && strcmp(ev->param.conn.private_data, "go away") == 0,
			      "REJ: consumer reason 28 and the data (got %d)", ev->status);
			rdma_ack_cm_event(ev);
			CHECK(c->qp->state == IBV_QPS_ERR, "a rejected QP goes to ERR");
			rdma_destroy_qp(c);
			rdma_destroy_id(c);
			rdma_destroy_id(s);
			continue;
		}
		qp_for(s);
		mr = ibv_reg_mr(s->pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
		CHECK(mr, "reg_mr");
		{
			struct ibv_sge sge = {.addr = (uintptr_t)rbuf, .length = sizeof(rbuf), .lkey = mr->lkey};
			struct ibv_recv_wr wr = {.sg_list = &sge, .num_sge = 1}, *bad;

			CHECK(ibv_post_recv(s->qp, &wr, &bad) == 0, "post_recv");
		}
		memset(&p, 0, sizeof(p));
		p.private_data = "welcome";
		p.private_data_len = 8;
		p.responder_resources = p.initiator_depth = 1;
		CHECK(rdma_accept(s, &p) == 0, "accept");
		CHECK(s->qp->state == IBV_QPS_RTS, "passive QP in RTS");
		ev = expect(cch, RDMA_CM_EVENT_ESTABLISHED);
		CHECK(strcmp(ev->param.conn.private_data, "welcome") == 0, "REP's private data");
		rdma_ack_cm_event(ev);
		CHECK(c->qp->state == IBV_QPS_RTS, "active QP in RTS");
		rdma_ack_cm_event(expect(sch, RDMA_CM_EVENT_ESTABLISHED));
		{
			struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 16};
			struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
						 .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED},
					   *bad;

			CHECK(ibv_post_send(c->qp, &wr, &bad) == 0, "post_send");
		}
		do
			n = ibv_poll_cq(s->recv_cq, 1, &wc);
		while (n == 0);
		CHECK(n == 1 && wc.status == IBV_WC_SUCCESS && strcmp(rbuf, buf) == 0, "the SEND arrived");
		CHECK(rdma_disconnect(c) == 0, "disconnect");
		rdma_ack_cm_event(expect(sch, RDMA_CM_EVENT_DISCONNECTED));
		/* The passive side's rdma_disconnect answers the DREQ. */
		CHECK(rdma_disconnect(s) == 0, "disconnect the passive side");
		rdma_ack_cm_event(expect(cch, RDMA_CM_EVENT_DISCONNECTED));
		ibv_dereg_mr(mr);
		rdma_destroy_qp(c);
		rdma_destroy_qp(s);
		CHECK(rdma_destroy_id(c) == 0 && rdma_destroy_id(s) == 0, "destroy");
	}
	CHECK(rdma_destroy_id(l) == 0, "destroy listener");
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

static void fork_test(int port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_in a = addr(server_ip, port);
	int status;
	pid_t pid;

	CHECK(ch && rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "parent's id");
	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		struct rdma_event_channel *cch;
		struct rdma_cm_id *cid;

		/* The parent's ID is the parent's. */
		CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) == -1 && errno == EIO,
		      "child on the parent's id");
		cch = rdma_create_event_channel();
		CHECK(cch && rdma_create_id(cch, &cid, NULL, RDMA_PS_TCP) == 0, "child's id");
		CHECK(rdma_resolve_addr(cid, NULL, (struct sockaddr *)&a, 2000) == 0, "child resolves");
		rdma_ack_cm_event(expect(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
		CHECK(rdma_destroy_id(cid) == 0, "child destroys");
		rdma_destroy_event_channel(cch);
		_exit(0);
	}
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "child failed");
	/* The parent's ID still works. */
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) == 0, "parent resolves");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

/* orphan: Debian's rping (rdma-core 44) leaves its CM thread blocked in
 * rdma_get_cm_event when it destroys its ID and the event channel, and the
 * connection's DISCONNECTED may arrive after the ID is gone. On the
 * kernel's rdma_cm that thread waits until the process exits. libgoroce
 * once dropped the destroyed ID's event and read the channel's descriptor
 * again after rdma_destroy_event_channel had closed it: EBADF, and rping
 * exited with 255 (1 run in about 300 under load). A reader inside
 * rdma_get_cm_event keeps the channel's descriptor open and waiting. */
static struct {
	struct rdma_event_channel *ch;
	pid_t tid;
	volatile int returned;
} orphan;

static void *orphan_reader(void *arg)
{
	struct rdma_cm_event *ev;

	(void)arg;
	orphan.tid = (pid_t)syscall(SYS_gettid);
	orphan.returned = rdma_get_cm_event(orphan.ch, &ev) == 0 ? 1 : 2;
	return NULL;
}

/* in_recv reports whether thread tid is blocked in recvfrom(2). */
static int in_recv(pid_t tid)
{
	char path[64];
	long nr = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%ld", &nr) != 1)
		nr = -1;
	fclose(f);
	return nr == SYS_recvfrom;
}

static void orphan_test(int port)
{
	struct rdma_cm_id *id;
	struct sockaddr_in a = addr(server_ip, port);
	pthread_t t;
	int fd, i;

	orphan.ch = rdma_create_event_channel();
	CHECK(orphan.ch && rdma_create_id(orphan.ch, &id, NULL, RDMA_PS_TCP) == 0, "id");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) == 0, "resolve_addr");
	rdma_ack_cm_event(expect(orphan.ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(pthread_create(&t, NULL, orphan_reader, NULL) == 0, "pthread_create");
	for (i = 0; i < 10000 && !(orphan.tid && in_recv(orphan.tid)); i++)
		usleep(1000);
	CHECK(orphan.tid && in_recv(orphan.tid), "the reader never blocked in recv");
	fd = orphan.ch->fd;
	CHECK(rdma_destroy_id(id) == 0, "destroy id");
	rdma_destroy_event_channel(orphan.ch);
	/* The descriptor stays the reader's: closed, its next read would fail
	 * (or read a file that took the number). */
	CHECK(fcntl(fd, F_GETFD) != -1, "the channel's descriptor was closed under its reader");
	usleep(100000);
	CHECK(!orphan.returned, "the reader returned (%s)", orphan.returned == 1 ? "an event" : "an error");
	/* exit with the reader still waiting, as rping does */
}

int main(int argc, char **argv)
{
	int port;

	if (argc != 3 && argc != 5) {
		fprintf(stderr, "usage: cmharness errors|connect|fork|orphan PORT [SERVER_IP CLIENT_IP]\n");
		return 2;
	}
	if (argc == 5) {
		server_ip = argv[3];
		client_ip = argv[4];
	}
	mode = argv[1];
	port = atoi(argv[2]);
	if (strcmp(mode, "errors") == 0)
		errors(port);
	else if (strcmp(mode, "connect") == 0)
		connect_test(port);
	else if (strcmp(mode, "fork") == 0)
		fork_test(port);
	else if (strcmp(mode, "orphan") == 0)
		orphan_test(port);
	else
		return 2;
	printf("%s: ok\n", mode);
	return 0;
}
