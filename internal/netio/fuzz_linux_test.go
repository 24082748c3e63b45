//go:build linux && !goroce_portable

package netio

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strconv"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/wire"
)

// Fuzz targets for every input that comes from the network or the kernel:
// the per-datagram receive path (parse, ICRC, id recovery, dispatch),
// control messages and socket addresses. The ICRC arithmetic and the id
// solver have their own in internal/wire.

// fuzzPeers are the addresses FuzzDeliver uses: those of the rxe captures,
// so that captured packets are valid seeds.
var (
	fuzzSrc4 = netip.MustParseAddr("10.99.0.2")
	fuzzDst4 = netip.MustParseAddrPort("10.99.0.3:4791")
	fuzzSrc6 = netip.MustParseAddr("fd00::2")
	fuzzDst6 = netip.MustParseAddrPort("[fd00::3]:4791")
)

// FuzzDeliver runs one datagram through the receive path as if recvmmsg had
// returned it. With fix set, the last 4 bytes are replaced by the valid ICRC
// for IPv4 identification id, so the fuzzer also explores packets that pass.
// Invariants: no panic; every datagram is counted exactly once (malformed,
// ICRC error or delivered); a delivered packet parses and its ICRC is valid
// for the identification reported; a fixed, well-formed packet is delivered
// with that identification.
func FuzzDeliver(f *testing.F) {
	f.Add([]byte{}, false, uint16(0xC000), uint16(0), false)
	f.Add(make([]byte, 16), false, uint16(0xC000), uint16(0), true)
	f.Fuzz(func(t *testing.T, data []byte, v6 bool, sport uint16, id uint16, fix bool) {
		const size = 512
		if len(data) > size+1 {
			return
		}
		src, local := netip.AddrPortFrom(fuzzSrc4, sport), fuzzDst4
		if v6 {
			src, local = netip.AddrPortFrom(fuzzSrc6, sport), fuzzDst6
		}
		c := &Conn{cfg: Config{MaxDatagramSize: size}, local: local, v6: v6}
		rx := newReceiver(1, size)
		rx.reset()
		n := copy(rx.bufs, data)
		var parsed wire.Packet
		fixed := fix && len(data) <= size && parsed.Parse(data, 0) == nil
		if fixed {
			pkt := rx.bufs[:n]
			binary.LittleEndian.PutUint32(pkt[n-wire.ICRCLen:], refTransportICRC(src, local, id, pkt[:n-wire.ICRCLen]))
		}
		h := &rx.batch.hdrs[0]
		h.Len = uint32(n)
		h.Hdr.Namelen = rx.batch.names[0].encode(src, v6)
		h.Hdr.Controllen = 0
		if len(data) > size {
			h.Hdr.Flags = unix.MSG_TRUNC // the datagram did not fit
		}
		rx.batch.n = 1

		var got []received
		c.deliver(rx, HandlerFunc(func(p *wire.Packet, from netip.AddrPort, info *RecvInfo) {
			var q wire.Packet
			if q.Parse(p.Raw, 0) != nil {
				t.Fatalf("delivered a packet that does not parse: %x", p.Raw)
			}
			m := len(p.Raw) - wire.ICRCLen
			want := refTransportICRC(from, info.Local, info.IPID, p.Raw[:m])
			if binary.LittleEndian.Uint32(p.Raw[m:]) != want {
				t.Fatalf("delivered with id %#04x but the ICRC is wrong for it", info.IPID)
			}
			if info.IDRecovered != (info.IPID != 0) || (v6 && info.IDRecovered) {
				t.Fatalf("inconsistent info %+v", *info)
			}
			got = append(got, received{from: from, info: *info})
		}), false)
		ctr := &c.counters
		if sum := ctr.Malformed.Load() + ctr.ICRCErrors.Load() + ctr.Delivered.Load(); sum != 1 || ctr.RxPackets.Load() != 1 {
			t.Fatalf("counters: %d rx, %d malformed + %d ICRC errors + %d delivered",
				ctr.RxPackets.Load(), ctr.Malformed.Load(), ctr.ICRCErrors.Load(), ctr.Delivered.Load())
		}
		if fixed {
			wantID := id
			if v6 {
				wantID = 0
			}
			if len(got) != 1 || got[0].info.IPID != wantID || got[0].from != src {
				t.Fatalf("valid packet with id %#04x not delivered as such: %+v", id, got)
			}
		}
	})
}

