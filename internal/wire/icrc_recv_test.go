package wire

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// refIDSyndrome computes L_n(id) the slow, obviously correct way: the
// difference between the CRC-32 of a message with the id bytes set and of
// the same message with them zero, the id followed by n other bytes. The
// prefix and the following bytes are random: the difference must not depend
// on them.
func refIDSyndrome(rng *rand.Rand, id uint16, n int) uint32 {
	msg := make([]byte, 8+2+n)
	for i := range msg {
		msg[i] = byte(rng.Uint32())
	}
	binary.BigEndian.PutUint16(msg[8:], 0)
	c0 := crc32.ChecksumIEEE(msg)
	binary.BigEndian.PutUint16(msg[8:], id)
	return c0 ^ crc32.ChecksumIEEE(msg)
}

// lengths covers the shapes that matter: tiny, every power-of-two boundary
// of the square-and-multiply, the smallest and typical RoCEv2 packets, and
// the largest UDP datagram.
var lengths = []int{0, 1, 2, 3, 7, 8, 255, 256, 1023, 1024, 1025,
	idCoveredBytes(16), idCoveredBytes(20), idCoveredBytes(1024 + 32), idCoveredBytes(4096 + 32),
	65535 + idCoveredAfter}

func TestIDSyndromeMatchesCRC(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ids := []uint16{1, 2, 0x80, 0x100, 0x8000, 0xFFFF, 0x1234, 0xEAFE}
	for _, n := range lengths {
		for _, id := range ids {
			if got, want := idSyndrome(id, n), refIDSyndrome(rng, id, n); got != want {
				t.Errorf("idSyndrome(%#04x, %d) = %#08x, CRC-32 difference is %#08x", id, n, got, want)
			}
		}
	}
}

func TestRecoverIDRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var r idRecoverer
	for _, n := range lengths {
		for range 200 {
			id := uint16(rng.Uint32())
			s := refIDSyndrome(rng, id, n)
			got, ok := r.recoverID(n, s, 0)
			if !ok || got != id {
				t.Fatalf("n=%d: recoverID(L(%#04x)) = %#04x, %v", n, id, got, ok)
			}
			// A right prediction is taken, a wrong one does not stand
			// in the way.
			for _, next := range []uint16{id, id + 1} {
				if got, ok := r.recoverID(n, s, next); !ok || got != id {
					t.Fatalf("n=%d: recoverID(L(%#04x)) predicting %#04x = %#04x, %v", n, id, next, got, ok)
				}
			}
		}
	}
}

// TestIDBasisImage: the basis's byte tables give L_n of every id.
func TestIDBasisImage(t *testing.T) {
	var r idRecoverer
	for _, n := range lengths {
		b := r.basis(n)
		for id := range 1 << idBits {
			if got, want := b.syndromeOf(uint16(id)), idSyndrome(uint16(id), n); got != want {
				t.Fatalf("n=%d: syndromeOf(%#04x) = %#08x, idSyndrome %#08x", n, id, got, want)
			}
		}
	}
}

// TestIDMapInjective checks, for a typical length, that all 65536 ids give
// distinct syndromes (rank 16), so a recovered id is unique.
func TestIDMapInjective(t *testing.T) {
	for _, n := range []int{idCoveredBytes(16), idCoveredBytes(1024 + 16)} {
		var b idBasis
		b.build(n)
		if b.rank != idBits {
			t.Fatalf("n=%d: rank %d, want %d", n, b.rank, idBits)
		}
		seen := make(map[uint32]bool, 1<<16)
		for id := range 1 << 16 {
			s := idSyndrome(uint16(id), n)
			if seen[s] {
				t.Fatalf("n=%d: syndrome %#08x repeats at id %#04x", n, s, id)
			}
			seen[s] = true
			if got, ok := b.solve(s); !ok || got != uint16(id) {
				t.Fatalf("n=%d: solve(L(%#04x)) = %#04x, %v", n, id, got, ok)
			}
		}
	}
}

// TestRecoverIDRejectRate checks that random syndromes fall in the image of
// L_n at the expected rate, 2^16/2^32: the strength of the recovery path.
func TestRecoverIDRejectRate(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var r idRecoverer
	n := idCoveredBytes(1024 + 16)
	const trials = 1 << 22 // 64 accepts expected
	accepted := 0
	for range trials {
		s := rng.Uint32()
		if id, ok := r.recoverID(n, s, 0); ok {
			accepted++
			if idSyndrome(id, n) != s {
				t.Fatalf("recoverID(%#08x) = %#04x, but L(%#04x) = %#08x", s, id, id, idSyndrome(id, n))
			}
		}
	}
	if accepted < 16 || accepted > 256 {
		t.Errorf("%d of %d random syndromes accepted, want about %d", accepted, trials, trials>>16)
	}
}

