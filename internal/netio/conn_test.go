package netio

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/wire"
)

// Loopback addresses of the tests: testkit's, of this process's own, so
// that two runs at the same time share no address (with fixed ones they
// took each other's ports and received each other's packets, which the
// tests then counted). Every wait is bounded by testkit.Timeout.
var (
	addrA, addrB = testkit.Addr(1), testkit.Addr(2)
	addr6        = netip.MustParseAddr("::1")
)

// openConn opens a Conn for the test and closes it at the end.
func openConn(t testing.TB, cfg Config) *Conn {
	t.Helper()
	c, err := Open(cfg)
	if err != nil {
		if cfg.Addr.Is6() && errors.Is(err, errAddrNotAvail) {
			t.Skipf("no IPv6 loopback: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// openPair opens two Conns for a test. On two of this process's
// addresses, each pair gets ports of its own (a test may hold several;
// goroce peers may use any port), counted from 25,000 by pairs. On one
// address every process shares (::1), one pair at a time gets two ports
// of this process's own: testkit.Port (20,000 to 29,999) and the same plus
// 10,000.
func openPair(t testing.TB, a, b netip.Addr, cfg Config) (*Conn, *Conn) {
	t.Helper()
	ca, cb := cfg, cfg
	ca.Addr, cb.Addr = a, b
	if a == b {
		ca.Port, cb.Port = testkit.Port(), testkit.Port()+10000
	} else {
		k := uint16(pairs.Add(1) % 5000)
		ca.Port, cb.Port = 25000+2*k, 25001+2*k
	}
	return openConn(t, ca), openConn(t, cb)
}

// pairs counts the pairs openPair opened on two addresses.
var pairs atomic.Uint32

// received is a copy of what a Handler saw.
type received struct {
	raw  []byte
	from netip.AddrPort
	info RecvInfo
}

// collector is a Handler that copies every packet into a channel.
type collector chan received

func (c collector) HandlePacket(p *wire.Packet, from netip.AddrPort, info *RecvInfo) {
	c <- received{raw: bytes.Clone(p.Raw), from: from, info: *info}
}

// serve runs c.Serve(h) until the end of the test and checks that it
// returns nil once c is closed.
func serve(t testing.TB, c *Conn, h Handler) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Serve(context.Background(), h) }()
	// Serving before the test goes on: a Close that came first would
	// find no Serve to end, and the Serve after it would rightly
	// return net.ErrClosed (a test ended at once saw that on a loaded
	// machine).
	testkit.WaitFor(t, "Serve started", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.serving || len(done) > 0 // an error is reported below
	})
	t.Cleanup(func() {
		c.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve returned %v after Close", err)
			}
		case <-time.After(testkit.Timeout):
			t.Error("Serve did not return after Close")
		}
	})
}

func (c collector) next(t testing.TB) received {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(testkit.Timeout):
		t.Fatal("no packet received")
		return received{}
	}
}

// waitCounted waits until c has counted n datagrams read (RxPackets; a
// coalesced datagram counts as its packets). The receive loop adds a
// batch's counts after handing its packets to the Handler, RxPackets last
// (see Counters): a packet a Handler has seen may not be counted yet, and
// once RxPackets includes it, every other receive counter does.
func waitCounted(t testing.TB, c *Conn, n uint64) {
	t.Helper()
	testkit.WaitFor(t, fmt.Sprintf("%d datagrams to be counted", n), func() bool { return c.Counters().RxPackets.Load() >= n })
}

// acquire returns a Sender released at the end of the test.
func acquire(t testing.TB, c *Conn, port uint16) *Sender {
	t.Helper()
	s, err := c.Sender(port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Release)
	return s
}

