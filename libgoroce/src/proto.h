/*
 * proto.h: the contract between libgoroce.so (the shim inside an application)
 * and goroce-nic (the software NIC daemon).
 *
 * Two channels:
 *  - control: request/response messages on a SOCK_SEQPACKET Unix socket, one
 *    connection per open device context, file descriptors in SCM_RIGHTS;
 *  - data: rings in shared memory (memfds created and sealed by the daemon),
 *    with eventfd doorbells the shim rings only when the daemon sleeps.
 *
 * Every structure here is little-endian, naturally aligned and has explicit
 * padding, so the Go side (internal/nicproto) encodes the same bytes with
 * encoding/binary; a Go test compiles this header and compares every size and
 * offset. Change both sides together and bump GR_PROTO_VERSION.
 */
#ifndef GOROCE_PROTO_H
#define GOROCE_PROTO_H

#include <stdint.h>

#define GR_PROTO_VERSION 2
#define GR_NAME_MAX 64
#define GR_MAX_MSG 65536	/* largest control message, either direction */
#define GR_MAX_FDS 32		/* file descriptors per message */
#define GR_MAX_PIECES 1000	/* pieces of one memory registration */

/* Control operations. */
enum gr_op {
	GR_OP_HELLO = 1,
	GR_OP_LIST,
	GR_OP_ENSURE,
	GR_OP_OPEN,
	GR_OP_ALLOC_PD,
	GR_OP_DEALLOC_PD,
	GR_OP_REG_MR,
	GR_OP_DEREG_MR,
	GR_OP_CREATE_CHANNEL,
	GR_OP_DESTROY_CHANNEL,
	GR_OP_CREATE_CQ,
	GR_OP_DESTROY_CQ,
	GR_OP_CREATE_SRQ,
	GR_OP_MODIFY_SRQ,
	GR_OP_QUERY_SRQ,
	GR_OP_DESTROY_SRQ,
	GR_OP_CREATE_QP,
	GR_OP_MODIFY_QP,
	GR_OP_QUERY_QP,
	GR_OP_DESTROY_QP,
	GR_OP_CREATE_AH,
	GR_OP_DESTROY_AH,
	GR_OP_REREG_MR,
	GR_OP_RESIZE_CQ,
	GR_OP_ALLOC_MW,
	GR_OP_DEALLOC_MW,
	/* The connection manager, on a connection of its own (rdmacm.c):
	 * each request is a gr_cm_req, each response a gr_cm_resp. */
	GR_OP_CM_CREATE_CHANNEL, /* -> 1 fd: the event socket; info.id = channel handle */
	GR_OP_CM_DESTROY_CHANNEL, /* id = channel */
	GR_OP_CM_CREATE_ID,	  /* arg = channel, arg2 = port space */
	GR_OP_CM_DESTROY_ID,
	GR_OP_CM_BIND_ADDR,	  /* src */
	GR_OP_CM_RESOLVE_ADDR,	  /* src (family 0: none), dst, arg = timeout ms */
	GR_OP_CM_RESOLVE_ROUTE,	  /* arg = timeout ms */
	GR_OP_CM_LISTEN,	  /* arg = backlog */
	GR_OP_CM_CONNECT,	  /* param */
	GR_OP_CM_ACCEPT,	  /* param; arg = 1: no parameters (NULL) */
	GR_OP_CM_REJECT,	  /* param.private_data */
	GR_OP_CM_DISCONNECT,
	GR_OP_CM_ESTABLISH,
	GR_OP_CM_INIT_QP_ATTR,	  /* arg = state -> attr, mask */
	GR_OP_CM_SET_OPTION,	  /* arg = level, arg2 = name, arg3 = value */
	GR_OP_CM_MIGRATE,	  /* arg = channel */
	GR_OP_CM_QUERY,		  /* -> info */
	GR_OP_MAX
};

/* Every message starts with this header; a response echoes op and carries
 * an errno value in status (0: success). len counts the header. */
struct gr_hdr {
	uint32_t op;
	int32_t status;
	uint32_t len;
	uint32_t nfds;
};

struct gr_hello_req {
	uint32_t version;
	uint32_t pid;
};

struct gr_hello_resp {
	uint32_t version;
	uint32_t page_size; /* the daemon's page size */
};

/* One device, as LIST, ENSURE and OPEN describe it. gid is GID index 1 (the
 * bound address), guid the node GUID as a host-order number. */
struct gr_dev_info {
	char name[GR_NAME_MAX];
	uint8_t gid[16];
	uint64_t guid;
	uint32_t index;
	uint32_t udp_port;
};

