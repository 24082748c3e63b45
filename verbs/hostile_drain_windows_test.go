package verbs_test

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/wire"
)

// drain returns the datagrams queued on the socket, each parsed (ICRC
// stripped) and copied. Windows has no MSG_DONTWAIT for Go's sockets: it
// reads until a read finds nothing within a millisecond.
func (p *rawPeer) drain(t testing.TB) []*wire.Packet {
	t.Helper()
	var out []*wire.Packet
	for _, b := range p.drainRaw(t) {
		pkt := new(wire.Packet)
		if err := pkt.Parse(b, 0); err != nil {
			t.Fatalf("device sent a malformed packet: %v", err)
		}
		out = append(out, pkt)
	}
	return out
}

// drainRaw returns copies of the datagrams queued on the socket.
func (p *rawPeer) drainRaw(t testing.TB) [][]byte {
	t.Helper()
	defer p.conn.SetReadDeadline(time.Time{})
	var out [][]byte
	for {
		if err := p.conn.SetReadDeadline(time.Now().Add(time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		n, _, err := p.conn.ReadFromUDPAddrPort(p.buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out
		}
		if err != nil {
			t.Fatalf("peer receive: %v", err)
		}
		out = append(out, append([]byte(nil), p.buf[:n]...))
	}
}
