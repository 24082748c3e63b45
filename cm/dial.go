package cm

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/verbs"
)

// The net-like API's active side, on the event API: an ID on a channel of
// its own, resolved from the QP's device, connected, and handed to a Conn.

// Dial connects qp to the listener at address ("ip:port" or
// "host:port"), from the QP's device (rdma_resolve_addr,
// rdma_resolve_route, rdma_connect), and returns when both QPs are in
// RTS. qp is an RC or UC QP in RESET or INIT (Dial moves it to INIT at
// once; one handed over in INIT, by PrepareQP, may have receives posted,
// so that the peer's first SEND finds one); on the REP it gets the
// connection's rights and goes to RTR and RTS, and the RTU goes out.
//
// Errors: invalid Params, QP type or state wrap verbs.ErrInvalidArgument,
// verbs.ErrNotSupported or verbs.ErrInvalidState before anything is sent;
// ErrNoRoute when the kernel's routing has no route from the device's
// address to the peer's; a *RejectError (ErrRejected, and ErrNoListener
// for a port nobody listens on) when the peer refuses; ErrTimeout when it
// never answers (the REQ is retransmitted for about a minute with the
// kernel's timers; Params.CMResponseTimeout and MaxCMRetries shorten
// that); ctx's error when ctx ends first (the peer is then sent a REJ).
// After a failure the QP may be in ERR (rdma_cm moves it there on a
// rejection or a timeout): move it to RESET before another attempt.
//
// A QP of a kernel RDMA device (verbs.OpenHardware) is connected through
// librdmacm (see "Kernel RDMA devices").
func Dial(ctx context.Context, address string, qp *verbs.QP, p *Params) (*Conn, error) {
	c, err := dial(ctx, address, qp, p)
	if err != nil {
		return nil, fmt.Errorf("cm: dial %s: %w", address, err)
	}
	return c, nil
}

func dial(ctx context.Context, address string, qp *verbs.QP, p *Params) (*Conn, error) {
	if qp == nil {
		return nil, fmt.Errorf("nil QP: %w", verbs.ErrInvalidArgument)
	}
	if t := qp.Type(); t != verbs.QPTypeRC && t != verbs.QPTypeUC {
		return nil, fmt.Errorf("%v QP: Dial connects RC and UC QPs (DialUD resolves UD services): %w", t, verbs.ErrNotSupported)
	}
	if s := qp.State(); s != verbs.QPStateReset && s != verbs.QPStateInit {
		return nil, fmt.Errorf("QP %#x is in %v, want RESET or INIT: %w", qp.QPN(), s, verbs.ErrInvalidState)
	}
	if qp.PD().Device().Hardware() {
		return hwDial(ctx, address, qp, p)
	}
	cp, err := p.connParam()
	if err != nil {
		return nil, err
	}
	var sec *securing
	if p != nil && p.Security != nil {
		if cp.PrivateData, sec, err = offerPrivateData(p.Security, cp.PrivateData); err != nil {
			return nil, err
		}
	}
	id, ch, err := resolve(ctx, address, PortSpaceTCP, qp, p)
	if err != nil {
		return nil, err
	}
	lock()
	id.sec = sec
	unlock()
	conn, err := connect(ctx, id, ch, qp, &cp)
	if err != nil {
		_ = id.Destroy()
		_ = ch.Close()
		_ = qpToErr(qp)
		return nil, explainReject(err)
	}
	return conn, nil
}

// connect sends the REQ and waits for the connection.
func connect(ctx context.Context, id *ID, ch *EventChannel, qp *verbs.QP, cp *ConnParam) (*Conn, error) {
	if err := id.Connect(cp); err != nil {
		return nil, err
	}
	ev, err := waitFor(ctx, ch, EventEstablished)
	if err != nil {
		return nil, err
	}
	lock()
	remote := id.remoteInfo(ev.Conn)
	unlock()
	_ = ev.Ack()
	return newConn(id, ch, qp, remote), nil
}

