//go:build linux && !goroce_portable

package netio

import (
	"bytes"
	"encoding/binary"
	"io"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/pcap"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/wire"
)

// gsoTestMessages returns the packets of TestOffloadExchange: a 64 KiB
// WRITE at MTU 4096 with a short tail (more than one super-packet's
// bytes), a run of small equal packets longer than a super-packet's
// segment limit allows at once, and a few packets of growing size, which
// cannot share a super-packet (only the last segment may be shorter).
func gsoTestMessages(t testing.TB, dst netip.AddrPort) []Message {
	var sizes []int
	for range 16 {
		sizes = append(sizes, 4096)
	}
	sizes = append(sizes, 1000)
	for range maxGSOSegments + 6 {
		sizes = append(sizes, 8)
	}
	sizes = append(sizes, 16, 32, 64, 64, 4)
	msgs := make([]Message, len(sizes))
	for i, n := range sizes {
		msgs[i] = Message{Dst: dst, Packet: buildTestPacket(t, wire.RCRDMAWriteMiddle, 0x25, n, uint32(i))}
	}
	return msgs
}

// TestOffloadExchange sends runs of packets with and without segmentation
// and receive offload, over IPv4 and IPv6, and checks that every packet
// arrives once, in order, intact, with an ICRC valid for the IPv4
// identification the kernel gave it, and that the receiver's check was a
// full one (identification 0 or predicted, never recovered).
func TestOffloadExchange(t *testing.T) {
	for _, fam := range []struct {
		name string
		a, b netip.Addr
	}{{"IPv4", addrA, addrB}, {"IPv6", addr6, addr6}} {
		for _, tc := range []struct {
			name         string
			noGSO, noGRO bool
		}{{"GSO+GRO", false, false}, {"GSO", false, true}, {"GRO", true, false}, {"none", true, true}} {
			t.Run(fam.name+"/"+tc.name, func(t *testing.T) {
				a, b := openPair(t, fam.a, fam.b, Config{NoGSO: tc.noGSO, NoGRO: tc.noGRO, BatchSize: 32})
				if !tc.noGSO && !a.gso {
					t.Skip("the kernel does not support UDP_SEGMENT")
				}
				if !tc.noGRO && !b.gro {
					t.Skip("the kernel does not support UDP_GRO")
				}
				got := make(collector, 256)
				serve(t, b, got)
				s := acquire(t, a, SourcePortForQPN(0x31))
				msgs := gsoTestMessages(t, b.LocalAddr())
				want := make([][]byte, len(msgs))
				for i, m := range msgs {
					want[i] = bytes.Clone(m.Packet)
				}
				if sent, err := s.SendBatch(msgs); sent != len(msgs) || err != nil {
					t.Fatalf("SendBatch = %d, %v", sent, err)
				}
				var prevID uint16
				for i := range msgs {
					r := got.next(t)
					n := len(r.raw) - wire.ICRCLen
					if !bytes.Equal(r.raw[:n], want[i]) {
						t.Fatalf("packet %d: received %d bytes, not the %d sent", i, n, len(want[i]))
					}
					if r.info.IDRecovered {
						t.Errorf("packet %d: identification %d recovered, not predicted", i, r.info.IPID)
					}
					if id := r.info.IPID; id != 0 && (id != prevID+1 || fam.a.Is6() || tc.noGSO) {
						t.Errorf("packet %d: identification %d after %d", i, id, prevID)
					}
					prevID = r.info.IPID
					if crc := refTransportICRC(r.from, b.LocalAddr(), r.info.IPID, want[i]); binary.LittleEndian.Uint32(r.raw[n:]) != crc {
						t.Errorf("packet %d: ICRC %x, reference %08x for id %d", i, r.raw[n:], crc, r.info.IPID)
					}
				}
				ac, bc := a.Counters(), b.Counters()
				n := uint64(len(msgs))
				waitCounted(t, b, n)
				if ac.TxPackets.Load() != n || bc.RxPackets.Load() != n || bc.Delivered.Load() != n || ac.SendErrors.Load() != 0 {
					t.Errorf("%d packets sent, %d received, %d delivered, %d send errors; want %d, %d, %d, 0",
						ac.TxPackets.Load(), bc.RxPackets.Load(), bc.Delivered.Load(), ac.SendErrors.Load(), n, n, n)
				}
				if ac.TxBytes.Load() != bc.RxBytes.Load() {
					t.Errorf("%d bytes sent, %d received", ac.TxBytes.Load(), bc.RxBytes.Load())
				}
				// One sendmmsg per batch of 32 packets, GSO or not.
				if calls := ac.TxCalls.Load(); calls != (n+31)/32 {
					t.Errorf("TxCalls = %d for %d packets in batches of 32", calls, n)
				}
				if gso := ac.TxGSO.Load(); (gso > 0) == tc.noGSO {
					t.Errorf("TxGSO = %d with NoGSO %v", gso, tc.noGSO)
				}
				// Loopback hands a super-packet whole to a socket with
				// UDP_GRO, and segments it for the others.
				if gro := bc.RxGRO.Load(); (gro > 0) != (!tc.noGSO && !tc.noGRO) {
					t.Errorf("RxGRO = %d with NoGSO %v, NoGRO %v", gro, tc.noGSO, tc.noGRO)
				}
				predicted := bc.ICRCIDPredicted.Load()
				if (predicted > 0) != (!tc.noGSO && fam.a.Is4()) || bc.ICRCIDRecovered.Load() != 0 || bc.ICRCErrors.Load() != 0 {
					t.Errorf("%d identifications predicted, %d recovered, %d ICRC errors",
						predicted, bc.ICRCIDRecovered.Load(), bc.ICRCErrors.Load())
				}
				if ac.GSOFallbacks.Load() != 0 {
					t.Errorf("GSOFallbacks = %d", ac.GSOFallbacks.Load())
				}
			})
		}
	}
}

