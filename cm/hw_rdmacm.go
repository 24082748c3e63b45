//go:build linux && cgo && goroce_ibverbs

package cm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/rdmacm"
	"github.com/goroce/goroce/verbs"
)

// The net-like API on kernel RDMA devices (verbs.OpenHardware): the
// kernel's rdma_cm speaks the CM through librdmacm (internal/rdmacm), and
// the QP stays the application's, moved with the attributes librdmacm
// computes. Each connection's events are watched by a goroutine of its
// own, parked in Go's poller on its event channel.

// hwWaitSlice bounds each wait for an event, so that a context without a
// deadline is still seen to end: librdmacm's channel knows no context.
const hwWaitSlice = 100 * time.Millisecond

// hwWait waits on ch for an event of type want; the failures become this
// package's errors.
func hwWait(ctx context.Context, ch *rdmacm.EventChannel, want rdmacm.EventType) (rdmacm.Event, error) {
	for {
		if err := ctx.Err(); err != nil {
			return rdmacm.Event{}, err
		}
		deadline := time.Now().Add(hwWaitSlice)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		ev, err := ch.GetEvent(deadline)
		if errors.Is(err, rdmacm.ErrTimeout) {
			continue
		}
		if err != nil {
			return ev, err
		}
		if ev.Type == want {
			return ev, nil
		}
		if err := hwEventErr(ev); err != nil {
			return ev, err
		}
	}
}

// hwEventErr is the error a failure event stands for, nil for the others.
func hwEventErr(ev rdmacm.Event) error {
	switch ev.Type {
	case rdmacm.EventRejected:
		return &RejectError{Reason: RejectReason(ev.Status), PrivateData: ev.Param.PrivateData}
	case rdmacm.EventUnreachable:
		if ev.Status == -int(syscall.ETIMEDOUT) {
			return ErrTimeout
		}
		return fmt.Errorf("%v (status %d): %w", ev.Type, ev.Status, ErrTimeout)
	case rdmacm.EventAddrError, rdmacm.EventRouteError:
		return fmt.Errorf("%v (status %d): %w", ev.Type, ev.Status, ErrNoRoute)
	case rdmacm.EventConnectError:
		return fmt.Errorf("%v (status %d): %w", ev.Type, ev.Status, ErrConnect)
	case rdmacm.EventDisconnected:
		return ErrDisconnected
	case rdmacm.EventDeviceRemoval:
		return ErrDeviceRemoved
	}
	return nil
}

// hwUnsupported refuses what only goroce peers agree on.
func hwUnsupported(p *Params) error {
	switch {
	case p == nil:
		return nil
	case p.Security != nil:
		return fmt.Errorf("Security on a hardware device (librdmacm carries no packet keys): %w", verbs.ErrNotSupported)
	case p.SelectiveRepeat:
		return fmt.Errorf("SelectiveRepeat on a hardware device: %w", verbs.ErrNotSupported)
	}
	return nil
}

// hwMove moves qp to state with librdmacm's attributes; on the way to RTR
// the responder's RNR timer is the package's (librdmacm leaves 0, 655 ms).
func hwMove(id *rdmacm.ID, qp *verbs.QP, state verbs.QPState, p *Params) error {
	a, mask, err := id.InitQPAttr(state)
	if err != nil {
		return err
	}
	if state == verbs.QPStateRTR && mask&verbs.QPAttrMinRNRTimer != 0 {
		a.MinRNRTimer = DefaultMinRNRTimer
		if p != nil && p.MinRNRTimer != 0 {
			a.MinRNRTimer = p.MinRNRTimer
		}
	}
	return qp.Modify(a, mask)
}

// hwCheckDevice checks that the ID resolved to qp's device.
func hwCheckDevice(id *rdmacm.ID, qp *verbs.QP) error {
	if n, want := id.DeviceName(), qp.PD().Device().Name(); n != want {
		return fmt.Errorf("the address is on device %q, the QP on %q: %w", n, want, verbs.ErrInvalidArgument)
	}
	return nil
}

