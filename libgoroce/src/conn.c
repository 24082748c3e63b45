/*
 * conn.c: the control connection to goroce-nic. One SOCK_SEQPACKET
 * connection per open context (the daemon's session: closing it destroys
 * what the context created); requests are synchronous, file descriptors
 * travel in SCM_RIGHTS.
 */
#include "shim.h"

#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

void gr_debug(const char *fmt, ...)
{
	static int on = -1;
	va_list ap;

	if (on < 0) {
		const char *e = getenv("GOROCE_DEBUG");
		on = e && *e && strcmp(e, "0") != 0;
	}
	if (!on)
		return;
	va_start(ap, fmt);
	fprintf(stderr, "libgoroce: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* The daemon's address: $GOROCE_NIC_SOCKET ("@name" is abstract), else
 * "@goroce-nic.<uid>", as goroce-nic computes it. */
static socklen_t socket_addr(struct sockaddr_un *sa)
{
	const char *name = getenv("GOROCE_NIC_SOCKET");
	char buf[sizeof(sa->sun_path)];
	size_t n;

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (!name || !*name) {
		snprintf(buf, sizeof(buf), "@goroce-nic.%u", (unsigned)getuid());
		name = buf;
	}
	n = strlen(name);
	if (n >= sizeof(sa->sun_path))
		n = sizeof(sa->sun_path) - 1;
	memcpy(sa->sun_path, name, n);
	if (name[0] == '@') {
		sa->sun_path[0] = 0; /* abstract: no trailing NUL counted */
		return offsetof(struct sockaddr_un, sun_path) + n;
	}
	return offsetof(struct sockaddr_un, sun_path) + n + 1;
}

/* gr_connect opens a session with the daemon; returns the socket or -errno. */
int gr_connect(void)
{
	struct sockaddr_un sa;
	socklen_t len = socket_addr(&sa);
	struct gr_hello_req req = {.version = GR_PROTO_VERSION, .pid = (uint32_t)getpid()};
	struct gr_hello_resp resp;
	int fd, err;

	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, len) < 0) {
		err = errno;
		gr_debug("cannot reach goroce-nic at %s%s: %s (is it running? goroce-exec starts it)",
			 sa.sun_path[0] ? "" : "@", sa.sun_path + (sa.sun_path[0] ? 0 : 1),
			 strerror(err));
		close(fd);
		return -err;
	}
	err = gr_call_fd(fd, GR_OP_HELLO, &req, sizeof(req), NULL, 0, NULL, 0, &resp,
			 sizeof(resp), NULL, 0);
	if (err) {
		gr_debug("goroce-nic refused the session: %s", strerror(err));
		close(fd);
		return -err;
	}
	return fd;
}

