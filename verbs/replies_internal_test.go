package verbs

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/transport"
	"github.com/goroce/goroce/internal/wire"
)

// TestFirstReply checks which acknowledgements of a QP's output may leave
// with the shared replies of a batch: only those after its last other
// response.
func TestFirstReply(t *testing.T) {
	pkt := func(op wire.Opcode, n int) transport.OutPacket {
		b := make([]byte, n)
		b[0] = byte(op)
		return transport.OutPacket{Bytes: b}
	}
	ack := pkt(wire.RCAcknowledge, replyLen)
	readResp := pkt(wire.RCRDMAReadResponseOnly, replyLen+64)
	atomicAck := pkt(wire.RCAtomicAcknowledge, replyLen+wire.AtomicAckETHLen)
	write := pkt(wire.RCRDMAWriteOnly, wire.BTHLen+wire.RETHLen+64)
	for _, tc := range []struct {
		name string
		pkts []transport.OutPacket
		want int
	}{
		{"empty", nil, 0},
		{"ACKs", []transport.OutPacket{ack, ack, ack}, 0},
		{"requests and ACKs", []transport.OutPacket{write, ack, write, ack}, 0},
		{"ACK after READ response", []transport.OutPacket{readResp, ack}, 1},
		{"ACK before READ response", []transport.OutPacket{ack, readResp}, 2},
		{"ACK between", []transport.OutPacket{ack, readResp, ack, ack}, 2},
		{"ATOMIC ACKNOWLEDGE", []transport.OutPacket{ack, atomicAck, ack}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := firstReply(tc.pkts); got != tc.want {
				t.Errorf("firstReply = %d, want %d", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		pkt  []byte
		want bool
	}{
		{"ACK", ack.Bytes, true},
		{"ATOMIC ACKNOWLEDGE", atomicAck.Bytes, false},
		{"READ response", readResp.Bytes, false},
		{"short", ack.Bytes[:wire.BTHLen], false},
		{"empty", nil, false},
	} {
		b := &replyBatch{}
		if got := b.take(netip.AddrPortFrom(testkit.Addr(2), wire.RoCEv2Port), tc.pkt); got != tc.want {
			t.Errorf("take(%s) = %v, want %v", tc.name, got, tc.want)
		}
		if tc.want {
			m := b.msgs[0].Packet
			if !bytes.Equal(m, tc.pkt) || cap(m)-len(m) < wire.ICRCLen || &m[0] == &tc.pkt[0] {
				t.Errorf("take(%s) kept % x (spare %d), want a copy with room for the ICRC", tc.name, m, cap(m)-len(m))
			}
		}
	}
}

// TestOutputPool checks that the pool lends the Output returned last
// first.
func TestOutputPool(t *testing.T) {
	var p outputPool
	o1, o2 := p.get(), p.get()
	if o1 == o2 {
		t.Fatal("two gets returned one Output")
	}
	p.put(o2)
	p.put(o1)
	if got := p.get(); got != o1 {
		t.Errorf("get = %p, want %p (returned last)", got, o1)
	}
	if got := p.get(); got != o2 {
		t.Errorf("get = %p, want %p", got, o2)
	}
}
