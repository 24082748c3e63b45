//go:build linux && !goroce_portable

package netio

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/wire"
)

// sockopt reads an integer socket option of a raw connection.
func sockopt(t *testing.T, rc interface{ Control(func(uintptr)) error }, level, opt int) int {
	t.Helper()
	var v int
	var err error
	if cerr := rc.Control(func(fd uintptr) { v, err = unix.GetsockoptInt(int(fd), level, opt) }); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSocketOptions(t *testing.T) {
	a := openConn(t, Config{Addr: addrA, Port: 24798})
	rmemMax := readSysctl(t, "/proc/sys/net/core/rmem_max")
	// The kernel doubles the requested size for its bookkeeping; without
	// CAP_NET_ADMIN it caps the request at rmem_max.
	if got, want := sockopt(t, a.rc, unix.SOL_SOCKET, unix.SO_RCVBUF), min(DefaultReadBuffer, rmemMax); got < want {
		t.Errorf("receive buffer %d bytes, want at least %d", got, want)
	}
	for _, rc := range []interface{ Control(func(uintptr)) error }{a.rc, acquire(t, a, MinSourcePort+9).rc} {
		if got := sockopt(t, rc, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER); got != unix.IP_PMTUDISC_DO {
			t.Errorf("IP_MTU_DISCOVER = %d, want IP_PMTUDISC_DO", got)
		}
	}
	if sockopt(t, a.rc, unix.IPPROTO_IP, unix.IP_PKTINFO) != 1 {
		t.Error("IP_PKTINFO not set on the receive socket")
	}
}

func readSysctl(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Skip(err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// udpDrops returns the drop count /proc/net/udp reports for the IPv4 socket
// bound to ap.
func udpDrops(t *testing.T, ap netip.AddrPort) int {
	t.Helper()
	f, err := os.Open("/proc/net/udp")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	a := ap.Addr().As4()
	// The address is the in-memory __be32 printed as a host-order integer.
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", a[3], a[2], a[1], a[0], ap.Port())
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 12 && fields[1] == want {
			n, err := strconv.Atoi(fields[len(fields)-1])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no socket %v (%s) in /proc/net/udp", ap, want)
	return 0
}

// TestSenderSocketDropsInput sends stray datagrams to a Sender's source
// port: its socket filter must drop them rather than let them queue up in a
// buffer nobody reads.
func TestSenderSocketDropsInput(t *testing.T) {
	a := openConn(t, Config{Addr: addrA, Port: 24799})
	s := acquire(t, a, MinSourcePort+10)
	uc := rawUDP(t, addrB)
	const n = 3
	for range n {
		if _, err := uc.WriteToUDPAddrPort([]byte("stray datagram"), s.src); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, "the stray datagrams to be dropped", func() bool { return udpDrops(t, s.src) == n })
	var queued int
	var err error
	if cerr := s.rc.Control(func(fd uintptr) { queued, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); cerr != nil || err != nil {
		t.Fatal(cerr, err)
	}
	if queued != 0 {
		t.Errorf("%d bytes queued on a send-only socket", queued)
	}
}

// pollerFDs returns the descriptors registered with the process's epoll
// instances (Go's network poller is one), from /proc/self/fdinfo.
func pollerFDs(t *testing.T) map[int]bool {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	fds := make(map[int]bool)
	for _, e := range ents {
		link, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || link != "anon_inode:[eventpoll]" {
			continue
		}
		f, err := os.Open("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var tfd int
			if _, err := fmt.Sscanf(sc.Text(), "tfd: %d", &tfd); err == nil {
				fds[tfd] = true
			}
		}
		f.Close()
	}
	return fds
}

func rawFD(t *testing.T, rc interface{ Control(func(uintptr)) error }) int {
	t.Helper()
	var fd int
	if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
		t.Fatal(err)
	}
	return fd
}

// A Sender's socket stays out of the network poller: registered, every
// datagram it sends would wake a thread sleeping in epoll_wait (see
// openSendSocket). The receive socket is in it, which shows the check
// sees registrations.
func TestSendSocketOutsidePoller(t *testing.T) {
	a := openConn(t, Config{Addr: addrA, Port: 24792})
	s := acquire(t, a, MinSourcePort+11)
	if _, ok := s.rc.(*sendSock); !ok || s.uc != nil {
		t.Fatalf("Sender socket: %T, UDPConn %v; want a sendSock only", s.rc, s.uc)
	}
	registered := pollerFDs(t)
	if rfd := rawFD(t, a.rc); !registered[rfd] {
		t.Skipf("the receive socket (fd %d) is in no epoll instance of /proc/self/fdinfo (%v): cannot tell", rfd, registered)
	}
	if sfd := rawFD(t, s.rc); registered[sfd] {
		t.Errorf("the Sender's socket (fd %d) is registered with an epoll instance", sfd)
	}
	// And it sends: a packet reaches the receive socket.
	b := openConn(t, Config{Addr: addrB, Port: 24792})
	h := &countingHandler{}
	serve(t, b, h)
	if err := s.Send(b.LocalAddr(), buildTestPacket(t, wire.RCSendOnly, 5, 32, 1)); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the packet", func() bool { return h.n.Load() == 1 })
}

// fullSendSock returns a sendSock on one end of a datagram socket pair
// whose send buffer is full, the other end's descriptor, the number of
// datagrams queued and a one-datagram batch to send (len(msg) bytes).
func fullSendSock(t *testing.T, msg []byte) (k *sendSock, peer, queued int, b *mmsgBatch) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skip(err)
	}
	k = &sendSock{fd: fds[0]}
	t.Cleanup(func() { k.Close(); unix.Close(fds[1]) })
	_ = unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 4096)
	for ; ; queued++ {
		if _, err := unix.SendmsgN(fds[0], msg, nil, nil, unix.MSG_DONTWAIT); err == unix.EAGAIN {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	b = newMmsgBatch(1, false)
	b.sendFlags = unix.MSG_DONTWAIT
	b.iovs[0].Base, b.iovs[0].Len = &msg[0], uint64(len(msg))
	h := &b.hdrs[0].Hdr
	h.Name, h.Namelen = nil, 0
	h.Iov = &b.iovs[0]
	h.SetIovlen(1)
	b.off, b.cnt = 0, 1
	return k, fds[1], queued, b
}

// A sendSock's Write waits in poll(2) for room when the send buffer is
// full, and then sends.
func TestSendSockWaitsForRoom(t *testing.T) {
	msg := make([]byte, 512)
	k, peer, queued, b := fullSendSock(t, msg)
	var drained atomic.Bool
	read := make(chan error, 1)
	go func() {
		time.Sleep(20 * time.Millisecond) // let the send find the buffer full
		drained.Store(true)
		buf := make([]byte, len(msg))
		for range queued + 1 {
			if _, _, err := unix.Recvfrom(peer, buf, 0); err != nil {
				read <- err
				return
			}
		}
		read <- nil
	}()
	err := k.Write(b.fn)
	// The reader ends before the test does: after the cleanup it would
	// read whatever socket reused its descriptor (the next test's).
	if rerr := <-read; rerr != nil {
		t.Fatalf("reading the queued datagrams: %v", rerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if b.errno != 0 || b.n != 1 {
		t.Fatalf("Write: %d sent, errno %v; want 1, none", b.n, b.errno)
	}
	if !drained.Load() {
		t.Fatalf("sent before the reader drained the %d datagrams that filled the buffer", queued)
	}
}

// Close ends a send that waits for room, which then fails with
// net.ErrClosed, and closes the socket.
func TestSendSockCloseEndsWait(t *testing.T) {
	msg := make([]byte, 512)
	k, _, _, b := fullSendSock(t, msg)
	done := make(chan error, 1)
	go func() { done <- k.Write(b.fn) }()
	time.Sleep(20 * time.Millisecond) // let the send find the buffer full
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Write during Close = %v, want net.ErrClosed", err)
		}
	case <-time.After(testkit.Timeout):
		t.Fatal("Write still waiting after Close")
	}
	if err := k.Write(b.fn); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Write after Close = %v, want net.ErrClosed", err)
	}
}
