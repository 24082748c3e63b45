//go:build linux && !goroce_portable

package netio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/pcap"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/wire"
)

// These tests look at real IP headers on loopback through raw sockets, which
// need CAP_NET_RAW; they are skipped without it.

// rawSocket opens a raw IPv4 socket of the given protocol with a receive
// timeout, or skips the test.
func rawSocket(t testing.TB, proto int) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		t.Skipf("raw socket: %v (needs CAP_NET_RAW)", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	tv := unix.NsecToTimeval(int64(testkit.Timeout))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return fd
}

// TestOwnPacketsOnTheWire checks what the kernel really sends from a Sender:
// IPv4 identification 0 and DF, so that the ICRC computed for id 0 is valid
// over the real headers (what rxe will check).
func TestOwnPacketsOnTheWire(t *testing.T) {
	sniff := rawSocket(t, unix.IPPROTO_UDP) // a copy of every UDP packet, IP header included
	// Only packets to addrB: the other processes' UDP traffic could
	// otherwise fill the socket's buffer and crowd ours out.
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 16}, // IPv4 destination
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: binary.BigEndian.Uint32(addrB.AsSlice())},
		{Code: unix.BPF_RET | unix.BPF_K, K: 0xFFFF},
		{Code: unix.BPF_RET | unix.BPF_K, K: 0},
	}
	if err := unix.SetsockoptSockFprog(sniff, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
		&unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}); err != nil {
		t.Fatal(err)
	}
	a, b := openPair(t, addrA, addrB, Config{})
	s := acquire(t, a, SourcePortForFlow(0x11, 0x25))
	const n = 5 // several packets: a counting id would show
	for i := range n {
		if err := s.Send(b.LocalAddr(), buildTestPacket(t, wire.RCSendFirst, 0x25, 1024, uint32(i))); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 65536)
	for seen := 0; seen < n; {
		m, _, err := unix.Recvfrom(sniff, buf, 0)
		if err == unix.EINTR {
			// A blocking call with a receive timeout is not restarted
			// after a signal handler (signal(7)), and the Go runtime
			// signals its threads to preempt goroutines.
			continue
		}
		if err != nil {
			t.Fatalf("sniffing: %v (saw %d of %d packets)", err, seen, n)
		}
		ipHdr, udp, payload, err := wire.SplitIPUDP(buf[:m])
		if err != nil || udp.SrcPort() != s.Port() || udp.DstPort() != b.LocalAddr().Port() {
			continue
		}
		ip := wire.IPv4(ipHdr)
		if ip.Version() != 4 || ip.Src() != addrA.As4() || ip.Dst() != addrB.As4() {
			continue // another process's packet with the same ports
		}
		seen++
		if ip.ID() != 0 || ip.Flags()&wire.IPv4DontFragment == 0 || len(ipHdr) != wire.IPv4MinHeaderLen {
			t.Errorf("packet %d: IPv4 id %#04x, flags %#x, header %d bytes; want id 0, DF, 20 bytes",
				seen, ip.ID(), ip.Flags(), len(ipHdr))
		}
		if !wire.CheckICRC(ipHdr, udp, payload) {
			t.Errorf("packet %d: ICRC invalid over the real headers", seen)
		}
	}
}

// sendCrafted sends a hand-made IPv4 packet carrying transport (BTH
// through pad) with a valid ICRC for the given header fields, through a raw
// socket with IP_HDRINCL: the way rxe's packets look (counted ids, any TOS
// and TTL).
func sendCrafted(t testing.TB, fd int, src, dst netip.AddrPort, f wire.IPv4Fields, transport []byte) {
	t.Helper()
	f.TotalLength = uint16(wire.IPv4MinHeaderLen + wire.UDPHeaderLen + len(transport) + wire.ICRCLen)
	f.Protocol = wire.IPProtocolUDP
	f.Src, f.Dst = src.Addr().As4(), dst.Addr().As4()
	pkt := f.Append(nil)
	u := wire.UDPFields{SrcPort: src.Port(), DstPort: dst.Port(), Length: f.TotalLength - wire.IPv4MinHeaderLen}
	pkt = u.Append(pkt)
	pkt = append(pkt, transport...)
	crc := wire.ICRC(pkt[:wire.IPv4MinHeaderLen], pkt[wire.IPv4MinHeaderLen:wire.IPv4MinHeaderLen+wire.UDPHeaderLen], transport)
	pkt = binary.LittleEndian.AppendUint32(pkt, crc)
	if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: dst.Addr().As4()}); err != nil {
		t.Fatal(err)
	}
}

