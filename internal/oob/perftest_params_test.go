package oob

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/goroce/goroce/internal/ibv"
)

func TestVersionBlock(t *testing.T) {
	b := appendVersionBlock(nil, "6.06")
	if want := []byte("6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"); !bytes.Equal(b, want) {
		t.Fatalf("block %q, want %q", b, want)
	}
	tests := []struct {
		block []byte
		str   string
		v     float64
		ok    bool
	}{
		{b, "6.06", 6.06, true},
		{[]byte("6.29\x00garbage...."), "6.29", 6.29, true}, // after the NUL: ignored, as atof does
		{[]byte("10\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), "10", 10, true},
		{[]byte("5.70\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), "5.70", 5.70, true},
		{[]byte("123456789012345\x00"), "123456789012345", 123456789012345, true},
		{[]byte("1234567890123456"), "", 0, false}, // no NUL
		{[]byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), "", 0, false},
		{[]byte("6.06-rc1\x00\x00\x00\x00\x00\x00\x00\x00"), "", 0, false},
		{[]byte(" 6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), "", 0, false},
		{[]byte("6.\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), "", 0, false},
		{[]byte(".6\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), "", 0, false},
		{[]byte("6.0.6\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), "", 0, false},
		{[]byte("6.06\x00"), "", 0, false}, // wrong block size
	}
	for _, tt := range tests {
		s, v, err := parseVersionBlock(tt.block)
		if tt.ok != (err == nil) || s != tt.str || v != tt.v {
			t.Errorf("parseVersionBlock(%q) = %q, %v, %v", tt.block, s, v, err)
		}
		if err != nil {
			checkOneLine(t, err)
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%v does not wrap ErrMalformed", err)
			}
		}
	}
}

func TestCheckLocalVersion(t *testing.T) {
	for v, ok := range map[string]bool{
		"6.06": true, "5.70": true, "6.27": true, "6.17": true,
		"5.69": false, "6.28": false, "6.29": false, "": false, "x": false, "1234567890123456": false,
	} {
		if _, err := checkLocalVersion(v); (err == nil) != ok {
			t.Errorf("checkLocalVersion(%q): %v", v, err)
		}
	}
}

// TestVersionThresholds checks the version-dependent shapes perftest uses
// toward a peer, including its float quirk in check_mtu: the peer's version
// is held in a float there, and float32(5.31) < 5.31.
func TestVersionThresholds(t *testing.T) {
	tests := []struct {
		remote  float64
		mtuSize int
		iters32 bool
	}{
		{5.1, 4, true},
		{5.30, 4, true},
		{5.31, 4, true}, // the float quirk
		{5.32, 2, true},
		{5.33, 2, false},
		{5.70, 2, false},
		{6.06, 2, false},
		{6.29, 2, false},
	}
	for _, tt := range tests {
		if got := mtuBlockSize(tt.remote); got != tt.mtuSize {
			t.Errorf("mtuBlockSize(%v) = %d, want %d", tt.remote, got, tt.mtuSize)
		}
		if got := layoutFor(tt.remote, false).Iters32; got != tt.iters32 {
			t.Errorf("layoutFor(%v).Iters32 = %v, want %v", tt.remote, got, tt.iters32)
		}
	}
}

func TestMTUBlock(t *testing.T) {
	for m := ibv.MTU256; m <= ibv.MTU4096; m++ {
		for _, size := range []int{2, 4} {
			b := appendMTUBlock(nil, m, size)
			if len(b) != size || b[0] != '0'+byte(m) || b[1] != 0 {
				t.Errorf("appendMTUBlock(%v, %d) = %q", m, size, b)
			}
			got, err := parseMTUBlock(b)
			if err != nil || got != m {
				t.Errorf("parseMTUBlock(%q) = %v, %v", b, got, err)
			}
		}
	}
	if got, err := parseMTUBlock([]byte("3\x00\xde\xad")); err != nil || got != ibv.MTU1024 {
		t.Errorf("4-byte block with stack garbage: %v, %v", got, err)
	}
	for _, bad := range []string{"", "3", "0\x00", "6\x00", "33", "a\x00", "\x003", "-1"} {
		_, err := parseMTUBlock([]byte(bad))
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("parseMTUBlock(%q): %v", bad, err)
		}
	}
	if ibv.MTU1024.Bytes() != 1024 || ibv.MTU256.Bytes() != 256 || ibv.MTU4096.Bytes() != 4096 || ibv.MTU(0).Bytes() != 0 || ibv.MTU(6).Valid() {
		t.Error("MTU.Bytes")
	}
	if ibv.MTU2048.String() != "2048" || ibv.MTU(9).String() != "MTU(9)" {
		t.Error("MTU.String")
	}
}

func TestSysData(t *testing.T) {
	a, b := SysData{4096, 64}, SysData{65536, 32}
	if got := a.Max(b); got != (SysData{65536, 64}) {
		t.Errorf("Max = %+v", got)
	}
	if got := appendSysData(nil, a); !bytes.Equal(got, []byte{0, 0, 0x10, 0, 0, 0, 0, 0x40}) {
		t.Errorf("appendSysData = %x", got)
	}
	for s, ok := range map[SysData]bool{
		{4096, 64}: true, {1 << 30, 1}: true,
		{0, 64}: false, {4096, 0}: false, {-4096, 64}: false, {4095, 64}: false, {4096, 48}: false, {math.MaxInt32, 64}: false,
	} {
		if err := s.check(); (err == nil) != ok {
			t.Errorf("%+v.check(): %v", s, err)
		}
	}
}

func TestBWReport(t *testing.T) {
	r := BWReport{
		Size: 4096, Iters: 0x1_0000_0008, BWPeak: 3.2, BWAvg: 3.13, MsgRateAvg: 0.000801,
		BWAvgP1: 1, MsgRateAvgP1: 2, BWAvgP2: math.Inf(1), MsgRateAvgP2: -0.5,
	}
	for _, l := range []BWReportLayout{{}, {Iters32: true}, {PerPort: true}, {Iters32: true, PerPort: true}} {
		b := AppendBWReport(nil, r, l)
		if len(b) != l.Size() {
			t.Fatalf("%+v: %d bytes, Size %d", l, len(b), l.Size())
		}
		got, err := ParseBWReport(b, l)
		if err != nil {
			t.Fatal(err)
		}
		want := r
		if l.Iters32 {
			want.Iters = 8 // hton_int cuts it to 32 bits
		}
		if !l.PerPort {
			want.BWAvgP1, want.MsgRateAvgP1, want.BWAvgP2, want.MsgRateAvgP2 = 0, 0, 0, 0
		}
		if got != want {
			t.Errorf("%+v: parsed %+v, want %+v", l, got, want)
		}
		for n := 0; n < len(b); n++ {
			if _, err := ParseBWReport(b[:n], l); !errors.Is(err, ErrMalformed) {
				t.Errorf("%+v: %d of %d bytes: %v", l, n, len(b), err)
			}
		}
	}
	// The first 16 bytes: size 4096 and 8-byte iters, big-endian, as in
	// the captures.
	b := AppendBWReport(nil, BWReport{Size: 4096, Iters: 8}, BWReportLayout{})
	if want := []byte{0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 8}; !bytes.Equal(b[:16], want) {
		t.Errorf("report starts %x, want %x", b[:16], want)
	}
	if sizes := (BWReportLayout{Iters32: true, PerPort: true}).fieldSizes(); len(sizes) != 9 || sizes[1] != 4 {
		t.Errorf("field sizes %v", sizes)
	}
}
