//go:build linux && cgo && goroce_ibverbs

package verbs

// The hardware backend (OpenHardware): a Device and its PDs, MRs and CQs
// on rdma-core's libibverbs, through internal/ibverbs. QPs, SRQs and AHs
// are in hw_ibverbs_qp.go.

import (
	"context"
	"errors"
	"math"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/goroce/goroce/internal/ibverbs"
)

// hwError turns a libibverbs error (wrapping an errno) into this
// package's: the errno picks the sentinel.
func hwError(op string, err error) error {
	var errno syscall.Errno
	sentinel := ErrInvalidArgument
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ENOMEM, syscall.EAGAIN:
			sentinel = ErrNoMemory
		case syscall.EBUSY:
			sentinel = ErrBusy
		case syscall.EOPNOTSUPP, syscall.ENOSYS:
			sentinel = ErrNotSupported
		}
	}
	// The errno's text is often the sentinel's ("invalid argument"):
	// said once.
	return newError(op, "", sentinel, strings.TrimSuffix(err.Error(), ": "+sentinel.Error()))
}

// AllocBuffer maps n bytes (rounded up to pages) outside the Go heap, for
// buffers to register on a hardware device: the garbage collector never
// frees or moves them, so RegMR need not pin them. FreeBuffer unmaps one,
// after its MR is deregistered.
func AllocBuffer(n int) ([]byte, error) {
	if n <= 0 {
		return nil, errorf("AllocBuffer", "length", ErrInvalidArgument, "%d", n)
	}
	b, err := ibverbs.Alloc(n)
	if err != nil {
		return nil, hwError("AllocBuffer", err)
	}
	return b, nil
}

// FreeBuffer unmaps a buffer from AllocBuffer (and only those); it must no
// longer be registered.
func FreeBuffer(b []byte) error {
	if err := ibverbs.Free(b); err != nil {
		return hwError("FreeBuffer", err)
	}
	return nil
}

type ibvDevice struct {
	dev *ibverbs.Device
	mu  sync.Mutex
	mrs map[*MR]struct{} // guarded by mu; the other objects are in Device's registries
	// cqs and srqs find the objects of asynchronous events by their
	// handles; guarded by mu.
	cqs  map[uintptr]*CQ
	srqs map[uintptr]*SRQ

	// The asynchronous event descriptor (a dup, in Go's poller), read by
	// one GetAsyncEvent at a time.
	asyncWaiting chan struct{}
	asyncFile    *os.File
	asyncConn    syscall.RawConn
	asyncClosed  atomic.Bool // set by close before it closes asyncFile
}

// openHardware opens the device and reads its attributes, port 1 and GID
// table once, as a goroce device fixes its own at Open.
func openHardware(name string) (*Device, error) {
	const op = "OpenHardware"
	dev, err := ibverbs.Open(name)
	if err != nil {
		if errors.Is(err, ibverbs.ErrNoDevice) {
			return nil, newError(op, "name", ErrInvalidArgument, err.Error())
		}
		return nil, hwError(op, err)
	}
	d, err := hwDescribe(dev)
	if err != nil {
		_ = dev.Close()
		return nil, hwError(op, err)
	}
	h := &ibvDevice{dev: dev, mrs: make(map[*MR]struct{}), cqs: make(map[uintptr]*CQ), srqs: make(map[uintptr]*SRQ),
		asyncWaiting: make(chan struct{}, 1)}
	if err := h.openAsync(); err != nil {
		_ = dev.Close()
		return nil, hwError(op, err)
	}
	d.hw = h
	return d, nil
}

// openAsync puts a dup of the device's asynchronous event descriptor in
// Go's poller.
func (h *ibvDevice) openAsync() error {
	fd, err := h.dev.AsyncFd()
	if err != nil {
		return err
	}
	h.asyncFile, h.asyncConn, err = pollerFile(fd, "async-event")
	return err
}