func TestExchange(t *testing.T) {
	for _, fam := range []struct {
		name string
		a, b netip.Addr
	}{{"IPv4", addrA, addrB}, {"IPv6", addr6, addr6}} {
		t.Run(fam.name, func(t *testing.T) {
			a, b := openPair(t, fam.a, fam.b, Config{})
			got := make(collector, 16)
			serve(t, b, got)
			const qa, qb = 0x14, 0x28
			s := acquire(t, a, SourcePortForFlow(qa, qb))
			packets := []struct {
				op wire.Opcode
				n  int
			}{
				{wire.RCSendOnly, 0},
				{wire.RCSendOnly, 1}, // 3 pad bytes
				{wire.RCSendOnly, 1024},
				{wire.RCRDMAWriteFirst, 4096},
				{wire.RCAcknowledge, 0},
				{wire.UDSendOnly, 256},
			}
			var txBytes uint64
			for i, p := range packets {
				pkt := buildTestPacket(t, p.op, qb, p.n, uint32(i))
				sent := bytes.Clone(pkt)
				if err := s.Send(b.LocalAddr(), pkt); err != nil {
					t.Fatalf("%v: %v", p.op, err)
				}
				txBytes += uint64(len(pkt) + wire.ICRCLen)
				r := got.next(t)
				if !bytes.Equal(r.raw[:len(r.raw)-wire.ICRCLen], sent) {
					t.Errorf("%v: received %x, sent %x", p.op, r.raw, sent)
				}
				// The ICRC on the wire is the one for the real headers with
				// id 0: check it with the reference.
				if want := refTransportICRC(r.from, b.LocalAddr(), 0, sent); binary.LittleEndian.Uint32(r.raw[len(sent):]) != want {
					t.Errorf("%v: ICRC %x, reference %08x", p.op, r.raw[len(sent):], want)
				}
				if wantFrom := netip.AddrPortFrom(a.LocalAddr().Addr(), s.Port()); r.from != wantFrom {
					t.Errorf("from %v, want %v", r.from, wantFrom)
				}
				if r.info != (RecvInfo{Local: b.LocalAddr(), ECN: wantNotECT}) {
					t.Errorf("info %+v, want local %v, id 0, not recovered", r.info, b.LocalAddr())
				}
			}
			n := uint64(len(packets))
			ac, bc := a.Counters(), b.Counters()
			waitCounted(t, b, n)
			if ac.TxPackets.Load() != n || ac.TxBytes.Load() != txBytes || ac.SendErrors.Load() != 0 {
				t.Errorf("sender counters: %d packets, %d bytes, %d errors; want %d, %d, 0",
					ac.TxPackets.Load(), ac.TxBytes.Load(), ac.SendErrors.Load(), n, txBytes)
			}
			if bc.RxPackets.Load() != n || bc.RxBytes.Load() != txBytes || bc.Delivered.Load() != n {
				t.Errorf("receiver counters: %d packets, %d bytes, %d delivered; want %d, %d, %d",
					bc.RxPackets.Load(), bc.RxBytes.Load(), bc.Delivered.Load(), n, txBytes, n)
			}
		})
	}
}

// wantNotECT is the ECN a packet sent without Config.ECT arrives with:
// Not-ECT, or unknown on the portable path, which does not read it.
var wantNotECT = map[bool]ECN{true: ECNNotECT, false: ECNUnknown}[batchedReceive]

// TestECN: a Conn with ECT sends ECT(0), every packet of a GSO send too,
// and the receiver reads it (IP_RECVTOS, IPV6_RECVTCLASS) on the batched
// path.
func TestECN(t *testing.T) {
	if !batchedReceive {
		t.Skip("the portable path neither sends ECT nor reads the ECN field")
	}
	for _, fam := range []struct {
		name string
		a, b netip.Addr
	}{{"IPv4", addrA, addrB}, {"IPv6", addr6, addr6}} {
		t.Run(fam.name, func(t *testing.T) {
			a, b := openPair(t, fam.a, fam.b, Config{ECT: true})
			got := make(collector, 16)
			serve(t, b, got)
			s := acquire(t, a, SourcePortForFlow(1, 2))
			pkt := buildTestPacket(t, wire.RCSendOnly, 2, 64, 7)
			if err := s.Send(b.LocalAddr(), pkt); err != nil {
				t.Fatal(err)
			}
			if r := got.next(t); r.info.ECN != ECNECT0 {
				t.Errorf("ECN %v, want ECT(0)", r.info.ECN)
			}
			// A GSO run: the kernel copies the TOS into every segment.
			const n = 4
			msgs := make([]Message, n)
			for i := range msgs {
				msgs[i] = splitPacket(b.LocalAddr(), buildTestPacket(t, wire.RCRDMAWriteMiddle, 2, 1024, uint32(8+i)), 1024)
			}
			if _, err := s.SendBatch(msgs); err != nil {
				t.Fatal(err)
			}
			for range n {
				if r := got.next(t); r.info.ECN != ECNECT0 {
					t.Errorf("segment ECN %v, want ECT(0)", r.info.ECN)
				}
			}
		})
	}
}

