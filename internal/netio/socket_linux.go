//go:build linux && !goroce_portable

package netio

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// socketKind says what a socket is for, which decides its options.
type socketKind uint8

const (
	// receiveSocket is the Conn's socket on the configured port: it
	// receives every RoCEv2 packet for the device.
	receiveSocket socketKind = iota
	// sendSocket is bound to a per-QP source port and only sends.
	sendSocket
)

// listen opens a UDP socket bound to addr with the options of kind set
// before the bind, and returns it with its raw connection for the
// recvmmsg/sendmmsg system calls.
func listen(addr netip.AddrPort, kind socketKind, cfg *Config) (*net.UDPConn, syscall.RawConn, error) {
	network := "udp4"
	if addr.Addr().Is6() {
		network = "udp6" // sets IPV6_V6ONLY: the socket sees only IPv6
	}
	lc := net.ListenConfig{
		Control: func(_, _ string, rc syscall.RawConn) error {
			var err error
			if cerr := rc.Control(func(fd uintptr) {
				err = setSocketOptions(int(fd), addr.Addr().Is6(), kind, cfg)
			}); cerr != nil {
				return cerr
			}
			return err
		},
	}
	pc, err := lc.ListenPacket(context.Background(), network, addr.String())
	if err != nil {
		return nil, nil, err
	}
	uc := pc.(*net.UDPConn)
	rc, err := uc.SyscallConn()
	if err != nil {
		uc.Close()
		return nil, nil, err
	}
	return uc, rc, nil
}

// setSocketOptions sets the options every goroce socket needs.
//
//   - Path MTU discovery "do" (IP_PMTUDISC_DO): DF is set and the kernel
//     never fragments; a packet larger than the path MTU fails with
//     EMSGSIZE. With DF set on an unconnected socket Linux also sends IPv4
//     identification 0, which the ICRC covers: the Sender computes its ICRCs
//     for it (and
//     so does the numbering of GSO segments from 0, see gso_linux.go), and
//     rxe drops packets whose ICRC was computed for another id. The sockets
//     are therefore never connect()ed (a connected socket counts ids).
//   - Large buffers: bursts of MTU-sized packets must not be dropped by the
//     socket before the receive loop runs. SO_RCVBUFFORCE/SO_SNDBUFFORCE go
//     past net.core.rmem_max/wmem_max when the process may (CAP_NET_ADMIN);
//     otherwise the plain options give what the limits allow.
//   - Receive socket: IP_PKTINFO / IPV6_RECVPKTINFO report the destination
//     address of each datagram (covered by the ICRC), IP_RECVTOS /
//     IPV6_RECVTCLASS its ECN field (RecvInfo.ECN); UDP_NO_CHECK6_RX makes
//     IPv6 accept UDP checksum 0, which rxe sends (RFC 6936 allows it for
//     tunnels; Linux drops such datagrams by default).
//   - Receive socket with Config.ReusePort: SO_REUSEPORT, so that the
//     sockets of a receive group (OpenGroup) share the address and port.
//   - Send sockets: a socket filter that drops every datagram, so that
//     anything sent to a source port (nothing should be) does not sit in a
//     buffer nobody reads, and a minimal receive buffer.
func setSocketOptions(fd int, v6 bool, kind socketKind, cfg *Config) error {
	if v6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO); err != nil {
			return os.NewSyscallError("setsockopt IPV6_MTU_DISCOVER", err)
		}
	} else {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
			return os.NewSyscallError("setsockopt IP_MTU_DISCOVER", err)
		}
	}
	if err := setBuffer(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, cfg.WriteBuffer); err != nil {
		return err
	}
	if cfg.ECT {
		if err := setTrafficClass(fd, v6, ecnECT0); err != nil {
			return err
		}
	}
	switch kind {
	case receiveSocket:
		if err := setBuffer(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, cfg.ReadBuffer); err != nil {
			return err
		}
		if cfg.ReusePort {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
				return os.NewSyscallError("setsockopt SO_REUSEPORT", err)
			}
		}
		if v6 {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1); err != nil {
				return os.NewSyscallError("setsockopt IPV6_RECVPKTINFO", err)
			}
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1); err != nil {
				return os.NewSyscallError("setsockopt UDP_NO_CHECK6_RX", err)
			}
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1); err != nil {
				return os.NewSyscallError("setsockopt IPV6_RECVTCLASS", err)
			}
		} else {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1); err != nil {
				return os.NewSyscallError("setsockopt IP_PKTINFO", err)
			}
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1); err != nil {
				return os.NewSyscallError("setsockopt IP_RECVTOS", err)
			}
		}
	case sendSocket:
		// The kernel raises 0 to its minimum (a few KiB).
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 0); err != nil {
			return os.NewSyscallError("setsockopt SO_RCVBUF", err)
		}
		if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &dropAll); err != nil {
			return os.NewSyscallError("setsockopt SO_ATTACH_FILTER", err)
		}
	}
	return nil
}

