package wire

import (
	"testing"
	"time"
)

// TestAETHSyndromeExhaustive checks every syndrome byte: the kind comes from
// bits 7:5 (anything with bit 7 set is reserved), the value from bits 4:0,
// and the constructors invert the accessors.
func TestAETHSyndromeExhaustive(t *testing.T) {
	for v := range 256 {
		s := AETHSyndrome(v)
		var want AETHKind
		switch {
		case v >= 0x80, v&0x60 == 0x40:
			want = AETHReserved
		case v&0x60 == 0x00:
			want = AETHAck
		case v&0x60 == 0x20:
			want = AETHRNRNak
		default:
			want = AETHNak
		}
		if got := s.Kind(); got != want {
			t.Errorf("%#02x: kind %v, want %v", v, got, want)
		}
		low := uint8(v & 0x1F)
		if s.Credits() != low || s.RNRTimer() != low || s.NAKCode() != NAKCode(low) {
			t.Errorf("%#02x: value accessors", v)
		}
		switch want {
		case AETHAck:
			if AckSyndrome(low) != s {
				t.Errorf("%#02x: AckSyndrome(%d) = %#02x", v, low, uint8(AckSyndrome(low)))
			}
		case AETHRNRNak:
			if RNRNakSyndrome(low) != s {
				t.Errorf("%#02x: RNRNakSyndrome(%d) = %#02x", v, low, uint8(RNRNakSyndrome(low)))
			}
		case AETHNak:
			if NakSyndrome(NAKCode(low)) != s {
				t.Errorf("%#02x: NakSyndrome(%d) = %#02x", v, low, uint8(NakSyndrome(NAKCode(low))))
			}
		}
		if s.String() == "" {
			t.Errorf("%#02x: empty String", v)
		}
	}
	// Constructors mask out-of-range values instead of changing the kind.
	if AckSyndrome(0xFF).Kind() != AETHAck || RNRNakSyndrome(0xFF).Kind() != AETHRNRNak || NakSyndrome(0xFF).Kind() != AETHNak {
		t.Error("constructor with an out-of-range value changed the kind")
	}
}

func TestAETHSyndromeString(t *testing.T) {
	tests := []struct {
		s    AETHSyndrome
		want string
	}{
		{SyndromeAckUnlimited, "ACK credits=31"},
		{AckSyndrome(0), "ACK credits=0"},
		{RNRNakSyndrome(12), "RNR NAK timer=12 (640µs)"},
		{RNRNakSyndrome(0), "RNR NAK timer=0 (655.36ms)"},
		{0x60, "NAK PSN sequence error"},
		{0x61, "NAK invalid request"},
		{0x62, "NAK remote access error"},
		{0x63, "NAK remote operational error"},
		{0x64, "NAK invalid RD request"},
		{0x65, "NAK reserved code 5"},
		{0x40, "reserved syndrome 0x40"},
		{0x9F, "reserved syndrome 0x9f"},
	}
	for _, tt := range tests {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("%#02x: %q, want %q", uint8(tt.s), got, tt.want)
		}
	}
}

func TestRNRDelay(t *testing.T) {
	tests := []struct {
		code uint8
		want time.Duration
	}{
		{0, 655360 * time.Microsecond},
		{1, 10 * time.Microsecond},
		{5, 60 * time.Microsecond},
		{12, 640 * time.Microsecond},
		{14, 1280 * time.Microsecond},
		{25, 61440 * time.Microsecond}, // not the 61410 typo of one rxe version
		{31, 491520 * time.Microsecond},
		{32 + 12, 640 * time.Microsecond}, // only 5 bits count
	}
	for _, tt := range tests {
		if got := RNRDelay(tt.code); got != tt.want {
			t.Errorf("RNRDelay(%d) = %v, want %v", tt.code, got, tt.want)
		}
	}
	// Codes 1..31 grow strictly; code 0 is the longest of all.
	for c := uint8(2); c < 32; c++ {
		if RNRDelay(c) <= RNRDelay(c-1) {
			t.Errorf("RNRDelay(%d) <= RNRDelay(%d)", c, c-1)
		}
	}
	if RNRDelay(0) <= RNRDelay(31) {
		t.Error("code 0 is not the longest delay")
	}
}