func TestSendBatch(t *testing.T) {
	a, b := openPair(t, addrA, addrB, Config{BatchSize: 16})
	got := make(collector, 256)
	serve(t, b, got)
	s := acquire(t, a, SourcePortForQPN(0x11))
	const n = 100 // several batches and a partial one
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i] = Message{Dst: b.LocalAddr(), Packet: buildTestPacket(t, wire.RCRDMAWriteMiddle, 0x25, 1024, uint32(i))}
	}
	if sent, err := s.SendBatch(msgs); sent != n || err != nil {
		t.Fatalf("SendBatch = %d, %v", sent, err)
	}
	for i := range n {
		r := got.next(t)
		var p wire.Packet
		if err := p.Parse(r.raw, 1024); err != nil {
			t.Fatal(err)
		}
		if psn := uint32(p.BTH.PSN()); psn != uint32(i) {
			t.Fatalf("packet %d has PSN %d: reordered or lost", i, psn)
		}
		if !bytes.Equal(r.raw[:len(r.raw)-wire.ICRCLen], msgs[i].Packet) {
			t.Fatalf("packet %d differs", i)
		}
	}
	if got := a.Counters().TxPackets.Load(); got != n {
		t.Errorf("TxPackets = %d, want %d", got, n)
	}
}

func TestSendBatchStopsAtBadPacket(t *testing.T) {
	a, b := openPair(t, addrA, addrB, Config{BatchSize: 4})
	got := make(collector, 16)
	serve(t, b, got)
	s := acquire(t, a, SourcePortForQPN(1))
	msgs := make([]Message, 6)
	for i := range msgs {
		msgs[i] = Message{Dst: b.LocalAddr(), Packet: buildTestPacket(t, wire.RCSendMiddle, 2, 256, uint32(i))}
	}
	msgs[5].Packet = msgs[5].Packet[:len(msgs[5].Packet):len(msgs[5].Packet)] // no room for the ICRC
	sent, err := s.SendBatch(msgs)
	if sent != 5 || !errors.Is(err, ErrNoICRCRoom) {
		t.Fatalf("SendBatch = %d, %v; want 5, ErrNoICRCRoom", sent, err)
	}
	for range 5 {
		got.next(t)
	}
	if e := a.Counters().SendErrors.Load(); e != 1 {
		t.Errorf("SendErrors = %d, want 1", e)
	}
}

func TestSendErrors(t *testing.T) {
	a := openConn(t, Config{Addr: addrA, Port: 24793})
	s := acquire(t, a, MinSourcePort+7)
	good := func() []byte { return buildTestPacket(t, wire.RCSendOnly, 3, 8, 0) }
	// The one packet that leaves goes to a's own socket, which does not
	// serve: sent to a port the test does not hold (addrB:4791), it would
	// land in whatever Conn another test process running at the same time
	// has there, and be counted as delivered.
	dst := a.LocalAddr()
	tests := []struct {
		name string
		dst  netip.AddrPort
		pkt  []byte
		want error
	}{
		{"IPv6 destination", netip.MustParseAddrPort("[::1]:4791"), good(), ErrDestination},
		{"no destination", netip.AddrPort{}, good(), ErrDestination},
		{"port 0", netip.AddrPortFrom(addrB, 0), good(), ErrDestination},
		{"shorter than a BTH", dst, make([]byte, 11, 64), ErrShortPacket},
		{"pad beyond the packet", dst, func() []byte {
			p := make([]byte, wire.BTHLen, 64)
			wire.BTH(p).SetPadCount(3)
			return p
		}(), ErrShortPacket},
		{"no room for the ICRC", dst, func() []byte { p := good(); return p[:len(p):len(p)] }(), ErrNoICRCRoom},
	}
	for i, tt := range tests {
		if err := s.Send(tt.dst, tt.pkt); !errors.Is(err, tt.want) {
			t.Errorf("%s: Send = %v, want %v", tt.name, err, tt.want)
		}
		if e := a.Counters().SendErrors.Load(); e != uint64(i+1) {
			t.Errorf("%s: SendErrors = %d, want %d", tt.name, e, i+1)
		}
	}
	// An IPv4-mapped destination is IPv4.
	if err := s.Send(netip.AddrPortFrom(netip.AddrFrom16(dst.Addr().As16()), dst.Port()), good()); err != nil {
		t.Errorf("IPv4-mapped destination: %v", err)
	}
}

