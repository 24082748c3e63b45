package verbs

import "context"

// OpenHardware opens the kernel RDMA device called name (mlx5_0, rxe0,
// …; "" for the first one) through rdma-core's libibverbs, and returns it
// as a *Device: the same types and methods as on a goroce device, run by
// the NIC (or the kernel's rxe) instead of goroce's software transport.
//
// It needs a binary built with cgo and the goroce_ibverbs build tag on
// Linux, and libibverbs (Debian's libibverbs-dev to build, libibverbs1 and
// a provider such as ibverbs-providers to run):
//
//	go build -tags goroce_ibverbs ./...
//
// Without them it returns an error wrapping ErrNotSupported that names the
// tag. What differs on hardware (see "Running on RDMA hardware" in the
// README):
//
//   - Memory: RegMR pins a Go heap buffer (runtime.Pinner) until Dereg,
//     so the garbage collector neither frees nor moves it while the NIC
//     addresses it; a buffer from AllocBuffer (mmap, outside the Go heap)
//     needs no pinning. Dereg before dropping the last reference.
//   - Errors come from the provider: an errno mapped onto this package's
//     sentinels (EINVAL ErrInvalidArgument, ENOMEM ErrNoMemory, EBUSY
//     ErrBusy, EOPNOTSUPP ErrNotSupported), with the verb in Op and the
//     provider's message in Reason; Field is set only where this package
//     refuses the request itself.
//   - Not supported (ErrNotSupported): the goroce-only features
//     (DeviceConfig, BusyPoll, fault injection, SelectiveRepeat, packet
//     sealing, MR.WaitRemoteWrite, CQ.SetSink, PostSendWait); the FLUSH
//     and ATOMIC_WRITE opcodes, which libibverbs posts only through its
//     extended work request API and rxe executes from Linux 6.2 on (the
//     error says so).
//   - Memory windows, CQ.Resize and MR.Rereg go to the device
//     (ibv_alloc_mw, ibv_bind_mw and BIND_MW/LOCAL_INV work requests,
//     ibv_resize_cq, ibv_rereg_mr), which enforces the windows' rules:
//     MW.Bound reports false and MW.Remote has no binding to describe,
//     since the device holds it. Rereg registers new memory at its
//     address and the provider chooses the keys: another IOVA, a change
//     of AccessZeroBased and ReregAttr.KeepKeys are ErrNotSupported;
//     rxe0 in the rxe VM (rdma-core 44, Linux 6.1) refuses ibv_rereg_mr
//     with EOPNOTSUPP.
//   - RegMRIOVA and zero-based regions use ibv_reg_mr_iova, whose kernel
//     side needs the IOVA at the buffer's offset in its page: a
//     zero-based region starts a page (AllocBuffer's memory does).
//   - Counters and FaultCounters return zeros,
//     MR.RemoteWrites 0, QP.Refusal none, AsyncEvent.Refusal none; the
//     NIC's counters are in sysfs (/sys/class/infiniband/*/ports/1/).
//   - GetAsyncEvent waits in Go's poller on the device's asynchronous
//     event descriptor; events are acknowledged as they are taken.
//   - CQ.Wait parks on a completion channel of the CQ's own whose file
//     descriptor is in Go's poller, so a waiting goroutine holds no
//     thread; a CQ created with a CompChannel is waited for through
//     it (GetEvent, also in the poller), and its Wait polls. Events
//     are acknowledged as GetEvent takes them: AckEvents has nothing
//     left to do, and destroying a CQ never waits for it.
//   - The GID table is the device's: RoCE v1 and v2 entries of every
//     address of its network interface. Pick the RoCE v2 entry of the
//     address to use (see GIDTable), not index 1 as on goroce.
func OpenHardware(name string) (*Device, error) { return openHardware(name) }

// HardwareDevices lists the names of the kernel's RDMA devices
// (ibv_get_device_list), those OpenHardware opens; a kernel without RDMA
// support has none. Without the backend (see OpenHardware) it returns an
// error wrapping ErrNotSupported that names the tag.
func HardwareDevices() ([]string, error) { return hardwareDevices() }

// Hardware reports whether d is a kernel RDMA device opened through
// OpenHardware: package cm connects its QPs through librdmacm.
func (d *Device) Hardware() bool { return d.hw != nil }

// The hardware backend's objects. A Device, PD, MR, CQ, QP, SRQ or AH
// opened through OpenHardware carries one of these (hw_ibverbs.go, under
// the goroce_ibverbs tag); a software object carries nil, so the software
// path pays one nil check in the verbs that dispatch. Interfaces: without
// the tag nothing implements them and nothing can set them.
//
// The verbs of the data path (Poll, Wait, PostSend, PostRecv and their
// lists, ModifyQP) instead call the functions hwPoll, hwPark, hwPostSend,
// hwPostRecv, hwPostSRQRecv and hwModify, defined by both backends'
// files: an argument passed to an interface method escapes to the heap,
// for every caller, software ones included, whereas a static call lets the
// compiler see that the work requests and completion arrays stay with the
// caller, so neither path allocates.
type (
	hwDevice interface {
		close(d *Device) error
		allocPD(d *Device) (*PD, error)
		createCQ(d *Device, cqe int, ch *CompChannel) (*CQ, error)
		createChannel(d *Device) (*CompChannel, error)
		asyncEvent(d *Device, ctx context.Context) (AsyncEvent, error)
	}
	hwPD interface {
		dealloc() error
		regMR(op string, pd *PD, buf []byte, iova uint64, access AccessFlags) (*MR, error)
		createQP(pd *PD, init *QPInitAttr) (*QP, error)
		createAH(pd *PD, av *AddressVector) (*AH, error)
		createSRQ(pd *PD, attr *SRQInitAttr) (*SRQ, error)
		allocMW(pd *PD, typ MWType) (*MW, error)
	}
	hwMR interface {
		rkey() uint32
		dereg(mr *MR) error
		rereg(op string, mr *MR, a ReregAttr) error
	}
	hwCQ interface {
		size() int
		reqNotify(solicitedOnly bool) error
		resize(cqe int) error
		destroy(cq *CQ) error
	}
	hwQP interface {
		state() QPState
		destroy(qp *QP) error
		bindMW(qp *QP, mw *MW, bind *MWBind) (uint32, error)
	}
	hwMW interface {
		dealloc(mw *MW) error
	}
	hwSRQ interface {
		query() (SRQAttr, error)
		modify(attr *SRQAttr, mask SRQAttrMask) error
		destroy(s *SRQ) error
	}
	hwAH interface {
		destroy(ah *AH) error
	}
	hwChannel interface {
		getEvent(ctx context.Context) (*CQ, error)
		destroy(ch *CompChannel) error
	}
)

// hwUnsupported is the error of a verb or feature a hardware device does
// not offer.
func hwUnsupported(op, field, what string) error {
	return errorf(op, field, ErrNotSupported, "%s: not on a hardware device (OpenHardware)", what)
}
