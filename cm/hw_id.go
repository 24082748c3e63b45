//go:build linux && cgo && goroce_ibverbs

package cm

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/rdmacm"
	"github.com/goroce/goroce/verbs"
)

// The event API (IDs on event channels) on kernel RDMA devices. An ID
// starts with no device, as in librdmacm; binding or resolving an address
// that no goroce device of the process holds hands it to the kernel's
// rdma_cm: the ID then gets an rdma_cm_id of librdmacm (hwID) on an event
// channel of librdmacm that belongs to its EventChannel (hwChannel). A
// goroutine per channel (pump) takes librdmacm's events, does what
// librdmacm does with the QP of an ID that has one (the IDs it sees never
// have one: the QP stays the application's), and queues the events as
// this package's, so that GetEvent, Ack, Migrate and Destroy behave the
// same on both kinds of device.

// hwID is an ID's librdmacm side.
type hwID struct {
	id *rdmacm.ID
	// dev is the ID's device once known, offer the request's values from
	// this side's point of view (a request's ID).
	dev   *verbs.Device
	offer rdmacm.ConnParam
}

// hwChannel is an EventChannel's librdmacm side.
type hwChannel struct {
	ch   *rdmacm.EventChannel
	done chan struct{} // closed when the pump has stopped
}

// hwIDs finds the ID of a librdmacm ID. Guarded by state.mu.
var hwIDs = map[*rdmacm.ID]*ID{}

// hwDevices are the kernel devices the event API has opened, by name:
// like librdmacm's, they stay open for the life of the process, since
// IDs, PDs and QPs on them may outlive any one ID.
var hwDevices struct {
	mu   sync.Mutex
	byID map[string]*verbs.Device
}

// hwDevice returns the process's device of the event API with that name.
func hwDevice(name string) (*verbs.Device, error) {
	hwDevices.mu.Lock()
	defer hwDevices.mu.Unlock()
	if d := hwDevices.byID[name]; d != nil {
		return d, nil
	}
	d, err := verbs.OpenHardware(name)
	if err != nil {
		return nil, err
	}
	if hwDevices.byID == nil {
		hwDevices.byID = map[string]*verbs.Device{}
	}
	hwDevices.byID[name] = d
	return d, nil
}

// hwChannelLocked returns ch's librdmacm channel, creating it and its
// pump on first use. The caller holds state.mu.
func (ch *EventChannel) hwChannelLocked() (*rdmacm.EventChannel, error) {
	if ch.hw != nil {
		return ch.hw.ch, nil
	}
	c, err := rdmacm.NewEventChannel()
	if err != nil {
		return nil, err
	}
	ch.hw = &hwChannel{ch: c, done: make(chan struct{})}
	go ch.hw.pump()
	return c, nil
}

// hwClose stops the pump and destroys the librdmacm channel. The caller
// does not hold state.mu: the pump may be waiting for it.
func (h *hwChannel) close() {
	_ = h.ch.Close()
	<-h.done
}

// hwTake gives the ID an rdma_cm_id of its port space on its channel,
// with the options set so far. The caller holds state.mu.
func (id *ID) hwTake() error {
	c, err := id.ch.hwChannelLocked()
	if err != nil {
		return err
	}
	if id.opts.respTimeout != 0 || id.opts.maxCMRetries != 0 {
		return fmt.Errorf("SetCMTimeouts on a kernel RDMA device (the kernel's CM timers are fixed): %w", verbs.ErrNotSupported)
	}
	var rid *rdmacm.ID
	switch id.ps {
	case PortSpaceTCP:
		rid, err = c.CreateID()
	case PortSpaceUDP:
		rid, err = c.CreateUDID()
	default:
		return fmt.Errorf("port space %v on a kernel RDMA device: %w", id.ps, verbs.ErrNotSupported)
	}
	if err != nil {
		return err
	}
	if err := id.setHWOptions(rid); err != nil {
		_ = rid.Destroy()
		return err
	}
	id.hw = &hwID{id: rid}
	hwIDs[rid] = id
	return nil
}