func hwRemote(addr netip.AddrPort, p rdmacm.ConnParam) RemoteInfo {
	return RemoteInfo{Addr: addr, QPN: p.QPNum, ResponderResources: int(p.InitiatorDepth),
		InitiatorDepth: int(p.ResponderResources), RetryCount: p.RetryCount, RNRRetryCount: p.RNRRetryCount,
		SRQ: p.SRQ, PrivateData: p.PrivateData}
}

// hwDial is Dial from a QP of a hardware device.
func hwDial(ctx context.Context, address string, qp *verbs.QP, p *Params) (*Conn, error) {
	if err := hwUnsupported(p); err != nil {
		return nil, err
	}
	cp, err := p.connParam()
	if err != nil {
		return nil, err
	}
	addrs, err := resolveAddress(ctx, address)
	if err != nil {
		return nil, err
	}
	ch, err := rdmacm.NewEventChannel()
	if err != nil {
		return nil, err
	}
	id, err := ch.CreateID()
	if err != nil {
		_ = ch.Close()
		return nil, err
	}
	conn, err := hwConnect(ctx, ch, id, addrs[0], qp, p, &cp)
	if err != nil {
		_ = id.Destroy()
		_ = ch.Close()
		_ = qpToErr(qp)
		return nil, err
	}
	return conn, nil
}

// hwResolve resolves dst's address and route on id, as rdma_resolve_addr
// and rdma_resolve_route with their events, and checks that the device it
// resolved to is qp's.
func hwResolve(ctx context.Context, ch *rdmacm.EventChannel, id *rdmacm.ID, dst netip.AddrPort, qp *verbs.QP) error {
	if err := id.ResolveAddr(netip.AddrPort{}, dst, resolveTimeout); err != nil {
		return err
	}
	if _, err := hwWait(ctx, ch, rdmacm.EventAddrResolved); err != nil {
		return err
	}
	if err := hwCheckDevice(id, qp); err != nil {
		return err
	}
	if err := id.ResolveRoute(resolveTimeout); err != nil {
		return err
	}
	_, err := hwWait(ctx, ch, rdmacm.EventRouteResolved)
	return err
}

func hwConnect(ctx context.Context, ch *rdmacm.EventChannel, id *rdmacm.ID, dst netip.AddrPort, qp *verbs.QP, p *Params, cp *ConnParam) (*Conn, error) {
	if err := hwResolve(ctx, ch, id, dst, qp); err != nil {
		return nil, err
	}
	if qp.State() == verbs.QPStateReset {
		if err := hwMove(id, qp, verbs.QPStateInit, p); err != nil {
			return nil, err
		}
	}
	if err := id.Connect(hwParamOf(cp, qp.QPN(), cp.SRQ)); err != nil {
		return nil, err
	}
	ev, err := hwWait(ctx, ch, rdmacm.EventConnectResponse)
	if err != nil {
		return nil, err
	}
	// INIT again once the CM knows the connection, as librdmacm's
	// ucma_modify_qp_rtr does: before, rdma_init_qp_attr gives no remote
	// rights (the kernel has no IB CM ID yet); now it gives the
	// responder resources' READ and atomic rights.
	for _, s := range []verbs.QPState{verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS} {
		if err := hwMove(id, qp, s, p); err != nil {
			_ = id.Reject(nil)
			return nil, fmt.Errorf("%w: %w", ErrConnect, err)
		}
	}
	if err := id.Establish(); err != nil {
		return nil, err
	}
	return newHWConn(ch, id, qp, hwRemote(id.PeerAddr(), ev.Param), id.LocalAddr()), nil
}

// hwConn is a Conn's librdmacm side.
type hwConn struct {
	ch *rdmacm.EventChannel
	id *rdmacm.ID

	// mu orders Close's Disconnect before the watcher's Destroy: after
	// that the cm_id is freed memory.
	mu   sync.Mutex
	gone bool
}

