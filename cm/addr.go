package cm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/ibcm"
	"github.com/goroce/goroce/internal/mad"
	"github.com/goroce/goroce/verbs"
)

// Addresses, ports and routes: rdma_bind_addr, rdma_resolve_addr and
// rdma_resolve_route. rdma_cm keeps its own port spaces, apart from the
// kernel's TCP and UDP ports: a port belongs to the IDs bound to it, and
// the service ID of a connection names the listener's.

// bindKey is a port of a port space.
type bindKey struct {
	ps   PortSpace
	port uint16
}

// bindList is the IDs bound to one port (the kernel's rdma_bind_list).
type bindList struct {
	key    bindKey
	owners []*ID
}

// Ephemeral ports come from Linux's default ip_local_port_range, as the
// kernel's cma_alloc_any_port takes them.
const (
	ephemeralLow  = 32768
	ephemeralHigh = 60999
)

// wildcardOf returns the unspecified address of a's family.
func wildcardOf(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.IPv4Unspecified()
	}
	return netip.IPv6Unspecified()
}

// BindAddr binds the ID to a local address and port (rdma_bind_addr). An
// unspecified address binds every device (a listener then takes requests
// on all of them, those opened later included); a specific one binds the
// goroce device with that address, ErrNoDevice if there is none. Port 0
// picks a free port. ErrAddrInUse if the port is taken.
func (id *ID) BindAddr(addr netip.AddrPort) error {
	lock()
	defer unlock()
	if err := id.usable("bind"); err != nil {
		return err
	}
	if id.st != idIdle {
		return id.errState("bind")
	}
	return id.bindLocked(addr)
}

// bindLocked binds the ID. The caller holds state.mu.
func (id *ID) bindLocked(addr netip.AddrPort) error {
	ip := addr.Addr()
	if !ip.IsValid() {
		return fmt.Errorf("cm: bind: no address: %w", verbs.ErrInvalidArgument)
	}
	ip = ip.Unmap()
	if !ip.IsUnspecified() {
		a := agentFor(ip)
		if a == nil {
			if handled, err := id.hwBind(netip.AddrPortFrom(ip, addr.Port())); handled {
				return err
			}
			return errnoErr(syscall.ENODEV, ErrNoDevice, "cm: bind %v: %v", addr, ErrNoDevice)
		}
		a.attach(id)
	}
	if !id.opts.afOnlySet {
		// rdma_bind_addr: an IPv4 ID is IPv4 only; an IPv6 one takes
		// IPv4 too (net.ipv6.bindv6only=0).
		id.opts.afOnly = ip.Is4()
	}
	id.src = netip.AddrPortFrom(ip, addr.Port())
	id.portAsked = addr.Port() != 0
	if err := id.takePort(); err != nil {
		if id.agent != nil {
			id.agent.detach(id)
			id.agent = nil
		}
		return err
	}
	id.st = idAddrBound
	return nil
}

// takePort binds the ID's port, or a free one for port 0. The caller
// holds state.mu.
func (id *ID) takePort() error {
	if id.src.Port() != 0 {
		key := bindKey{id.ps, id.src.Port()}
		bl := state.binds[key]
		if bl != nil {
			if err := bl.check(id, id.opts.reuseAddr); err != nil {
				return err
			}
		} else {
			bl = &bindList{key: key}
			state.binds[key] = bl
		}
		bl.owners = append(bl.owners, id)
		id.bind = bl
		return nil
	}
	n := ephemeralHigh - ephemeralLow + 1
	start := rand.IntN(n)
	for i := range n {
		port := uint16(ephemeralLow + (start+i)%n)
		key := bindKey{id.ps, port}
		if state.binds[key] != nil {
			continue
		}
		bl := &bindList{key: key, owners: []*ID{id}}
		state.binds[key] = bl
		id.bind = bl
		id.src = netip.AddrPortFrom(id.src.Addr(), port)
		return nil
	}
	return errnoErr(syscall.EADDRNOTAVAIL, ErrAddrInUse, "cm: bind: no free port in %v: %v", id.ps, ErrAddrInUse)
}