// TestGSOGrouping checks which packets share a super-packet: runs of equal
// sizes to one destination with at most one shorter packet at the end,
// within the kernel's segment and byte limits.
func TestGSOGrouping(t *testing.T) {
	a, b := openPair(t, addrA, addrB, Config{BatchSize: 128})
	c, _ := openPair(t, addrA, addrB, Config{}) // a second destination
	if !a.gso {
		t.Skip("the kernel does not support UDP_SEGMENT")
	}
	s := acquire(t, a, SourcePortForQPN(0x32))
	d1, d2 := b.LocalAddr(), c.LocalAddr()
	type pkt struct {
		dst netip.AddrPort
		n   int
	}
	run := func(dst netip.AddrPort, n, count int) []pkt {
		p := make([]pkt, count)
		for i := range p {
			p[i] = pkt{dst, n}
		}
		return p
	}
	cat := func(ps ...[]pkt) []pkt {
		var r []pkt
		for _, p := range ps {
			r = append(r, p...)
		}
		return r
	}
	for _, tc := range []struct {
		name string
		pkts []pkt
		segs []int // packets per datagram
	}{
		{"single", run(d1, 100, 1), []int{1}},
		{"equal", run(d1, 100, 5), []int{5}},
		{"short tail", cat(run(d1, 100, 3), run(d1, 40, 1)), []int{4}},
		{"after the tail", cat(run(d1, 100, 3), run(d1, 40, 2)), []int{4, 1}},
		{"longer breaks", cat(run(d1, 40, 2), run(d1, 100, 2)), []int{2, 2}},
		{"destinations", cat(run(d1, 100, 2), run(d2, 100, 2), run(d1, 100, 1)), []int{2, 2, 1}},
		{"segment limit", run(d1, 0, maxGSOSegments+1), []int{maxGSOSegments, 1}},
		// 4096-byte payload + 12-byte BTH + 4-byte ICRC: 15 fit.
		{"byte limit", run(d1, 4096, 17), []int{15, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs := make([]Message, len(tc.pkts))
			for i, p := range tc.pkts {
				msgs[i] = Message{Dst: p.dst, Packet: buildTestPacket(t, wire.RCRDMAWriteMiddle, 1, p.n, uint32(i))}
			}
			before := a.Counters().TxGSO.Load()
			if sent, err := s.SendBatch(msgs); sent != len(msgs) || err != nil {
				t.Fatalf("SendBatch = %d, %v", sent, err)
			}
			// The batch's headers still tell how the last call grouped
			// the packets.
			nh := 0
			for nh < len(s.batch.segs) && nh < len(tc.segs) && s.batch.segs[nh] == tc.segs[nh] {
				nh++
			}
			var gso uint64
			for _, k := range tc.segs {
				if k > 1 {
					gso++
				}
			}
			if nh != len(tc.segs) || a.Counters().TxGSO.Load()-before != gso {
				t.Errorf("grouped as %v, want %v", s.batch.segs[:len(tc.segs)], tc.segs)
			}
			// Staged (stage_linux.go), each datagram is one I/O vector.
			for j := range tc.segs {
				if s.batch.niov[j] != 1 {
					t.Errorf("datagram %d is %d I/O vectors, want 1", j, s.batch.niov[j])
				}
			}
			// Each packet's ICRC is for its index in its datagram.
			i := 0
			for _, k := range tc.segs {
				for id := range k {
					m := msgs[i]
					n := len(m.Packet)
					got := binary.LittleEndian.Uint32(m.Packet[n : n+wire.ICRCLen])
					if want := refTransportICRC(s.src, m.Dst, uint16(id), m.Packet); got != want {
						t.Errorf("packet %d: ICRC %08x, want %08x for id %d", i, got, want, id)
					}
					i++
				}
			}
		})
	}
}