// ReusePortSpreads reports whether receive sockets sharing one address and
// port (Config.ReusePort, OpenGroup) divide the arriving flows among
// them: Linux's SO_REUSEPORT hashes each datagram's addresses and ports
// to one socket of the group. Elsewhere SO_REUSEPORT does not spread
// unicast (macOS, Windows) or is another option (FreeBSD's
// SO_REUSEPORT_LB), so the portable path has no groups.
const ReusePortSpreads = true

// setTrafficClass sets the IPv4 TOS or IPv6 traffic class byte the socket
// sends with (Config.ECT).
func setTrafficClass(fd int, v6 bool, tc int) error {
	if v6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, tc); err != nil {
			return os.NewSyscallError("setsockopt IPV6_TCLASS", err)
		}
		return nil
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS, tc); err != nil {
		return os.NewSyscallError("setsockopt IP_TOS", err)
	}
	return nil
}

// dropAll is a classic BPF program of one instruction, "ret #0": accept 0
// bytes of every packet, that is drop it.
var dropAll = unix.SockFprog{
	Len:    1,
	Filter: &[]unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}[0],
}

// setBuffer sets a socket buffer size, first with the privileged option that
// ignores the system limit, then with the ordinary one. size 0 leaves the
// system default.
func setBuffer(fd, force, plain, size int) error {
	if size <= 0 {
		return nil
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, size) == nil {
		return nil
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, size); err != nil {
		return os.NewSyscallError(fmt.Sprintf("setsockopt buffer option %d", plain), err)
	}
	return nil
}

// openSenderSocket opens the socket of a Sender on src: on this platform
// one outside the network poller (sendSock), whose raw connection it
// returns.
func openSenderSocket(src netip.AddrPort, cfg *Config) (*net.UDPConn, syscall.RawConn, error) {
	k, err := openSendSocket(src, cfg)
	if err != nil {
		return nil, nil, err
	}
	return nil, k, nil
}

// openSendSocket opens a send socket (sendSocket) bound to addr, outside
// Go's network poller: a blocking socket that the runtime never registers
// with its epoll instance. A socket in that instance has an epoll entry on
// its wait queue, and the kernel then wakes the queue for every datagram
// the socket sent (sock_wfree makes room in the send buffer: EPOLLOUT),
// which wakes a thread of the process sleeping in epoll_wait, to find
// nothing to do. With more than one processor one usually sleeps there: a
// WRITE stream's sender spent 13 % of its CPU in those wake-ups. Nothing
// waits for a send socket's readability (it only sends), and its sends do
// not block: each passes MSG_DONTWAIT and waits in poll(2) for room
// (sendSock.Write).
func openSendSocket(addr netip.AddrPort, cfg *Config) (*sendSock, error) {
	v6 := addr.Addr().Is6()
	family := unix.AF_INET
	if v6 {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	fail := func(err error) (*sendSock, error) {
		unix.Close(fd)
		return nil, err
	}
	if v6 {
		// As net's udp6: the socket sees only IPv6.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			return fail(os.NewSyscallError("setsockopt IPV6_V6ONLY", err))
		}
	}
	if err := setSocketOptions(fd, v6, sendSocket, cfg); err != nil {
		return fail(err)
	}
	var sa unix.Sockaddr
	if v6 {
		sa = &unix.SockaddrInet6{Port: int(addr.Port()), Addr: addr.Addr().As16()}
	} else {
		sa = &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()}
	}
	if err := unix.Bind(fd, sa); err != nil {
		return fail(os.NewSyscallError("bind", err))
	}
	return &sendSock{fd: fd}, nil
}

