//go:build !windows

package verbs_test

import (
	"syscall"
	"testing"

	"github.com/goroce/goroce/internal/wire"
)

// drain returns the datagrams queued on the socket without waiting for
// more, each parsed (ICRC stripped) and copied. It reads with
// MSG_DONTWAIT: a read deadline in the past would not read at all.
func (p *rawPeer) drain(t testing.TB) []*wire.Packet {
	t.Helper()
	return parseAll(t, p.drainRaw(t))
}

// drainRaw returns copies of the datagrams queued on the socket, without
// waiting for more.
func (p *rawPeer) drainRaw(t testing.TB) [][]byte {
	t.Helper()
	rc, err := p.conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for {
		var (
			n    int
			rerr error
		)
		if err := rc.Read(func(fd uintptr) bool {
			n, _, rerr = syscall.Recvfrom(int(fd), p.buf, syscall.MSG_DONTWAIT)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if rerr == syscall.EAGAIN {
			return out
		}
		if rerr != nil {
			t.Fatalf("peer receive: %v", rerr)
		}
		out = append(out, append([]byte(nil), p.buf[:n]...))
	}
}

// parseAll parses the datagrams a device sent (ICRC stripped).
func parseAll(t testing.TB, raw [][]byte) []*wire.Packet {
	t.Helper()
	var out []*wire.Packet
	for _, b := range raw {
		pkt := new(wire.Packet)
		if err := pkt.Parse(b, 0); err != nil {
			t.Fatalf("device sent a malformed packet: %v", err)
		}
		out = append(out, pkt)
	}
	return out
}
