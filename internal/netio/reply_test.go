package netio

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/wire"
)

// TestReplySender checks that the Conn's reply Sender sends from the port
// the Conn receives on, with valid ICRCs (Serve drops any other), in order,
// as GSO datagrams when offload is on, and that releasing it leaves the
// receive socket working.
func TestReplySender(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b netip.Addr
		cfg  Config
	}{
		{"IPv4", addrA, addrB, Config{}},
		{"IPv4/NoGSO", addrA, addrB, Config{NoGSO: true}},
		{"IPv6", addr6, addr6, Config{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := openPair(t, tc.a, tc.b, tc.cfg)
			gotB := make(collector, 256)
			serve(t, b, gotB)
			gotA := make(collector, 4)
			serve(t, a, gotA)

			s := a.ReplySender()
			if a.ReplySender() != s {
				t.Fatal("ReplySender returned two Senders")
			}
			if s.Port() != a.LocalAddr().Port() {
				t.Fatalf("reply port %d, want the receive port %d", s.Port(), a.LocalAddr().Port())
			}
			// The acknowledgements of many QPs, as the end of a receive
			// batch sends them.
			const n = 70 // more than a GSO datagram's segments
			msgs := make([]Message, n)
			for i := range msgs {
				msgs[i] = Message{Dst: b.LocalAddr(), Packet: buildTestPacket(t, wire.RCAcknowledge, wire.QPN(0x100+i), 0, uint32(i))}
			}
			if sent, err := s.SendBatch(msgs); sent != n || err != nil {
				t.Fatalf("SendBatch = %d, %v", sent, err)
			}
			for i := range n {
				r := gotB.next(t)
				if r.from != a.LocalAddr() {
					t.Fatalf("packet %d from %v, want %v", i, r.from, a.LocalAddr())
				}
				if !bytes.Equal(r.raw[:len(r.raw)-wire.ICRCLen], msgs[i].Packet) {
					t.Fatalf("packet %d differs or is out of order", i)
				}
			}
			gso := a.Counters().TxGSO.Load()
			switch {
			case tc.cfg.NoGSO && gso != 0:
				t.Errorf("TxGSO = %d with NoGSO", gso)
			case !tc.cfg.NoGSO && a.gso && gso == 0:
				t.Error("TxGSO = 0: the replies left one datagram each")
			}

			// Release is a no-op: the socket still receives and sends.
			s.Release()
			if err := acquire(t, b, SourcePortForQPN(7)).Send(a.LocalAddr(), buildTestPacket(t, wire.RCRDMAWriteOnly, 7, 64, 1)); err != nil {
				t.Fatal(err)
			}
			gotA.next(t)
			if err := s.Send(b.LocalAddr(), buildTestPacket(t, wire.RCAcknowledge, 7, 0, 2)); err != nil {
				t.Fatalf("Send after Release: %v", err)
			}
			gotB.next(t)

			a.Close()
			if err := s.Send(b.LocalAddr(), buildTestPacket(t, wire.RCAcknowledge, 7, 0, 3)); err == nil {
				t.Error("Send on a closed Conn succeeded")
			}
		})
	}
}