// TestGSOFallback makes the kernel refuse segmentation (a socket without
// UDP checksums cannot use it: EINVAL) and checks that the Sender falls
// back to one datagram per packet, once, without losing a packet.
func TestGSOFallback(t *testing.T) {
	a, b := openPair(t, addrA, addrB, Config{})
	if !a.gso {
		t.Skip("the kernel does not support UDP_SEGMENT")
	}
	got := make(collector, 64)
	serve(t, b, got)
	s := acquire(t, a, SourcePortForQPN(0x33))
	var serr error
	if err := s.rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NO_CHECK, 1)
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	for round := range 2 {
		msgs := make([]Message, 8)
		for i := range msgs {
			msgs[i] = Message{Dst: b.LocalAddr(), Packet: buildTestPacket(t, wire.RCRDMAWriteMiddle, 1, 256, uint32(i))}
		}
		if sent, err := s.SendBatch(msgs); sent != len(msgs) || err != nil {
			t.Fatalf("round %d: SendBatch = %d, %v", round, sent, err)
		}
		for i := range msgs {
			r := got.next(t)
			if psn := binary.BigEndian.Uint32(r.raw[8:12]) & 0xffffff; psn != uint32(i) || r.info.IPID != 0 {
				t.Fatalf("round %d: packet %d has PSN %d, id %d", round, i, psn, r.info.IPID)
			}
		}
	}
	ac := a.Counters()
	if ac.GSOFallbacks.Load() != 1 || ac.TxGSO.Load() != 0 || ac.SendErrors.Load() != 0 || s.gso.Load() {
		t.Errorf("%d fallbacks, %d GSO sends, %d send errors, GSO still on: %v",
			ac.GSOFallbacks.Load(), ac.TxGSO.Load(), ac.SendErrors.Load(), s.gso.Load())
	}
}

// TestOffloadRoundTripNoAlloc checks that the offload paths allocate
// nothing in steady state: a batch sent as one super-packet, received
// whole (UDP_GRO) and split.
func TestOffloadRoundTripNoAlloc(t *testing.T) {
	a, b := openPair(t, addrA, addrB, Config{})
	arrived := make(signal, 8)
	serve(t, b, arrived)
	s := acquire(t, a, SourcePortForQPN(0x34))
	pkt := buildTestPacket(t, wire.RCRDMAWriteMiddle, 1, 1024, 0)
	dst := b.LocalAddr()
	msgs := []Message{{Dst: dst, Packet: pkt}, {Dst: dst, Packet: pkt}, {Dst: dst, Packet: pkt}, {Dst: dst, Packet: pkt}}
	var sent uint64
	if n := testing.AllocsPerRun(100, func() {
		if _, err := s.SendBatch(msgs); err != nil {
			t.Fatal(err)
		}
		sent += uint64(len(msgs))
		for range msgs {
			<-arrived
		}
	}); n != 0 {
		t.Errorf("a GSO round trip allocates %v times", n)
	}
	waitCounted(t, b, sent)
	if a.gso && b.gro && (a.Counters().TxGSO.Load() == 0 || b.Counters().RxGRO.Load() == 0) {
		t.Errorf("offload not used: %d GSO sends, %d GRO receives", a.Counters().TxGSO.Load(), b.Counters().RxGRO.Load())
	}
}

