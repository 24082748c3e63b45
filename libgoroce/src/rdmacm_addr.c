/*
 * rdmacm_addr.c: addresses: rdma_getaddrinfo (IP names and numbers
 * through getaddrinfo; goroce has no AF_IB and no ibacm), and the
 * conversions between sockaddrs and the daemon's gr_cm_addr.
 */
#include "rdmacm.h"

#include <netdb.h>
#include <stdlib.h>
#include <string.h>

void gr_cm_to_addr(const struct sockaddr *sa, struct gr_cm_addr *o)
{
	memset(o, 0, sizeof(*o));
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		o->family = AF_INET;
		o->port = be16toh(in->sin_port);
		memcpy(o->addr, &in->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		o->family = AF_INET6;
		o->port = be16toh(in6->sin6_port);
		o->scope_id = in6->sin6_scope_id;
		memcpy(o->addr, &in6->sin6_addr, 16);
	}
}

void gr_cm_from_addr(const struct gr_cm_addr *a, struct sockaddr_storage *o)
{
	memset(o, 0, sizeof(*o));
	if (a->family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)o;

		in->sin_family = AF_INET;
		in->sin_port = htobe16(a->port);
		memcpy(&in->sin_addr, a->addr, 4);
	} else if (a->family == AF_INET6) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)o;

		in6->sin6_family = AF_INET6;
		in6->sin6_port = htobe16(a->port);
		in6->sin6_scope_id = a->scope_id;
		memcpy(&in6->sin6_addr, a->addr, 16);
	}
}

/* gr_cm_to_gid: a RoCEv2 GID is the IPv6 address, or the IPv4-mapped one. */
void gr_cm_to_gid(const struct gr_cm_addr *a, uint8_t *gid)
{
	memset(gid, 0, 16);
	if (a->family == AF_INET6) {
		memcpy(gid, a->addr, 16);
		return;
	}
	gid[10] = gid[11] = 0xff;
	memcpy(gid + 12, a->addr, 4);
}

socklen_t gr_cm_addr_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static struct sockaddr *dup_addr(const struct sockaddr *sa, socklen_t *len)
{
	struct sockaddr *o;

	*len = gr_cm_addr_len(sa);
	o = gr_malloc(*len);
	if (o)
		memcpy(o, sa, *len);
	return o;
}

GR_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	struct rdma_addrinfo *next;

	for (; res; res = next) {
		next = res->ai_next;
		gr_free(res->ai_src_addr);
		gr_free(res->ai_dst_addr);
		gr_free(res->ai_src_canonname);
		gr_free(res->ai_dst_canonname);
		gr_free(res->ai_route);
		gr_free(res->ai_connect);
		gr_free(res);
	}
}

/* rdma_getaddrinfo resolves node and service as librdmacm does for IP
 * addresses: with RAI_PASSIVE the source (node, or the wildcard), else
 * the destination (and the hints' source, if any). It returns
 * getaddrinfo's error codes (gai_strerror), or -1 with errno. */
GR_EXPORT int rdma_getaddrinfo(const char *node, const char *service,
			       const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)
{
	struct addrinfo ah, *ai = NULL;
	struct rdma_addrinfo *r;
	int passive = hints && (hints->ai_flags & RAI_PASSIVE), ret;
	socklen_t len;

	if (!res || (!node && !service))
		return gr_cm_err(EINVAL);
	if (hints && (hints->ai_family == AF_IB))
		return gr_cm_err(EAFNOSUPPORT);
	memset(&ah, 0, sizeof(ah));
	ah.ai_socktype = SOCK_STREAM; /* one entry per address */
	ah.ai_flags = (passive ? AI_PASSIVE : 0) |
		      (hints && (hints->ai_flags & RAI_NUMERICHOST) ? AI_NUMERICHOST : 0);
	ah.ai_family = hints ? hints->ai_family : 0;
	ret = getaddrinfo(node, service, &ah, &ai);
	if (ret)
		return ret;
	r = gr_calloc(1, sizeof(*r));
	if (!r) {
		freeaddrinfo(ai);
		return gr_cm_err(ENOMEM);
	}
	r->ai_flags = hints ? hints->ai_flags : 0;
	r->ai_family = ai->ai_family;
	r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
	r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space
			   : r->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP
							: RDMA_PS_TCP;
	if (passive) {
		r->ai_src_addr = dup_addr(ai->ai_addr, &len);
		r->ai_src_len = len;
	} else {
		r->ai_dst_addr = dup_addr(ai->ai_addr, &len);
		r->ai_dst_len = len;
		if (hints && hints->ai_src_addr && hints->ai_src_len) {
			r->ai_src_addr = dup_addr(hints->ai_src_addr, &len);
			r->ai_src_len = len;
		}
	}
	freeaddrinfo(ai);
	if ((passive && !r->ai_src_addr) || (!passive && !r->ai_dst_addr)) {
		rdma_freeaddrinfo(r);
		return gr_cm_err(ENOMEM);
	}
	*res = r;
	return 0;
}