// TestIDCacheEviction cycles through more lengths than the cache holds and
// checks every answer stays right.
func TestIDCacheEviction(t *testing.T) {
	var r idRecoverer
	for round := range 3 {
		for k := range 2*idCacheSize + 1 {
			n := 40 + 4*k
			id := uint16(0x1111*k + round)
			if got, ok := r.recoverID(n, idSyndrome(id, n), 0); !ok || got != id {
				t.Fatalf("round %d, n=%d: got %#04x, %v; want %#04x", round, n, got, ok, id)
			}
		}
	}
	for i := range r.slots {
		if !r.slots[i].built {
			t.Errorf("slot %d never used", i)
		}
	}
}

func TestRecoverIDNoAlloc(t *testing.T) {
	var r idRecoverer
	n := idCoveredBytes(1024 + 16)
	s := idSyndrome(0xBEEF, n)
	r.recoverID(n, s, 0)
	if a := testing.AllocsPerRun(100, func() { r.recoverID(n, s, 0) }); a != 0 {
		t.Errorf("recoverID allocates %v times", a)
	}
}

func BenchmarkRecoverID(b *testing.B) {
	n := idCoveredBytes(1024 + 16)
	s := idSyndrome(0xBEEF, n)
	b.Run("cached", func(b *testing.B) {
		var r idRecoverer
		for b.Loop() {
			r.recoverID(n, s, 0)
		}
	})
	b.Run("build", func(b *testing.B) {
		var ib idBasis
		for b.Loop() {
			ib.build(n)
		}
	})
}

// TestSingleBitErrorsDetectedByRecovery shows that the recovery path,
// although it accepts 2^16 of the 2^32 syndromes, still rejects every
// single-bit error in any RoCEv2 packet. A flipped bit d bytes after the id
// field passes only if its syndrome lies in the image of L_d (the
// condition depends on the distance alone, because shifting by the bytes
// that follow is invertible), so checking every distance once covers every
// packet length. The first distance at which some single-bit error passes
// is far beyond the largest packet (and a 9000-byte jumbo frame).
func TestSingleBitErrorsDetectedByRecovery(t *testing.T) {
	var b idBasis
	first := 0
	for d := 1; d <= 65535+idCoveredAfter && first == 0; d++ {
		b.build(d)
		for k := range 8 {
			if _, ok := b.solve(crcStepByte(0, 1<<k)); ok {
				first = d
			}
		}
	}
	t.Logf("first distance with an undetected single-bit error: %d bytes", first)
	if first != 0 && first <= idCoveredBytes(9000) {
		t.Errorf("a single-bit error %d bytes after the id passes id recovery", first)
	}
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
		if got, ok := r.recoverID(m, idSyndrome(id, m), 0); !ok || got != id {
			t.Fatalf("n=%d: recoverID(L(%#04x)) = %#04x, %v", m, id, got, ok)
		}
		if got, ok := r.recoverID(m, syndrome, 0); ok && idSyndrome(got, m) != syndrome {
			t.Fatalf("n=%d: recoverID(%#08x) = %#04x, whose syndrome is %#08x", m, syndrome, got, idSyndrome(got, m))
		}
	})
}

// TestCheckICRCNext checks the receive check's outcomes against the
// identification a packet was sent with and the one predicted for it.
func TestCheckICRCNext(t *testing.T) {
	src4, dst4 := netip.MustParseAddrPort("10.0.0.1:49152"), netip.MustParseAddrPort("10.0.0.2:4791")
	src6, dst6 := netip.MustParseAddrPort("[fd00::1]:49152"), netip.MustParseAddrPort("[fd00::2]:4791")
	transport := transportOf(RCRDMAWriteMiddle, 1024)
	for _, tc := range []struct {
		name     string
		src, dst netip.AddrPort
		sentID   uint16
		next     uint16
		weak     bool
		want     ICRCResult
		wantID   uint16
	}{
		{"id 0", src4, dst4, 0, 7, false, ICRCOK, 0},
		{"predicted", src4, dst4, 7, 7, false, ICRCIDPredicted, 7},
		{"predicted, weak", src4, dst4, 7, 7, true, ICRCIDPredicted, 7},
		{"not predicted, strict", src4, dst4, 8, 7, false, ICRCBad, 0},
		{"not predicted, weak", src4, dst4, 8, 7, true, ICRCIDRecovered, 8},
		{"no prediction, strict", src4, dst4, 8, 0, false, ICRCBad, 0},
		{"IPv6", src6, dst6, 0, 7, false, ICRCOK, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkt := binary.LittleEndian.AppendUint32(bytes.Clone(transport), refICRCAddrs(tc.src, tc.dst, tc.sentID, transport))
			var k ICRCChecker
			predict := func() {
				k.prevFrom, k.prevID = netip.AddrPort{}, 0
				if tc.next != 0 {
					k.prevFrom, k.prevID = tc.src, tc.next-1
				}
			}
			predict()
			res, id := k.Check(tc.src, tc.dst, pkt, !tc.weak)
			if res != tc.want || id != tc.wantID {
				t.Errorf("Check = %v, %d; want %v, %d", res, id, tc.want, tc.wantID)
			}
			// A damaged packet fails whatever was predicted.
			pkt[20] ^= 0x10
			predict()
			if res, _ := k.Check(tc.src, tc.dst, pkt, true); res != ICRCBad {
				t.Errorf("damaged packet: %v", res)
			}
		})
	}
}