/* LIST response: struct gr_list_resp then count struct gr_dev_info. */
struct gr_list_resp {
	uint32_t count;
	uint32_t pad;
};

/* ENSURE: open a device on this address unless one is open (goroce-exec). */
struct gr_ensure_req {
	uint8_t gid[16];
};

struct gr_dev_attr {
	char fw_ver[64];
	uint64_t node_guid;
	uint64_t sys_image_guid;
	uint64_t max_mr_size;
	uint64_t page_size_cap;
	uint64_t device_cap_flags;
	uint32_t vendor_id;
	uint32_t vendor_part_id;
	uint32_t hw_ver;
	uint32_t max_qp;
	uint32_t max_qp_wr;
	uint32_t max_sge;
	uint32_t max_sge_rd;
	uint32_t max_cq;
	uint32_t max_cqe;
	uint32_t max_mr;
	uint32_t max_pd;
	uint32_t max_qp_rd_atom;
	uint32_t max_qp_init_rd_atom;
	uint32_t max_res_rd_atom;
	uint32_t atomic_cap;
	uint32_t max_mw;
	uint32_t max_ah;
	uint32_t max_srq;
	uint32_t max_srq_wr;
	uint32_t max_srq_sge;
	uint32_t max_pkeys;
	uint32_t local_ca_ack_delay;
	uint32_t phys_port_cnt;
	uint32_t max_inline_data;
	uint32_t num_comp_vectors;
	uint32_t pad;
};

struct gr_port_attr {
	uint32_t state;
	uint32_t max_mtu;
	uint32_t active_mtu;
	uint32_t gid_tbl_len;
	uint32_t port_cap_flags;
	uint32_t max_msg_sz;
	uint32_t bad_pkey_cntr;
	uint32_t qkey_viol_cntr;
	uint32_t pkey_tbl_len;
	uint32_t lid;
	uint32_t sm_lid;
	uint32_t lmc;
	uint32_t max_vl_num;
	uint32_t sm_sl;
	uint32_t subnet_timeout;
	uint32_t init_type_reply;
	uint32_t active_width;
	uint32_t active_speed;
	uint32_t phys_state;
	uint32_t link_layer;
};

#define GR_MAX_GIDS 4

struct gr_open_req {
	char name[GR_NAME_MAX];
};

/* OPEN response; one fd: the read end of the async event pipe. */
struct gr_open_resp {
	struct gr_dev_info info;
	struct gr_dev_attr attr;
	struct gr_port_attr port;
	uint8_t gids[GR_MAX_GIDS][16];
	uint32_t gid_types[GR_MAX_GIDS];
	uint32_t gid_count;
	uint32_t pkey;
};

/* Requests that name one object, and responses that return one. */
struct gr_handle {
	uint32_t handle;
	uint32_t pad;
};

/* A piece of a registration: length bytes at offset in the file descriptor
 * number fd_index of the message. Pieces are contiguous from view_start. */
struct gr_piece {
	uint32_t fd_index;
	uint32_t writable;
	uint64_t offset;
	uint64_t length;
};

/* REG_MR and REREG_MR: then npieces struct gr_piece; npieces distinct fds. */
struct gr_reg_mr_req {
	uint32_t handle; /* REREG_MR: the region; REG_MR: 0 */
	uint32_t pd;
	uint32_t access;
	uint32_t flags; /* REREG_MR: enum ibv_rereg_mr_flags */
	uint64_t addr;
	uint64_t length;
	uint64_t iova;
	uint64_t view_start;
	uint32_t npieces;
	uint32_t pad;
};

struct gr_reg_mr_resp {
	uint32_t handle;
	uint32_t lkey;
	uint32_t rkey;
	uint32_t pad;
};

/* CREATE_CHANNEL response: struct gr_handle; one fd: the read end of the
 * pipe on which the daemon writes struct gr_comp_event records. */
struct gr_comp_event {
	uint64_t cq_handle;
};

/* Async event pipe record (OPEN's fd). */
enum gr_obj_kind {
	GR_OBJ_NONE = 0,
	GR_OBJ_CQ = 1,
	GR_OBJ_QP = 2,
	GR_OBJ_SRQ = 3,
};

struct gr_async_event {
	uint32_t event_type; /* enum ibv_event_type */
	uint32_t kind;	     /* enum gr_obj_kind */
	uint64_t handle;     /* or the port number for port events */
};

struct gr_create_cq_req {
	uint32_t cqe;
	uint32_t channel; /* 0: none */
	uint32_t comp_vector;
	uint32_t pad;
};

/* CREATE_CQ and RESIZE_CQ response; one fd: the ring memfd. */
struct gr_create_cq_resp {
	uint32_t handle;
	uint32_t cqe;	  /* ibv_cq.cqe */
	uint32_t entries; /* ring entries, a power of two */
	uint32_t pad;
	uint64_t ring_size;
};