// TestSendBatchPayload sends packets whose payloads are separate from
// their headers (Message.Payload, gathered by the kernel), mixed with
// whole packets, over runs of equal sizes (one GSO datagram each, with and
// without offload) and sizes that need a pad: every packet must arrive
// exactly as the whole packet would have, with a valid ICRC, and the
// counters and the capture tap must count the whole packets.
func TestSendBatchPayload(t *testing.T) {
	for _, noGSO := range []bool{false, true} {
		a, b := openPair(t, addrA, addrB, Config{BatchSize: 16, NoGSO: noGSO})
		got := make(collector, 256)
		serve(t, b, got)
		s := acquire(t, a, SourcePortForQPN(0x12))
		var capture bytes.Buffer
		if err := a.SetCapture(&capture); err != nil {
			t.Fatal(err)
		}
		sizes := []int{4096, 4096, 4096, 4096, 4093, 1, 2, 3, 1024, 1024, 0, 17}
		// Packets a little larger than a staging slot (stageSlot; the
		// receive buffers take them) fill the staging buffer before the
		// batch of 16 ends: the packets after them go in place, some
		// joining a staged datagram.
		for range 16 {
			sizes = append(sizes, 4280)
		}
		var msgs []Message
		var whole [][]byte
		var txBytes uint64
		for round := range 5 {
			for i, n := range sizes {
				psn := uint32(round*len(sizes) + i)
				pkt := buildTestPacket(t, wire.RCSendOnly, 0x25, n, psn) // any size, padded
				whole = append(whole, pkt)
				txBytes += uint64(len(pkt) + wire.ICRCLen)
				if n > 0 && (i+round)%4 != 3 { // some whole, some split
					msgs = append(msgs, splitPacket(b.LocalAddr(), pkt, n))
				} else {
					msgs = append(msgs, Message{Dst: b.LocalAddr(), Packet: pkt})
				}
			}
		}
		if sent, err := s.SendBatch(msgs); sent != len(msgs) || err != nil {
			t.Fatalf("NoGSO %v: SendBatch = %d, %v", noGSO, sent, err)
		}
		for i := range msgs {
			r := got.next(t)
			if !bytes.Equal(r.raw[:len(r.raw)-wire.ICRCLen], whole[i]) {
				d := 0
				for d < min(len(r.raw)-wire.ICRCLen, len(whole[i])) && r.raw[d] == whole[i][d] {
					d++
				}
				t.Fatalf("NoGSO %v: packet %d (%d bytes, want %d) differs from the whole packet at byte %d", noGSO, i, len(r.raw)-wire.ICRCLen, len(whole[i]), d)
			}
		}
		if err := a.SetCapture(nil); err != nil {
			t.Fatal(err)
		}
		waitCounted(t, b, uint64(len(msgs)))
		ac, bc := a.Counters(), b.Counters()
		// The last batch's counts are added after the handler had it.
		testkit.WaitFor(t, "the receive counts", func() bool { return bc.Delivered.Load()+bc.ICRCErrors.Load() >= uint64(len(msgs)) })
		if ac.TxPackets.Load() != uint64(len(msgs)) || ac.TxBytes.Load() != txBytes || ac.SendErrors.Load() != 0 {
			t.Errorf("NoGSO %v: sender counters %d packets, %d bytes, %d errors; want %d, %d, 0",
				noGSO, ac.TxPackets.Load(), ac.TxBytes.Load(), ac.SendErrors.Load(), len(msgs), txBytes)
		}
		if bc.ICRCErrors.Load() != 0 || bc.Delivered.Load() != uint64(len(msgs)) {
			t.Errorf("NoGSO %v: receiver %d ICRC errors, %d delivered; want 0, %d", noGSO, bc.ICRCErrors.Load(), bc.Delivered.Load(), len(msgs))
		}
		if !noGSO && ac.TxGSO.Load() == 0 {
			t.Error("no GSO datagram: the equal-size runs should have been one each")
		}
		checkCapturedPackets(t, capture.Bytes(), whole)
	}
}

// checkCapturedPackets checks that the pcap file holds the packets of want
// in order (transport bytes without the ICRC), each with a valid ICRC over
// the captured headers.
func checkCapturedPackets(t *testing.T, file []byte, want [][]byte) {
	t.Helper()
	r, err := pcap.NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		rec, err := r.ReadPacket(nil)
		if err == io.EOF {
			if i != len(want) {
				t.Errorf("capture: %d records, want %d", i, len(want))
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		f, err := pcap.DecodeFrame(r.LinkType(), rec.Data)
		if err != nil {
			t.Fatalf("capture %d: %v", i, err)
		}
		if i >= len(want) {
			t.Errorf("capture: extra record %d", i)
			continue
		}
		if !wire.CheckICRC(f.IPHeader, f.UDPHeader, f.UDPPayload) {
			t.Errorf("capture %d: ICRC invalid", i)
		}
		if !bytes.Equal(f.UDPPayload[:len(f.UDPPayload)-wire.ICRCLen], want[i]) {
			t.Errorf("capture %d: packet differs", i)
		}
	}
}
