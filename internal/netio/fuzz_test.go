package netio

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/wire"
)

// Fuzz targets for every input that comes from the network or the kernel:
// the per-datagram receive path (parse, ICRC, id recovery, dispatch), the
// id solver, control messages and socket addresses.

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
			binary.LittleEndian.PutUint32(pkt[n-icrcLen:], refTransportICRC(src, local, id, pkt[:n-icrcLen]))
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
		c.deliver(rx, HandlerFunc(func(p *wire.Packet, from netip.AddrPort, info RecvInfo) {
			var q wire.Packet
			if q.Parse(p.Raw, 0) != nil {
				t.Fatalf("delivered a packet that does not parse: %x", p.Raw)
			}
			m := len(p.Raw) - icrcLen
			want := refTransportICRC(from, info.Local, info.IPID, p.Raw[:m])
			if binary.LittleEndian.Uint32(p.Raw[m:]) != want {
				t.Fatalf("delivered with id %#04x but the ICRC is wrong for it", info.IPID)
			}
			if info.IDRecovered != (info.IPID != 0) || (v6 && info.IDRecovered) {
				t.Fatalf("inconsistent info %+v", info)
			}
			got = append(got, received{from: from, info: info})
		}))
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

// refTransportICRC is the reference ICRC of transport from src to dst with
// IPv4 identification id, over headers built independently of the code
// under test's ICRC path.
func refTransportICRC(src, dst netip.AddrPort, id uint16, transport []byte) uint32 {
	var buf [maxIPUDPHeaderLen]byte
	ip, udp := ipUDPHeaders(&buf, src, dst, id, len(transport)+icrcLen)
	return refICRC(ip, udp, transport)
}

// FuzzRecoverID checks the solver: the syndrome of any id at any length is
// solved back to that id, and any syndrome it accepts is really the
// syndrome of the id it returns.
func FuzzRecoverID(f *testing.F) {
	f.Add(uint32(idCoveredBytes(1024+16)), uint16(0xEAFE), uint32(0))
	f.Add(uint32(1), uint16(1), uint32(0xFFFFFFFF))
	f.Fuzz(func(t *testing.T, n uint32, id uint16, syndrome uint32) {
		m := int(n % (65535 + idCoveredAfter + 1))
		var r idRecoverer
		if got, ok := r.recoverID(m, idSyndrome(id, m)); !ok || got != id {
			t.Fatalf("n=%d: recoverID(L(%#04x)) = %#04x, %v", m, id, got, ok)
		}
		if got, ok := r.recoverID(m, syndrome); ok && idSyndrome(got, m) != syndrome {
			t.Fatalf("n=%d: recoverID(%#08x) = %#04x, whose syndrome is %#08x", m, syndrome, got, idSyndrome(got, m))
		}
	})
}

// FuzzControlMessage feeds arbitrary bytes to the control-message parser,
// which must never read out of bounds, and checks that an IP_PKTINFO
// message is found behind another message carrying the fuzzed bytes.
func FuzzControlMessage(f *testing.F) {
	f.Add([]byte{})
	f.Add(pktinfo4Message([4]byte{127, 77, 0, 2}))
	f.Fuzz(func(t *testing.T, oob []byte) {
		pktinfoDst(oob)

		data := oob[:min(len(oob), 64)]
		msg := cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, data)
		msg = append(msg, pktinfo4Message([4]byte{10, 1, 2, 3})...)
		if a, ok := pktinfoDst(msg); !ok || a != netip.AddrFrom4([4]byte{10, 1, 2, 3}) {
			t.Fatalf("found %v, %v; want 10.1.2.3", a, ok)
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
