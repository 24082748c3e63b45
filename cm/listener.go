package cm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/seal"
	"github.com/goroce/goroce/verbs"
)

// The net-like API's passive side, on the event API: a Listener is a
// listening ID with its channel; each request it accepts gets a channel of
// its own (Migrate), on which Request.Accept waits for the RTU.

// ListenConfig holds a Listener's options. The zero value listens for RC
// connections with the default backlog.
type ListenConfig struct {
	// Backlog bounds the requests received and not yet returned by
	// Accept; beyond it new REQs are dropped unanswered and the peers
	// retransmit them. Zero selects DefaultBacklog.
	Backlog int
	// PortSpace is PortSpaceTCP (zero) for RC connections, PortSpaceUDP
	// for UD services (answer with Request.AcceptUD).
	PortSpace PortSpace
}

// Listen listens for connection requests on address with the default
// configuration: "ip:port" on the goroce device of this process bound to
// ip, or else, in a build with the goroce_ibverbs tag, on the kernel RDMA
// device that has ip (see "Kernel RDMA devices"; ErrNoDevice if neither),
// ":port" on every goroce device of the process, those opened later
// included. Port 0 picks a free port (see
// Listener.Addr).
func Listen(address string) (*Listener, error) {
	return ListenConfig{}.Listen(context.Background(), address)
}

// Listen listens on address (see the package-level Listen). ctx bounds
// resolving a host name only.
func (lc ListenConfig) Listen(ctx context.Context, address string) (*Listener, error) {
	ps := lc.PortSpace
	if ps == 0 {
		ps = PortSpaceTCP
	}
	addrs, err := resolveAddress(ctx, address)
	if err != nil {
		return nil, err
	}
	ch := NewEventChannel()
	id, err := ch.CreateID(nil, ps)
	if err != nil {
		return nil, err
	}
	id.goroceOnly = true // kernel devices: hwListen
	for _, ap := range addrs {
		if err = id.BindAddr(ap); !errors.Is(err, ErrNoDevice) {
			break
		}
	}
	if errors.Is(err, ErrNoDevice) && (ps == PortSpaceTCP || ps == PortSpaceUDP) {
		// Not a goroce device's address: a kernel RDMA device's?
		if l, herr := hwListen(addrs, lc.Backlog, ps == PortSpaceUDP); l != nil || herr != nil {
			_ = id.Destroy()
			_ = ch.Close()
			return l, herr
		}
	}
	if err == nil {
		err = id.Listen(lc.Backlog)
	}
	if err != nil {
		_ = id.Destroy()
		_ = ch.Close()
		return nil, fmt.Errorf("cm: listen %s: %w", address, err)
	}
	return &Listener{ch: ch, id: id, addr: id.LocalAddr()}, nil
}

// Listener is the passive side (rdma_listen), on one device or all.
type Listener struct {
	ch   *EventChannel
	id   *ID
	hw   *hwListener // on a kernel RDMA device: librdmacm's listener, and ch and id nil
	addr netip.AddrPort

	accept    sync.Mutex // one Accept at a time takes a request and moves it
	closeOnce sync.Once
	closed    atomic.Bool
	removed   atomic.Bool // the device closed
}

// Addr returns the listener's address and port (an unspecified address
// for every device).
func (l *Listener) Addr() netip.AddrPort { return l.addr }

// Accept waits for the next connection request and returns it; answer it
// with Request.Accept (or Request.AcceptUD) or Request.Reject. It returns
// an error wrapping ctx.Err() when ctx ends, net.ErrClosed once the
// listener is closed, ErrDeviceRemoved once its device closed.
func (l *Listener) Accept(ctx context.Context) (*Request, error) {
	l.accept.Lock()
	defer l.accept.Unlock()
	if l.hw != nil {
		return l.hwAccept(ctx)
	}
	for {
		if l.removed.Load() {
			return nil, fmt.Errorf("cm: accept on %v: %w", l.addr, ErrDeviceRemoved)
		}
		if l.closed.Load() {
			return nil, fmt.Errorf("cm: accept on %v: %w", l.addr, net.ErrClosed)
		}
		ev, err := l.ch.GetEvent(ctx)
		if err != nil {
			if errors.Is(err, ErrClosed) {
				return nil, fmt.Errorf("cm: accept on %v: %w", l.addr, net.ErrClosed)
			}
			return nil, fmt.Errorf("cm: accept on %v: %w", l.addr, err)
		}
		switch ev.Type {
		case EventConnectRequest:
			r, err := newRequest(ev)
			_ = ev.Ack()
			if err != nil {
				continue // the request died meanwhile
			}
			return r, nil
		case EventDeviceRemoval:
			l.removed.Store(true)
		}
		_ = ev.Ack()
	}
}