// sendSock is a send socket outside the network poller (openSendSocket).
// It is the Sender's syscall.RawConn: Write runs the Sender's sendmmsg
// (which passes MSG_DONTWAIT) and waits in poll(2) while it finds the
// send buffer full; Control gives the descriptor to a function (socket
// options, tests).
type sendSock struct {
	// mu is held shared while the descriptor is in use and exclusively
	// by Close, so that a send never reaches a descriptor closed, and
	// perhaps reused, under it. closed, set by Close before it waits
	// for mu, refuses new uses and makes a send that waits for room
	// give up within closePoll.
	mu     sync.RWMutex
	fd     int
	closed atomic.Bool
}

var _ syscall.RawConn = (*sendSock)(nil)

// closePoll is how long, in milliseconds, a send waits in poll(2) at a
// time before it looks for a Close.
const closePoll = 100

// Control calls f with the descriptor.
func (k *sendSock) Control(f func(fd uintptr)) error {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if k.closed.Load() {
		return net.ErrClosed
	}
	f(uintptr(k.fd))
	return nil
}

// Write calls f with the descriptor until it returns true, waiting for
// room in the send buffer between calls.
func (k *sendSock) Write(f func(fd uintptr) bool) error {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if k.closed.Load() {
		return net.ErrClosed
	}
	for !f(uintptr(k.fd)) {
		if err := k.waitRoom(); err != nil {
			return err
		}
	}
	return nil
}

// waitRoom waits until the send buffer has room, or fails when the socket
// is being closed. The caller holds mu shared.
func (k *sendSock) waitRoom() error {
	if k.closed.Load() {
		return net.ErrClosed
	}
	if e := waitWritable(uintptr(k.fd), closePoll); e != 0 {
		return os.NewSyscallError("poll", e)
	}
	return nil
}

// waitWritable waits until the socket fd has room in its send buffer, or
// for at most timeout milliseconds; it returns 0 then, or why poll(2)
// failed.
func waitWritable(fd uintptr, timeout int) unix.Errno {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	for {
		_, err := unix.Poll(pfd, timeout)
		switch {
		case err == nil:
			return 0
		case err == unix.EINTR:
			continue
		default:
			return err.(unix.Errno)
		}
	}
}

// Read is not supported: the socket only sends.
func (k *sendSock) Read(func(fd uintptr) bool) error {
	return errors.New("netio: a send socket is not read")
}

// sendto sends one datagram b to dst, in the socket's family (v6 for
// AF_INET6), waiting for room if the send buffer is full. It does not
// allocate.
func (k *sendSock) sendto(b []byte, dst netip.AddrPort, v6 bool) error {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if k.closed.Load() {
		return net.ErrClosed
	}
	var name sockaddr
	n := name.encode(dst, v6)
	for {
		_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(k.fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), unix.MSG_DONTWAIT, uintptr(unsafe.Pointer(&name)), uintptr(n))
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			if err := k.waitRoom(); err != nil {
				return err
			}
			continue
		}
		return os.NewSyscallError("sendto", e)
	}
}

// Close closes the socket once no send uses it; a send waiting for room
// gives up (net.ErrClosed) within closePoll milliseconds.
func (k *sendSock) Close() error {
	if k.closed.Swap(true) {
		return net.ErrClosed
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return unix.Close(k.fd)
}

// isAddrInUse reports whether err is a bind failing because the port is
// taken.
func isAddrInUse(err error) bool {
	return errors.Is(err, unix.EADDRINUSE)
}

// steerByDestQP attaches to the receive group of rc's socket a classic
// BPF program (SO_ATTACH_REUSEPORT_CBPF) that picks, for each datagram,
// the group's socket (in the order they bound) with index BTH destination
// QP mod n. The kernel runs it with the data at the UDP payload, the BTH:
// its 32-bit word at byte 4 holds the destination QP in its low 24 bits.
// A datagram too short for the load makes the program return 0: the first
// socket, whose receiver drops it as malformed; an index past the group's
// sockets (none here) would fall back to the kernel's hash.
func steerByDestQP(rc syscall.RawConn, n int) error {
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 4},
		{Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: 0x00FFFFFF},
		{Code: unix.BPF_ALU | unix.BPF_MOD | unix.BPF_K, K: uint32(n)},
		{Code: unix.BPF_RET | unix.BPF_A},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	var err error
	if cerr := rc.Control(func(fd uintptr) {
		err = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &fprog)
	}); cerr != nil {
		return cerr
	}
	if err != nil {
		return os.NewSyscallError("setsockopt SO_ATTACH_REUSEPORT_CBPF", err)
	}
	return nil
}