// FuzzControlMessage feeds arbitrary bytes to the control-message parser,
// which must never read out of bounds, and checks that an IP_PKTINFO
// message, a UDP_GRO one and an IP_TOS one are found behind another
// message carrying the fuzzed bytes.
func FuzzControlMessage(f *testing.F) {
	f.Add([]byte{})
	f.Add(pktinfo4Message([4]byte{127, 77, 0, 2}))
	f.Add(cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{0x03}))
	f.Add(cmsg(unix.IPPROTO_IPV6, unix.IPV6_TCLASS, binary.NativeEndian.AppendUint32(nil, 0xB9)))
	f.Fuzz(func(t *testing.T, oob []byte) {
		pktinfoDst(oob)

		data := oob[:min(len(oob), 64)]
		msg := cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, data)
		msg = append(msg, pktinfo4Message([4]byte{10, 1, 2, 3})...)
		if a, ok := pktinfoDst(msg); !ok || a != netip.AddrFrom4([4]byte{10, 1, 2, 3}) {
			t.Fatalf("found %v, %v; want 10.1.2.3", a, ok)
		}
		msg = append(msg, groMessage(4124)...)
		if a, ok, seg, ecn := recvControl(msg); !ok || a != netip.AddrFrom4([4]byte{10, 1, 2, 3}) || seg != 4124 || ecn != ECNUnknown {
			t.Fatalf("found %v, %v, segment size %d, ECN %v; want 10.1.2.3, 4124 and unknown", a, ok, seg, ecn)
		}
		msg = append(msg, cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{0xB9})...)
		if _, _, _, ecn := recvControl(msg); ecn != ECNECT1 {
			t.Fatalf("ECN %v from TOS 0xB9, want ECT(1)", ecn)
		}
	})
}

// groMessage encodes a UDP_GRO control message: an int, the segment size.
func groMessage(size int) []byte {
	return cmsg(unix.SOL_UDP, unix.UDP_GRO, binary.NativeEndian.AppendUint32(nil, uint32(size)))
}

// FuzzDeliverGRO runs a coalesced datagram (UDP_GRO) through the receive
// path: data cut into segments of seg bytes, the last possibly shorter.
// With fix set, every segment that parses gets the valid ICRC for IPv4
// identification base+k, k its index, as a GSO sender's segments carry.
// Invariants: no panic; every segment is counted once (malformed, ICRC
// error or delivered); a delivered packet is one of the segments, in
// order, with an ICRC valid for the identification reported; a fixed
// segment is delivered, and one following a delivered segment has its
// identification predicted (a full check), not recovered.
func FuzzDeliverGRO(f *testing.F) {
	f.Add(make([]byte, 90), uint16(30), uint16(0), true)
	f.Add(make([]byte, 100), uint16(30), uint16(0xFFFE), true)
	f.Add([]byte{1, 2, 3}, uint16(1), uint16(0), false)
	f.Fuzz(func(t *testing.T, data []byte, seg uint16, base uint16, fix bool) {
		const size = 2048
		if len(data) > size || seg == 0 {
			return
		}
		src, local := netip.AddrPortFrom(fuzzSrc4, 0xC123), fuzzDst4
		c := &Conn{cfg: Config{MaxDatagramSize: size}, local: local}
		rx := newReceiver(1, size)
		rx.reset()
		n := copy(rx.bufs, data)
		buf := rx.bufs[:n]
		var segs [][]byte
		for off := 0; ; off += int(seg) {
			segs = append(segs, buf[off:min(off+int(seg), n)])
			if off+int(seg) >= n {
				break
			}
		}
		fixed := make([]bool, len(segs))
		if fix {
			for k, s := range segs {
				var p wire.Packet
				if p.Parse(s, 0) == nil {
					m := len(s) - wire.ICRCLen
					binary.LittleEndian.PutUint32(s[m:], refTransportICRC(src, local, base+uint16(k), s[:m]))
					fixed[k] = true
				}
			}
		}
		want := make([][]byte, len(segs))
		for k, s := range segs {
			want[k] = bytes.Clone(s)
		}
		h := &rx.batch.hdrs[0]
		h.Len = uint32(n)
		h.Hdr.Namelen = rx.batch.names[0].encode(src, false)
		oob := groMessage(int(seg))
		copy(rx.oob, oob)
		h.Hdr.SetControllen(len(oob))
		rx.batch.n = 1

		next := 0 // index of the next segment that may be delivered
		prevDelivered := -1
		c.deliver(rx, HandlerFunc(func(p *wire.Packet, from netip.AddrPort, info *RecvInfo) {
			k := next
			for k < len(want) && !bytes.Equal(want[k], p.Raw) {
				k++
			}
			if k == len(want) {
				t.Fatalf("delivered a packet that is no segment, or out of order: %x", p.Raw)
			}
			m := len(p.Raw) - wire.ICRCLen
			if binary.LittleEndian.Uint32(p.Raw[m:]) != refTransportICRC(from, info.Local, info.IPID, p.Raw[:m]) {
				t.Fatalf("segment %d delivered with id %#04x but the ICRC is wrong for it", k, info.IPID)
			}
			if fixed[k] && prevDelivered == k-1 && k > 0 && info.IDRecovered {
				t.Fatalf("segment %d: identification %#04x recovered, not predicted", k, info.IPID)
			}
			for j := next; j < k; j++ {
				if fixed[j] {
					t.Fatalf("fixed segment %d not delivered", j)
				}
			}
			next, prevDelivered = k+1, k
		}), false)
		for j := next; j < len(segs); j++ {
			if fixed[j] {
				t.Fatalf("fixed segment %d not delivered", j)
			}
		}
		ctr := &c.counters
		if sum := ctr.Malformed.Load() + ctr.ICRCErrors.Load() + ctr.Delivered.Load(); sum != uint64(len(segs)) || ctr.RxPackets.Load() != uint64(len(segs)) {
			t.Fatalf("counters for %d segments: %d rx, %d malformed + %d ICRC errors + %d delivered", len(segs),
				ctr.RxPackets.Load(), ctr.Malformed.Load(), ctr.ICRCErrors.Load(), ctr.Delivered.Load())
		}
		if gro := ctr.RxGRO.Load(); (gro == 1) != (len(segs) > 1) || gro > 1 {
			t.Fatalf("RxGRO = %d for %d segments", gro, len(segs))
		}
	})
}