func newHWConn(ch *rdmacm.EventChannel, id *rdmacm.ID, qp *verbs.QP, remote RemoteInfo, local netip.AddrPort) *Conn {
	c := &Conn{qp: qp, remote: remote, local: local, done: make(chan struct{}), hw: &hwConn{ch: ch, id: id}}
	go c.hwWatch()
	return c
}

// hwWatch takes the connection's events until it has ended, then
// releases the ID and its channel.
func (c *Conn) hwWatch() {
	for {
		ev, err := c.hw.ch.GetEvent(time.Time{})
		if err != nil {
			c.end(fmt.Errorf("cm: connection to %v: %w", c.remote.Addr, err))
			break
		}
		if ev.Type == rdmacm.EventDisconnected {
			c.mu.Lock()
			closing := c.closing
			c.mu.Unlock()
			if closing {
				c.end(net.ErrClosed)
			} else {
				// The peer's DREQ: the QP to ERR, and the DREP. Done
				// closes after the QP is in ERR, as on goroce devices
				// (TestHardwareConnSendWriteClose saw it still RTS).
				_ = qpToErr(c.qp)
				c.end(fmt.Errorf("cm: connection to %v: %w", c.remote.Addr, ErrDisconnected))
				c.hw.mu.Lock()
				_ = c.hw.id.Disconnect()
				c.hw.mu.Unlock()
			}
			break
		}
		if err := hwEventErr(ev); err != nil {
			c.end(fmt.Errorf("cm: connection to %v: %w", c.remote.Addr, err))
			break
		}
	}
	c.hw.mu.Lock()
	c.hw.gone = true
	_ = c.hw.id.Destroy()
	c.hw.mu.Unlock()
	_ = c.hw.ch.Close()
}

// hwClose is Close on a hardware connection: the QP to ERR and a DREQ;
// the watcher releases the ID on the DREP (or the DREQ's timeout).
func (c *Conn) hwClose() error {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	err := qpToErr(c.qp)
	c.hw.mu.Lock()
	if !c.hw.gone {
		if derr := c.hw.id.Disconnect(); derr != nil && err == nil && !errors.Is(derr, syscall.EINVAL) {
			err = derr // EINVAL: the peer's DREQ came first
		}
	}
	c.hw.mu.Unlock()
	c.end(net.ErrClosed)
	if err != nil {
		return fmt.Errorf("cm: close: %w", err)
	}
	return nil
}

// hwListener is a Listener's librdmacm side.
type hwListener struct {
	ch *rdmacm.EventChannel
	id *rdmacm.ID
	ud bool // UDP port space: its requests are SIDR requests
}

// hwListen listens on the first of addrs that belongs to a kernel RDMA
// device, in the UDP port space if ud; (nil, nil) when none does.
func hwListen(addrs []netip.AddrPort, backlog int, ud bool) (*Listener, error) {
	if backlog == 0 {
		backlog = DefaultBacklog
	}
	ch, err := rdmacm.NewEventChannel()
	if err != nil {
		return nil, nil // no rdma_cm here: no kernel device
	}
	for _, ap := range addrs {
		if !ap.Addr().IsValid() || ap.Addr().IsUnspecified() {
			continue
		}
		create := ch.CreateID
		if ud {
			create = ch.CreateUDID
		}
		id, err := create()
		if err != nil {
			break
		}
		if id.BindAddr(ap) != nil || id.DeviceName() == "" {
			_ = id.Destroy()
			continue
		}
		if err := id.Listen(backlog); err != nil {
			_ = id.Destroy()
			_ = ch.Close()
			return nil, fmt.Errorf("cm: listen %v: %w", ap, err)
		}
		return &Listener{addr: netip.AddrPortFrom(ap.Addr(), id.LocalPort()), hw: &hwListener{ch: ch, id: id, ud: ud}}, nil
	}
	_ = ch.Close()
	return nil, nil
}