// check refuses id's binding if it conflicts with an owner's (the
// kernel's cma_check_port): two IDs share a port only with different
// addresses, neither a wildcard covering the other, or both with
// REUSEADDR and neither listening.
func (bl *bindList) check(id *ID, reuse bool) error {
	for _, o := range bl.owners {
		if o == id {
			continue
		}
		if o.st != idListen && reuse && o.opts.reuseAddr {
			continue
		}
		a, b := id.src.Addr(), o.src.Addr()
		if id.opts.afOnly && o.opts.afOnly && a.Is4() != b.Is4() {
			continue
		}
		if a.IsUnspecified() || b.IsUnspecified() || a == b {
			return errnoErr(syscall.EADDRINUSE, ErrAddrInUse, "cm: bind %v port %d: %v", id.ps, bl.key.port, ErrAddrInUse)
		}
	}
	return nil
}

// releasePort drops the ID's binding. The caller holds state.mu.
func (id *ID) releasePort() {
	bl := id.bind
	if bl == nil {
		return
	}
	id.bind = nil
	if i := slices.Index(bl.owners, id); i >= 0 {
		bl.owners = slices.Delete(bl.owners, i, i+1)
	}
	if len(bl.owners) == 0 && state.binds[bl.key] == bl {
		delete(state.binds, bl.key)
	}
}

// ResolveAddr resolves dst to the device the ID will use
// (rdma_resolve_addr) and reports EventAddrResolved, or EventAddrError.
// An unbound ID is first bound to src (port 0: a free port), or to a
// wildcard of dst's family if src is zero. The device is the one bound to
// the source address: with a wildcard, the kernel's routing picks it (the
// source address of a route to dst; a local dst is reached from its own
// device). The kernel's routing must have a route from that address to
// dst (ErrNoRoute otherwise, ENETUNREACH); no goroce device with the
// source address is ErrNoDevice (ENODEV). Addresses need no neighbour
// resolution on UDP, so timeout only bounds nothing and must be positive.
func (id *ID) ResolveAddr(src, dst netip.AddrPort, timeout time.Duration) error {
	if timeout <= 0 {
		return fmt.Errorf("cm: resolve address: timeout %v: %w", timeout, verbs.ErrInvalidArgument)
	}
	dip := dst.Addr().Unmap()
	if !dip.IsValid() || dip.IsUnspecified() || dip.IsMulticast() {
		return fmt.Errorf("cm: resolve address: destination %v: %w", dst, verbs.ErrInvalidArgument)
	}
	dst = netip.AddrPortFrom(dip, dst.Port())
	lock()
	defer unlock()
	if err := id.usable("resolve address"); err != nil {
		return err
	}
	if id.st == idIdle {
		if !src.Addr().IsValid() {
			src = netip.AddrPortFrom(wildcardOf(dip), 0)
		}
		if err := id.bindLocked(src); err != nil {
			return err
		}
	}
	if id.st != idAddrBound {
		return id.errState("resolve address")
	}
	if id.removed {
		return fmt.Errorf("cm: resolve address: %w", ErrDeviceRemoved)
	}
	if id.hw != nil {
		_, err := id.hwResolve(dst, timeout)
		return err
	}
	id.dst = dst
	a, err := id.resolveDevice(dip)
	if err != nil {
		if errors.Is(err, ErrNoDevice) && id.agent == nil {
			// No goroce device on the way: the kernel's, if any.
			if handled, err := id.hwResolve(dst, timeout); handled {
				return err
			}
		}
		id.post(&Event{Type: EventAddrError, Err: err})
		return nil
	}
	if id.agent == nil {
		a.attach(id)
	}
	id.src = netip.AddrPortFrom(a.port.Addr(), id.src.Port())
	id.st = idAddrResolved
	id.post(&Event{Type: EventAddrResolved})
	return nil
}

