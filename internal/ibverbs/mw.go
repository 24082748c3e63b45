//go:build linux && cgo && goroce_ibverbs

package ibverbs

/*
#include <infiniband/verbs.h>

// ibv_alloc_mw and ibv_bind_mw are inline in verbs.h (through the
// context's ops): wrapped so Go calls them with scalars, the struct
// ibv_mw_bind on the C stack. gr_bind_mw returns the window's new rkey
// (the provider updates mw->rkey on a successful post) in *rkey.
static struct ibv_mw *gr_alloc_mw(struct ibv_pd *pd, int type) { return ibv_alloc_mw(pd, (enum ibv_mw_type)type); }

static int gr_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, uint64_t wr_id, unsigned flags, struct ibv_mr *mr,
		      uint64_t addr, uint64_t length, unsigned access, uint32_t *rkey)
{
	struct ibv_mw_bind b = {
		.wr_id = wr_id,
		.send_flags = flags,
		.bind_info = {.mr = mr, .addr = addr, .length = length, .mw_access_flags = access},
	};
	int ret = ibv_bind_mw(qp, mw, &b);

	*rkey = mw->rkey;
	return ret;
}

#cgo noescape gr_bind_mw
#cgo nocallback gr_bind_mw
*/
import "C"

// MW is a memory window (struct ibv_mw).
type MW struct{ mw *C.struct_ibv_mw }

// AllocMW allocates a window of type typ (1 or 2) in the PD (ibv_alloc_mw).
func (pd *PD) AllocMW(typ int) (*MW, error) {
	mw, err := C.gr_alloc_mw(pd.pd, C.int(typ))
	if mw == nil {
		return nil, nilErr("ibv_alloc_mw", err)
	}
	return &MW{mw: mw}, nil
}

// RKey is the window's rkey as libibverbs holds it: set by the allocation
// and by each type 1 bind posted (BindMW), not by a type 2 bind.
func (mw *MW) RKey() uint32 { return uint32(mw.mw.rkey) }

// Dealloc deallocates the window (ibv_dealloc_mw).
func (mw *MW) Dealloc() error { return errnoOf("ibv_dealloc_mw", C.ibv_dealloc_mw(mw.mw), nil) }

// BindMW posts a type 1 bind of mw on the QP's send queue (ibv_bind_mw) and
// returns the window's new rkey; mr nil with length 0 unbinds it. The
// caller serialises it with SetSend and PostSends on the QP.
func (qp *QP) BindMW(mw *MW, wrID uint64, flags int, mr *MR, addr, length uint64, access int) (uint32, error) {
	var cmr *C.struct_ibv_mr
	if mr != nil {
		cmr = mr.mr
	}
	var rkey C.uint32_t
	ret := C.gr_bind_mw(qp.qp, mw.mw, C.uint64_t(wrID), C.uint(flags), cmr, C.uint64_t(addr), C.uint64_t(length),
		C.uint(access), &rkey)
	if err := errnoOf("ibv_bind_mw", ret, nil); err != nil {
		return 0, err
	}
	return uint32(rkey), nil
}
