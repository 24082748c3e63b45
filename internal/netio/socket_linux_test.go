//go:build linux && !goroce_portable

package netio

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
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