// setHWOptions sets the options the application gave the ID on rid.
func (id *ID) setHWOptions(rid *rdmacm.ID) error {
	o := &id.opts
	set := func(opt rdmacm.Option, on bool, v int) error {
		if !on {
			return nil
		}
		return rid.SetOption(opt, v)
	}
	if err := set(rdmacm.OptionTOS, o.tosSet, int(o.tos)); err != nil {
		return err
	}
	if err := set(rdmacm.OptionReuseAddr, o.reuseAddr, 1); err != nil {
		return err
	}
	if err := set(rdmacm.OptionAFOnly, o.afOnlySet, boolInt(o.afOnly)); err != nil {
		return err
	}
	return set(rdmacm.OptionAckTimeout, o.ackTimeout != 0, int(o.ackTimeout))
}

var hwOptions = [...]rdmacm.Option{hwOptionTOS: rdmacm.OptionTOS, hwOptionReuseAddr: rdmacm.OptionReuseAddr,
	hwOptionAFOnly: rdmacm.OptionAFOnly, hwOptionAckTimeout: rdmacm.OptionAckTimeout}

// hwSetOption sets an option of the ID's rdma_cm_id. The caller holds
// state.mu.
func (id *ID) hwSetOption(o hwOption, v int) error { return id.hw.id.SetOption(hwOptions[o], v) }

// hwResolveRoute, hwListen, hwEstablish and hwNotify are librdmacm's
// calls on the ID's rdma_cm_id. The caller holds state.mu.
func (id *ID) hwResolveRoute(timeout time.Duration) error { return id.hw.id.ResolveRoute(timeout) }

func (id *ID) hwListen(backlog int) error { return id.hw.id.Listen(backlog) }

func (id *ID) hwEstablish() error { return id.hw.id.Establish() }

func (id *ID) hwNotify(ev verbs.AsyncEventType) error { return id.hw.id.Notify(int(ev)) }

// hwDrop lets go of the ID's rdma_cm_id after a failed hand-over. The
// caller holds state.mu.
func (id *ID) hwDrop() {
	id.hwDestroy()
	id.hw = nil
}

// hwBind binds the ID to addr on the kernel device that holds it; false
// when no kernel device (or no rdma_cm) does. The caller holds state.mu.
func (id *ID) hwBind(addr netip.AddrPort) (bool, error) {
	if id.goroceOnly {
		return false, nil
	}
	if err := id.hwTake(); err != nil {
		if errors.Is(err, verbs.ErrNotSupported) {
			return true, fmt.Errorf("cm: bind %v: %w", addr, err)
		}
		return false, nil
	}
	if err := id.hw.id.BindAddr(addr); err != nil || id.hw.id.DeviceName() == "" {
		id.hwDrop()
		if errors.Is(err, syscall.EADDRINUSE) {
			return true, errnoErr(syscall.EADDRINUSE, ErrAddrInUse, "cm: bind %v: %v", addr, ErrAddrInUse)
		}
		return false, nil
	}
	dev, err := hwDevice(id.hw.id.DeviceName())
	if err != nil {
		id.hwDrop()
		return true, fmt.Errorf("cm: bind %v: %w", addr, err)
	}
	id.hw.dev = dev
	id.src = id.hw.id.LocalAddr()
	id.st = idAddrBound
	return true, nil
}

// hwResolve asks the kernel's rdma_cm to resolve dst, for an ID that
// found no goroce device for it: handled is false when there is no
// rdma_cm here. The outcome comes as an event. The caller holds
// state.mu.
func (id *ID) hwResolve(dst netip.AddrPort, timeout time.Duration) (handled bool, err error) {
	if id.goroceOnly {
		return false, nil
	}
	var src netip.AddrPort
	if id.hw == nil {
		// The wildcard binding ResolveAddr made (or BindAddr): the
		// kernel binds the rdma_cm_id instead, on the port if one was
		// asked for.
		if id.src.Port() != 0 && id.bind != nil && id.portAsked {
			src = id.src
		}
		if err := id.hwTake(); err != nil {
			if errors.Is(err, verbs.ErrNotSupported) {
				return true, fmt.Errorf("cm: resolve address: %w", err)
			}
			return false, nil
		}
		id.releasePort()
	}
	id.dst = dst
	if err := id.hw.id.ResolveAddr(src, dst, timeout); err != nil {
		return true, fmt.Errorf("cm: resolve address %v: %w", dst, err)
	}
	return true, nil
}