// pollerFile puts a dup of a libibverbs descriptor (non-blocking) in Go's
// poller, so that a goroutine waiting on it holds no thread; the caller
// keeps the original, and closes the file before destroying its owner.
func pollerFile(fd int, name string) (*os.File, syscall.RawConn, error) {
	dup, err := syscall.Dup(fd)
	if err != nil {
		return nil, nil, err
	}
	f := os.NewFile(uintptr(dup), name)
	conn, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	return f, conn, nil
}

// asyncEvent waits in Go's poller for the device's next asynchronous
// event, until ctx ends or the device is closed.
func (h *ibvDevice) asyncEvent(d *Device, ctx context.Context) (AsyncEvent, error) {
	const op = "GetAsyncEvent"
	select {
	case h.asyncWaiting <- struct{}{}:
	case <-ctx.Done():
		return AsyncEvent{}, ctx.Err()
	}
	defer func() { <-h.asyncWaiting }()
	stop := context.AfterFunc(ctx, func() { _ = h.asyncFile.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	for {
		if err := ctx.Err(); err != nil {
			return AsyncEvent{}, err
		}
		_ = h.asyncFile.SetReadDeadline(time.Time{})
		var ev ibverbs.AsyncEvent
		var evErr error
		err := h.asyncConn.Read(func(uintptr) bool {
			var got bool
			ev, got, evErr = h.dev.TakeAsyncEvent()
			return got || evErr != nil
		})
		switch {
		case evErr != nil:
			return AsyncEvent{}, hwError(op, evErr)
		case err == nil:
			return h.event(d, ev), nil
		case h.asyncClosed.Load():
			return AsyncEvent{}, closedError(op, "device") // a closing file's error
		case !errors.Is(err, os.ErrDeadlineExceeded):
			return AsyncEvent{}, hwError(op, err)
		}
		// A deadline: this ctx's (checked above), or a stale one.
	}
}

// event finds the objects of an asynchronous event.
func (h *ibvDevice) event(d *Device, e ibverbs.AsyncEvent) AsyncEvent {
	ev := AsyncEvent{Type: AsyncEventType(e.Type), PortNum: e.Port}
	h.mu.Lock()
	ev.CQ, ev.SRQ = h.cqs[e.CQ], h.srqs[e.SRQ]
	h.mu.Unlock()
	if e.QPN != 0 {
		if v, ok := d.qps.Load(e.QPN); ok {
			ev.QP = v.(*QP)
		}
	}
	return ev
}

// track records (or, with nil, forgets) the object of a CQ or SRQ handle.
func (h *ibvDevice) trackCQ(handle uintptr, cq *CQ) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cq == nil {
		delete(h.cqs, handle)
	} else if h.cqs != nil {
		h.cqs[handle] = cq
	}
}

func (h *ibvDevice) trackSRQ(handle uintptr, s *SRQ) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s == nil {
		delete(h.srqs, handle)
	} else if h.srqs != nil {
		h.srqs[handle] = s
	}
}