// rawUDP returns a plain UDP socket for sending hand-made datagrams.
func rawUDP(t testing.TB, addr netip.Addr) *net.UDPConn {
	t.Helper()
	uc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	return uc
}

func TestBadICRCDropped(t *testing.T) {
	a, b := openPair(t, addrA, addrB, Config{})
	got := make(collector, 4)
	serve(t, b, got)
	uc := rawUDP(t, addrA)
	from := netip.AddrPortFrom(addrA, uint16(uc.LocalAddr().(*net.UDPAddr).Port))

	pkt := buildTestPacket(t, wire.RCSendOnly, 9, 64, 1)
	crc := refTransportICRC(from, b.LocalAddr(), 0, pkt) ^ 0x00010000
	// The test means something only if no IPv4 id explains this ICRC:
	// check all of them with the reference.
	for id := range 1 << 16 {
		if refTransportICRC(from, b.LocalAddr(), uint16(id), pkt) == crc {
			t.Fatalf("corrupted ICRC is valid for id %#04x; pick another corruption", id)
		}
	}
	bad := binary.LittleEndian.AppendUint32(bytes.Clone(pkt), crc)
	if _, err := uc.WriteToUDPAddrPort(bad, b.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	bc := b.Counters()
	waitCounted(t, b, 1)
	if e, d := bc.ICRCErrors.Load(), bc.Delivered.Load(); e != 1 || d != 0 {
		t.Fatalf("%d ICRC errors, %d delivered; want 1, 0", e, d)
	}

	// A good packet still gets through afterwards, and is the only one.
	s := acquire(t, a, MinSourcePort)
	if err := s.Send(b.LocalAddr(), pkt); err != nil {
		t.Fatal(err)
	}
	got.next(t)
	// The Handler has the packet; the receive loop counts it after.
	waitCounted(t, b, 2)
	if d, r, e := bc.Delivered.Load(), bc.RxPackets.Load(), bc.ICRCErrors.Load(); d != 1 || r != 2 || e != 1 {
		t.Errorf("delivered %d of %d packets, %d ICRC errors; want 1 of 2, 1", d, r, e)
	}
}

func TestStrictICRC(t *testing.T) {
	_, b := openPair(t, addrA, addrB, Config{StrictICRC: true})
	got := make(collector, 4)
	serve(t, b, got)
	uc := rawUDP(t, addrA)
	from := netip.AddrPortFrom(addrA, uint16(uc.LocalAddr().(*net.UDPAddr).Port))
	// An ICRC for id 0x4242, as rxe would send: valid, but refused in
	// strict mode. Then one for id 0 from the same socket as a marker.
	pkt := buildTestPacket(t, wire.RCSendOnly, 9, 64, 1)
	rxe := binary.LittleEndian.AppendUint32(bytes.Clone(pkt), refTransportICRC(from, b.LocalAddr(), 0x4242, pkt))
	if _, err := uc.WriteToUDPAddrPort(rxe, b.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	waitCounted(t, b, 1)
	if e, d := b.Counters().ICRCErrors.Load(), b.Counters().Delivered.Load(); e != 1 || d != 0 {
		t.Errorf("strict mode: %d ICRC errors, %d delivered for a packet with a non-zero id; want 1, 0", e, d)
	}
}

func TestMalformedDropped(t *testing.T) {
	_, b := openPair(t, addrA, addrB, Config{MaxDatagramSize: 512})
	got := make(collector, 4)
	serve(t, b, got)
	uc := rawUDP(t, addrA)
	unknownOpcode := buildTestPacket(t, wire.RCSendOnly, 1, 16, 0)
	unknownOpcode[0] = 0x1F
	badTVer := buildTestPacket(t, wire.RCSendOnly, 1, 16, 0)
	wire.BTH(badTVer).SetTVer(1)
	tooBig := buildTestPacket(t, wire.RCSendOnly, 1, 1024, 0)
	datagrams := [][]byte{
		{},
		{0x04, 0x00, 0xFF},
		make([]byte, wire.BTHLen+wire.ICRCLen-1),
		append(unknownOpcode, 0, 0, 0, 0),
		append(badTVer, 0, 0, 0, 0),
		append(tooBig, 0, 0, 0, 0),
	}
	for i, d := range datagrams {
		if _, err := uc.WriteToUDPAddrPort(d, b.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		waitCounted(t, b, uint64(i+1))
		if m := b.Counters().Malformed.Load(); m != uint64(i+1) {
			t.Errorf("datagram %d: Malformed = %d, want %d", i, m, i+1)
		}
	}
	if d := b.Counters().Delivered.Load(); d != 0 {
		t.Errorf("%d malformed packets delivered", d)
	}
}

func TestSourcePorts(t *testing.T) {
	a := openConn(t, Config{Addr: addrA, Port: 24794})
	// Ports for many QPs come from the dynamic range, and a QP always
	// gets the same one.
	for q := wire.QPN(1); q < 5000; q += 7 {
		for _, p := range []uint16{SourcePortForQPN(q), SourcePortForFlow(q, q+0x14), SourcePortForFlowLabel(uint32(q) * 977)} {
			if p < MinSourcePort {
				t.Fatalf("QP %v: source port %#x outside the dynamic range", q, p)
			}
		}
		if SourcePortForFlow(q, 0x123) != SourcePortForFlow(0x123, q) {
			t.Fatalf("QP %v: source ports differ by direction", q)
		}
	}

	p := SourcePortForFlow(0x14, 0x28)
	s1 := acquire(t, a, p)
	s2 := acquire(t, a, p)
	if s1 != s2 || s1.Port() != p {
		t.Fatalf("two requests for port %d: %p (port %d) and %p", p, s1, s1.Port(), s2)
	}

	// A port taken by someone else: the next free one is used, and asking
	// again gives the same socket.
	taken := uint16(0xF00D)
	other, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrA, taken)))
	if err != nil {
		t.Skipf("cannot take port %d: %v", taken, err)
	}
	defer other.Close()
	s3 := acquire(t, a, taken)
	if s3.Port() == taken || s3.Port() < MinSourcePort {
		t.Fatalf("port %d is taken, got %d", taken, s3.Port())
	}
	if s4 := acquire(t, a, taken); s4 != s3 {
		t.Fatal("second request for a taken port got another socket")
	}
	if s5 := acquire(t, a, s3.Port()); s5 != s3 {
		t.Fatal("request for the bound port got another socket")
	}

	// Probing wraps from the top of the range to the bottom.
	top, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrA, MaxSourcePort)))
	if err != nil {
		t.Skipf("cannot take port %d: %v", MaxSourcePort, err)
	}
	defer top.Close()
	if s := acquire(t, a, MaxSourcePort); s.Port() < MinSourcePort || s.Port() == MaxSourcePort {
		t.Fatalf("port %d taken: got %d", MaxSourcePort, s.Port())
	}

	// A port outside the range is not probed.
	low, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrA, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer low.Close()
	if lp := uint16(low.LocalAddr().(*net.UDPAddr).Port); lp < MinSourcePort {
		if _, err := a.Sender(lp); err == nil {
			t.Errorf("Sender(%d) for a taken port outside the range succeeded", lp)
		}
	}
}