static int send_msg(int fd, uint32_t op, const void *req, size_t reqlen, const void *extra,
		    size_t extralen, const int *fds, int nfds)
{
	struct gr_hdr h = {.op = op, .len = (uint32_t)(sizeof(h) + reqlen + extralen),
			   .nfds = (uint32_t)nfds};
	struct iovec iov[3] = {{&h, sizeof(h)}, {(void *)req, reqlen}, {(void *)extra, extralen}};
	union {
		char buf[CMSG_SPACE(sizeof(int) * GR_MAX_FDS)];
		struct cmsghdr align;
	} u;
	struct msghdr m = {.msg_iov = iov, .msg_iovlen = 3};
	ssize_t n;

	if (nfds > GR_MAX_FDS || h.len > GR_MAX_MSG)
		return E2BIG;
	if (nfds > 0) {
		struct cmsghdr *c;

		memset(&u, 0, sizeof(u));
		m.msg_control = u.buf;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	do
		n = sendmsg(fd, &m, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EPIPE ? EIO : errno;
	return (size_t)n == h.len ? 0 : EIO;
}

/* recv_msg reads the response to op into resp (resplen bytes expected when
 * the status is 0) and its descriptors into rfds; extra descriptors are
 * closed. */
static int recv_msg(int fd, uint32_t op, void *resp, size_t resplen, size_t *gotlen, int *rfds,
		    int nrfds)
{
	char *buf;
	union {
		char buf[CMSG_SPACE(sizeof(int) * GR_MAX_FDS)];
		struct cmsghdr align;
	} u;
	struct iovec iov;
	struct msghdr m;
	struct cmsghdr *c;
	struct gr_hdr h;
	int got = 0, i, err = EIO;
	ssize_t n;

	if (!(buf = gr_malloc(GR_MAX_MSG)))
		return ENOMEM;
	iov.iov_base = buf;
	iov.iov_len = GR_MAX_MSG;
	memset(&m, 0, sizeof(m));
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = u.buf;
	m.msg_controllen = sizeof(u.buf);
	do
		n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		goto out; /* the daemon went away */
	for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		int k, *p;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		p = (int *)CMSG_DATA(c);
		for (i = 0; i < k; i++) {
			if (got < nrfds)
				rfds[got++] = p[i];
			else
				close(p[i]);
		}
	}
	if ((size_t)n < sizeof(h))
		goto bad;
	memcpy(&h, buf, sizeof(h));
	if (h.op != op || h.len != (uint32_t)n)
		goto bad;
	if (h.status) {
		err = h.status;
		goto bad;
	}
	if (got < nrfds)
		goto bad;
	if (gotlen) {
		resplen = (size_t)n - sizeof(h) < resplen ? (size_t)n - sizeof(h) : resplen;
		*gotlen = resplen;
	} else if ((size_t)n - sizeof(h) < resplen) {
		goto bad;
	}
	memcpy(resp, buf + sizeof(h), resplen);
	gr_free(buf);
	return 0;
bad:
	for (i = 0; i < got; i++)
		close(rfds[i]);
out:
	gr_free(buf);
	return err;
}

int gr_call_fd(int fd, uint32_t op, const void *req, size_t reqlen, const void *extra,
	       size_t extralen, const int *fds, int nfds, void *resp, size_t resplen,
	       int *rfds, int nrfds)
{
	int err = send_msg(fd, op, req, reqlen, extra, extralen, fds, nfds);

	if (err)
		return err;
	return recv_msg(fd, op, resp, resplen, NULL, rfds, nrfds);
}

int gr_call_var(int fd, uint32_t op, const void *req, size_t reqlen, void *resp, size_t max,
		size_t *gotlen)
{
	int err = send_msg(fd, op, req, reqlen, NULL, 0, NULL, 0);

	if (err)
		return err;
	return recv_msg(fd, op, resp, max, gotlen, NULL, 0);
}

int gr_call(struct gr_context *ctx, uint32_t op, const void *req, size_t reqlen,
	    const void *extra, size_t extralen, const int *fds, int nfds, void *resp,
	    size_t resplen, int *rfds, int nrfds)
{
	int err;

	if (gr_gone(ctx))
		return EIO;
	pthread_mutex_lock(&ctx->call_mu);
	err = gr_call_fd(ctx->sock, op, req, reqlen, extra, extralen, fds, nfds, resp, resplen,
			 rfds, nrfds);
	pthread_mutex_unlock(&ctx->call_mu);
	if (err == EIO || err == ECONNRESET)
		gr_check_daemon(ctx);
	return err;
}

/* gr_check_daemon marks the context dead if its connection to the daemon
 * is closed at the other end (the daemon exited or was killed): its verbs
 * then fail with EIO, polls with -1, and async_fd reports
 * IBV_EVENT_DEVICE_FATAL, instead of waiting forever for a NIC that is
 * gone. */
void gr_check_daemon(struct gr_context *ctx)
{
	struct pollfd p = {.fd = ctx->sock, .events = POLLRDHUP};

	if (ctx->stale || ctx->sock < 0)
		return;
	if (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR | POLLRDHUP))) {
		if (!__atomic_exchange_n(&ctx->dead, 1, __ATOMIC_RELAXED))
			gr_debug("goroce-nic went away: the device is dead");
	}
}

/* Objects that events name. */
void gr_obj_add(struct gr_context *ctx, struct gr_obj *o, uint32_t handle, uint32_t kind,
		void *ptr)
{
	o->handle = handle;
	o->kind = kind;
	o->ptr = ptr;
	pthread_mutex_lock(&ctx->obj_mu);
	o->next = ctx->objs;
	ctx->objs = o;
	pthread_mutex_unlock(&ctx->obj_mu);
}

void gr_obj_del(struct gr_context *ctx, struct gr_obj *o)
{
	struct gr_obj **p;

	pthread_mutex_lock(&ctx->obj_mu);
	for (p = &ctx->objs; *p; p = &(*p)->next) {
		if (*p == o) {
			*p = o->next;
			break;
		}
	}
	pthread_mutex_unlock(&ctx->obj_mu);
}

/* gr_obj_find returns the object; the caller holds ctx->obj_mu. */
void *gr_obj_find(struct gr_context *ctx, uint32_t handle, uint32_t kind)
{
	struct gr_obj *o;

	for (o = ctx->objs; o; o = o->next)
		if (o->handle == handle && o->kind == kind)
			return o->ptr;
	return NULL;
}