// hwDescribe builds the Device that presents dev.
func hwDescribe(dev *ibverbs.Device) (*Device, error) {
	a, err := dev.Query()
	if err != nil {
		return nil, err
	}
	pa, err := dev.QueryPort(1)
	if err != nil {
		return nil, err
	}
	var addr netip.Addr
	gids := make([]GIDEntry, pa.GIDTblLen)
	for i := range gids {
		gids[i] = GIDEntry{Index: i, Port: 1}
		g, typ, err := dev.GIDEntry(1, i)
		if err != nil {
			continue // an unpopulated entry
		}
		gids[i].GID, gids[i].Type = g, GIDType(typ)
		if ga := GID(g).Addr(); !addr.IsValid() && typ == ibverbs.GIDTypeRoCEv2 && ga.Is4() {
			addr = ga
		}
	}
	return &Device{
		name:    dev.Name,
		addr:    addr,
		udpPort: DefaultUDPPort,
		attr: DeviceAttr{
			FWVer: a.FWVer, NodeGUID: GUID(hostToWire(a.NodeGUID)), SysImageGUID: GUID(hostToWire(a.SysImageGUID)),
			MaxMRSize: a.MaxMRSize, PageSizeCap: a.PageSizeCap, VendorID: a.VendorID, VendorPartID: a.VendorPartID,
			HWVer: a.HWVer, MaxQP: a.MaxQP, MaxQPWR: a.MaxQPWR, DeviceCapFlags: DeviceCapFlags(a.DeviceCapFlags),
			MaxSGE: a.MaxSGE, MaxSGERD: a.MaxSGERD, MaxCQ: a.MaxCQ, MaxCQE: a.MaxCQE, MaxMR: a.MaxMR,
			MaxPD: a.MaxPD, MaxQPRdAtom: a.MaxQPRdAtom, MaxQPInitRdAtom: a.MaxQPInitRdAtom,
			MaxResRdAtom: a.MaxResRdAtom, AtomicCap: AtomicCap(a.AtomicCap), MaxMW: a.MaxMW, MaxAH: a.MaxAH,
			MaxSRQ: a.MaxSRQ, MaxSRQWR: a.MaxSRQWR, MaxSRQSGE: a.MaxSRQSGE, MaxPKeys: a.MaxPKeys,
			LocalCAAckDelay: a.LocalCAAckDelay, PhysPortCnt: a.PhysPortCnt,
			// libibverbs does not report it: the provider refuses
			// at CreateQP what it cannot inline.
			MaxInlineData: math.MaxInt32,
		},
		port: PortAttr{
			State: PortState(pa.State), MaxMTU: MTU(pa.MaxMTU), ActiveMTU: MTU(pa.ActiveMTU),
			GIDTblLen: pa.GIDTblLen, PortCapFlags: PortCapFlags(pa.PortCapFlags), MaxMsgSize: pa.MaxMsgSize,
			PKeyTblLen: pa.PKeyTblLen, ActiveWidth: PortWidth(pa.ActiveWidth), ActiveSpeed: PortSpeed(pa.ActiveSpeed),
			PhysState: PhysPortState(pa.PhysState), LinkLayer: LinkLayer(pa.LinkLayer),
			BadPKeyCntr: pa.BadPKeyCntr, QKeyViolCntr: pa.QKeyViolCntr, LID: pa.LID, SMLID: pa.SMLID, LMC: pa.LMC,
			MaxVLNum: pa.MaxVLNum, SMSL: pa.SMSL, SubnetTimeout: pa.SubnetTimeout, InitTypeReply: pa.InitTypeReply,
		},
		mtu:            newActiveMTU(addr, MTU(pa.ActiveMTU)),
		gids:           gids,
		numCompVectors: max(1, a.NumCompVecs),
		pds:            make(map[*PD]struct{}),
		cqs:            make(map[*CQ]struct{}),
		channels:       make(map[*CompChannel]struct{}),
		srqs:           make(map[*SRQ]struct{}),
		ahs:            make(map[*AH]struct{}),
	}, nil
}

// hostToWire reads a GUID libibverbs stores in wire order (big-endian
// bytes in memory) as the number GUID means.
func hostToWire(v uint64) uint64 {
	b := (*[8]byte)(unsafe.Pointer(&v))
	var out uint64
	for _, x := range b {
		out = out<<8 | uint64(x)
	}
	return out
}

// close destroys the device's objects as Device.Close does on goroce:
// QPs, SRQs, address handles, memory regions, CQs, PDs, then the device.
func (h *ibvDevice) close(d *Device) error {
	o, err := d.markClosed()
	if err != nil {
		return err
	}
	pds, cqs, chans, srqs, ahs := o.pds, o.cqs, o.channels, o.srqs, o.ahs
	d.qps.Range(func(_, v any) bool {
		_ = v.(*QP).Destroy()
		return true
	})
	for s := range srqs {
		_ = s.Destroy()
	}
	for ah := range ahs {
		_ = ah.Destroy()
	}
	h.mu.Lock()
	mrs := h.mrs
	h.mrs = nil
	h.mu.Unlock()
	// A region the kernel refuses to deregister (a memory window still
	// bound to it: EBUSY) stays pinned until the device is closed below,
	// which releases every registration of the context.
	var stuck []*ibvMR
	for mr := range mrs {
		if err := mr.Dereg(); err != nil {
			if h, ok := mr.hw.(*ibvMR); ok {
				stuck = append(stuck, h)
			}
		}
	}
	for cq := range cqs {
		_ = cq.Destroy()
	}
	for ch := range chans {
		_ = ch.Destroy()
	}
	for pd := range pds {
		_ = pd.Dealloc()
	}
	// Wake a GetAsyncEvent, and wait for it to leave the device.
	h.asyncClosed.Store(true)
	_ = h.asyncFile.Close()
	h.asyncWaiting <- struct{}{}
	defer func() { <-h.asyncWaiting }()
	if err := h.dev.Close(); err != nil {
		return hwError("Close", err)
	}
	// The kernel no longer maps those buffers: they may move again, and
	// a dropped Pinner that still pins would make the runtime panic.
	for _, m := range stuck {
		m.pin.Unpin()
	}
	return nil
}

