package verbs

import (
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The port's active MTU follows the link MTU of the interface that carries
// the device's address, as rxe's does (rxe_set_mtu, called when the netdev's
// MTU changes): the largest IB MTU whose packets, headers included, fit in
// one link frame.
//
// rxe subtracts a flat RXE_MAX_HDR_LENGTH of 80 bytes for both IP
// versions. The largest headers a packet carrying payload can have are
// BTH (12) + RETH (16) + ImmDt (4) + ICRC (4) = 36 bytes (RDMA WRITE Only
// with Immediate) over UDP (8) and IP: 64 bytes on IPv4, which 80 covers,
// and 84 bytes on IPv6, which it does not (a 4096-byte WRITE with
// immediate on a 4176-byte IPv6 link is 4 bytes too long for rxe). goroce
// therefore subtracts max(80, the family's worst case): 80 on IPv4, so
// that a goroce port reports what rxe reports on the same link, and 84 on
// IPv6, so that every packet fits.
const (
	rxeHeaderAllowance = 80 // rxe's RXE_MAX_HDR_LENGTH
	// worst-case RoCEv2 packet overhead above the payload: UDP, BTH,
	// RETH, ImmDt, ICRC, plus the IP header
	roceOverhead = 8 + 12 + 16 + 4 + 4
	ipv4Header   = 20
	ipv6Header   = 40
)

// mtuFromLink returns the active MTU of a port on a link whose MTU is
// linkMTU bytes: the largest IB MTU that fits with the RoCEv2 headers of
// the address family, and MTU256 when none does (as rxe, which never
// reports less).
func mtuFromLink(linkMTU int, ipv6 bool) MTU {
	overhead := max(rxeHeaderAllowance, roceOverhead+ipv4Header)
	if ipv6 {
		overhead = max(rxeHeaderAllowance, roceOverhead+ipv6Header)
	}
	if m := MTUFromBytes(linkMTU - overhead); m.Valid() {
		return m
	}
	return MTU256
}

// linkMTURefresh is how old the active MTU may be before a query reads
// the interface again: a query then costs a netlink dump (or the GOOS's
// equivalent) at most once per interval, and a change of the link's MTU
// shows within it.
const linkMTURefresh = time.Second

// activeMTU is a port's active MTU: fixed when DeviceConfig.MTU set it,
// else derived from the link MTU of the interface carrying addr, read
// again on query when older than linkMTURefresh. Reading the interface
// by polling rather than watching netlink keeps it portable (net.Interface
// has the MTU on every GOOS) and costs nothing while nobody asks.
type activeMTU struct {
	fixed bool
	addr  netip.Addr
	cur   atomic.Int32 // the MTU last derived (or the fixed one)

	mu      sync.Mutex // serialises refreshes; guards the fields below
	ifindex int        // the interface last found carrying addr; 0 none
	read    time.Time  // when cur was last derived
}

// newActiveMTU returns the active MTU of a port bound to addr: fixed
// when override is valid, else following addr's interface.
func newActiveMTU(addr netip.Addr, override MTU) *activeMTU {
	a := &activeMTU{addr: addr, fixed: override.Valid()}
	if a.fixed {
		a.cur.Store(int32(override))
		return a
	}
	a.cur.Store(int32(a.derive()))
	a.read = time.Now()
	return a
}

// get returns the active MTU, reading the interface again when the last
// reading is older than linkMTURefresh.
func (a *activeMTU) get() MTU {
	if a.fixed {
		return a.cached()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if now := time.Now(); now.Sub(a.read) >= linkMTURefresh {
		a.cur.Store(int32(a.derive()))
		a.read = now
	}
	return a.cached()
}

// cached returns the active MTU last derived, without reading the
// interface (for paths that must not make system calls).
func (a *activeMTU) cached() MTU { return MTU(a.cur.Load()) }

// derive reads the link MTU of addr's interface and converts it. When no
// interface can be found (the address was removed, or the GOOS does not
// say), it keeps the last value, or on the first reading falls back to
// what the address suggests: MTU4096 on loopback (a 64 KiB link), MTU1024
// elsewhere (a 1500-byte Ethernet link). Called with mu held, or before
// the port is shared.
func (a *activeMTU) derive() MTU {
	ifi := a.lookup()
	if ifi == nil || ifi.MTU <= 0 {
		if m := a.cached(); m.Valid() {
			return m
		}
		return defaultActiveMTU(a.addr)
	}
	a.ifindex = ifi.Index
	return mtuFromLink(ifi.MTU, a.addr.Is6())
}

// lookup finds the interface carrying addr: the one found last if it
// still has the address, else a search of all interfaces.
func (a *activeMTU) lookup() *net.Interface {
	if a.ifindex != 0 {
		if ifi, err := net.InterfaceByIndex(a.ifindex); err == nil && carries(ifi, a.addr) {
			return ifi
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	for i := range ifs {
		if carries(&ifs[i], a.addr) {
			return &ifs[i]
		}
	}
	return nil
}

// carries reports whether ifi is the interface that holds addr: one of
// its addresses is addr; or addr is a loopback address (any of
// 127.0.0.0/8, which Linux routes to lo without listing each) and ifi is
// a loopback interface; or addr's zone names ifi.
func carries(ifi *net.Interface, addr netip.Addr) bool {
	if addr.Zone() != "" {
		return addr.Zone() == ifi.Name || addr.Zone() == strconv.Itoa(ifi.Index)
	}
	if addr.IsLoopback() && ifi.Flags&net.FlagLoopback != 0 {
		return true
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return false
	}
	for _, ia := range addrs {
		var ip net.IP
		switch v := ia.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		}
		if got, ok := netip.AddrFromSlice(ip); ok && got.Unmap() == addr.WithZone("") {
			return true
		}
	}
	return false
}
