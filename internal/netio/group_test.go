package netio

import (
	"errors"
	"net/netip"
	"sync"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/wire"
)

// qpnRecorder records the destination QP of every packet a Conn delivers.
type qpnRecorder struct {
	mu   sync.Mutex
	qpns []wire.QPN
}

func (r *qpnRecorder) HandlePacket(p *wire.Packet, _ netip.AddrPort, _ *RecvInfo) {
	r.mu.Lock()
	r.qpns = append(r.qpns, p.BTH.DestQP())
	r.mu.Unlock()
}

func (r *qpnRecorder) taken() []wire.QPN {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]wire.QPN(nil), r.qpns...)
}

// openGroup opens a receive group of n on addrB for the test.
func openGroup(t *testing.T, port uint16, n int) []*Conn {
	t.Helper()
	conns, err := OpenGroup(Config{Addr: addrB, Port: port}, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	return conns
}

// TestOpenGroupSteersByDestQP: a group of four receives, from two source
// ports, packets for QPs 2 to 33: Conn i gets exactly those whose QP
// number is i mod 4, from both flows.
func TestOpenGroupSteersByDestQP(t *testing.T) {
	const n, qps = 4, 32
	port := testkit.Port()
	if !ReusePortSpreads {
		if _, err := OpenGroup(Config{Addr: addrB, Port: port}, n); !errors.Is(err, ErrNoReceiveGroups) {
			t.Fatalf("OpenGroup on the portable path: %v, want ErrNoReceiveGroups", err)
		}
		return
	}
	a := openConn(t, Config{Addr: addrA, Port: port})
	group := openGroup(t, port, n)
	recs := make([]*qpnRecorder, n)
	for i, c := range group {
		recs[i] = &qpnRecorder{}
		serve(t, c, recs[i])
	}
	senders := []*Sender{acquire(t, a, MinSourcePort+11), acquire(t, a, MinSourcePort+12)}
	for k := range qps {
		for _, s := range senders {
			if err := s.Send(group[0].LocalAddr(), buildTestPacket(t, wire.RCSendOnly, wire.QPN(2+k), 16, uint32(k))); err != nil {
				t.Fatal(err)
			}
		}
	}
	testkit.WaitFor(t, "every packet delivered", func() bool {
		total := 0
		for _, r := range recs {
			total += len(r.taken())
		}
		return total == 2*qps
	})
	for i, r := range recs {
		got := r.taken()
		if len(got) != 2*qps/n {
			t.Errorf("Conn %d took %d packets, want %d: %v", i, len(got), 2*qps/n, got)
		}
		last := map[wire.QPN]int{}
		for _, q := range got {
			if int(q)%n != i {
				t.Errorf("Conn %d took a packet for QP %d", i, q)
			}
			last[q]++
		}
		for q, c := range last {
			if c != 2 {
				t.Errorf("Conn %d: QP %d's packets %d times, want 2 (one per flow)", i, q, c)
			}
		}
	}
}

// TestOpenGroupPortTaken: a group does not join a port another socket
// holds, with or without SO_REUSEPORT (another group), and frees the port
// when closed.
func TestOpenGroupPortTaken(t *testing.T) {
	if !ReusePortSpreads {
		t.Skip("no receive groups on the portable path")
	}
	port := testkit.Port()
	c := openConn(t, Config{Addr: addrB, Port: port})
	if _, err := OpenGroup(Config{Addr: addrB, Port: port}, 2); !isAddrInUse(err) {
		t.Fatalf("OpenGroup on a port a plain socket holds: %v, want EADDRINUSE", err)
	}
	c.Close()
	group, err := OpenGroup(Config{Addr: addrB, Port: port}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenGroup(Config{Addr: addrB, Port: port}, 2); !isAddrInUse(err) {
		t.Fatalf("OpenGroup on a port another group holds: %v, want EADDRINUSE", err)
	}
	for _, c := range group {
		c.Close()
	}
	openConn(t, Config{Addr: addrB, Port: port}).Close()
}

// TestOpenGroupSteersGSOWhole: a run of equal-size packets for different
// QPs from one source port leaves as one GSO datagram, which the kernel
// steers whole, by its first packet's QP: the receiver cannot rely on a
// QP's packets reaching only its own Conn (verbs' coalesced replies are
// such runs), which is why it locks what its Conns share.
func TestOpenGroupSteersGSOWhole(t *testing.T) {
	const n = 4
	if !ReusePortSpreads {
		t.Skip("no receive groups on the portable path")
	}
	port := testkit.Port()
	a := openConn(t, Config{Addr: addrA, Port: port})
	group := openGroup(t, port, n)
	recs := make([]*qpnRecorder, n)
	for i, c := range group {
		recs[i] = &qpnRecorder{}
		serve(t, c, recs[i])
	}
	s := acquire(t, a, MinSourcePort+13)
	var msgs []Message
	for k := range 8 {
		msgs = append(msgs, Message{Dst: group[0].LocalAddr(), Packet: buildTestPacket(t, wire.RCAcknowledge, wire.QPN(5+k), 0, uint32(k))})
	}
	if _, err := s.SendBatch(msgs); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the run delivered", func() bool {
		total := 0
		for _, r := range recs {
			total += len(r.taken())
		}
		return total == len(msgs)
	})
	if !s.gso.Load() {
		t.Skip("no GSO on this kernel: each packet was steered by its own QP")
	}
	if got := recs[5%n].taken(); len(got) != len(msgs) {
		t.Fatalf("Conn %d (the first packet's QP's) took %v, want all %d", 5%n, got, len(msgs))
	}
}