type ibvPD struct{ pd *ibverbs.PD }

func (h *ibvDevice) allocPD(d *Device) (*PD, error) {
	const op = "AllocPD"
	p, err := h.dev.AllocPD()
	if err != nil {
		return nil, hwError(op, err)
	}
	pd := &PD{dev: d, id: pdIDs.Add(1), hw: &ibvPD{pd: p}}
	if err := d.register(op, func() { d.pds[pd] = struct{}{} }); err != nil {
		_ = p.Dealloc()
		return nil, err
	}
	return pd, nil
}

func (p *ibvPD) dealloc() error {
	if err := p.pd.Dealloc(); err != nil {
		return hwError("DeallocPD", err)
	}
	return nil
}

// ibvMR is a registration; pin keeps a Go heap buffer in place until
// Dereg (a no-op for memory outside the heap, such as AllocBuffer's).
type ibvMR struct {
	mr  *ibverbs.MR
	pin runtime.Pinner
}

// regMR registers buf in place with iova (its address unless the caller
// chose one: RegMRIOVA, or 0 for AccessZeroBased). The buffer's first byte
// is pinned, which pins the whole heap object the slice lies in.
func (p *ibvPD) regMR(op string, pd *PD, buf []byte, iova uint64, access AccessFlags) (*MR, error) {
	if err := validateMRAccess(op, access); err != nil {
		return nil, err
	}
	if len(buf) == 0 {
		return nil, newError(op, "length", ErrInvalidArgument, "empty region")
	}
	if iova+uint64(len(buf))-1 < iova {
		return nil, errorf(op, "iova", ErrInvalidArgument, "%#x + %d bytes wraps around 2^64", iova, len(buf))
	}
	// The kernel maps the buffer's pages and needs the IOVA at the same
	// offset in its page (ib_uverbs_reg_mr's EINVAL otherwise): a
	// zero-based region starts on a page.
	if page := uint64(os.Getpagesize()); (iova^bufAddr(buf))&(page-1) != 0 {
		return nil, errorf(op, "iova", ErrInvalidArgument, "%#x is at offset %d in its page and the buffer at %d: on a kernel RDMA device they must be equal",
			iova, iova&(page-1), bufAddr(buf)&(page-1))
	}
	if err := pd.use(op); err != nil {
		return nil, err
	}
	h := &ibvMR{}
	h.pin.Pin(unsafe.SliceData(buf))
	// A zero-based region is one registered at IOVA 0; the flag itself is
	// a memory window bind flag in libibverbs (ibv_bind_mw(3)) and is
	// not passed.
	kaccess := int(access &^ AccessZeroBased)
	var (
		r   *ibverbs.MR
		err error
	)
	if iova == bufAddr(buf) {
		r, err = p.pd.RegMR(buf, kaccess)
	} else {
		r, err = p.pd.RegMRIOVA(buf, iova, kaccess)
	}
	if err != nil {
		h.pin.Unpin()
		pd.unuse()
		return nil, hwError(op, err)
	}
	h.mr = r
	mr := &MR{dev: pd.dev, hw: h}
	mr.reg.Store(newRegion(mr, r.LKey, pd, buf, r.Addr, access))
	hd := pd.dev.hw.(*ibvDevice)
	hd.mu.Lock()
	if hd.mrs == nil {
		hd.mu.Unlock()
		_ = r.Dereg()
		h.pin.Unpin()
		pd.unuse()
		return nil, closedError(op, "device")
	}
	hd.mrs[mr] = struct{}{}
	hd.mu.Unlock()
	return mr, nil
}

