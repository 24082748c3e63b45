package wire

import (
	"errors"
	"testing"

	"github.com/goroce/goroce/internal/psn"
)

func TestSACKBitmap(t *testing.T) {
	b := make(SACKBitmap, SACKLen(256))
	if b.Bits() != 256 {
		t.Fatalf("%d bits for 256 PSNs", b.Bits())
	}
	for _, i := range []int{0, 7, 8, 100, 255} {
		b.Set(i)
	}
	b.Set(-1)
	b.Set(256) // beyond: ignored
	for i := -2; i < 260; i++ {
		want := i == 0 || i == 7 || i == 8 || i == 100 || i == 255
		if b.Held(i) != want {
			t.Errorf("bit %d = %v", i, b.Held(i))
		}
	}
	first := psn.PSN(psn.Mask) // wraps
	if !b.HeldPSN(first, first.Add(1)) || b.HeldPSN(first, first) || !b.HeldPSN(first, first.Add(256)) {
		t.Error("HeldPSN does not count from the PSN after the SACK's")
	}
	if b[0] != 0x81 || b[1] != 0x01 {
		t.Errorf("bit order: % x", b[:2])
	}
	for n, want := range map[int]int{0: 4, 1: 4, 32: 4, 33: 8, 256: 32, 1024: 128, 5000: 128} {
		if got := SACKLen(n); got != want {
			t.Errorf("SACKLen(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestSACKParse(t *testing.T) {
	for n, ok := range map[int]bool{0: false, 2: false, 4: true, 6: false, 32: true, SACKMaxLen: true, SACKMaxLen + 4: false} {
		h := Headers{BTH: BTHFields{Opcode: RCSACK, PSN: 7}, AETH: AETHFields{Syndrome: SyndromeAckUnlimited}}
		b := buildPacket(&h, n)
		var p Packet
		err := p.Parse(b, 1024)
		if ok != (err == nil) || err != nil && !errors.Is(err, ErrPayloadLength) && !errors.Is(err, ErrPadCount) {
			t.Errorf("%d-byte bitmap: %v", n, err)
		}
		if err == nil && (len(p.Payload) != n || p.AETH == nil || !p.Info().IsResponse() || p.Info().IsRequest()) {
			t.Errorf("%d-byte bitmap parsed as %+v", n, p)
		}
	}
}