struct gr_resize_cq_req {
	uint32_t handle;
	uint32_t cqe;
};

struct gr_ah_attr {
	uint8_t dgid[16];
	uint32_t flow_label;
	uint32_t sgid_index;
	uint32_t hop_limit;
	uint32_t traffic_class;
	uint32_t sl;
	uint32_t static_rate;
	uint32_t is_global;
	uint32_t port_num;
	uint32_t dlid;
	uint32_t src_path_bits;
};

/* ALLOC_MW (DEALLOC_MW takes a struct gr_handle). */
struct gr_alloc_mw_req {
	uint32_t pd;
	uint32_t type; /* enum ibv_mw_type */
};

struct gr_alloc_mw_resp {
	uint32_t handle;
	uint32_t rkey;
};

struct gr_create_ah_req {
	uint32_t pd;
	uint32_t pad;
	struct gr_ah_attr attr;
};

struct gr_qp_cap {
	uint32_t max_send_wr;
	uint32_t max_recv_wr;
	uint32_t max_send_sge;
	uint32_t max_recv_sge;
	uint32_t max_inline_data;
	uint32_t pad;
};

struct gr_create_qp_req {
	uint32_t pd;
	uint32_t send_cq;
	uint32_t recv_cq;
	uint32_t srq; /* 0: none */
	uint32_t qp_type;
	uint32_t sq_sig_all;
	struct gr_qp_cap cap;
};

/* CREATE_QP response; two fds: the ring memfd and the doorbell eventfd. */
struct gr_create_qp_resp {
	uint32_t handle;
	uint32_t qp_num;
	struct gr_qp_cap cap;
	uint32_t sq_entries;
	uint32_t rq_entries;
	uint32_t sq_stride;
	uint32_t rq_stride;
	uint64_t sq_offset; /* ring header, then the slots */
	uint64_t rq_offset;
	uint64_t ring_size;
};

struct gr_qp_attr {
	uint32_t qp_state;
	uint32_t cur_qp_state;
	uint32_t path_mtu;
	uint32_t path_mig_state;
	uint32_t qkey;
	uint32_t rq_psn;
	uint32_t sq_psn;
	uint32_t dest_qp_num;
	uint32_t qp_access_flags;
	uint32_t pkey_index;
	uint32_t en_sqd_async_notify;
	uint32_t sq_draining;
	uint32_t max_rd_atomic;
	uint32_t max_dest_rd_atomic;
	uint32_t min_rnr_timer;
	uint32_t port_num;
	uint32_t timeout;
	uint32_t retry_cnt;
	uint32_t rnr_retry;
	uint32_t rate_limit;
	struct gr_qp_cap cap;
	struct gr_ah_attr ah_attr;
};

struct gr_modify_qp_req {
	uint32_t handle;
	uint32_t mask;
	struct gr_qp_attr attr;
};

struct gr_query_qp_resp {
	struct gr_qp_attr attr;
	uint32_t sq_sig_all;
	uint32_t pad;
};

struct gr_create_srq_req {
	uint32_t pd;
	uint32_t max_wr;
	uint32_t max_sge;
	uint32_t srq_limit;
};

/* CREATE_SRQ response; two fds: ring memfd, doorbell eventfd. */
struct gr_create_srq_resp {
	uint32_t handle;
	uint32_t max_wr;
	uint32_t max_sge;
	uint32_t entries;
	uint32_t stride;
	uint32_t pad;
	uint64_t ring_size;
};

struct gr_modify_srq_req {
	uint32_t handle;
	uint32_t mask;
	uint32_t max_wr;
	uint32_t srq_limit;
};

struct gr_query_srq_resp {
	uint32_t max_wr;
	uint32_t max_sge;
	uint32_t srq_limit;
	uint32_t pad;
};

/*
 * Shared rings.
 *
 * A work queue (send queue, receive queue, SRQ) is a header followed by
 * entries slots of stride bytes. The shim writes slot prod % entries and then
 * publishes prod; the daemon takes slots up to prod and publishes cons, then
 * done as their completions reach the CQ ring (SQ, RQ: the sequence number
 * after the last completed one; SRQ: a count). The shim keeps
 * prod - done <= the queue's capacity, so a slot is always free again before
 * it is needed. need_doorbell is set by the daemon just before it sleeps: the
 * shim then writes the queue's eventfd after publishing prod.
 */
struct gr_wq_hdr {
	uint64_t prod;
	uint8_t pad0[56];
	uint64_t cons;
	uint64_t done;
	uint32_t need_doorbell;
	uint32_t pad1;
	uint8_t pad2[40];
};