func (h *ibvMR) rkey() uint32 { return h.mr.RKey }

// rereg re-registers in place (ibv_rereg_mr). libibverbs registers the
// new memory at its address and lets the provider choose the keys, so a
// caller-chosen IOVA, a change of AccessZeroBased and KeepKeys are refused
// (ErrNotSupported); what the device refuses comes back as its errno.
// The new buffer is pinned before the call and the old one unpinned
// after it succeeded.
func (h *ibvMR) rereg(op string, mr *MR, a ReregAttr) error {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.dead {
		return closedError(op, "mr")
	}
	old := mr.reg.Load()
	newPD, newBuf, newAccess := old.pd, old.buf, old.access
	if a.Flags&ReregChangeAccess != 0 {
		if err := validateMRAccess(op, a.Access); err != nil {
			return err
		}
		if (a.Access^old.access)&AccessZeroBased != 0 {
			return errorf(op, "access", ErrNotSupported, "changing %v on a hardware device (OpenHardware): ibv_rereg_mr takes no IOVA", AccessZeroBased)
		}
		newAccess = a.Access
	}
	var pin runtime.Pinner
	if a.Flags&ReregChangeTranslation != 0 {
		switch {
		case len(a.Buf) == 0:
			return newError(op, "length", ErrInvalidArgument, "empty region")
		case newAccess&AccessZeroBased != 0 || a.IOVA != bufAddr(a.Buf):
			return errorf(op, "iova", ErrNotSupported, "%#x on a hardware device (OpenHardware): ibv_rereg_mr registers the buffer at its address", a.IOVA)
		}
		newBuf = a.Buf
	}
	if a.KeepKeys {
		return newError(op, "KeepKeys", ErrNotSupported, "on a hardware device (OpenHardware) the provider chooses the keys")
	}
	var kpd *ibverbs.PD
	if a.Flags&ReregChangePD != 0 {
		switch {
		case a.PD == nil:
			return newError(op, "pd", ErrInvalidArgument, "nil")
		case a.PD.dev != mr.dev:
			return newError(op, "pd", ErrInvalidArgument, "belongs to another device")
		}
		hp, ok := a.PD.hw.(*ibvPD)
		if !ok {
			return newError(op, "pd", ErrInvalidArgument, "not a PD of a hardware device")
		}
		if a.PD != old.pd {
			if err := a.PD.use(op); err != nil {
				return err
			}
		}
		kpd, newPD = hp.pd, a.PD
	}
	var kbuf []byte
	if a.Flags&ReregChangeTranslation != 0 {
		pin.Pin(unsafe.SliceData(newBuf))
		kbuf = newBuf
	}
	if err := h.mr.Rereg(int(a.Flags), kpd, kbuf, int(newAccess&^AccessZeroBased)); err != nil {
		pin.Unpin()
		if newPD != old.pd {
			newPD.unuse()
		}
		return hwError(op, err)
	}
	if kbuf != nil {
		h.pin.Unpin()
		h.pin = pin
	}
	mr.reg.Store(newRegion(mr, h.mr.LKey, newPD, newBuf, h.mr.Addr, newAccess))
	if newPD != old.pd {
		old.pd.unuse()
	}
	return nil
}

func (h *ibvMR) dereg(mr *MR) error {
	const op = "DeregMR"
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.dead {
		return closedError(op, "mr")
	}
	if err := h.mr.Dereg(); err != nil {
		return hwError(op, err)
	}
	h.pin.Unpin()
	mr.dead = true
	r := mr.reg.Load()
	r.pd.unuse()
	hd := mr.dev.hw.(*ibvDevice)
	hd.mu.Lock()
	delete(hd.mrs, mr)
	hd.mu.Unlock()
	return nil
}
