//go:build !linux || goroce_portable

package netio

import (
	"net"
	"net/netip"
	"syscall"
)

// socketKind says what a socket is for.
type socketKind uint8

const (
	// receiveSocket is the Conn's socket on the configured port.
	receiveSocket socketKind = iota
	// sendSocket is bound to a per-QP source port and only sends.
	sendSocket
)

// listen opens a UDP socket bound to addr through the net package, with
// the buffer sizes of cfg as far as the system allows, and returns it with
// its raw connection. None of socket_linux.go's options is set: no DF
// (packets above the path MTU are fragmented, not refused), no receive
// filter on send sockets (their few stray datagrams sit in the buffer),
// no acceptance of IPv6 UDP checksum 0 (rxe's IPv6 packets may be dropped
// by the kernel).
func listen(addr netip.AddrPort, kind socketKind, cfg *Config) (*net.UDPConn, syscall.RawConn, error) {
	if cfg.ReusePort {
		return nil, nil, ErrNoReceiveGroups
	}
	network := "udp4"
	if addr.Addr().Is6() {
		network = "udp6"
	}
	uc, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, nil, err
	}
	if cfg.WriteBuffer > 0 {
		_ = uc.SetWriteBuffer(cfg.WriteBuffer) // best effort, as on Linux without privileges
	}
	if kind == receiveSocket && cfg.ReadBuffer > 0 {
		_ = uc.SetReadBuffer(cfg.ReadBuffer)
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		uc.Close()
		return nil, nil, err
	}
	return uc, rc, nil
}

// ReusePortSpreads is false on the portable path: no receive groups (see
// the Linux definition).
const ReusePortSpreads = false

// probeOffloads reports no offloads: the portable path has neither GSO
// nor GRO.
func probeOffloads(syscall.RawConn, *Config) (gso, gro bool) { return false, false }

// steerByDestQP is never called on the portable path (no groups).
func steerByDestQP(syscall.RawConn, int) error { return ErrNoReceiveGroups }

// openSenderSocket opens the socket of a Sender on src: a UDPConn like
// the receive socket's.
func openSenderSocket(src netip.AddrPort, cfg *Config) (*net.UDPConn, syscall.RawConn, error) {
	return listen(src, sendSocket, cfg)
}
