/*
 * cq_ex.c: extended CQs (ibv_create_cq_ex) and the extended poll API
 * (ibv_start_poll, ibv_next_poll, ibv_end_poll, ibv_wc_read_*).
 *
 * An extended CQ is an ordinary one (the same ring, which ibv_poll_cq also
 * reads) with the function pointers of struct ibv_cq_ex filled in. A poll
 * holds the CQ's lock from a successful ibv_start_poll to ibv_end_poll and
 * reads the entry under the ring's consumer index in place; ibv_next_poll
 * and ibv_end_poll consume it. The fields goroce's completions carry are
 * IBV_WC_STANDARD_FLAGS; timestamps, VLANs, flow tags and tag matching are
 * refused with EOPNOTSUPP.
 */
#include "shim.h"

#include <string.h>

static inline struct gr_cq *ex_cq(struct ibv_cq_ex *c)
{
	return container_of(c, struct gr_cq, cq);
}

/* set_current makes the entry under cons the one read, or reports ENOENT. */
static int set_current(struct gr_cq *cq)
{
	uint64_t prod = __atomic_load_n(&cq->hdr->prod, __ATOMIC_ACQUIRE);

	if (cq->cons == prod) {
		cq->cur = NULL;
		return ENOENT;
	}
	cq->cur = &cq->cqes[cq->cons & cq->mask];
	cq->cq.wr_id = cq->cur->wr_id;
	cq->cq.status = (enum ibv_wc_status)cq->cur->status;
	return 0;
}

static int start_poll(struct ibv_cq_ex *c, struct ibv_poll_cq_attr *attr)
{
	struct gr_cq *cq = ex_cq(c);

	if (attr->comp_mask)
		return EINVAL;
	if (unlikely(to_ctx(c->context)->stale))
		return EIO;
	pthread_spin_lock(&cq->lock);
	if (set_current(cq)) {
		pthread_spin_unlock(&cq->lock);
		gr_empty_poll(cq);
		return gr_gone(to_ctx(c->context)) ? EIO : ENOENT;
	}
	cq->polling = 1;
	cq->empty_polls = 0;
	return 0;
}

static void consume(struct gr_cq *cq)
{
	if (cq->cur) {
		cq->cons++;
		cq->cur = NULL;
		__atomic_store_n(&cq->hdr->cons, cq->cons, __ATOMIC_RELEASE);
	}
}

static int next_poll(struct ibv_cq_ex *c)
{
	struct gr_cq *cq = ex_cq(c);

	if (!cq->polling)
		return EINVAL;
	consume(cq);
	return set_current(cq);
}

static void end_poll(struct ibv_cq_ex *c)
{
	struct gr_cq *cq = ex_cq(c);

	if (!cq->polling)
		return; /* after a start_poll that found nothing */
	consume(cq);
	cq->polling = 0;
	pthread_spin_unlock(&cq->lock);
}

static enum ibv_wc_opcode read_opcode(struct ibv_cq_ex *c)
{
	return (enum ibv_wc_opcode)ex_cq(c)->cur->opcode;
}

static uint32_t read_vendor_err(struct ibv_cq_ex *c)
{
	return ex_cq(c)->cur->vendor_err;
}

static uint32_t read_byte_len(struct ibv_cq_ex *c)
{
	return ex_cq(c)->cur->byte_len;
}

/* imm_data, or the invalidated rkey (host order) of a SEND_WITH_INV, as
 * ibv_wc's union holds them. */
static __be32 read_imm_data(struct ibv_cq_ex *c)
{
	return (__be32)ex_cq(c)->cur->imm_data;
}

static uint32_t read_qp_num(struct ibv_cq_ex *c)
{
	return ex_cq(c)->cur->qp_num;
}

static uint32_t read_src_qp(struct ibv_cq_ex *c)
{
	return ex_cq(c)->cur->src_qp;
}

static unsigned int read_wc_flags(struct ibv_cq_ex *c)
{
	return ex_cq(c)->cur->wc_flags;
}

static uint32_t read_slid(struct ibv_cq_ex *c)
{
	return ex_cq(c)->cur->slid;
}

static uint8_t read_sl(struct ibv_cq_ex *c)
{
	return ex_cq(c)->cur->sl;
}

static uint8_t read_dlid_path_bits(struct ibv_cq_ex *c)
{
	return ex_cq(c)->cur->dlid_path_bits;
}

#define GR_WC_FLAGS IBV_WC_STANDARD_FLAGS

struct ibv_cq_ex *gr_create_cq_ex(struct ibv_context *c, struct ibv_cq_init_attr_ex *attr)
{
	struct gr_cq *cq;

	if (attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) ||
	    attr->wc_flags & ~(uint64_t)GR_WC_FLAGS ||
	    ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	     attr->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) &&
	    (!attr->parent_domain || !gr_is_parent_domain(attr->parent_domain) ||
	     attr->parent_domain->context != c)) {
		errno = EINVAL; /* the PD of a CQ must be a parent domain */
		return NULL;
	}
	if (attr->cqe > INT32_MAX || attr->comp_vector > INT32_MAX) {
		errno = EINVAL;
		return NULL;
	}
	cq = gr_create_cq(c, (int)attr->cqe, attr->cq_context, attr->channel, (int)attr->comp_vector);
	if (!cq)
		return NULL;
	cq->cq.start_poll = start_poll;
	cq->cq.next_poll = next_poll;
	cq->cq.end_poll = end_poll;
	cq->cq.read_opcode = read_opcode;
	cq->cq.read_vendor_err = read_vendor_err;
	cq->cq.read_byte_len = read_byte_len;
	cq->cq.read_imm_data = read_imm_data;
	cq->cq.read_qp_num = read_qp_num;
	cq->cq.read_src_qp = read_src_qp;
	cq->cq.read_wc_flags = read_wc_flags;
	cq->cq.read_slid = read_slid;
	cq->cq.read_sl = read_sl;
	cq->cq.read_dlid_path_bits = read_dlid_path_bits;
	return &cq->cq;
}