// resolve makes an ID of port space ps on a channel of its own, resolves
// address from qp's device and hands it qp. On failure nothing is left.
func resolve(ctx context.Context, address string, ps PortSpace, qp *verbs.QP, p *Params) (*ID, *EventChannel, error) {
	addrs, err := resolveAddress(ctx, address)
	if err != nil {
		return nil, nil, err
	}
	dst := addrs[0]
	src := qp.PD().Device().Addr()
	for _, a := range addrs { // a name may resolve to both families
		if a.Addr().Is4() == src.Is4() {
			dst = a
			break
		}
	}
	ch := NewEventChannel()
	id, err := ch.CreateID(nil, ps)
	if err != nil {
		_ = ch.Close()
		return nil, nil, err
	}
	id.goroceOnly = true // kernel devices: hwDial
	fail := func(err error) (*ID, *EventChannel, error) {
		_ = id.Destroy()
		_ = ch.Close()
		return nil, nil, err
	}
	if err := p.apply(id); err != nil {
		return fail(err)
	}
	if err := id.ResolveAddr(netip.AddrPortFrom(src, 0), dst, resolveTimeout); err != nil {
		return fail(err)
	}
	if ev, err := waitFor(ctx, ch, EventAddrResolved); err != nil {
		return fail(err)
	} else {
		_ = ev.Ack()
	}
	if err := id.ResolveRoute(resolveTimeout); err != nil {
		return fail(err)
	}
	if ev, err := waitFor(ctx, ch, EventRouteResolved); err != nil {
		return fail(err)
	} else {
		_ = ev.Ack()
	}
	if err := id.SetQP(qp); err != nil {
		return fail(err)
	}
	return id, ch, nil
}

// UDService is the answer to DialUD: where to send datagrams for the
// service.
type UDService struct {
	// Addr is the service's address and rdma_cm port.
	Addr netip.AddrPort
	// QPN and QKey are the service's UD QP and its Q_Key; AH the address
	// vector to create an address handle from.
	QPN  uint32
	QKey uint32
	AH   verbs.AddressVector
	// PrivateData is the service's (136 bytes, zero-padded).
	PrivateData []byte
}

// DialUD asks the listener at address (a ListenConfig with PortSpaceUDP)
// for its UD service with a SIDR_REQ carrying p's private data (at most
// MaxUDConnectPrivateData), from qp's device; qp, a UD QP, is moved to RTS
// with the Q_Key UDPQKey. Errors as Dial's; a refused request is a
// *RejectError with its SIDR status.
func DialUD(ctx context.Context, address string, qp *verbs.QP, p *Params) (*UDService, error) {
	s, err := dialUD(ctx, address, qp, p)
	if err != nil {
		return nil, fmt.Errorf("cm: dial UD %s: %w", address, err)
	}
	return s, nil
}

func dialUD(ctx context.Context, address string, qp *verbs.QP, p *Params) (*UDService, error) {
	if qp == nil || qp.Type() != verbs.QPTypeUD {
		return nil, fmt.Errorf("DialUD needs a UD QP: %w", verbs.ErrInvalidArgument)
	}
	if qp.PD().Device().Hardware() {
		return hwDialUD(ctx, address, qp, p)
	}
	var pd []byte
	if p != nil {
		pd = p.PrivateData
	}
	id, ch, err := resolve(ctx, address, PortSpaceUDP, qp, p)
	if err != nil {
		return nil, err
	}
	defer func() {
		_ = id.Destroy()
		_ = ch.Close()
	}()
	if err := id.Connect(&ConnParam{PrivateData: pd}); err != nil {
		return nil, err
	}
	ev, err := waitFor(ctx, ch, EventEstablished)
	if err != nil {
		return nil, err
	}
	defer ev.Ack()
	return &UDService{Addr: id.PeerAddr(), QPN: ev.UD.QPNum, QKey: ev.UD.QKey, AH: ev.UD.AH, PrivateData: ev.UD.PrivateData}, nil
}
