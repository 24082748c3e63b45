package oob

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

var testDest = Dest{
	LID:              0x1234,
	OutReads:         0x80,
	QPN:              0xabcdef,
	PSN:              0x012345,
	RKey:             0xfedcba98,
	VAddr:            0x00007f1122334455,
	TailMarkersVAddr: 0x00005566778899aa,
	GID:              [16]byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x99, 0, 0x02},
	SRQN:             0x00c0ffee,
}

func TestAppendKeyLine(t *testing.T) {
	tests := []struct {
		format KeyFormat
		want   string
	}{
		{KeyFormatGID, "1234:0080:abcdef:012345:fedcba98:00007f1122334455:fe:80:00:00:00:00:00:00:50:54:00:ff:fe:99:00:02:00c0ffee:\x00"},
		{KeyFormatLID, "1234:0080:abcdef:012345:fedcba98:00007f1122334455:00c0ffee\x00"},
		{KeyFormatGIDDataValidation, "1234:0080:abcdef:012345:fedcba98:00007f1122334455:00005566778899aa:fe:80:00:00:00:00:00:00:50:54:00:ff:fe:99:00:02:00c0ffee:\x00"},
		{KeyFormatLIDDataValidation, "1234:0080:abcdef:012345:fedcba98:00007f1122334455:00005566778899aa:00c0ffee\x00"},
	}
	for _, tt := range tests {
		t.Run(tt.format.String(), func(t *testing.T) {
			got := AppendKeyLine([]byte("prefix"), testDest, tt.format)
			if string(got) != "prefix"+tt.want {
				t.Fatalf("got  %q\nwant %q", got, "prefix"+tt.want)
			}
			if n := len(got) - len("prefix"); n != tt.format.Size() {
				t.Errorf("%d bytes, Size() %d", n, tt.format.Size())
			}
			d, err := ParseKeyLine([]byte(tt.want), tt.format)
			if err != nil {
				t.Fatal(err)
			}
			want := testDest
			if !tt.format.hasGID() {
				want.GID = [16]byte{}
			}
			if !tt.format.hasTailMarkers() {
				want.TailMarkersVAddr = 0
			}
			if d != want {
				t.Errorf("parsed %+v, want %+v", d, want)
			}
		})
	}
}

func TestKeyFormatSizes(t *testing.T) {
	// perftest_communication.h: KEY_MSG_SIZE 59, KEY_MSG_SIZE_GID 108,
	// KEY_MSG_SIZE_DV 76, KEY_MSG_SIZE_GID_DV 125.
	for f, want := range map[KeyFormat]int{KeyFormatLID: 59, KeyFormatGID: 108, KeyFormatLIDDataValidation: 76, KeyFormatGIDDataValidation: 125, 9: 0} {
		if got := f.Size(); got != want {
			t.Errorf("%v.Size() = %d, want %d", f, got, want)
		}
		if got := len(AppendKeyLine(nil, Dest{}, f)); got != want {
			t.Errorf("%v: AppendKeyLine wrote %d bytes, want %d", f, got, want)
		}
	}
}

func TestAppendKeyLineMasks24BitFields(t *testing.T) {
	d := Dest{QPN: 0x1abcdef, PSN: 0xff000001}
	got := string(AppendKeyLine(nil, d, KeyFormatLID))
	if !strings.HasPrefix(got, "0000:0000:abcdef:000001:") {
		t.Errorf("got %q", got)
	}
	if d.check() == nil {
		t.Error("check accepts a 25-bit QPN")
	}
}

func TestParseKeyLineUppercase(t *testing.T) {
	line := bytes.ToUpper(AppendKeyLine(nil, testDest, KeyFormatGID))
	d, err := ParseKeyLine(line, KeyFormatGID)
	if err != nil {
		t.Fatal(err)
	}
	if d != func() Dest { x := testDest; x.TailMarkersVAddr = 0; return x }() {
		t.Errorf("parsed %+v", d)
	}
}