// TestRecoverIDFromRealHeaders sends packets as rxe does, with non-zero
// identifications and arbitrary TOS and TTL, and checks that the receive
// loop delivers them with the identification they carried; a packet without
// DF breaks the assumption the check rests on and is dropped.
func TestRecoverIDFromRealHeaders(t *testing.T) {
	fd := rawSocket(t, unix.IPPROTO_RAW) // IPPROTO_RAW implies IP_HDRINCL
	_, b := openPair(t, addrA, addrB, Config{})
	got := make(collector, 8)
	serve(t, b, got)
	from := netip.AddrPortFrom(addrA, SourcePortForQPN(0x27))
	tests := []struct {
		name string
		ip   wire.IPv4Fields
	}{
		// The kernel fills in an id of 0 with one of its own, so every
		// id here is non-zero.
		{"rxe-like", wire.IPv4Fields{ID: 0xEAFE, Flags: wire.IPv4DontFragment, TTL: 64}},
		{"top id bit", wire.IPv4Fields{ID: 0x8000, Flags: wire.IPv4DontFragment, TTL: 1}},
		{"DSCP and ECN", wire.IPv4Fields{ID: 0x0001, TOS: 0x6A, Flags: wire.IPv4DontFragment, TTL: 255}},
		{"all ones", wire.IPv4Fields{ID: 0xFFFF, TOS: 0xFF, Flags: wire.IPv4DontFragment, TTL: 17}},
	}
	for i, tt := range tests {
		pkt := buildTestPacket(t, wire.UDSendOnly, 0x13, 100+i, uint32(i))
		sendCrafted(t, fd, from, b.LocalAddr(), tt.ip, pkt)
		r := got.next(t)
		if !bytes.Equal(r.raw[:len(pkt)], pkt) || r.from != from {
			t.Errorf("%s: received %x from %v", tt.name, r.raw, r.from)
		}
		if !r.info.IDRecovered || r.info.IPID != tt.ip.ID {
			t.Errorf("%s: info %+v, want id %#04x recovered", tt.name, r.info, tt.ip.ID)
		}
	}
	n := uint64(len(tests))
	waitCounted(t, b, n)
	if c := b.Counters().ICRCIDRecovered.Load(); c != n {
		t.Errorf("ICRCIDRecovered = %d, want %d", c, n)
	}

	noDF := wire.IPv4Fields{ID: 0x1234, TTL: 64}
	sendCrafted(t, fd, from, b.LocalAddr(), noDF, buildTestPacket(t, wire.UDSendOnly, 0x13, 64, 9))
	waitCounted(t, b, n+1)
	if e, d := b.Counters().ICRCErrors.Load(), b.Counters().Delivered.Load(); e != 1 || d != n {
		t.Errorf("packet without DF: %d ICRC errors, %d delivered; want 1, %d", e, d, n)
	}
}

// TestCaptureTap captures both ends of an exchange and checks that every
// record is a well-formed IP packet whose ICRC is valid over the rebuilt
// headers, with the identification the packet had.
func TestCaptureTap(t *testing.T) {
	a, b := openPair(t, addrA, addrB, Config{})
	var capA, capB bytes.Buffer
	if err := a.SetCapture(&capA); err != nil {
		t.Fatal(err)
	}
	if err := b.SetCapture(&capB); err != nil {
		t.Fatal(err)
	}
	got := make(collector, 8)
	serve(t, b, got)
	s := acquire(t, a, SourcePortForFlow(0x14, 0x28))
	wantIDs := []uint16{0, 0, 0}
	for i, n := range []int{0, 5, 4096} {
		if err := s.Send(b.LocalAddr(), buildTestPacket(t, wire.RCSendOnly, 0x28, n, uint32(i))); err != nil {
			t.Fatal(err)
		}
		got.next(t)
	}
	if _, err := s.SendBatch([]Message{{Dst: b.LocalAddr(), Packet: buildTestPacket(t, wire.RCAcknowledge, 0x28, 0, 3)}}); err != nil {
		t.Fatal(err)
	}
	got.next(t)
	wantIDs = append(wantIDs, 0)
	sentIDs := append([]uint16(nil), wantIDs...)
	if fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW); err == nil {
		defer unix.Close(fd)
		from := netip.AddrPortFrom(addrA, 0xC001)
		sendCrafted(t, fd, from, b.LocalAddr(), wire.IPv4Fields{ID: 0xBEEF, Flags: wire.IPv4DontFragment, TTL: 64},
			buildTestPacket(t, wire.UDSendOnly, 0x13, 32, 0))
		got.next(t)
		wantIDs = append(wantIDs, 0xBEEF)
	}
	// Stopped captures get nothing more.
	if err := a.SetCapture(nil); err != nil {
		t.Fatal(err)
	}
	if err := b.SetCapture(nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(b.LocalAddr(), buildTestPacket(t, wire.RCSendOnly, 0x28, 1, 9)); err != nil {
		t.Fatal(err)
	}
	got.next(t)

	checkCapture(t, "sent", capA.Bytes(), sentIDs)
	checkCapture(t, "received", capB.Bytes(), wantIDs)
	if e := a.Counters().CaptureErrors.Load() + b.Counters().CaptureErrors.Load(); e != 0 {
		t.Errorf("%d capture errors", e)
	}
}