// hwQPAttr is InitQPAttr on a kernel device: librdmacm's attributes,
// with this package's RNR timer on the way to RTR (the kernel leaves 0,
// 655 ms). The caller holds state.mu.
func (id *ID) hwQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	if (state == verbs.QPStateRTR || state == verbs.QPStateRTS) && id.qpType != verbs.QPTypeUD &&
		(id.st != idConnect || id.active && !id.replied) {
		// The kernel answers with attributes that name no peer QP
		// before the REP (rxe0 did): refused, as on goroce.
		return verbs.QPAttr{}, 0, fmt.Errorf("cm: init QP attributes for %v before the connection's values: %w", state, id.errState("init QP attributes"))
	}
	a, mask, err := id.hw.id.InitQPAttr(state)
	if err != nil {
		return verbs.QPAttr{}, 0, fmt.Errorf("cm: init QP attributes: %w", hwStateErr(err))
	}
	if state == verbs.QPStateRTR && mask&verbs.QPAttrMinRNRTimer != 0 {
		a.MinRNRTimer = DefaultMinRNRTimer
		if id.opts.minRNRTimer != 0 {
			a.MinRNRTimer = id.opts.minRNRTimer
		}
	}
	return *a, mask, nil
}

// hwParamOf is p as librdmacm's, for the QP qpn: the event API's and the
// net-like API's (whose retry counts are 7 at most already).
func hwParamOf(p *ConnParam, qpn uint32, srq bool) *rdmacm.ConnParam {
	return &rdmacm.ConnParam{PrivateData: p.PrivateData, ResponderResources: p.ResponderResources,
		InitiatorDepth: p.InitiatorDepth, RetryCount: min(p.RetryCount, 7), RNRRetryCount: min(p.RNRRetryCount, 7),
		QPNum: qpn, SRQ: srq}
}

// hwConnect is Connect on a kernel device. The caller holds state.mu
// and has checked the state.
func (id *ID) hwConnect(p *ConnParam) error {
	qpn, srq, err := id.qpNumber(p)
	if err != nil {
		return fmt.Errorf("cm: connect: %w", err)
	}
	if id.qpType == verbs.QPTypeUD {
		if len(p.PrivateData) > MaxUDConnectPrivateData {
			return fmt.Errorf("cm: connect: %d bytes of private data exceed %d: %w", len(p.PrivateData), MaxUDConnectPrivateData, verbs.ErrInvalidArgument)
		}
	} else {
		if len(p.PrivateData) > MaxConnectPrivateData {
			return fmt.Errorf("cm: connect: %d bytes of private data exceed %d: %w", len(p.PrivateData), MaxConnectPrivateData, verbs.ErrInvalidArgument)
		}
		if p.SelectiveRepeat {
			return fmt.Errorf("cm: connect: SelectiveRepeat on a kernel RDMA device: %w", verbs.ErrNotSupported)
		}
		attr := id.hw.dev.Query()
		if err := checkDepths(p, attr); err != nil {
			return fmt.Errorf("cm: connect: %w", err)
		}
		q := *p
		q.ResponderResources = depth(p.ResponderResources, attr.MaxQPRdAtom)
		q.InitiatorDepth = depth(p.InitiatorDepth, attr.MaxQPInitRdAtom)
		p = &q
	}
	if err := id.hw.id.Connect(hwParamOf(p, qpn, srq)); err != nil {
		return fmt.Errorf("cm: connect to %v: %w", id.dst, hwStateErr(err))
	}
	id.active, id.st = true, idConnect
	return nil
}