func TestParseKeyLineErrors(t *testing.T) {
	good := AppendKeyLine(nil, testDest, KeyFormatGID)
	mutate := func(off int, c byte) []byte {
		b := bytes.Clone(good)
		b[off] = c
		return b
	}
	tests := []struct {
		name   string
		line   []byte
		format KeyFormat
		want   string // in the message
	}{
		{"empty", nil, KeyFormatGID, "0 bytes, want 108"},
		{"short", good[:107], KeyFormatGID, "107 bytes, want 108"},
		{"long", append(bytes.Clone(good), 0), KeyFormatGID, "109 bytes"},
		{"no NUL", mutate(107, ':'), KeyFormatGID, "not NUL-terminated"},
		{"bad LID digit", mutate(0, 'g'), KeyFormatGID, "field LID at byte 0"},
		{"missing colon", mutate(4, '-'), KeyFormatGID, "field LID"},
		{"QPN", mutate(10, ' '), KeyFormatGID, "field QPN at byte 10"},
		{"PSN", mutate(17, 'x'), KeyFormatGID, "field PSN"},
		{"RKEY", mutate(24, 'z'), KeyFormatGID, "field RKEY"},
		{"VADDR", mutate(33, '+'), KeyFormatGID, "field VADDR"},
		{"GID byte", mutate(50, 'q'), KeyFormatGID, "field GID[0]"},
		{"last GID byte", mutate(95, 'q'), KeyFormatGID, "field GID[15]"},
		{"SRQN", mutate(98, 'q'), KeyFormatGID, "field SRQN"},
		{"trailing colon", mutate(106, '0'), KeyFormatGID, "field SRQN"},
		{"NUL inside", mutate(20, 0), KeyFormatGID, "field PSN"},
		{"LID form with GID line", good, KeyFormatLID, "108 bytes, want 59"},
		{"LID form colon for the last digit", append(AppendKeyLine(nil, testDest, KeyFormatLID)[:57], ':', 0), KeyFormatLID, "field SRQN"},
		{"unknown format", good, 7, "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := ParseKeyLine(tt.line, tt.format)
			checkOneLine(t, err)
			if tt.format.Size() != 0 && !errors.Is(err, ErrMalformed) {
				t.Errorf("%v does not wrap ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
			if d != (Dest{}) {
				t.Errorf("returned %+v with the error", d)
			}
		})
	}
}

// TestParseKeyLineTruncations cuts a valid line at every length and
// corrupts every byte in turn: everything but the original must be refused.
func TestParseKeyLineTruncations(t *testing.T) {
	for _, f := range []KeyFormat{KeyFormatGID, KeyFormatLID, KeyFormatGIDDataValidation, KeyFormatLIDDataValidation} {
		good := AppendKeyLine(nil, testDest, f)
		for n := 0; n < len(good); n++ {
			if _, err := ParseKeyLine(good[:n], f); err == nil {
				t.Errorf("%v: accepted %d of %d bytes", f, n, len(good))
			}
		}
		for i := range good {
			b := bytes.Clone(good)
			b[i] = '#'
			if _, err := ParseKeyLine(b, f); err == nil {
				t.Errorf("%v: accepted '#' at byte %d", f, i)
			}
		}
	}
}

// The client's key of the rxe capture write_bw_rdmacm.pcap (frame 31):
// perftest -R's struct pingpong_dest, big-endian, 56 bytes.
var capturedKeyBin = []byte{
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x30, 0x00, 0xcc, 0x25, 0x9e,
	0x00, 0x00, 0x26, 0x16, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x55, 0xfa, 0x8a, 0x6e, 0x30, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x0a, 0x63, 0x00, 0x02,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
}

func TestKeyBinCapture(t *testing.T) {
	d, err := ParseKeyLine(capturedKeyBin, KeyFormatRDMACM)
	if err != nil {
		t.Fatal(err)
	}
	want := Dest{OutReads: 1, QPN: 0x30, PSN: 0xcc259e, RKey: 0x2616, VAddr: 0x55fa8a6e3000,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 99, 14: 0, 15: 2}, GIDIndex: 1}
	if d != want {
		t.Errorf("parsed %+v\nwant   %+v", d, want)
	}
	if re := AppendKeyLine(nil, d, KeyFormatRDMACM); !bytes.Equal(re, capturedKeyBin) {
		t.Errorf("re-encoded % x", re)
	}
	dv := AppendKeyLine(nil, Dest{QPN: 1, TailMarkersVAddr: 0x1122334455667788, SRQN: 7, GIDIndex: 3}, KeyFormatRDMACMDataValidation)
	if len(dv) != 64 || dv[32] != 0x11 || dv[39] != 0x88 || dv[59] != 7 || dv[63] != 3 {
		t.Errorf("data-validation layout % x", dv)
	}
	// The padding is ignored; fields beyond their widths are not.
	pad := bytes.Clone(capturedKeyBin)
	pad[21] = 0xAA
	if got, err := ParseKeyLine(pad, KeyFormatRDMACM); err != nil || got != want {
		t.Errorf("padding not ignored: %+v, %v", got, err)
	}
	for off, name := range map[int]string{0: "LID", 4: "OUT_READS", 8: "QPN", 12: "PSN"} {
		bad := bytes.Clone(capturedKeyBin)
		bad[off] = 1
		if _, err := ParseKeyLine(bad, KeyFormatRDMACM); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s beyond its width: %v", name, err)
		}
	}
	if _, err := ParseKeyLine(capturedKeyBin[:55], KeyFormatRDMACM); !errors.Is(err, ErrMalformed) {
		t.Errorf("55 bytes: %v", err)
	}
}