func (l *Listener) hwAccept(ctx context.Context) (*Request, error) {
	for {
		if l.closed.Load() {
			return nil, fmt.Errorf("cm: accept on %v: %w", l.addr, net.ErrClosed)
		}
		ev, err := hwWait(ctx, l.hw.ch, rdmacm.EventConnectRequest)
		if errors.Is(err, ErrDeviceRemoved) {
			l.removed.Store(true)
		}
		if err != nil {
			return nil, fmt.Errorf("cm: accept on %v: %w", l.addr, err)
		}
		ch, err := rdmacm.NewEventChannel()
		if err != nil {
			_ = ev.ID.Reject(nil)
			_ = ev.ID.Destroy()
			return nil, fmt.Errorf("cm: accept on %v: %w", l.addr, err)
		}
		if err := ev.ID.Migrate(ch); err != nil {
			_ = ev.ID.Destroy()
			_ = ch.Close()
			continue // the request died meanwhile
		}
		return &Request{remote: hwRemote(ev.ID.PeerAddr(), ev.Param), ud: l.hw.ud,
			hw: &hwRequest{ch: ch, id: ev.ID, offer: ev.Param}}, nil
	}
}

func (l *Listener) hwClose() error {
	l.closed.Store(true)
	err := l.hw.id.Destroy()
	if cerr := l.hw.ch.Close(); err == nil {
		err = cerr
	}
	return err
}

// hwRequest is a Request's librdmacm side.
type hwRequest struct {
	ch    *rdmacm.EventChannel
	id    *rdmacm.ID
	offer rdmacm.ConnParam // the request's, from this side's point of view
}

func (r *Request) hwRelease() {
	_ = r.hw.id.Destroy()
	_ = r.hw.ch.Close()
}

func (r *Request) hwReject(privateData []byte) error {
	limit := MaxRejectPrivateData
	if r.ud {
		limit = MaxUDAcceptPrivateData // a SIDR_REP's
	}
	if len(privateData) > limit {
		return fmt.Errorf("cm: reject: %d bytes of private data, at most %d: %w", len(privateData), limit, verbs.ErrInvalidArgument)
	}
	defer r.hwRelease()
	return r.hw.id.Reject(privateData)
}

func (r *Request) hwAccept(ctx context.Context, qp *verbs.QP, p *Params) (*Conn, error) {
	if qp == nil {
		return nil, fmt.Errorf("nil QP: %w", verbs.ErrInvalidArgument)
	}
	if !qp.PD().Device().Hardware() {
		return nil, fmt.Errorf("a request on a kernel RDMA device needs a QP of it (verbs.OpenHardware): %w", verbs.ErrInvalidArgument)
	}
	if err := hwUnsupported(p); err != nil {
		return nil, err
	}
	cp, err := p.connParam()
	if err != nil {
		return nil, err
	}
	if err := hwCheckDevice(r.hw.id, qp); err != nil {
		return nil, err
	}
	// Within the peer's asks (librdmacm refuses more).
	cp.ResponderResources = min(cp.ResponderResources, r.hw.offer.ResponderResources)
	cp.InitiatorDepth = min(cp.InitiatorDepth, r.hw.offer.InitiatorDepth)
	// INIT even from INIT, as on goroce devices (connectQP): the
	// connection's rights (rdma_init_qp_attr's access flags) replace
	// those the QP came with; its posted receives stay.
	for _, s := range []verbs.QPState{verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS} {
		if err := hwMove(r.hw.id, qp, s, p); err != nil {
			_ = r.hw.id.Reject(nil)
			_ = qpToErr(qp)
			return nil, err
		}
	}
	if err := r.hw.id.Accept(hwParamOf(&cp, qp.QPN(), cp.SRQ)); err != nil {
		_ = r.hw.id.Reject(nil)
		_ = qpToErr(qp)
		return nil, err
	}
	if _, err := hwWait(ctx, r.hw.ch, rdmacm.EventEstablished); err != nil {
		_ = qpToErr(qp)
		return nil, err
	}
	return newHWConn(r.hw.ch, r.hw.id, qp, r.remote, r.hw.id.LocalAddr()), nil
}

