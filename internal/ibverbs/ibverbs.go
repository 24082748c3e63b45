//go:build linux && cgo && goroce_ibverbs

package ibverbs

/*
#cgo LDFLAGS: -libverbs
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

// The static inline verbs, and the macros over versioned symbols, are
// reached through these wrappers: cgo calls neither.

static int gr_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	return ibv_query_port(ctx, port, attr);
}

static int gr_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *e)
{
	return ibv_query_gid_ex(ctx, port, index, e, 0);
}

static struct ibv_mr *gr_reg_mr(struct ibv_pd *pd, uintptr_t addr, size_t length, int access)
{
	return ibv_reg_mr(pd, (void *)addr, length, access);
}

// ibv_rereg_mr returns an enum ibv_rereg_mr_err_code (0 or negative)
// and sets errno.
static int gr_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, uintptr_t addr, size_t length, int access)
{
	return ibv_rereg_mr(mr, flags, pd, (void *)addr, length, access);
}

static struct ibv_mr *gr_reg_mr_iova(struct ibv_pd *pd, uintptr_t addr, size_t length, uint64_t iova, int access)
{
	return ibv_reg_mr_iova(pd, (void *)addr, length, iova, access);
}

// A send work request of at most one SGE, passed as numbers: no Go
// pointer crosses, and nothing is allocated.
static int gr_post_send(struct ibv_qp *qp, uint64_t wr_id, int opcode, int flags,
			uint64_t addr, uint32_t length, uint32_t lkey, uint64_t raddr,
			uint32_t rkey, uint32_t imm, uint64_t compare_add, uint64_t swap)
{
	struct ibv_sge sge = {.addr = addr, .length = length, .lkey = lkey};
	struct ibv_send_wr wr, *bad;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.opcode = opcode;
	wr.send_flags = flags;
	if (length) {
		wr.sg_list = &sge;
		wr.num_sge = 1;
	}
	wr.imm_data = htonl(imm);
	if (opcode == IBV_WR_ATOMIC_CMP_AND_SWP || opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = compare_add;
		wr.wr.atomic.swap = swap;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	return ibv_post_send(qp, &wr, &bad);
}

static int gr_post_recv(struct ibv_qp *qp, uint64_t wr_id, uint64_t addr, uint32_t length,
			uint32_t lkey)
{
	struct ibv_sge sge = {.addr = addr, .length = length, .lkey = lkey};
	struct ibv_recv_wr wr, *bad;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	if (length) {
		wr.sg_list = &sge;
		wr.num_sge = 1;
	}
	return ibv_post_recv(qp, &wr, &bad);
}

static int gr_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, n, wc);
}

static uint32_t gr_wc_imm(const struct ibv_wc *wc)
{
	return ntohl(wc->imm_data);
}

static uint32_t gr_wc_inv(const struct ibv_wc *wc)
{
	return wc->invalidated_rkey;
}

static struct ibv_device *gr_device_at(struct ibv_device **list, int i)
{
	return list[i];
}

static void gr_set_gid(struct ibv_qp_attr *a, const uint8_t *gid)
{
	memcpy(a->ah_attr.grh.dgid.raw, gid, 16);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"
)

// Available reports whether this build has the libibverbs backend.
const Available = true

// Enumerations of verbs.h that callers need, with libibverbs' values.
const (
	QPTypeRC = C.IBV_QPT_RC
	QPTypeUC = C.IBV_QPT_UC
	QPTypeUD = C.IBV_QPT_UD

	QPStateReset = C.IBV_QPS_RESET
	QPStateInit  = C.IBV_QPS_INIT
	QPStateRTR   = C.IBV_QPS_RTR
	QPStateRTS   = C.IBV_QPS_RTS
	QPStateErr   = C.IBV_QPS_ERR

	AccessLocalWrite   = C.IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite  = C.IBV_ACCESS_REMOTE_WRITE
	AccessRemoteRead   = C.IBV_ACCESS_REMOTE_READ
	AccessRemoteAtomic = C.IBV_ACCESS_REMOTE_ATOMIC

	AttrState             = C.IBV_QP_STATE
	AttrCurState          = C.IBV_QP_CUR_STATE
	AttrAccessFlags       = C.IBV_QP_ACCESS_FLAGS
	AttrPKeyIndex         = C.IBV_QP_PKEY_INDEX
	AttrPort              = C.IBV_QP_PORT
	AttrQKey              = C.IBV_QP_QKEY
	AttrAV                = C.IBV_QP_AV
	AttrPathMTU           = C.IBV_QP_PATH_MTU
	AttrTimeout           = C.IBV_QP_TIMEOUT
	AttrRetryCnt          = C.IBV_QP_RETRY_CNT
	AttrRNRRetry          = C.IBV_QP_RNR_RETRY
	AttrRQPSN             = C.IBV_QP_RQ_PSN
	AttrMaxQPRdAtomic     = C.IBV_QP_MAX_QP_RD_ATOMIC
	AttrMinRNRTimer       = C.IBV_QP_MIN_RNR_TIMER
	AttrSQPSN             = C.IBV_QP_SQ_PSN
	AttrMaxDestRdAtomic   = C.IBV_QP_MAX_DEST_RD_ATOMIC
	AttrDestQPN           = C.IBV_QP_DEST_QPN
	WROpRDMAWrite         = C.IBV_WR_RDMA_WRITE
	WROpRDMAWriteWithImm  = C.IBV_WR_RDMA_WRITE_WITH_IMM
	WROpSend              = C.IBV_WR_SEND
	WROpSendWithImm       = C.IBV_WR_SEND_WITH_IMM
	WROpRDMARead          = C.IBV_WR_RDMA_READ
	WROpAtomicCmpAndSwp   = C.IBV_WR_ATOMIC_CMP_AND_SWP
	WROpAtomicFetchAndAdd = C.IBV_WR_ATOMIC_FETCH_AND_ADD

	SendSignaled = C.IBV_SEND_SIGNALED
	SendInline   = C.IBV_SEND_INLINE

	GIDTypeRoCEv2 = C.IBV_GID_TYPE_ROCE_V2

	WCSuccess     = C.IBV_WC_SUCCESS
	WCWithImm     = C.IBV_WC_WITH_IMM
	WCWithInv     = C.IBV_WC_WITH_INV
	PortActive    = C.IBV_PORT_ACTIVE
	LinkLayerEth  = C.IBV_LINK_LAYER_ETHERNET
	MTU1024       = C.IBV_MTU_1024
	MTU4096       = C.IBV_MTU_4096
	WCOpRecv      = C.IBV_WC_RECV
	WCOpRDMAWrite = C.IBV_WC_RDMA_WRITE
	WCOpRDMARead  = C.IBV_WC_RDMA_READ
	WCOpRecvImm   = C.IBV_WC_RECV_RDMA_WITH_IMM
)

// ErrNoDevice is returned by Open when no device has the name asked for.
var ErrNoDevice = errors.New("ibverbs: no such RDMA device")

// errnoOf turns a verbs return value (an errno, or -1 with errno set) into
// an error naming the call.
func errnoOf(call string, ret C.int, err error) error {
	switch {
	case ret == 0:
		return nil
	case ret > 0:
		return fmt.Errorf("ibverbs: %s: %w", call, syscall.Errno(ret))
	case err != nil:
		return fmt.Errorf("ibverbs: %s: %w", call, err)
	default:
		return fmt.Errorf("ibverbs: %s failed (%d)", call, int(ret))
	}
}

// nilErr names a verb that returned NULL.
func nilErr(call string, err error) error {
	if err == nil {
		err = syscall.EINVAL
	}
	return fmt.Errorf("ibverbs: %s: %w", call, err)
}

// deviceList is ibv_get_device_list; a kernel without RDMA support
// (ENOSYS) has no devices, which is not an error.
func deviceList() (**C.struct_ibv_device, int, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		if errors.Is(err, syscall.ENOSYS) {
			return nil, 0, nil
		}
		return nil, 0, nilErr("ibv_get_device_list", err)
	}
	return list, int(n), nil
}

// Devices lists the names of the kernel's RDMA devices.
func Devices() ([]string, error) {
	list, n, err := deviceList()
	if list == nil {
		return nil, err
	}
	defer C.ibv_free_device_list(list)
	names := make([]string, 0, n)
	for i := range n {
		names = append(names, C.GoString(C.ibv_get_device_name(C.gr_device_at(list, C.int(i)))))
	}
	return names, nil
}

// Device is an open RDMA device (struct ibv_context).
type Device struct {
	ctx  *C.struct_ibv_context
	Name string
}

// Open opens the device called name, or the first one if name is empty.
func Open(name string) (*Device, error) {
	list, n, err := deviceList()
	if err != nil {
		return nil, err
	}
	if list != nil {
		defer C.ibv_free_device_list(list)
	}
	for i := range n {
		dev := C.gr_device_at(list, C.int(i))
		devName := C.GoString(C.ibv_get_device_name(dev))
		if name != "" && devName != name {
			continue
		}
		ctx, err := C.ibv_open_device(dev)
		if ctx == nil {
			return nil, nilErr("ibv_open_device "+devName, err)
		}
		return &Device{ctx: ctx, Name: devName}, nil
	}
	if name == "" {
		return nil, ErrNoDevice
	}
	return nil, fmt.Errorf("%w: %q", ErrNoDevice, name)
}

// Close closes the device; its objects must have been destroyed.
func (d *Device) Close() error {
	return errnoOf("ibv_close_device", C.ibv_close_device(d.ctx), nil)
}

// DeviceAttr is struct ibv_device_attr.
type DeviceAttr struct {
	FWVer                              string
	NodeGUID, SysImageGUID             uint64 // as stored: the wire bytes in memory order
	MaxMRSize, PageSizeCap             uint64
	VendorID, VendorPartID, HWVer      uint32
	DeviceCapFlags                     uint64
	MaxQP, MaxQPWR, MaxSGE, MaxSGERD   int
	MaxCQ, MaxCQE, MaxMR, MaxPD        int
	MaxQPRdAtom, MaxQPInitRdAtom       int
	MaxResRdAtom, AtomicCap, MaxMW     int
	MaxAH, MaxSRQ, MaxSRQWR, MaxSRQSGE int
	MaxPKeys, PhysPortCnt, NumCompVecs int
	LocalCAAckDelay                    uint8
}

// Query returns the device's attributes (ibv_query_device).
func (d *Device) Query() (DeviceAttr, error) {
	var a C.struct_ibv_device_attr
	if err := errnoOf("ibv_query_device", C.ibv_query_device(d.ctx, &a), nil); err != nil {
		return DeviceAttr{}, err
	}
	return DeviceAttr{
		FWVer: C.GoString(&a.fw_ver[0]), NodeGUID: uint64(a.node_guid), SysImageGUID: uint64(a.sys_image_guid),
		MaxMRSize: uint64(a.max_mr_size), PageSizeCap: uint64(a.page_size_cap),
		VendorID: uint32(a.vendor_id), VendorPartID: uint32(a.vendor_part_id), HWVer: uint32(a.hw_ver),
		DeviceCapFlags: uint64(a.device_cap_flags),
		MaxQP:          int(a.max_qp), MaxQPWR: int(a.max_qp_wr), MaxSGE: int(a.max_sge), MaxSGERD: int(a.max_sge_rd),
		MaxCQ: int(a.max_cq), MaxCQE: int(a.max_cqe), MaxMR: int(a.max_mr), MaxPD: int(a.max_pd),
		MaxQPRdAtom: int(a.max_qp_rd_atom), MaxQPInitRdAtom: int(a.max_qp_init_rd_atom),
		MaxResRdAtom: int(a.max_res_rd_atom), AtomicCap: int(a.atomic_cap), MaxMW: int(a.max_mw),
		MaxAH: int(a.max_ah), MaxSRQ: int(a.max_srq), MaxSRQWR: int(a.max_srq_wr), MaxSRQSGE: int(a.max_srq_sge),
		MaxPKeys: int(a.max_pkeys), PhysPortCnt: int(a.phys_port_cnt), NumCompVecs: int(d.ctx.num_comp_vectors),
		LocalCAAckDelay: uint8(a.local_ca_ack_delay),
	}, nil
}

// PortAttr is the part of struct ibv_port_attr goroce uses.
type PortAttr struct {
	State, MaxMTU, ActiveMTU, GIDTblLen, LinkLayer int
	PortCapFlags, MaxMsgSize                       uint32
	PKeyTblLen                                     int
	ActiveWidth, ActiveSpeed, PhysState            uint8
	// The InfiniBand fields ibv_devinfo prints (LIDs and SM's are 0 on
	// RoCE).
	BadPKeyCntr, QKeyViolCntr                         uint32
	LID, SMLID                                        uint16
	LMC, MaxVLNum, SMSL, SubnetTimeout, InitTypeReply uint8
}

// QueryPort returns a port's attributes (ibv_query_port).
func (d *Device) QueryPort(port int) (PortAttr, error) {
	var a C.struct_ibv_port_attr
	if err := errnoOf("ibv_query_port", C.gr_query_port(d.ctx, C.uint8_t(port), &a), nil); err != nil {
		return PortAttr{}, err
	}
	return PortAttr{State: int(a.state), MaxMTU: int(a.max_mtu), ActiveMTU: int(a.active_mtu),
		GIDTblLen: int(a.gid_tbl_len), LinkLayer: int(a.link_layer), PortCapFlags: uint32(a.port_cap_flags),
		MaxMsgSize: uint32(a.max_msg_sz), PKeyTblLen: int(a.pkey_tbl_len), ActiveWidth: uint8(a.active_width),
		ActiveSpeed: uint8(a.active_speed), PhysState: uint8(a.phys_state),
		BadPKeyCntr: uint32(a.bad_pkey_cntr), QKeyViolCntr: uint32(a.qkey_viol_cntr), LID: uint16(a.lid),
		SMLID: uint16(a.sm_lid), LMC: uint8(a.lmc), MaxVLNum: uint8(a.max_vl_num), SMSL: uint8(a.sm_sl),
		SubnetTimeout: uint8(a.subnet_timeout), InitTypeReply: uint8(a.init_type_reply)}, nil
}

// GIDEntry returns entry index of a port's GID table with its type
// (ibv_query_gid_ex; IBV_GID_TYPE_ROCE_V1 or _V2 on RoCE).
func (d *Device) GIDEntry(port, index int) ([16]byte, int, error) {
	var e C.struct_ibv_gid_entry
	var out [16]byte
	if ret, err := C.gr_query_gid_ex(d.ctx, C.uint32_t(port), C.uint32_t(index), &e); ret != 0 {
		return out, 0, errnoOf("ibv_query_gid_ex", ret, err)
	}
	copy(out[:], C.GoBytes(unsafe.Pointer(&e.gid), 16))
	return out, int(e.gid_type), nil
}

// GID returns entry index of a port's GID table (ibv_query_gid).
func (d *Device) GID(port, index int) ([16]byte, error) {
	var g C.union_ibv_gid
	var out [16]byte
	if ret, err := C.ibv_query_gid(d.ctx, C.uint8_t(port), C.int(index), &g); ret != 0 {
		return out, errnoOf("ibv_query_gid", ret, err)
	}
	copy(out[:], C.GoBytes(unsafe.Pointer(&g), 16))
	return out, nil
}

// PD is a protection domain.
type PD struct{ pd *C.struct_ibv_pd }

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (*PD, error) {
	pd, err := C.ibv_alloc_pd(d.ctx)
	if pd == nil {
		return nil, nilErr("ibv_alloc_pd", err)
	}
	return &PD{pd: pd}, nil
}

// Dealloc frees the protection domain.
func (pd *PD) Dealloc() error { return errnoOf("ibv_dealloc_pd", C.ibv_dealloc_pd(pd.pd), nil) }

// Alloc maps n bytes (rounded up to pages) outside the Go heap, for
// buffers that are registered: the runtime never moves or reuses them.
func Alloc(n int) ([]byte, error) {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("ibverbs: mmap %d bytes: %w", n, err)
	}
	return b, nil
}

// Free unmaps a buffer from Alloc; it must no longer be registered.
func Free(b []byte) error { return syscall.Munmap(b) }

// MR is a registered memory region.
type MR struct {
	mr         *C.struct_ibv_mr
	LKey, RKey uint32
	Addr       uint64 // the IOVA of the first byte: its address unless RegMRIOVA chose one
	Len        int
}

// RegMR registers buf, which must stay mapped (Alloc) until Dereg.
func (pd *PD) RegMR(buf []byte, access int) (*MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("ibverbs: RegMR: empty buffer")
	}
	addr := uintptr(unsafe.Pointer(&buf[0]))
	mr, err := C.gr_reg_mr(pd.pd, C.uintptr_t(addr), C.size_t(len(buf)), C.int(access))
	if mr == nil {
		return nil, nilErr("ibv_reg_mr", err)
	}
	return &MR{mr: mr, LKey: uint32(mr.lkey), RKey: uint32(mr.rkey), Addr: uint64(addr), Len: len(buf)}, nil
}

// RegMRIOVA registers buf (which must stay mapped until Dereg) with the
// I/O virtual address iova (ibv_reg_mr_iova): local SGEs and peers
// address its byte i as iova+i.
func (pd *PD) RegMRIOVA(buf []byte, iova uint64, access int) (*MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("ibverbs: RegMRIOVA: empty buffer")
	}
	addr := uintptr(unsafe.Pointer(&buf[0]))
	mr, err := C.gr_reg_mr_iova(pd.pd, C.uintptr_t(addr), C.size_t(len(buf)), C.uint64_t(iova), C.int(access))
	if mr == nil {
		return nil, nilErr("ibv_reg_mr_iova", err)
	}
	return &MR{mr: mr, LKey: uint32(mr.lkey), RKey: uint32(mr.rkey), Addr: iova, Len: len(buf)}, nil
}

// Rereg modifies the registration in place (ibv_rereg_mr): flags are
// IBV_REREG_MR_CHANGE_* (Go's ReregFlags values), pd the new PD (with
// CHANGE_PD), buf the new memory, registered at its address (with
// CHANGE_TRANSLATION; it must stay mapped until Dereg), access the new
// rights (with CHANGE_ACCESS). The keys, address and length are read back:
// the provider may change the keys.
func (mr *MR) Rereg(flags int, pd *PD, buf []byte, access int) error {
	var cpd *C.struct_ibv_pd
	if pd != nil {
		cpd = pd.pd
	}
	var addr uintptr
	if len(buf) > 0 {
		addr = uintptr(unsafe.Pointer(&buf[0]))
	}
	ret, err := C.gr_rereg_mr(mr.mr, C.int(flags), cpd, C.uintptr_t(addr), C.size_t(len(buf)), C.int(access))
	if ret != 0 {
		if err == nil {
			err = fmt.Errorf("ibverbs: ibv_rereg_mr failed (%d)", int(ret))
		} else {
			err = fmt.Errorf("ibverbs: ibv_rereg_mr: %w", err)
		}
		return err
	}
	mr.LKey, mr.RKey = uint32(mr.mr.lkey), uint32(mr.mr.rkey)
	if len(buf) > 0 {
		mr.Addr, mr.Len = uint64(addr), len(buf)
	}
	return nil
}

// Dereg deregisters the region.
func (mr *MR) Dereg() error { return errnoOf("ibv_dereg_mr", C.ibv_dereg_mr(mr.mr), nil) }

// CQ is a completion queue, polled without allocation into wcs.
type CQ struct {
	cq  *C.struct_ibv_cq
	wcs []C.struct_ibv_wc
	ch  *C.struct_ibv_comp_channel // nil without one (channel.go)
}

// CreateCQ creates a completion queue of at least cqe entries.
func (d *Device) CreateCQ(cqe int) (*CQ, error) {
	cq, err := C.ibv_create_cq(d.ctx, C.int(cqe), nil, nil, 0)
	if cq == nil {
		return nil, nilErr("ibv_create_cq", err)
	}
	return &CQ{cq: cq, wcs: make([]C.struct_ibv_wc, 64)}, nil
}

// Resize changes the CQ's capacity to at least cqe entries, keeping the
// completions it holds (ibv_resize_cq). The caller excludes polls.
func (cq *CQ) Resize(cqe int) error {
	ret, err := C.ibv_resize_cq(cq.cq, C.int(cqe))
	return errnoOf("ibv_resize_cq", ret, err)
}

// Destroy destroys the completion queue, and its completion channel.
func (cq *CQ) Destroy() error {
	if err := errnoOf("ibv_destroy_cq", C.ibv_destroy_cq(cq.cq), nil); err != nil {
		return err
	}
	if cq.ch != nil {
		return errnoOf("ibv_destroy_comp_channel", C.ibv_destroy_comp_channel(cq.ch), nil)
	}
	return nil
}

// WC is a work completion.
type WC struct {
	WRID      uint64
	Status    int
	Opcode    int
	VendorErr uint32
	ByteLen   uint32
	Imm       uint32 // host order
	QPNum     uint32
	SrcQP     uint32
	Flags     int
	InvRKey   uint32 // with IBV_WC_WITH_INV
	PKeyIndex uint16
	SLID      uint16
	SL        uint8
	DLIDBits  uint8
}

// Poll takes up to len(out) completions.
func (cq *CQ) Poll(out []WC) (int, error) {
	n := min(len(out), len(cq.wcs))
	if n == 0 {
		return 0, nil
	}
	got := C.gr_poll_cq(cq.cq, C.int(n), &cq.wcs[0])
	if got < 0 {
		return 0, fmt.Errorf("ibverbs: ibv_poll_cq failed (%d)", int(got))
	}
	for i := range int(got) {
		w := &cq.wcs[i]
		out[i] = WC{WRID: uint64(w.wr_id), Status: int(w.status), Opcode: int(w.opcode), VendorErr: uint32(w.vendor_err),
			ByteLen: uint32(w.byte_len), Imm: uint32(C.gr_wc_imm(w)), QPNum: uint32(w.qp_num), SrcQP: uint32(w.src_qp),
			Flags: int(w.wc_flags), InvRKey: uint32(C.gr_wc_inv(w)), PKeyIndex: uint16(w.pkey_index), SLID: uint16(w.slid),
			SL: uint8(w.sl), DLIDBits: uint8(w.dlid_path_bits)}
	}
	return int(got), nil
}

// QPInitAttr shapes a queue pair.
type QPInitAttr struct {
	Type                   int
	SendCQ, RecvCQ         *CQ
	SRQ                    *SRQ // receives come from it; MaxRecvWR and MaxRecvSGE are ignored
	MaxSendWR, MaxRecvWR   int
	MaxSendSGE, MaxRecvSGE int
	MaxInline              int
	SigAll                 bool
}

// QP is a queue pair.
type QP struct {
	qp     *C.struct_ibv_qp
	QPN    uint32
	sq, rq *workQueue // where work requests are built (wr.go)
}

// CreateQP creates a queue pair in RESET.
func (pd *PD) CreateQP(a QPInitAttr) (*QP, error) {
	var ia C.struct_ibv_qp_init_attr
	ia.qp_type = C.enum_ibv_qp_type(a.Type)
	ia.send_cq, ia.recv_cq = a.SendCQ.cq, a.RecvCQ.cq
	ia.cap.max_send_wr, ia.cap.max_recv_wr = C.uint32_t(a.MaxSendWR), C.uint32_t(a.MaxRecvWR)
	ia.cap.max_send_sge, ia.cap.max_recv_sge = C.uint32_t(a.MaxSendSGE), C.uint32_t(a.MaxRecvSGE)
	ia.cap.max_inline_data = C.uint32_t(a.MaxInline)
	if a.SigAll {
		ia.sq_sig_all = 1
	}
	if a.SRQ != nil {
		ia.srq = a.SRQ.srq
		ia.cap.max_recv_wr, ia.cap.max_recv_sge = 0, 0
	}
	sq, err := newSendQueue(a.MaxSendWR, a.MaxSendSGE)
	if err != nil {
		return nil, err
	}
	rq, err := newRecvQueue(a.MaxRecvWR, a.MaxRecvSGE)
	if err != nil {
		sq.free()
		return nil, err
	}
	qp, err := C.ibv_create_qp(pd.pd, &ia)
	if qp == nil {
		sq.free()
		rq.free()
		return nil, nilErr("ibv_create_qp", err)
	}
	return &QP{qp: qp, QPN: uint32(qp.qp_num), sq: sq, rq: rq}, nil
}

// Destroy destroys the queue pair and frees its work request arrays.
func (qp *QP) Destroy() error {
	if err := errnoOf("ibv_destroy_qp", C.ibv_destroy_qp(qp.qp), nil); err != nil {
		return err
	}
	qp.sq.free()
	qp.rq.free()
	return nil
}

// QPAttr is the part of struct ibv_qp_attr a connection sets; the address
// vector is a RoCE one (global, the destination GID and the source GID
// index).
type QPAttr struct {
	State, PathMTU                    int
	QKey, RQPSN, SQPSN, DestQPN       uint32
	Access, PKeyIndex, Port           int
	MaxRdAtomic, MaxDestRdAtomic      int
	MinRNRTimer, Timeout              int
	RetryCnt, RNRRetry                int
	DGID                              [16]byte
	SGIDIndex, HopLimit, TrafficClass int
}

// Modify changes the attributes mask selects (ibv_modify_qp).
func (qp *QP) Modify(a *QPAttr, mask int) error {
	var qa C.struct_ibv_qp_attr
	qa.qp_state = C.enum_ibv_qp_state(a.State)
	qa.path_mtu = C.enum_ibv_mtu(a.PathMTU)
	qa.qkey, qa.rq_psn, qa.sq_psn, qa.dest_qp_num = C.uint32_t(a.QKey), C.uint32_t(a.RQPSN), C.uint32_t(a.SQPSN), C.uint32_t(a.DestQPN)
	qa.qp_access_flags = C.uint(a.Access)
	qa.pkey_index, qa.port_num = C.uint16_t(a.PKeyIndex), C.uint8_t(a.Port)
	qa.max_rd_atomic, qa.max_dest_rd_atomic = C.uint8_t(a.MaxRdAtomic), C.uint8_t(a.MaxDestRdAtomic)
	qa.min_rnr_timer, qa.timeout = C.uint8_t(a.MinRNRTimer), C.uint8_t(a.Timeout)
	qa.retry_cnt, qa.rnr_retry = C.uint8_t(a.RetryCnt), C.uint8_t(a.RNRRetry)
	if mask&AttrAV != 0 {
		qa.ah_attr.is_global = 1
		qa.ah_attr.port_num = C.uint8_t(a.Port)
		qa.ah_attr.grh.sgid_index = C.uint8_t(a.SGIDIndex)
		qa.ah_attr.grh.hop_limit = C.uint8_t(a.HopLimit)
		qa.ah_attr.grh.traffic_class = C.uint8_t(a.TrafficClass)
		C.gr_set_gid(&qa, (*C.uint8_t)(unsafe.Pointer(&a.DGID[0])))
	}
	return errnoOf("ibv_modify_qp", C.ibv_modify_qp(qp.qp, &qa, C.int(mask)), nil)
}

// SendWR is a send work request of at most one SGE.
type SendWR struct {
	WRID       uint64
	Opcode     int
	Flags      int
	Addr       uint64 // local buffer, in a region of LKey
	Len, LKey  uint32
	RemoteAddr uint64
	RKey, Imm  uint32 // Imm in host order
	CompareAdd uint64
	Swap       uint64
}

// PostSend posts one send work request.
func (qp *QP) PostSend(w *SendWR) error {
	ret := C.gr_post_send(qp.qp, C.uint64_t(w.WRID), C.int(w.Opcode), C.int(w.Flags), C.uint64_t(w.Addr),
		C.uint32_t(w.Len), C.uint32_t(w.LKey), C.uint64_t(w.RemoteAddr), C.uint32_t(w.RKey), C.uint32_t(w.Imm),
		C.uint64_t(w.CompareAdd), C.uint64_t(w.Swap))
	return errnoOf("ibv_post_send", ret, nil)
}

// PostRecv posts one receive work request of at most one SGE.
func (qp *QP) PostRecv(wrID, addr uint64, length, lkey uint32) error {
	return errnoOf("ibv_post_recv", C.gr_post_recv(qp.qp, C.uint64_t(wrID), C.uint64_t(addr), C.uint32_t(length), C.uint32_t(lkey)), nil)
}

// State returns the QP's current state (ibv_query_qp), which the device
// changes on its own when a work request fails.
func (qp *QP) State() (int, error) {
	var a C.struct_ibv_qp_attr
	var ia C.struct_ibv_qp_init_attr
	if err := errnoOf("ibv_query_qp", C.ibv_query_qp(qp.qp, &a, C.IBV_QP_STATE, &ia), nil); err != nil {
		return 0, err
	}
	return int(a.qp_state), nil
}
