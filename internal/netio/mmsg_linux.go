//go:build linux && !goroce_portable

package netio

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Batched datagram I/O with recvmmsg(2) and sendmmsg(2).
//
// golang.org/x/net's ipv4.PacketConn.ReadBatch and WriteBatch wrap the same
// system calls, but they exchange addresses as net.Addr values: every
// received datagram allocates a *net.UDPAddr and every sent one needs one.
// The receive loop and the send path must not allocate per packet, so the
// message headers, I/O vectors and socket addresses live here in arrays
// allocated once, and addresses are converted to and from netip.AddrPort,
// which is a value type.

// sockaddr holds a struct sockaddr_in or sockaddr_in6 in the kernel's
// layout: family (host order), port (network order), then for IPv4 the
// address, for IPv6 the flow information, address and scope id.
type sockaddr [unix.SizeofSockaddrInet6]byte

// decode returns the address and port of a sockaddr the kernel filled in
// with n bytes; false for an unexpected family or length.
func (sa *sockaddr) decode(n uint32) (netip.AddrPort, bool) {
	port := binary.BigEndian.Uint16(sa[2:4])
	switch binary.NativeEndian.Uint16(sa[0:2]) {
	case unix.AF_INET:
		if n < unix.SizeofSockaddrInet4 {
			return netip.AddrPort{}, false
		}
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(sa[4:8])), port), true
	case unix.AF_INET6:
		if n < unix.SizeofSockaddrInet6 {
			return netip.AddrPort{}, false
		}
		// Scope ids (zones) are not kept: goroce binds no link-local
		// address, so they never matter for the ICRC or for replies.
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(sa[8:24])), port), true
	}
	return netip.AddrPort{}, false
}

// encode stores ap in the family of the socket (v6 for an AF_INET6 socket)
// and returns the sockaddr length.
func (sa *sockaddr) encode(ap netip.AddrPort, v6 bool) uint32 {
	*sa = sockaddr{}
	binary.BigEndian.PutUint16(sa[2:4], ap.Port())
	if !v6 {
		binary.NativeEndian.PutUint16(sa[0:2], unix.AF_INET)
		a := ap.Addr().As4()
		copy(sa[4:8], a[:])
		return unix.SizeofSockaddrInet4
	}
	binary.NativeEndian.PutUint16(sa[0:2], unix.AF_INET6)
	a := ap.Addr().As16()
	copy(sa[8:24], a[:])
	return unix.SizeofSockaddrInet6
}

// oobSize is the control-message room per received datagram: one
// IP_PKTINFO or IPV6_PKTINFO message (at most 40 bytes on 64-bit systems)
// and one UDP_GRO message (24 bytes), with spare room so that a control
// message added later does not truncate them.
const oobSize = 128

// pktinfoDst returns the destination address reported by the IP_PKTINFO or
// IPV6_PKTINFO control message in oob, and false when there is none.
func pktinfoDst(oob []byte) (netip.Addr, bool) {
	a, ok, _, _ := recvControl(oob)
	return a, ok
}

// mmsgBatch holds the kernel-facing arrays for up to len(hdrs) datagrams.
// All pointers in the headers point into the batch's own arrays (or, when
// sending, into the caller's packets during the call), so nothing escapes.
type mmsgBatch struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []sockaddr
	dsts  []netip.AddrPort // sending: the destination of each packet
	// Sending with segmentation offload: hdrs[i] carries segs[i] packets
	// (iovecs), and its UDP_SEGMENT control message, if any, lives in
	// ctrl[i*gsoCmsgSpace:].
	segs []int
	ctrl []byte
	// niov[i] is the number of I/O vectors of hdrs[i]: one for its
	// staged packets, else one per packet, three for a packet with a
	// separate payload, so iovs has three per header when sending.
	niov []int
	// stage is the staging buffer of the batch being sent (see
	// stage_linux.go), from the pool, and stageTail whether the last I/O
	// vector ends where stage does.
	stage     []byte
	stageTail bool

	// sendmmsg input: the headers hdrs[off:off+cnt] are sent, with the
	// flags sendFlags (MSG_DONTWAIT on a blocking sendSock).
	off, cnt  int
	sendFlags uintptr
	// Result of the last system call: datagrams transferred, or errno.
	n     int
	errno unix.Errno
	// fn is the bound method value sendmmsg handed to RawConn.Write, made
	// once so that a call allocates no closure. (Receiving goes through
	// receiver.read, which calls recvmmsg.)
	fn func(uintptr) bool
}

func newMmsgBatch(size int, recv bool) *mmsgBatch {
	b := &mmsgBatch{
		hdrs:  make([]unix.Mmsghdr, size),
		iovs:  make([]unix.Iovec, size),
		names: make([]sockaddr, size),
	}
	if !recv {
		b.iovs = make([]unix.Iovec, 3*size)
		b.dsts = make([]netip.AddrPort, size)
		b.segs = make([]int, size)
		b.niov = make([]int, size)
		b.ctrl = make([]byte, size*gsoCmsgSpace)
	}
	for i := range b.hdrs {
		h := &b.hdrs[i].Hdr
		h.Name = &b.names[i][0]
		h.Iov = &b.iovs[i]
		h.SetIovlen(1)
	}
	if !recv {
		b.fn = b.sendmmsg
	}
	return b
}

// Both calls are raw system calls: the sockets are non-blocking, so they
// never sleep, and the runtime need not know it is in the kernel. A
// syscall.Syscall tells the scheduler (entersyscall), and a sendmmsg,
// which on a veth or loopback path also runs the receiver's stack, often
// outlasts sysmon's 20 µs tick: sysmon then handed the goroutine's
// processor to another thread, woke it, and kept polling every 20 µs,
// each hand-off a context switch. On the veth path at link MTU 1500 that
// was a tenth of a receiving process's CPU in sysmon's sleeps alone
// (perf); raw calls took 64 KiB WRITEs from 720-950 to 1,130-1,230 MB/s,
// one-per-post 64-byte WRITEs from 0.31-0.36 to 0.43-0.47 M/s, and
// write_lat's median from 70 to 52 µs. What it costs: a stop-the-world
// waits for a call in progress to return, tens of microseconds.

// recvmmsg reads as many datagrams as are queued, up to len(hdrs), without
// blocking (the socket is non-blocking), for the RawConn.Read callback
// receiver.read; it returns false when none is (EAGAIN).
func (b *mmsgBatch) recvmmsg(fd uintptr) bool {
	for {
		r, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(len(b.hdrs)), 0, 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		b.setResult(r, e)
		return true
	}
}

// sendmmsg is the RawConn.Write callback for hdrs[off:off+cnt]; it returns
// false to wait for writability when the send buffer is full.
func (b *mmsgBatch) sendmmsg(fd uintptr) bool {
	for {
		r, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&b.hdrs[b.off])), uintptr(b.cnt), b.sendFlags, 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		b.setResult(r, e)
		return true
	}
}

func (b *mmsgBatch) setResult(r uintptr, e unix.Errno) {
	if e != 0 {
		b.n, b.errno = 0, e
		return
	}
	b.n, b.errno = int(r), 0
}
