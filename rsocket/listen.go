package rsocket

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/verbs"
)

// ListenConfig listens for rsocket connections: from goroce's Dialer and
// from librdmacm's rsockets (rstream, riostream). The zero value listens
// on the goroce device of the address given, opening it if need be.
type ListenConfig struct {
	// Device, when set, is the device to listen on: a goroce device (the
	// address's host part must then be its address or empty), or a
	// kernel RDMA device (verbs.OpenHardware; the address must be one of
	// its addresses).
	Device *verbs.Device
	// UDPPort is the RoCEv2 port of the device the package opens; zero
	// selects 4791.
	UDPPort uint16
	Config
}

// acceptTimeout bounds the connection handshake of one request (the REP
// until the RTU) in Accept.
const acceptTimeout = 30 * time.Second

// Listen listens on address, "ip:port" (port the rdma_cm port), with the
// zero ListenConfig; network as for Dial.
func Listen(network, address string) (*Listener, error) {
	var lc ListenConfig
	return lc.Listen(context.Background(), network, address)
}

// Listen listens on address (see the package-level Listen). ctx bounds
// resolving the address only.
func (lc *ListenConfig) Listen(ctx context.Context, network, address string) (*Listener, error) {
	l, err := lc.listen(ctx, network, address)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: "rdma", Err: err}
	}
	return l, nil
}

func (lc *ListenConfig) listen(ctx context.Context, network, address string) (*Listener, error) {
	if err := checkNetwork(network); err != nil {
		return nil, err
	}
	if err := lc.Config.check(); err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	dev, release, own := lc.Device, func() {}, lc.Device == nil
	if own {
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, err
		}
		if dev, release, err = acquireDevice(ips[0], lc.UDPPort); err != nil {
			return nil, err
		}
	}
	if dev.Hardware() {
		// A kernel device has several addresses: the one given.
		if host == "" {
			release()
			return nil, fmt.Errorf("rsocket: listen on a kernel RDMA device needs its address, not %q: %w", address, verbs.ErrInvalidArgument)
		}
	} else {
		address = net.JoinHostPort(dev.Addr().String(), port)
	}
	cml, err := cm.ListenConfig{}.Listen(ctx, address)
	if err != nil {
		release()
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Listener{cml: cml, dev: dev, own: own, release: release, cfg: lc.Config, ctx: ctx, stop: stop}, nil
}

// Listener accepts rsocket connections (a net.Listener).
type Listener struct {
	cml     *cm.Listener
	dev     *verbs.Device
	own     bool // dev is the package's: each connection holds it too
	release func()
	cfg     Config
	ctx     context.Context
	stop    context.CancelFunc
	refused atomic.Uint64
}

var _ net.Listener = (*Listener)(nil)

// Addr returns the listener's address (an Addr).
func (l *Listener) Addr() net.Addr { return Addr{l.cml.Addr()} }

// Accept waits for a connection request and connects it (rsockets'
// raccept): a request whose private data is not rs_conn_data version 1 is
// rejected, and Accept waits for the next. It returns an error wrapping
// net.ErrClosed once the listener is closed.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		req, err := l.cml.Accept(l.ctx)
		if err != nil {
			if l.ctx.Err() != nil {
				err = net.ErrClosed
			}
			return nil, &net.OpError{Op: "accept", Net: "rdma", Addr: l.Addr(), Err: err}
		}
		c, err := l.accept(req)
		if errors.Is(err, errBadConnData) {
			continue // refused: not an rsocket
		}
		if err != nil {
			if l.ctx.Err() != nil {
				err = net.ErrClosed
			}
			return nil, &net.OpError{Op: "accept", Net: "rdma", Addr: l.Addr(), Err: err}
		}
		return c, nil
	}
}

func (l *Listener) accept(req *cm.Request) (*Conn, error) {
	peer, err := parseConnData(req.PrivateData())
	if err != nil {
		l.refused.Add(1) // before the peer learns it
		_ = req.Reject(nil)
		return nil, err
	}
	ep, err := newEndpoint(l.dev, &l.cfg)
	if err != nil {
		_ = req.Reject(nil)
		return nil, err
	}
	ctx, cancel := context.WithTimeout(l.ctx, acceptTimeout)
	defer cancel()
	cmc, err := req.Accept(ctx, ep.qp, &cm.Params{PrivateData: ep.connData()})
	if err != nil {
		_ = ep.destroy()
		return nil, fmt.Errorf("connection from %v: %w", req.Remote().Addr, err)
	}
	release := func() {}
	if l.own { // the device stays open while the connection is, listener closed or not
		if _, release, err = acquireDevice(l.dev.Addr(), l.dev.UDPPort()); err != nil {
			_ = cmc.Close()
			_ = ep.destroy()
			return nil, err
		}
	}
	return newConn(ep, cmc, release, &peer, &l.cfg), nil
}

// Refused returns how many connection requests Accept rejected because
// their private data was not rsockets' rs_conn_data version 1.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// Close stops listening; connections accepted stay up. A blocked Accept
// returns an error wrapping net.ErrClosed.
func (l *Listener) Close() error {
	l.stop()
	err := l.cml.Close()
	l.release()
	return err
}