// newRequest moves a request's ID to a channel of its own.
func newRequest(ev *Event) (*Request, error) {
	child := ev.ID
	ch := NewEventChannel()
	if err := child.Migrate(ch); err != nil {
		return nil, err
	}
	lock()
	remote := child.remoteInfo(ev.Conn)
	unlock()
	r := &Request{id: child, ch: ch, remote: remote, ud: child.qpType == verbs.QPTypeUD}
	if r.ud {
		r.remote.PrivateData = ev.UD.PrivateData
	}
	return r, nil
}

// pending returns the requests received and not yet taken by Accept.
func (l *Listener) pending() int {
	lock()
	defer unlock()
	return l.id.pendingRequests
}

// Close stops listening and refuses the requests Accept has not returned.
// Requests returned and connections are not affected.
func (l *Listener) Close() error {
	err := fmt.Errorf("cm: close listener %v: %w", l.addr, net.ErrClosed)
	l.closeOnce.Do(func() {
		if l.hw != nil {
			err = l.hwClose()
			return
		}
		l.closed.Store(true)
		err = l.id.Destroy()
		if cerr := l.ch.Close(); err == nil {
			err = cerr
		}
	})
	return err
}

// Request is a connection request a Listener received. Answer it once:
// Accept, AcceptUD or Reject. An unanswered request is refused by the CM
// after a while (about 70 s), but its resources stay until it is answered.
type Request struct {
	id       *ID
	ch       *EventChannel
	hw       *hwRequest // on a kernel RDMA device: librdmacm's request, and id and ch nil
	remote   RemoteInfo
	ud       bool
	answered atomic.Bool
}

// Remote returns what the active side announced in its request.
func (r *Request) Remote() RemoteInfo { return r.remote }

// PrivateData returns the private data of the request: 56 bytes for a REQ
// (after rdma_cm's header), 180 for a SIDR_REQ, zero-padded.
func (r *Request) PrivateData() []byte { return r.remote.PrivateData }

// UD reports whether the request asks for a UD service (AcceptUD).
func (r *Request) UD() bool { return r.ud }

func (r *Request) claim(op string) error {
	if !r.answered.CompareAndSwap(false, true) {
		return fmt.Errorf("cm: %s request from %v: already answered: %w", op, r.remote.Addr, verbs.ErrInvalidState)
	}
	return nil
}

// release destroys the request's ID and channel.
func (r *Request) release() {
	if r.hw != nil {
		r.hwRelease()
		return
	}
	_ = r.id.Destroy()
	_ = r.ch.Close()
}

// Accept accepts the request with qp (rdma_accept): an RC or UC QP in
// RESET or INIT (PrepareQP, then receives posted, if the peer may SEND
// at once), which it moves INIT→RTR→RTS with the connection's values before
// sending the REP with p's private data. It returns when the RTU arrives
// (or the QP's first packet, if the RTU is lost): both QPs are in RTS.
// ctx bounds the wait: when it ends the peer is sent a REJ and Accept
// returns an error wrapping ctx.Err(). After any failure the request is
// answered and the QP, if it got that far, is in ERR.
func (r *Request) Accept(ctx context.Context, qp *verbs.QP, p *Params) (*Conn, error) {
	if r.ud {
		return nil, fmt.Errorf("cm: accept request from %v: a UD request (use AcceptUD): %w", r.remote.Addr, verbs.ErrInvalidArgument)
	}
	if err := r.claim("accept"); err != nil {
		return nil, err
	}
	var c *Conn
	var err error
	if r.hw != nil {
		c, err = r.hwAccept(ctx, qp, p)
	} else {
		c, err = r.accept(ctx, qp, p)
	}
	if err != nil {
		r.release()
		return nil, fmt.Errorf("cm: accept request from %v: %w", r.remote.Addr, explainReject(err))
	}
	return c, nil
}