// hwReadyUD moves a UD QP to RTS for id, as librdmacm's ucma_init_ud_qp
// does: INIT with rdma_init_qp_attr's P_Key index, port and Q_Key (the
// ID's, RDMA_UDP_QKEY), then RTR and RTS, which take nothing else.
func hwReadyUD(id *rdmacm.ID, qp *verbs.QP) error {
	if s := qp.State(); s != verbs.QPStateReset && s != verbs.QPStateInit {
		return fmt.Errorf("UD QP %#x is in %v, want RESET or INIT: %w", qp.QPN(), s, verbs.ErrInvalidState)
	}
	a, mask, err := id.InitQPAttr(verbs.QPStateInit)
	if err != nil {
		return err
	}
	if err := qp.Modify(a, mask); err != nil {
		return err
	}
	if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR}, verbs.QPAttrState); err != nil {
		return err
	}
	return qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS}, verbs.QPAttrState|verbs.QPAttrSQPSN)
}

// hwDialUD is DialUD from a UD QP of a hardware device: a SIDR request
// through an ID of librdmacm's UDP port space.
func hwDialUD(ctx context.Context, address string, qp *verbs.QP, p *Params) (*UDService, error) {
	if err := hwUnsupported(p); err != nil {
		return nil, err
	}
	var pd []byte
	if p != nil {
		pd = p.PrivateData
	}
	if len(pd) > MaxUDConnectPrivateData {
		return nil, fmt.Errorf("%d bytes of private data, at most %d: %w", len(pd), MaxUDConnectPrivateData, verbs.ErrInvalidArgument)
	}
	addrs, err := resolveAddress(ctx, address)
	if err != nil {
		return nil, err
	}
	ch, err := rdmacm.NewEventChannel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	id, err := ch.CreateUDID()
	if err != nil {
		return nil, err
	}
	defer id.Destroy()
	if err := hwResolve(ctx, ch, id, addrs[0], qp); err != nil {
		return nil, err
	}
	if err := hwReadyUD(id, qp); err != nil {
		return nil, err
	}
	if err := id.Connect(&rdmacm.ConnParam{PrivateData: pd, QPNum: qp.QPN()}); err != nil {
		return nil, err
	}
	ev, err := hwWait(ctx, ch, rdmacm.EventEstablished)
	if err != nil && ev.Type == rdmacm.EventUnreachable && ev.Status > 0 {
		// A SIDR_REP whose status is not success: the kernel reports
		// it as unreachable, with the SIDR status.
		return nil, &RejectError{Reason: RejectReason(ev.Status), PrivateData: ev.Param.PrivateData}
	}
	if err != nil {
		return nil, err
	}
	return &UDService{Addr: id.PeerAddr(), QPN: ev.UD.QPNum, QKey: ev.UD.QKey, AH: ev.UD.AH, PrivateData: ev.Param.PrivateData}, nil
}

// hwAcceptUD answers a SIDR request with qp, moved to RTS with the
// request ID's Q_Key, and privateData.
func (r *Request) hwAcceptUD(qp *verbs.QP, privateData []byte) error {
	if !qp.PD().Device().Hardware() {
		return fmt.Errorf("cm: accept UD request from %v: a request on a kernel RDMA device needs a QP of it (verbs.OpenHardware): %w", r.remote.Addr, verbs.ErrInvalidArgument)
	}
	if len(privateData) > MaxUDAcceptPrivateData {
		return fmt.Errorf("cm: accept UD request from %v: %d bytes of private data, at most %d: %w", r.remote.Addr, len(privateData), MaxUDAcceptPrivateData, verbs.ErrInvalidArgument)
	}
	if err := hwCheckDevice(r.hw.id, qp); err != nil {
		return err
	}
	if err := hwReadyUD(r.hw.id, qp); err != nil {
		return fmt.Errorf("cm: accept UD request from %v: %w", r.remote.Addr, err)
	}
	return r.hw.id.Accept(&rdmacm.ConnParam{PrivateData: privateData, QPNum: qp.QPN()})
}
