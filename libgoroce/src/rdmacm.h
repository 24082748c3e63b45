/*
 * rdmacm.h: librdmacm on goroce (rdmacm*.c).
 *
 * libgoroce.so defines librdmacm's rdma_* ABI (RDMACM_1.0 ... 1.3), which
 * programs bind through the PLT, so the real librdmacm.so is loaded but
 * unused. The connection manager runs in goroce-nic (package cm) on the
 * daemon's devices: each rdma_* call is a request on the process's CM
 * connection, and each event channel is a socket whose other end the
 * daemon writes events to (rdma_event_channel.fd: poll and O_NONBLOCK
 * work). QPs stay the application's: as librdmacm does over the kernel's
 * rdma_ucm, this library moves them with rdma_init_qp_attr's attributes
 * (INIT at rdma_create_qp, RTR and RTS in rdma_accept and on the REP,
 * ERR at rdma_disconnect) and calls rdma_establish itself.
 */
#ifndef GOROCE_RDMACM_H
#define GOROCE_RDMACM_H

#include "shim.h"

#include <rdma/rdma_cma.h>

struct gr_cm_channel {
	struct rdma_event_channel ch;
	uint32_t handle;
	/* Threads inside rdma_get_cm_event (gr_cm_mu). A channel destroyed
	 * while one reads is left to them, its socket open (orphaned): see
	 * rdma_destroy_event_channel. */
	int readers;
	int orphaned;
};

struct gr_cm_id {
	struct rdma_cm_id id;
	uint32_t handle;
	int sync;		      /* a private channel: calls wait for their event */
	int device;		      /* the daemon's index, -1 before one is bound */
	int stale;		      /* inherited across fork */
	int own_cqs;		      /* send/recv CQs rdma_create_qp made */
	uint8_t initiator_depth;      /* a request's offer, for rdma_accept(NULL) */
	uint8_t responder_resources;
	struct ibv_qp_init_attr *qp_init_attr; /* rdma_create_ep's, for rdma_get_request */
	struct ibv_sa_path_rec path;
	pthread_cond_t cond;	      /* events_completed moved (cm_mu) */
	uint32_t events_reported;
	uint32_t events_completed;
	struct gr_cm_id *next;
};

/* An event as the application holds it. */
struct gr_cm_evt {
	struct rdma_cm_event ev;
	struct gr_cm_id *owner; /* the ID whose acknowledgement count it is */
	uint8_t private_data[GR_CM_PRIVATE_MAX];
};

static inline struct gr_cm_id *to_cm_id(struct rdma_cm_id *id)
{
	return container_of(id, struct gr_cm_id, id);
}

/* rdmacm.c, rdmacm_opt.c */
extern pthread_mutex_t gr_cm_mu;
int gr_cm_call(uint32_t op, struct gr_cm_req *req, struct gr_cm_resp *resp, int *rfd);
int gr_cm_id_call(struct gr_cm_id *p, uint32_t op, struct gr_cm_req *req);
void gr_cm_set_info(struct gr_cm_id *p, const struct gr_cm_id_info *in);
int gr_cm_err(int err); /* errno = err; return -1 (0 for 0) */
struct gr_cm_channel *gr_cm_channel_create(void);
struct gr_cm_id *gr_cm_id_find(uint32_t handle);
struct gr_cm_id *gr_cm_id_alloc(struct rdma_event_channel *channel, void *context,
				enum rdma_port_space ps, enum ibv_qp_type qp_type);
void gr_cm_id_register(struct gr_cm_id *p, const struct gr_cm_id_info *in);
int gr_cm_is_ud(struct rdma_cm_id *id);
int gr_cm_migrate(struct rdma_cm_id *id, struct rdma_event_channel *channel, int wait);
int gr_cm_create_sync_id(struct rdma_cm_id **id, enum rdma_port_space ps, enum ibv_qp_type t);

/* rdmacm_qp.c */
int gr_cm_modify_qp(struct gr_cm_id *p, enum ibv_qp_state state, int resp_res, int init_depth);
void gr_cm_qp_err(struct gr_cm_id *p);
struct ibv_pd *gr_cm_default_pd(struct ibv_context *c);

/* rdmacm_addr.c */
void gr_cm_to_addr(const struct sockaddr *sa, struct gr_cm_addr *o);
void gr_cm_from_addr(const struct gr_cm_addr *a, struct sockaddr_storage *o);
void gr_cm_to_gid(const struct gr_cm_addr *a, uint8_t *gid);
socklen_t gr_cm_addr_len(const struct sockaddr *sa);

/* The process's context of the daemon's device index, opened on first
 * use and kept, as librdmacm keeps its. */
struct ibv_context *gr_cm_context(int index);

#endif