// resolveDevice finds the device for a connection from the ID's address
// to dst and checks the kernel's route. The caller holds state.mu.
func (id *ID) resolveDevice(dst netip.Addr) (*agent, error) {
	sip := id.src.Addr()
	if sip.Is4() != dst.Is4() && !(sip.IsUnspecified() && !id.opts.afOnly) {
		return nil, errnoErr(syscall.EAFNOSUPPORT, ErrNoRoute, "cm: resolve %v from %v: address families differ: %v", dst, sip, ErrNoRoute)
	}
	if sip.IsUnspecified() {
		if a := agentFor(dst); a != nil {
			return a, nil // a local destination: loop back through its device
		}
		src, err := routeSource(netip.Addr{}, dst)
		if err != nil {
			return nil, err
		}
		a := agentFor(src)
		if a == nil {
			return nil, errnoErr(syscall.ENODEV, ErrNoDevice, "cm: resolve %v: the route's source address %v is no goroce device's: %v", dst, src, ErrNoDevice)
		}
		return a, nil
	}
	if _, err := routeSource(sip, dst); err != nil {
		return nil, err
	}
	return id.agent, nil
}

// routeSource asks the kernel's routing for a route from src (any, if
// zero) to dst by connecting a UDP socket, which sends nothing, and
// returns the source address the route has. A loopback source reaches
// only loopback destinations (IPv4 refuses the rest; IPv6 is told so
// here).
func routeSource(src, dst netip.Addr) (netip.Addr, error) {
	if src.IsValid() && src.IsLoopback() && !dst.IsLoopback() {
		return netip.Addr{}, errnoErr(syscall.ENETUNREACH, ErrNoRoute, "cm: no route from %v to %v: %v", src, dst, ErrNoRoute)
	}
	var laddr *net.UDPAddr
	if src.IsValid() {
		laddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0))
	}
	c, err := net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, verbs.DefaultUDPPort)))
	if err != nil {
		errno := syscall.ENETUNREACH
		var en syscall.Errno
		if errors.As(err, &en) && en == syscall.EHOSTUNREACH {
			errno = en
		}
		return netip.Addr{}, errnoErr(errno, ErrNoRoute, "cm: no route from %v to %v: %v (%v)", src, dst, ErrNoRoute, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// ResolveRoute sets the ID's path to the resolved address
// (rdma_resolve_route) and reports EventRouteResolved: on RoCE the path
// follows from the addresses: GIDs of the IP addresses, hop limit 64, the
// traffic class of SetTOS, the device's active MTU, rdma_cm's packet life
// time, and the flow label rdma_cm derives from both ports. timeout must
// be positive.
func (id *ID) ResolveRoute(timeout time.Duration) error {
	if timeout <= 0 {
		return fmt.Errorf("cm: resolve route: timeout %v: %w", timeout, verbs.ErrInvalidArgument)
	}
	lock()
	defer unlock()
	if err := id.onDevice("resolve route"); err != nil {
		return err
	}
	if id.st != idAddrResolved {
		return id.errState("resolve route")
	}
	if id.hw != nil {
		if err := id.hwResolveRoute(timeout); err != nil {
			return fmt.Errorf("cm: resolve route: %w", hwStateErr(err))
		}
		return nil
	}
	port, err := id.agent.dev.QueryPort(1)
	if err != nil {
		id.post(&Event{Type: EventRouteError, Err: errnoErr(syscall.ENODEV, ErrDeviceRemoved, "cm: resolve route: %v", err)})
		return nil
	}
	mtu := port.ActiveMTU
	if id.opts.pathMTU != 0 {
		mtu = min(mtu, id.opts.pathMTU)
	}
	id.route = Route{
		SGID:           verbs.GIDFromAddr(id.src.Addr()),
		DGID:           verbs.GIDFromAddr(id.dst.Addr()),
		PathMTU:        mtu,
		HopLimit:       roceHopLimit,
		TrafficClass:   id.opts.tos,
		FlowLabel:      mad.RDMACMFlowLabel(id.src.Port(), id.dst.Port()),
		PacketLifetime: ibcm.DefaultPacketLifetime,
		UDPPort:        peerUDPPort(id.dst.Addr()),
	}
	id.routeOK = true
	id.st = idRouteResolved
	id.post(&Event{Type: EventRouteResolved})
	return nil
}

// roceHopLimit is the hop limit of rdma_cm's RoCE paths (the route's
// default TTL): above 1, so the REQ's LIDs are permissive and the path
// not subnet-local.
const roceHopLimit = 64