// hwAccept is Accept on a kernel device: the ID's QP, if it has one, is
// moved to RTS first, as librdmacm's rdma_accept does. The caller holds
// state.mu.
func (id *ID) hwAccept(p *ConnParam) error {
	pp := defaultConnParam
	if p != nil {
		pp = *p
	}
	qpn, srq, err := id.qpNumber(&pp)
	if err != nil {
		return fmt.Errorf("cm: accept: %w", err)
	}
	if id.qpType == verbs.QPTypeUD {
		if len(pp.PrivateData) > MaxUDAcceptPrivateData {
			return fmt.Errorf("cm: accept: %d bytes of private data exceed %d: %w", len(pp.PrivateData), MaxUDAcceptPrivateData, verbs.ErrInvalidArgument)
		}
		if id.qp != nil {
			if err := id.readyUD(id.qp); err != nil {
				return fmt.Errorf("cm: accept: %w", err)
			}
		}
		if err := id.hw.id.Accept(&rdmacm.ConnParam{PrivateData: pp.PrivateData, QPNum: qpn}); err != nil {
			return fmt.Errorf("cm: accept: %w", hwStateErr(err))
		}
		id.replied = true
		return nil
	}
	if len(pp.PrivateData) > MaxAcceptPrivateData {
		return fmt.Errorf("cm: accept: %d bytes of private data exceed %d: %w", len(pp.PrivateData), MaxAcceptPrivateData, verbs.ErrInvalidArgument)
	}
	attr := id.hw.dev.Query()
	// Within the device's limits and the peer's asks (librdmacm refuses
	// more).
	pp.ResponderResources = min(depth(pp.ResponderResources, attr.MaxQPRdAtom), id.hw.offer.ResponderResources)
	pp.InitiatorDepth = min(depth(pp.InitiatorDepth, attr.MaxQPInitRdAtom), id.hw.offer.InitiatorDepth)
	if id.qp != nil {
		if err := id.connectQP(); err != nil {
			_ = id.hw.id.Reject(nil)
			_ = id.qpToErr()
			return fmt.Errorf("cm: accept: %w", err)
		}
	}
	if err := id.hw.id.Accept(hwParamOf(&pp, qpn, srq)); err != nil {
		_ = id.qpToErr()
		return fmt.Errorf("cm: accept: %w", hwStateErr(err))
	}
	id.replied = true
	return nil
}

// hwReject is RejectWith on a kernel device: librdmacm sends the
// consumer's reason, or rdma_reject_ece's. The caller holds state.mu.
func (id *ID) hwReject(reason RejectReason, privateData []byte) error {
	limit := MaxRejectPrivateData
	if id.qpType == verbs.QPTypeUD {
		limit = MaxUDAcceptPrivateData
	}
	if len(privateData) > limit {
		return fmt.Errorf("cm: reject: %d bytes of private data exceed %d: %w", len(privateData), limit, verbs.ErrInvalidArgument)
	}
	var err error
	switch reason {
	case RejectConsumer:
		err = id.hw.id.Reject(privateData)
	case RejectVendorOption:
		err = id.hw.id.RejectECE(privateData)
	default:
		return fmt.Errorf("cm: reject with reason %v on a kernel RDMA device (librdmacm sends %v or %v only): %w",
			reason, RejectConsumer, RejectVendorOption, verbs.ErrNotSupported)
	}
	if err != nil {
		return fmt.Errorf("cm: reject: %w", hwStateErr(err))
	}
	_ = id.qpToErr()
	return nil
}

// hwDisconnect is Disconnect on a kernel device. The caller holds
// state.mu.
func (id *ID) hwDisconnect() error {
	if id.qpType == verbs.QPTypeUD {
		return id.errState("disconnect")
	}
	if err := id.qpToErr(); err != nil {
		return fmt.Errorf("cm: disconnect: %w", err)
	}
	if err := id.hw.id.Disconnect(); err != nil {
		return fmt.Errorf("cm: disconnect: %w", hwStateErr(err))
	}
	return nil
}

// hwMigrate moves the ID's rdma_cm_id to ch's librdmacm channel. The
// caller holds state.mu.
func (id *ID) hwMigrate(ch *EventChannel) error {
	c, err := ch.hwChannelLocked()
	if err != nil {
		return fmt.Errorf("cm: migrate: %w", err)
	}
	if err := id.hw.id.Migrate(c); err != nil {
		return fmt.Errorf("cm: migrate: %w", err)
	}
	return nil
}