struct gr_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

/* A send slot: this header, max_send_sge struct gr_sge, then the inline area
 * (max_inline_data bytes) holding the data of an IBV_SEND_INLINE request.
 * opcode is enum ibv_wr_opcode; the fields each opcode uses:
 *  - RDMA WRITE(+IMM), READ: rkey, remote_addr (imm_data);
 *  - SEND(+IMM, +INV): imm_data (host order) or the rkey to invalidate, and
 *    on UD ah, remote_qpn, remote_qkey;
 *  - CMP_AND_SWP, FETCH_AND_ADD: rkey, remote_addr, compare_add, swap;
 *  - ATOMIC_WRITE: rkey, remote_addr, the 8 bytes in compare_add (memory
 *    order);
 *  - LOCAL_INV: imm_data = the rkey to invalidate;
 *  - BIND_MW: mw (the window), rkey (its rkey after the bind), mr (the
 *    region; 0 unbinds a type 1 window), remote_addr and length (the
 *    window's bytes), access (its rights). */
struct gr_swqe {
	uint64_t wr_id;
	uint32_t opcode;
	uint32_t send_flags;
	uint32_t num_sge;
	uint32_t inline_len;
	uint32_t imm_data;
	uint32_t rkey;
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	uint64_t length; /* BIND_MW */
	uint32_t ah;
	uint32_t remote_qpn;
	uint32_t remote_qkey;
	uint32_t mw;
	uint32_t mr;
	uint32_t access;
};

/* A receive slot: this header, then max_recv_sge struct gr_sge. */
struct gr_rwqe {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t pad;
};

/*
 * A completion queue ring: this header, then entries struct gr_cqe. The
 * daemon writes entries and publishes prod; the shim consumes and publishes
 * cons. arm is the pending ibv_req_notify_cq request (0, GR_ARM_NEXT or
 * GR_ARM_SOLICITED), which the daemon clears when it writes the event.
 */
struct gr_cq_hdr {
	uint64_t prod;
	uint8_t pad0[56];
	uint64_t cons;
	uint8_t pad1[56];
	uint32_t arm;
	uint32_t overrun;
	uint8_t pad2[56];
};

#define GR_ARM_NEXT 1
#define GR_ARM_SOLICITED 2

/* A completion: struct ibv_wc's layout (imm_data in network order), padded
 * to 64 bytes; solicited (past struct ibv_wc) marks a receive of a message
 * with the Solicited Event bit. */
struct gr_cqe {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm_data;
	uint32_t qp_num;
	uint32_t src_qp;
	uint32_t wc_flags;
	uint16_t pkey_index;
	uint16_t slid;
	uint8_t sl;
	uint8_t dlid_path_bits;
	uint8_t pad0[2];
	uint8_t solicited;
	uint8_t pad[15];
};

/* The connection manager. Addresses: AF_INET (address in the first 4
 * bytes) or AF_INET6, port in host byte order. */
#define GR_CM_PRIVATE_MAX 256

struct gr_cm_addr {
	uint16_t family;
	uint16_t port;
	uint32_t scope_id;
	uint8_t addr[16];
};

/* struct rdma_conn_param and struct rdma_ud_param in one. */
struct gr_cm_param {
	uint32_t private_data_len;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t flow_control;
	uint8_t retry_count;
	uint8_t rnr_retry_count;
	uint8_t srq;
	uint16_t pad;
	uint32_t qp_num;
	uint32_t qkey;
	struct gr_ah_attr ah_attr;
	uint8_t private_data[GR_CM_PRIVATE_MAX];
};

struct gr_cm_req {
	uint32_t id;
	uint32_t arg;
	uint32_t arg2;
	uint32_t arg3;
	struct gr_cm_addr src;
	struct gr_cm_addr dst;
	struct gr_cm_param param;
};

/* An ID: handle, device index (-1: none yet), port space, addresses. */
struct gr_cm_id_info {
	uint32_t id;
	int32_t device;
	uint32_t ps;
	uint32_t qp_type;
	struct gr_cm_addr src;
	struct gr_cm_addr dst;
};

struct gr_cm_resp {
	struct gr_cm_id_info info;
	uint32_t mask;
	uint32_t pad;
	struct gr_qp_attr attr;
};

/* One event, as read from the event channel's socket (no header). info is
 * the event's ID (a connection request's new one); listen the listener. */
struct gr_cm_event {
	uint32_t type;
	int32_t status;
	uint32_t listen;
	uint32_t pad;
	struct gr_cm_id_info info;
	struct gr_cm_param param;
};

#endif