// cmsg encodes a control message as the kernel does.
func cmsg(level, typ int32, data []byte) []byte {
	b := make([]byte, unix.CmsgSpace(len(data)))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = level, typ
	h.SetLen(unix.CmsgLen(len(data)))
	copy(b[unix.CmsgLen(0):], data)
	return b
}

// pktinfo4Message encodes an IP_PKTINFO control message: struct in_pktinfo
// is ifindex, spec_dst (a local address for replies), addr (the header's
// destination).
func pktinfo4Message(dst [4]byte) []byte {
	data := make([]byte, unix.SizeofInet4Pktinfo)
	binary.NativeEndian.PutUint32(data, 1)
	copy(data[4:], []byte{127, 0, 0, 1})
	copy(data[8:], dst[:])
	return cmsg(unix.IPPROTO_IP, unix.IP_PKTINFO, data)
}

// FuzzSockaddr decodes arbitrary socket addresses and checks that encoding
// a decoded one gives it back.
func FuzzSockaddr(f *testing.F) {
	var sa sockaddr
	n := sa.encode(netip.MustParseAddrPort("10.99.0.2:49952"), false)
	f.Add(sa[:], n)
	n = sa.encode(netip.MustParseAddrPort("[fd00::1]:4791"), true)
	f.Add(sa[:], n)
	f.Fuzz(func(t *testing.T, raw []byte, n uint32) {
		var sa sockaddr
		copy(sa[:], raw)
		ap, ok := sa.decode(n)
		if !ok {
			return
		}
		var again sockaddr
		if got, _ := again.decode(again.encode(ap, ap.Addr().Is6())); got != ap {
			t.Fatalf("round trip %v → %v", ap, got)
		}
	})
}

// BenchmarkDeliver measures the receive path per packet without the system
// call: a batch of 32 datagrams as recvmmsg returns them, each parsed,
// ICRC-checked, counted and handed to a Handler that does nothing. "id0"
// packets carry the ICRC for identification 0 (goroce peers), "recovered"
// ones an ICRC for 0xEAFE, each from its own source so that no
// identification is predicted (rxe peers on the recovery path).
func BenchmarkDeliver(b *testing.B) {
	const batch = 32
	for _, size := range []int{64, 1024, 4096} {
		for _, kind := range []string{"id0", "recovered"} {
			b.Run(kind+"/"+strconv.Itoa(size), func(b *testing.B) {
				pkt := buildTestPacket(b, wire.RCRDMAWriteMiddle, 1, size, 0)
				n := len(pkt) + wire.ICRCLen
				c := &Conn{cfg: Config{MaxDatagramSize: n}, local: fuzzDst4}
				rx := newReceiver(batch, n)
				rx.reset()
				for i := range batch {
					src := netip.AddrPortFrom(fuzzSrc4, uint16(0xC000+i))
					var id uint16
					if kind == "recovered" {
						id = 0xEAFE
					}
					buf := rx.bufs[i*n : (i+1)*n]
					copy(buf, pkt)
					binary.LittleEndian.PutUint32(buf[len(pkt):], refTransportICRC(src, fuzzDst4, id, pkt))
					h := &rx.batch.hdrs[i]
					h.Len = uint32(n)
					h.Hdr.Namelen = rx.batch.names[i].encode(src, false)
					h.Hdr.Controllen = 0
				}
				rx.batch.n = batch
				var count countingHandler
				b.SetBytes(int64(batch * n))
				for b.Loop() {
					c.deliver(rx, &count, false)
				}
				if want := uint64(b.N) * batch; count.n.Load() != want || c.counters.Delivered.Load() != want {
					b.Fatalf("delivered %d, counted %d, want %d", count.n.Load(), c.counters.Delivered.Load(), want)
				}
			})
		}
	}
}
