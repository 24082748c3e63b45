/*
 * unsupported.c: exported verbs goroce does not provide (yet), failing the
 * way libibverbs fails them on a provider that lacks them.
 */
#include "shim.h"

GR_EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)qp, (void)gid, (void)lid;
	return EOPNOTSUPP;
}

GR_EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)qp, (void)gid, (void)lid;
	return EOPNOTSUPP;
}

GR_EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	(void)cmd_fd;
	errno = EOPNOTSUPP;
	return NULL;
}

GR_EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	(void)context, (void)pd_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

GR_EXPORT void ibv_unimport_pd(struct ibv_pd *pd)
{
	(void)pd;
}

GR_EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	(void)pd, (void)mr_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

GR_EXPORT void ibv_unimport_mr(struct ibv_mr *mr)
{
	(void)mr;
}

GR_EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	(void)context, (void)dm_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

GR_EXPORT void ibv_unimport_dm(struct ibv_dm *dm)
{
	(void)dm;
}

GR_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp, (void)ece;
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

GR_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp, (void)ece;
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

GR_EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
					  uint8_t eth_mac[ETHERNET_LL_SIZE], uint16_t *vid)
{
	(void)context, (void)attr, (void)eth_mac, (void)vid;
	return -EOPNOTSUPP;
}

/* As for rxe: no promise that data lands in order. */
GR_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op,
					 uint32_t flags)
{
	(void)qp, (void)op, (void)flags;
	return 0;
}