func TestSenderRelease(t *testing.T) {
	a := openConn(t, Config{Addr: addrA, Port: 24795})
	const p = MinSourcePort + 100
	s1, err := a.Sender(p)
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := a.Sender(p)
	s1.Release()
	// Still held by s2: the port stays bound by us.
	if _, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrA, p))); err == nil {
		t.Fatal("port free while a holder remains")
	}
	s2.Release()
	// Released: the port is free for anyone.
	uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrA, p)))
	if err != nil {
		t.Fatalf("port still bound after the last Release: %v", err)
	}
	uc.Close()
	s3, err := a.Sender(p)
	if err != nil || s3.Port() != p {
		t.Fatalf("Sender after release: %v, %v", s3, err)
	}
	s3.Release()
}

func TestCloseStopsEverything(t *testing.T) {
	checkLeaks := testkit.CheckLeaks(t)
	a, err := Open(Config{Addr: addrA, Port: 24796})
	if err != nil {
		t.Fatal(err)
	}
	s, err := a.Sender(MinSourcePort + 1)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Serve(context.Background(), collector(make(chan received))) }()
	// Let Serve block in its read; Close must wake it either way.
	testkit.WaitFor(t, "Serve to start", func() bool { a.mu.Lock(); defer a.mu.Unlock(); return a.serving })
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve returned %v after Close, want nil", err)
		}
	case <-time.After(testkit.Timeout):
		t.Fatal("Serve still running after Close")
	}
	if err := s.Send(netip.AddrPortFrom(addrB, 4791), buildTestPacket(t, wire.RCSendOnly, 1, 0, 0)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Send after Close = %v, want net.ErrClosed", err)
	}
	s.Release()
	if _, err := a.Sender(MinSourcePort + 2); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Sender after Close = %v, want net.ErrClosed", err)
	}
	if err := a.Serve(context.Background(), collector(nil)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Serve after Close = %v, want net.ErrClosed", err)
	}
	if err := a.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close = %v, want net.ErrClosed", err)
	}
	// Both ports are free again.
	for _, p := range []uint16{24796, MinSourcePort + 1} {
		uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrA, p)))
		if err != nil {
			t.Errorf("port %d still bound after Close: %v", p, err)
			continue
		}
		uc.Close()
	}
	checkLeaks()
}

