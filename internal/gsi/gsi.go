// Package gsi joins a device's general services interface, its QP 1, to
// the connection manager: package verbs implements a Port for every open
// device and registers it here; package cm finds the ports by address and
// drives each one's IB CM. Neither exports anything to the other, so the
// public verbs API stays free of management hooks.
//
// The registry is also the process-wide list of open goroce devices: cm
// looks a device up by its IP address (rdma_cm binds an address, not a
// device) and learns of devices opened and closed later through Watch.
package gsi

import (
	"net/netip"
	"slices"
	"sync"
)

// MADSize is the size of a management datagram: the payload of every
// packet to and from QP 1.
const MADSize = 256

// Port is a device's QP 1 as the CM sees it.
type Port interface {
	// Addr is the device's IP address; UDPPort the port it receives on
	// (4791 unless the device was opened with another).
	Addr() netip.Addr
	UDPPort() uint16
	// NodeGUID is the device's node GUID: stable for the device's
	// address and port, unique among devices, the CA GUID of its CM.
	NodeGUID() uint64
	// Device is the *verbs.Device behind the port.
	Device() any
	// Send sends a 256-byte MAD as a UD SEND Only from QP 1 to QP 1 at
	// to, with the GSI Q_Key and P_Key 0xFFFF, from the device's
	// constant QP 1 source port. It may be called concurrently.
	Send(to netip.AddrPort, mad []byte) error
	// SetReceiver makes r the receiver of the port's MADs and QP
	// events; nil detaches it. MADs that arrive without a receiver are
	// counted and dropped.
	SetReceiver(r Receiver)
}

// Receiver takes what a Port receives. Both methods run on the device's
// receive path and must neither block nor call back into the device. A
// device with several receive queues calls them from several goroutines:
// CommEstablished of different QPs at the same time, and ReceiveMAD
// while a CommEstablished runs (QP 1's packets all take one queue).
type Receiver interface {
	// ReceiveMAD is a MAD that passed the GSI checks (UD SEND Only to QP
	// 1 from QP 1, GSI Q_Key, P_Key 0xFFFF, 256 bytes): from is the
	// sender's address (the source of the GRH), to the device's. mad is
	// valid only during the call.
	ReceiveMAD(from netip.AddrPort, to netip.Addr, mad []byte)
	// CommEstablished reports that connected QP qpn received its first
	// packet from its peer, in RTR (IBA's communication established) or
	// already in RTS: the CM takes it for the RTU when that was lost.
	CommEstablished(qpn uint32)
}

// registry holds the open ports and the watchers. notify serialises the
// watchers' calls (Register, Unregister, Watch's replay), so that each
// watcher sees every port come up before it goes down, exactly once; mu
// guards the lists and is never held across a call.
var registry struct {
	notify   sync.Mutex
	mu       sync.Mutex
	ports    []Port
	watchers []*watcher
}

type watcher struct {
	fn func(p Port, up bool)
}

// Register adds p, the port of a device just opened, and tells the
// watchers.
func Register(p Port) {
	registry.notify.Lock()
	defer registry.notify.Unlock()
	registry.mu.Lock()
	registry.ports = append(registry.ports, p)
	ws := slices.Clone(registry.watchers)
	registry.mu.Unlock()
	for _, w := range ws {
		w.fn(p, true)
	}
}

// Unregister tells the watchers that p, the port of a device being
// closed, goes away (they may still send on it meanwhile), then removes
// it.
func Unregister(p Port) {
	registry.notify.Lock()
	defer registry.notify.Unlock()
	registry.mu.Lock()
	i := slices.Index(registry.ports, p)
	ws := slices.Clone(registry.watchers)
	registry.mu.Unlock()
	if i < 0 {
		return
	}
	for _, w := range ws {
		w.fn(p, false)
	}
	registry.mu.Lock()
	if i := slices.Index(registry.ports, p); i >= 0 {
		registry.ports = slices.Delete(registry.ports, i, i+1)
	}
	registry.mu.Unlock()
}

// Lookup returns the port of the open device bound to addr (an
// IPv4-mapped address counts as IPv4), or nil.
func Lookup(addr netip.Addr) Port {
	addr = addr.Unmap()
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for _, p := range registry.ports {
		if p.Addr() == addr {
			return p
		}
	}
	return nil
}

// Ports returns the ports of every open device, oldest first.
func Ports() []Port {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return slices.Clone(registry.ports)
}

// Watch calls fn(p, true) for every open port, then for every port
// registered later, and fn(p, false) for every port being unregistered,
// until stop is called. Each port is reported up once, and down once
// after that. fn runs on the goroutine that opens or closes the device
// and holds it up meanwhile; it may call Lookup and Ports, not Register,
// Unregister or Watch.
func Watch(fn func(p Port, up bool)) (stop func()) {
	w := &watcher{fn: fn}
	registry.notify.Lock()
	registry.mu.Lock()
	registry.watchers = append(registry.watchers, w)
	ports := slices.Clone(registry.ports)
	registry.mu.Unlock()
	for _, p := range ports {
		fn(p, true)
	}
	registry.notify.Unlock()
	return func() {
		registry.notify.Lock()
		defer registry.notify.Unlock()
		registry.mu.Lock()
		defer registry.mu.Unlock()
		if i := slices.Index(registry.watchers, w); i >= 0 {
			registry.watchers = slices.Delete(registry.watchers, i, i+1)
		}
	}
}