func checkCapture(t *testing.T, name string, file []byte, ids []uint16) {
	t.Helper()
	r, err := pcap.NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if r.LinkType() != pcap.LinkTypeRaw || !r.Nanosecond() {
		t.Errorf("%s: link type %v, nanosecond %v", name, r.LinkType(), r.Nanosecond())
	}
	var prev time.Time
	for i := 0; ; i++ {
		rec, err := r.ReadPacket(nil)
		if err == io.EOF {
			if i != len(ids) {
				t.Errorf("%s: %d records, want %d", name, i, len(ids))
			}
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if i >= len(ids) {
			t.Errorf("%s: extra record %d", name, i)
			continue
		}
		if rec.Timestamp.Before(prev) {
			t.Errorf("%s %d: timestamp goes back", name, i)
		}
		prev = rec.Timestamp
		f, err := pcap.DecodeFrame(r.LinkType(), rec.Data)
		if err != nil {
			t.Fatalf("%s %d: %v", name, i, err)
		}
		if !wire.CheckICRC(f.IPHeader, f.UDPHeader, f.UDPPayload) {
			t.Errorf("%s %d: ICRC invalid over the captured headers", name, i)
		}
		ip := wire.IPv4(f.IPHeader)
		if uint16(f.ID) != ids[i] || !f.DontFragment || ip.Checksum() != ip.ComputeChecksum() {
			t.Errorf("%s %d: id %#04x (want %#04x), DF %v, IP checksum %#04x (want %#04x)",
				name, i, f.ID, ids[i], f.DontFragment, ip.Checksum(), ip.ComputeChecksum())
		}
		if f.UDPChecksum != 0 && !udpChecksumValid(f.IPHeader, f.UDPHeader, f.UDPPayload) {
			t.Errorf("%s %d: bad UDP checksum %#04x", name, i, f.UDPChecksum)
		}
		if name == "sent" && f.UDPChecksum == 0 {
			t.Errorf("%s %d: sent packet without UDP checksum", name, i)
		}
	}
}

// udpChecksumValid verifies a UDP checksum the RFC 1071 way: the ones'
// complement sum over pseudo-header, header (checksum included) and payload
// is all ones.
func udpChecksumValid(ip, udp, payload []byte) bool {
	var words []byte
	words = append(words, ip[12:20]...)
	words = append(words, 0, wire.IPProtocolUDP)
	words = append(words, udp[4:6]...)
	words = append(words, udp...)
	words = append(words, payload...)
	if len(words)%2 == 1 {
		words = append(words, 0)
	}
	var sum uint32
	for i := 0; i < len(words); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(words[i:]))
	}
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	return sum == 0xFFFF
}

func TestSetCaptureErrors(t *testing.T) {
	a := openConn(t, Config{Addr: addrA, Port: 24797})
	if err := a.SetCapture(failingWriter{}); err == nil {
		t.Error("SetCapture with a failing writer succeeded")
	}
	a.Close()
	var buf bytes.Buffer
	if err := a.SetCapture(&buf); err == nil {
		t.Error("SetCapture after Close succeeded")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestIPv6ZeroUDPChecksum sends an IPv6 datagram with UDP checksum 0, as
// rxe does, and checks that it arrives: Linux drops such datagrams unless
// the socket sets UDP_NO_CHECK6_RX.
func TestIPv6ZeroUDPChecksum(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		t.Skipf("raw socket: %v (needs CAP_NET_RAW)", err)
	}
	defer unix.Close(fd)
	_, b := openPair(t, addr6, addr6, Config{})
	got := make(collector, 2)
	serve(t, b, got)

	from := netip.AddrPortFrom(addr6, 0xC0DE)
	transport := buildTestPacket(t, wire.RCSendOnly, 0x28, 40, 1)
	u := wire.UDPFields{SrcPort: from.Port(), DstPort: b.LocalAddr().Port(), Length: uint16(wire.UDPHeaderLen + len(transport) + wire.ICRCLen)}
	dgram := u.Append(nil) // checksum 0: none
	dgram = append(dgram, transport...)
	dgram = binary.LittleEndian.AppendUint32(dgram, refTransportICRC(from, b.LocalAddr(), 0, transport))
	if err := unix.Sendto(fd, dgram, 0, &unix.SockaddrInet6{Addr: addr6.As16()}); err != nil {
		t.Fatal(err)
	}
	r := got.next(t)
	if r.from != from || !bytes.Equal(r.raw, dgram[wire.UDPHeaderLen:]) || r.info.IDRecovered {
		t.Errorf("received %x from %v (%+v)", r.raw, r.from, r.info)
	}
}