func TestServeContext(t *testing.T) {
	a, b := openPair(t, addrA, addrB, Config{})
	got := make(collector, 4)
	s := acquire(t, a, MinSourcePort+3)
	checkLeaks := testkit.CheckLeaks(t)
	for round := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.Serve(ctx, got) }()
		// The loop works...
		if err := s.Send(b.LocalAddr(), buildTestPacket(t, wire.RCSendOnly, 1, 4, uint32(round))); err != nil {
			t.Fatal(err)
		}
		got.next(t)
		if err := b.Serve(ctx, got); !errors.Is(err, ErrServing) {
			t.Errorf("concurrent Serve = %v, want ErrServing", err)
		}
		// ...until the context ends; then it can run again.
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Serve returned %v, want context.Canceled", err)
			}
		case <-time.After(testkit.Timeout):
			t.Fatal("Serve still running after cancel")
		}
	}
	checkLeaks()
}

func TestSendNoAlloc(t *testing.T) {
	a, b := openPair(t, addrA, addrB, Config{})
	s := acquire(t, a, MinSourcePort+4)
	pkt := buildTestPacket(t, wire.RCRDMAWriteMiddle, 1, 1024, 0)
	dst := b.LocalAddr()
	// Nobody reads b: the datagrams pile up in its buffer, which is fine.
	if n := testing.AllocsPerRun(100, func() {
		if err := s.Send(dst, pkt); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Send allocates %v times per packet", n)
	}
	msgs := []Message{{Dst: dst, Packet: pkt}, {Dst: dst, Packet: pkt}, {Dst: dst, Packet: pkt}}
	if n := testing.AllocsPerRun(50, func() {
		if _, err := s.SendBatch(msgs); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("SendBatch allocates %v times per batch", n)
	}
	split := splitPacket(dst, pkt, 1024)
	msgs = []Message{split, split, split}
	if n := testing.AllocsPerRun(50, func() {
		if _, err := s.SendBatch(msgs); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("SendBatch of packets with a Payload allocates %v times per batch", n)
	}
}

// signal is a Handler that only says a packet arrived, for the allocation
// test: it must not allocate itself.
type signal chan struct{}

func (s signal) HandlePacket(*wire.Packet, netip.AddrPort, *RecvInfo) { s <- struct{}{} }

// TestRoundTripNoAlloc sends a packet and waits for the receive loop to hand
// it over: AllocsPerRun counts allocations of every goroutine, so this
// covers the receive path per packet (recvmmsg, parse, ICRC, dispatch) in
// steady state, for an id-0 packet and for one whose id is recovered.
func TestRoundTripNoAlloc(t *testing.T) {
	a, b := openPair(t, addrA, addrB, Config{})
	arrived := make(signal)
	serve(t, b, arrived)
	s := acquire(t, a, MinSourcePort+5)
	pkt := buildTestPacket(t, wire.RCRDMAWriteMiddle, 1, 1024, 0)
	dst := b.LocalAddr()
	var sent, recovered uint64
	if n := testing.AllocsPerRun(200, func() {
		if err := s.Send(dst, pkt); err != nil {
			t.Fatal(err)
		}
		sent++
		<-arrived
	}); n != 0 {
		t.Errorf("send and receive allocate %v times per packet", n)
	}

	uc := rawUDP(t, addrA)
	from := netip.AddrPortFrom(addrA, uint16(uc.LocalAddr().(*net.UDPAddr).Port))
	rxe := binary.LittleEndian.AppendUint32(bytes.Clone(pkt), refTransportICRC(from, dst, 0x5151, pkt))
	if n := testing.AllocsPerRun(200, func() {
		if _, err := uc.WriteToUDPAddrPort(rxe, dst); err != nil {
			t.Fatal(err)
		}
		recovered++
		<-arrived
	}); n != 0 {
		t.Errorf("receiving with id recovery allocates %v times per packet", n)
	}
	waitCounted(t, b, sent+recovered)
	if r := b.Counters().ICRCIDRecovered.Load(); r != recovered {
		t.Errorf("ICRCIDRecovered = %d for %d packets sent with id 0x5151: the recovery path was not taken", r, recovered)
	}
}

// BenchmarkLoopback measures send and receive throughput between two Conns
// over loopback: batches of 32 packets with SendBatch, at most 512 packets
// in flight so that the receive buffer never overflows, with segmentation
// and receive offload and without.
func BenchmarkLoopback(b *testing.B) {
	for _, bc := range []struct {
		name string
		size int
		off  bool
	}{{"1024", 1024, false}, {"4096", 4096, false}, {"1024/NoOffload", 1024, true}, {"4096/NoOffload", 4096, true}} {
		size := bc.size
		b.Run(bc.name, func(b *testing.B) {
			ca, cb := openPair(b, addrA, addrB, Config{NoGSO: bc.off, NoGRO: bc.off})
			arrived := make(chan struct{}, 1)
			var count countingHandler
			count.signal = arrived
			serve(b, cb, &count)
			s := acquire(b, ca, MinSourcePort+6)
			const batch, window = 32, 512
			msgs := make([]Message, batch)
			for i := range msgs {
				msgs[i] = Message{Dst: cb.LocalAddr(), Packet: buildTestPacket(b, wire.RCRDMAWriteMiddle, 1, size, uint32(i))}
			}
			b.SetBytes(int64(size))
			b.ResetTimer()
			sent := 0
			for sent < b.N {
				for sent-int(count.n.Load()) > window {
					select {
					case <-arrived:
					case <-time.After(testkit.Timeout):
						b.Fatalf("stalled: %d sent, %d received", sent, count.n.Load())
					}
				}
				k := min(batch, b.N-sent)
				if _, err := s.SendBatch(msgs[:k]); err != nil {
					b.Fatal(err)
				}
				sent += k
			}
			for int(count.n.Load()) < b.N {
				select {
				case <-arrived:
				case <-time.After(testkit.Timeout):
					b.Fatalf("lost packets: %d sent, %d received", b.N, count.n.Load())
				}
			}
		})
	}
}