// TestICRCCheckerPredicts feeds an ICRCChecker packets from two IPv4
// sources that count identifications, interleaved, and one that uses 0:
// a packet whose identification follows the last accepted one from its
// source is predicted, any other non-zero one recovered (or, strict,
// refused), and a refused packet does not move the prediction.
func TestICRCCheckerPredicts(t *testing.T) {
	a, b := netip.MustParseAddrPort("10.0.0.1:49152"), netip.MustParseAddrPort("10.0.0.3:49152")
	dst := netip.MustParseAddrPort("10.0.0.2:4791")
	transport := transportOf(RCSendOnly, 100)
	packet := func(src netip.AddrPort, id uint16) []byte {
		return binary.LittleEndian.AppendUint32(bytes.Clone(transport), refICRCAddrs(src, dst, id, transport))
	}
	var k ICRCChecker
	for i, tc := range []struct {
		src    netip.AddrPort
		id     uint16
		strict bool
		want   ICRCResult
	}{
		{a, 0x100, false, ICRCIDRecovered},
		{a, 0x101, true, ICRCIDPredicted},
		{b, 0x102, true, ICRCBad},         // another source: not predicted
		{a, 0x102, true, ICRCIDPredicted}, // b's refusal left a's prediction
		{b, 0x7FFF, false, ICRCIDRecovered},
		{a, 0x103, true, ICRCBad}, // b's packet replaced the prediction
		{b, 0x8000, false, ICRCIDPredicted},
		{b, 0, true, ICRCOK},
		{b, 1, true, ICRCIDPredicted},
		{b, 0xFFFF, false, ICRCIDRecovered},
	} {
		res, id := k.Check(tc.src, dst, packet(tc.src, tc.id), tc.strict)
		wantID := tc.id
		if tc.want == ICRCBad {
			wantID = 0
		}
		if res != tc.want || id != wantID {
			t.Errorf("packet %d (%v, id %#04x, strict %v): %v, %#04x; want %v, %#04x", i, tc.src, tc.id, tc.strict, res, id, tc.want, wantID)
		}
	}
}

// FuzzICRCCheck runs ICRCChecker.Check on arbitrary packets that parse,
// from an IPv4 or IPv6 source whose previous accepted packet carried
// identification prev. With fix set, the packet gets the ICRC for
// identification id first. Invariants: no panic; an accepted packet's ICRC
// is valid, per the reference, for the identification reported, which is
// 0 for ICRCOK and over IPv6, prev+1 for ICRCIDPredicted, and any other
// only when not strict; a fixed packet is accepted with its identification
// unless strict checking refuses it (neither 0 nor predicted).
func FuzzICRCCheck(f *testing.F) {
	f.Add(transportOf(RCRDMAWriteMiddle, 64), false, true, false, uint16(0xEAFE), uint16(0))
	f.Add(transportOf(RCSendOnly, 5), false, true, true, uint16(8), uint16(7))
	f.Add(transportOf(RCAcknowledge, 0), true, true, false, uint16(1), uint16(0))
	f.Add(transportOf(RCSendOnly, 5), false, false, false, uint16(0), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, v6, fix, strict bool, id, prev uint16) {
		var p Packet
		if p.Parse(data, 0) != nil {
			return
		}
		src, dst := netip.MustParseAddrPort("10.99.0.2:49952"), netip.MustParseAddrPort("10.99.0.3:4791")
		if v6 {
			src, dst = netip.MustParseAddrPort("[fd00::2]:49952"), netip.MustParseAddrPort("[fd00::3]:4791")
		}
		pkt := bytes.Clone(data)
		n := len(pkt) - ICRCLen
		if fix {
			binary.LittleEndian.PutUint32(pkt[n:], refICRCAddrs(src, dst, id, pkt[:n]))
		}
		k := ICRCChecker{prevFrom: src, prevID: prev}
		res, got := k.Check(src, dst, pkt, strict)
		if res != ICRCBad && binary.LittleEndian.Uint32(pkt[n:]) != refICRCAddrs(src, dst, got, pkt[:n]) {
			t.Fatalf("%v with id %#04x, but the ICRC is not valid for it", res, got)
		}
		switch {
		case res == ICRCOK && got != 0,
			res == ICRCIDPredicted && (got != prev+1 || got == 0),
			res == ICRCIDRecovered && (strict || got == 0 || got == prev+1),
			res != ICRCBad && v6 && got != 0:
			t.Fatalf("%v with id %#04x after %#04x (strict %v, IPv6 %v)", res, got, prev, strict, v6)
		}
		if !fix {
			return
		}
		want := id
		if v6 {
			want = 0
		}
		if refused := strict && want != 0 && want != prev+1; refused != (res == ICRCBad) || (!refused && got != want) {
			t.Fatalf("packet with id %#04x after %#04x (strict %v): %v with id %#04x", want, prev, strict, res, got)
		}
	})
}
