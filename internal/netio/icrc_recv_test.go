package netio

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
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
			got, ok := r.recoverID(n, refIDSyndrome(rng, id, n))
			if !ok || got != id {
				t.Fatalf("n=%d: recoverID(L(%#04x)) = %#04x, %v", n, id, got, ok)
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
		if id, ok := r.recoverID(n, s); ok {
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
			if got, ok := r.recoverID(n, idSyndrome(id, n)); !ok || got != id {
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
	r.recoverID(n, s)
	if a := testing.AllocsPerRun(100, func() { r.recoverID(n, s) }); a != 0 {
		t.Errorf("recoverID allocates %v times", a)
	}
}

func BenchmarkRecoverID(b *testing.B) {
	n := idCoveredBytes(1024 + 16)
	s := idSyndrome(0xBEEF, n)
	b.Run("cached", func(b *testing.B) {
		var r idRecoverer
		for b.Loop() {
			r.recoverID(n, s)
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