// hwDestroy destroys the ID's rdma_cm_id: the kernel's CM refuses a
// request, disconnects a connection and stops a listener, as for a
// goroce device. The caller holds state.mu; the pump never waits for it
// while librdmacm waits for the pump's acknowledgements.
func (id *ID) hwDestroy() {
	delete(hwIDs, id.hw.id)
	_ = id.hw.id.Destroy()
}

// pump takes the channel's librdmacm events until it is closed.
func (h *hwChannel) pump() {
	defer close(h.done)
	for {
		ev, err := h.ch.GetEvent(time.Time{})
		if err != nil {
			if errors.Is(err, rdmacm.ErrClosed) {
				return
			}
			continue // EINTR and the like: librdmacm's read failed, the event stays queued
		}
		lock()
		hwEvent(ev)
		unlock()
	}
}

// hwEvent reports a librdmacm event on its ID, doing first what
// librdmacm does for an ID with a QP. The caller holds state.mu.
func hwEvent(ev rdmacm.Event) {
	if ev.Type == rdmacm.EventConnectRequest {
		hwConnectRequest(ev)
		return
	}
	id := hwIDs[ev.ID]
	if id == nil || id.destroyed {
		return // destroyed meanwhile: its events are dropped
	}
	out := &Event{Type: EventType(ev.Type), Status: ev.Status, Conn: hwConnParam(ev.Param)}
	switch ev.Type {
	case rdmacm.EventAddrResolved:
		dev, err := hwDevice(ev.ID.DeviceName())
		if err != nil {
			out.Type, out.Err = EventAddrError, errnoErr(syscall.ENODEV, ErrNoDevice, "cm: resolve %v: %v", id.dst, err)
			break
		}
		id.hw.dev = dev
		id.src, id.dst = ev.ID.LocalAddr(), ev.ID.PeerAddr()
		id.st = idAddrResolved
	case rdmacm.EventAddrError:
		out.Err = hwErrnoErr(ev.Status, ErrNoRoute, "cm: resolve %v", id.dst)
		if ev.Status == -int(syscall.ENODEV) {
			out.Err = hwErrnoErr(ev.Status, ErrNoDevice, "cm: resolve %v: no RDMA device for the route", id.dst)
		}
	case rdmacm.EventRouteResolved:
		id.st = idRouteResolved
		id.hwRoute()
	case rdmacm.EventRouteError:
		out.Err = hwErrnoErr(ev.Status, ErrNoRoute, "cm: resolve the route to %v", id.dst)
	case rdmacm.EventConnectResponse:
		id.replied = true
		if id.qp != nil {
			// librdmacm's ucma_process_conn_resp: INIT again (the
			// rights), RTR, RTS, the RTU; ESTABLISHED instead.
			if err := id.connectQP(); err != nil {
				_ = id.hw.id.Reject(nil)
				_ = id.qpToErr()
				out.Type, out.Status = EventConnectError, -int(syscall.EINVAL)
				out.Err = fmt.Errorf("cm: connect to %v: %w: %w", id.dst, ErrConnect, err)
				break
			}
			if err := id.hw.id.Establish(); err != nil {
				_ = id.qpToErr()
				out.Type, out.Err = EventConnectError, fmt.Errorf("cm: connect to %v: %w: %w", id.dst, ErrConnect, err)
				out.Status = status(out.Err)
				break
			}
			out.Type = EventEstablished
		}
	case rdmacm.EventEstablished:
		if id.qpType == verbs.QPTypeUD {
			out.Conn = ConnParam{}
			out.UD = UDParam{PrivateData: ev.Param.PrivateData, QPNum: ev.UD.QPNum, QKey: ev.UD.QKey, AH: ev.UD.AH}
		}
	case rdmacm.EventRejected:
		_ = id.qpToErr()
		out.Conn = ConnParam{PrivateData: ev.Param.PrivateData}
		out.Err = &RejectError{Reason: RejectReason(ev.Status), PrivateData: ev.Param.PrivateData}
	case rdmacm.EventUnreachable:
		_ = id.qpToErr()
		if ev.Status > 0 { // a SIDR_REP's status
			out.Conn = ConnParam{}
			out.UD = UDParam{PrivateData: ev.Param.PrivateData}
			out.Err = &RejectError{SIDR: true, SIDRStatus: SIDRStatus(ev.Status), PrivateData: ev.Param.PrivateData}
		} else {
			out.Err = hwErrnoErr(ev.Status, ErrTimeout, "cm: %v: no answer", id.dst)
		}
	case rdmacm.EventConnectError:
		_ = id.qpToErr()
		out.Err = hwErrnoErr(ev.Status, ErrConnect, "cm: connect to %v", id.dst)
	case rdmacm.EventDisconnected:
		id.st = idDisconnect
		if ev.Status != 0 {
			out.Err = hwErrnoErr(ev.Status, ErrTimeout, "cm: disconnect from %v", id.dst)
		}
	case rdmacm.EventDeviceRemoval:
		id.removed = true
		out.Err = hwErrnoErr(ev.Status, ErrDeviceRemoved, "cm: %v", ErrDeviceRemoved)
	}
	id.post(out)
}

