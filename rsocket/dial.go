package rsocket

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/verbs"
)

// Dialer connects to rsocket listeners: goroce's own and librdmacm's
// (rsockets' rconnect, rstream -s, riostream -s). The zero value dials
// from the goroce device on the address the kernel's routing picks toward
// the destination, opening it if need be.
type Dialer struct {
	// LocalAddr, when valid, is the address of the device to dial from.
	LocalAddr netip.Addr
	// Device, when set, is the device to dial from (LocalAddr is then
	// ignored): a goroce device, or a kernel RDMA device
	// (verbs.OpenHardware, -tags goroce_ibverbs; cm connects through
	// librdmacm). Otherwise the package opens a goroce device on the
	// local address and shares it with the connections and listeners on
	// that address.
	Device *verbs.Device
	// UDPPort is the RoCEv2 port of the device the package opens; zero
	// selects 4791.
	UDPPort uint16
	Config
}

// Dial connects to address ("ip:port" or "host:port", port the rdma_cm
// port) with the zero Dialer. network is "rdma", or "tcp", "tcp4" or
// "tcp6" for callers that name TCP.
func Dial(network, address string) (net.Conn, error) {
	var d Dialer
	return d.DialContext(context.Background(), network, address)
}

// DialContext connects to address (see Dial); ctx bounds resolving and
// connecting. Its signature is net.Dialer's, for http.Transport and gRPC.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := d.dial(ctx, network, address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "rdma", Err: err}
	}
	return c, nil
}

func (d *Dialer) dial(ctx context.Context, network, address string) (*Conn, error) {
	if err := checkNetwork(network); err != nil {
		return nil, err
	}
	if err := d.Config.check(); err != nil {
		return nil, err
	}
	dev, release, err := d.device(ctx, address)
	if err != nil {
		return nil, err
	}
	ep, err := newEndpoint(dev, &d.Config)
	if err != nil {
		release()
		return nil, err
	}
	cmc, err := cm.Dial(ctx, address, ep.qp, &cm.Params{RetryCount: 7, RNRRetryCount: 7, PrivateData: ep.connData()})
	if err != nil {
		_ = ep.destroy()
		release()
		return nil, err
	}
	peer, err := parseConnData(cmc.Remote().PrivateData)
	if err != nil {
		_ = cmc.Close()
		_ = ep.destroy()
		release()
		return nil, err
	}
	return newConn(ep, cmc, release, &peer, &d.Config), nil
}

// device returns the device to dial address from.
func (d *Dialer) device(ctx context.Context, address string) (*verbs.Device, func(), error) {
	if d.Device != nil {
		return d.Device, func() {}, nil
	}
	src := d.LocalAddr
	if !src.IsValid() {
		host, port, err := net.SplitHostPort(address)
		if err != nil {
			return nil, nil, err
		}
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, nil, err
		}
		if src, err = routeSource(ips[0], port); err != nil {
			return nil, nil, err
		}
	}
	return acquireDevice(src, d.UDPPort)
}

// routeSource is the address the kernel's routing sends from toward dst:
// a UDP connect, which sends nothing, tells.
func routeSource(dst netip.Addr, port string) (netip.Addr, error) {
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return netip.Addr{}, fmt.Errorf("port %q: %w", port, err)
	}
	c, err := net.Dial("udp", net.JoinHostPort(dst.Unmap().String(), port))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %v: %w", dst, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

func checkNetwork(network string) error {
	switch network {
	case "rdma", "tcp", "tcp4", "tcp6":
		return nil
	}
	return net.UnknownNetworkError(network)
}