func (r *Request) accept(ctx context.Context, qp *verbs.QP, p *Params) (*Conn, error) {
	if qp == nil {
		return nil, fmt.Errorf("nil QP: %w", verbs.ErrInvalidArgument)
	}
	cp, err := p.connParam()
	if err != nil {
		return nil, err
	}
	if err := p.apply(r.id); err != nil {
		return nil, err
	}
	if err := r.id.SetQP(qp); err != nil {
		return nil, err
	}
	if p != nil && p.Security != nil {
		if cp.PrivateData, err = r.respond(p.Security, qp, cp.PrivateData); err != nil {
			_ = r.id.RejectWith(RejectConsumer, seal.RejectData(seal.CodeOf(err)))
			return nil, err
		}
	}
	if err := r.id.Accept(&cp); err != nil {
		_ = r.id.Reject(nil)
		return nil, err
	}
	ev, err := waitFor(ctx, r.ch, EventEstablished)
	if err != nil {
		_ = qpToErr(qp)
		return nil, err
	}
	_ = ev.Ack()
	return newConn(r.id, r.ch, qp, r.remote), nil
}

// AcceptUD answers a UD service request with qp, a UD QP, which it moves
// to RTS with the Q_Key UDPQKey: the peer's DialUD learns its QP number,
// Q_Key and address, and privateData (at most MaxUDAcceptPrivateData).
// The peer may send at once: hand the QP over in INIT (PrepareQP) with
// receives posted (UD has no RNR retries; a datagram without a receive is lost).
func (r *Request) AcceptUD(qp *verbs.QP, privateData []byte) error {
	if !r.ud {
		return fmt.Errorf("cm: accept UD request from %v: an RC request: %w", r.remote.Addr, verbs.ErrInvalidArgument)
	}
	if err := r.claim("accept"); err != nil {
		return err
	}
	defer r.release()
	if qp == nil {
		return fmt.Errorf("cm: accept UD request from %v: nil QP: %w", r.remote.Addr, verbs.ErrInvalidArgument)
	}
	if r.hw != nil {
		return r.hwAcceptUD(qp, privateData)
	}
	if err := r.id.SetQP(qp); err != nil {
		return err
	}
	return r.id.Accept(&ConnParam{PrivateData: privateData})
}

// Reject refuses the request (rdma_reject): the peer's Dial fails with a
// *RejectError of reason RejectConsumer and privateData (at most
// MaxRejectPrivateData; for a UD request SIDR status "rejected" and at
// most MaxUDAcceptPrivateData).
func (r *Request) Reject(privateData []byte) error {
	if err := r.claim("reject"); err != nil {
		return err
	}
	if r.hw != nil {
		return r.hwReject(privateData)
	}
	defer r.release()
	return r.id.Reject(privateData)
}

// waitFor waits for an event of type want on ch, turning the failures into
// errors; when ctx ends first it returns ctx's error. Other events are
// acknowledged and skipped.
func waitFor(ctx context.Context, ch *EventChannel, want EventType) (*Event, error) {
	for {
		ev, err := ch.GetEvent(ctx)
		if err != nil {
			return nil, err
		}
		if ev.Type == want {
			return ev, nil
		}
		err = ev.Err
		switch ev.Type {
		case EventAddrError, EventRouteError, EventConnectError, EventUnreachable, EventRejected, EventDeviceRemoval:
		case EventDisconnected:
			err = ErrDisconnected
		default:
			_ = ev.Ack()
			continue
		}
		_ = ev.Ack()
		if err == nil {
			err = fmt.Errorf("%v", ev.Type)
		}
		return nil, err
	}
}

// qpToErr moves a QP that got past INIT to ERR.
func qpToErr(qp *verbs.QP) error {
	switch qp.State() {
	case verbs.QPStateReset, verbs.QPStateInit, verbs.QPStateErr:
		return nil
	}
	return qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)
}

// resolveTimeout is what the net-like API gives ResolveAddr and
// ResolveRoute, which need none.
const resolveTimeout = 2 * time.Second