// hwConnectRequest reports a connection request on its listener, with a new ID
// for it. The caller holds state.mu.
func hwConnectRequest(ev rdmacm.Event) {
	l := hwIDs[ev.Listen]
	if l == nil || l.destroyed || l.st != idListen || ev.ID == nil {
		if ev.ID != nil {
			_ = ev.ID.Reject(nil)
			_ = ev.ID.Destroy()
		}
		return
	}
	child := newID(l.ch, l.context, l.ps, l.qpType)
	child.hw = &hwID{id: ev.ID, dev: l.hw.dev, offer: ev.Param}
	hwIDs[ev.ID] = child
	child.parent, child.opts, child.st = l, l.opts, idConnect
	child.src, child.dst = ev.ID.LocalAddr(), ev.ID.PeerAddr()
	child.hwRoute()
	if child.src.Port() == 0 {
		child.src = netip.AddrPortFrom(child.src.Addr(), l.src.Port())
	}
	out := &Event{Type: EventConnectRequest, Listen: l, Status: ev.Status}
	if l.qpType == verbs.QPTypeUD {
		out.UD = UDParam{PrivateData: ev.Param.PrivateData}
	} else {
		out.Conn = hwConnParam(ev.Param)
	}
	child.requestEvent = out
	l.pendingRequests++
	child.post(out)
}

// hwRoute takes the ID's path from the kernel's route, if it has one
// (RoCE's UDP port is 4791). The caller holds state.mu.
func (id *ID) hwRoute() {
	r, ok := id.hw.id.Route()
	if !ok {
		return
	}
	id.route = Route{SGID: r.SGID, DGID: r.DGID, PathMTU: r.MTU, HopLimit: r.HopLimit, TrafficClass: r.TrafficClass,
		FlowLabel: r.FlowLabel, PacketLifetime: r.PacketLifetime, UDPPort: verbs.DefaultUDPPort}
	id.routeOK = true
}

// hwConnParam is what librdmacm reported of the peer's values.
func hwConnParam(p rdmacm.ConnParam) ConnParam {
	return ConnParam{PrivateData: p.PrivateData, ResponderResources: p.ResponderResources,
		InitiatorDepth: p.InitiatorDepth, RetryCount: p.RetryCount, RNRRetryCount: p.RNRRetryCount,
		QPNum: p.QPNum, SRQ: p.SRQ}
}

// hwErrnoErr is a librdmacm status (a negative errno) as this package's
// error, matching sentinel and the errno.
func hwErrnoErr(st int, sentinel error, format string, args ...any) error {
	errno := syscall.Errno(-st)
	if st >= 0 {
		errno = syscall.EIO
	}
	return errnoErr(errno, sentinel, "%s: %v (%v)", fmt.Sprintf(format, args...), sentinel, errno)
}
