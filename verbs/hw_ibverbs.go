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
	return newError(op, "", sentinel, err.Error())
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
	d.hw = &ibvDevice{dev: dev, mrs: make(map[*MR]struct{})}
	return d, nil
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
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return closedError("Close", "device")
	}
	d.closed = true
	pds, cqs, srqs, ahs := d.pds, d.cqs, d.srqs, d.ahs
	d.pds, d.cqs, d.channels, d.srqs, d.ahs = nil, nil, nil, nil, nil
	d.mu.Unlock()
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
	for mr := range mrs {
		_ = mr.Dereg()
	}
	for cq := range cqs {
		_ = cq.Destroy()
	}
	for pd := range pds {
		_ = pd.Dealloc()
	}
	if err := h.dev.Close(); err != nil {
		return hwError("Close", err)
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

// regMR registers buf in place. The buffer's first byte is pinned, which
// pins the whole heap object the slice lies in.
func (p *ibvPD) regMR(pd *PD, buf []byte, access AccessFlags) (*MR, error) {
	const op = "RegMR"
	if err := validateMRAccess(op, access); err != nil {
		return nil, err
	}
	if len(buf) == 0 {
		return nil, newError(op, "length", ErrInvalidArgument, "empty region")
	}
	if access&AccessZeroBased != 0 {
		return nil, hwUnsupported(op, "access", "ZERO_BASED")
	}
	if err := pd.use(op); err != nil {
		return nil, err
	}
	h := &ibvMR{}
	h.pin.Pin(unsafe.SliceData(buf))
	r, err := p.pd.RegMR(buf, int(access))
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

// ibvCQ is a CQ with a completion channel of its own, whose descriptor
// (a dup, in Go's poller) CQ.Wait parks on.
type ibvCQ struct {
	cqe int

	mu      sync.Mutex    // serialises polls: wcs is the CQ's one scratch array
	cq      *ibverbs.CQ   // nil once destroyed
	wcs     []ibverbs.WC  // converted into WorkCompletions
	waiting chan struct{} // one goroutine parks at a time
	// stopping asks a parked waiter to leave, for destroy.
	stopping atomic.Bool
	file     *os.File
	conn     syscall.RawConn
}

func (h *ibvDevice) createCQ(d *Device, cqe int) (*CQ, error) {
	const op = "CreateCQ"
	if cqe < 1 || cqe > d.attr.MaxCQE {
		return nil, errorf(op, "cqe", ErrInvalidArgument, "%d outside 1..%d", cqe, d.attr.MaxCQE)
	}
	c, err := h.dev.CreateCQWithChannel(cqe)
	if err != nil {
		return nil, hwError(op, err)
	}
	fd, err := syscall.Dup(c.Fd())
	if err != nil {
		_ = c.Destroy()
		return nil, hwError(op, err)
	}
	hc := &ibvCQ{cqe: cqe, cq: c, wcs: make([]ibverbs.WC, 64), waiting: make(chan struct{}, 1),
		file: os.NewFile(uintptr(fd), "cq-channel")}
	if hc.conn, err = hc.file.SyscallConn(); err != nil {
		_ = hc.file.Close()
		_ = c.Destroy()
		return nil, hwError(op, err)
	}
	cq := &CQ{dev: d, id: cqIDs.Add(1), hw: hc}
	if err := d.register(op, func() { d.cqs[cq] = struct{}{} }); err != nil {
		_ = hc.file.Close()
		_ = c.Destroy()
		return nil, err
	}
	return cq, nil
}

func (h *ibvCQ) size() int { return h.cqe }

func (h *ibvCQ) poll(wc []WorkCompletion) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cq == nil {
		return 0, closedError("PollCQ", "cq")
	}
	n, err := h.cq.Poll(h.wcs[:min(len(wc), len(h.wcs))])
	if err != nil {
		return 0, hwError("PollCQ", err)
	}
	for i := range n {
		w := &h.wcs[i]
		wc[i] = WorkCompletion{WRID: w.WRID, Status: WCStatus(w.Status), Opcode: WCOpcode(w.Opcode),
			VendorErr: w.VendorErr, ByteLen: w.ByteLen, QPNum: w.QPNum, SrcQP: w.SrcQP, WCFlags: WCFlags(w.Flags),
			PKeyIndex: w.PKeyIndex, SLID: w.SLID, SL: w.SL, DLIDPathBits: w.DLIDBits}
		if wc[i].WCFlags&WCWithImm != 0 {
			wc[i].ImmData = w.Imm
		}
		if wc[i].WCFlags&WCWithInv != 0 {
			wc[i].InvalidatedRKey = w.InvRKey
		}
	}
	return n, nil
}

// park arms the CQ and waits, in Go's poller, until its channel reports an
// event, ctx ends or the CQ is destroyed; like the software park it
// returns completions only if it found some before waiting.
func (h *ibvCQ) park(ctx context.Context, wc []WorkCompletion) (int, error) {
	select {
	case h.waiting <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-h.waiting }()
	h.mu.Lock()
	c := h.cq
	h.mu.Unlock()
	if c == nil {
		return 0, closedError("WaitCQ", "cq")
	}
	if err := c.ReqNotify(false); err != nil {
		return 0, hwError("WaitCQ", err)
	}
	if n, err := h.poll(wc); n > 0 || err != nil {
		return n, err
	}
	stop := context.AfterFunc(ctx, func() { _ = h.file.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		_ = h.file.SetReadDeadline(time.Time{})
		if h.stopping.Load() {
			return 0, nil // destroy sets stopping before the deadline
		}
		var evErr error
		err := h.conn.Read(func(uintptr) bool {
			got, err := c.TakeEvent()
			evErr = err
			return got || err != nil
		})
		switch {
		case evErr != nil:
			return 0, hwError("WaitCQ", evErr)
		case err == nil:
			return 0, nil
		case errors.Is(err, os.ErrClosed):
			return 0, closedError("WaitCQ", "cq")
		case !errors.Is(err, os.ErrDeadlineExceeded):
			return 0, hwError("WaitCQ", err)
		}
		// A deadline: this ctx's (checked above), or a stale one set
		// by an earlier park's context after that park returned.
	}
}

// destroy wakes a parked waiter (stopping, then a deadline), waits for it
// to leave, then destroys the CQ and its channel; the waiter comes back to
// find the CQ gone, or still there if the device refused (EBUSY while QPs
// use it).
func (h *ibvCQ) destroy(cq *CQ) error {
	const op = "DestroyCQ"
	h.stopping.Store(true)
	_ = h.file.SetReadDeadline(time.Unix(1, 0))
	h.waiting <- struct{}{}
	h.stopping.Store(false)
	defer func() { <-h.waiting }()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cq == nil {
		return closedError(op, "cq")
	}
	if err := h.cq.Destroy(); err != nil {
		return hwError(op, err)
	}
	h.cq = nil
	_ = h.file.Close()
	d := cq.dev
	d.unregister(func() { delete(d.cqs, cq) })
	return nil
}
