package rsocket

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

// rsConnData is an rs_conn_data as librdmacm on x86 sends it, spelled out
// from struct rs_conn_data: version 1, flags IOMAP, credits 384
// (big-endian), no iomap, the target SGL at 0x55d0c0a01000 (rkey 0x1234,
// 2 entries) and the data buffer at 0x7f0012340000 (rkey 0x5678, 64 KiB),
// every field big-endian.
var rsConnData = mustHex("01020180" + "00000000" +
	"000055d0c0a01000" + "00001234" + "00000002" +
	"00007f0012340000" + "00005678" + "00010000")

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func TestConnDataKnownEncoding(t *testing.T) {
	want := connData{version: 1, flags: connFlagIOMap, credits: 384,
		targetSGL: sge{addr: 0x55d0c0a01000, key: 0x1234, length: 2},
		dataBuf:   sge{addr: 0x7f0012340000, key: 0x5678, length: 0x10000}}
	// The CM hands over the whole private data field, zero-padded.
	got, err := parseConnData(append(bytes.Clone(rsConnData), make([]byte, 16)...))
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("parsed %+v, want %+v", got, want)
	}
	if b := want.append(nil); !bytes.Equal(b, rsConnData) {
		t.Fatalf("encoded % x\nwant    % x", b, rsConnData)
	}
	for n := range len(rsConnData) {
		if _, err := parseConnData(rsConnData[:n]); !errors.Is(err, errBadConnData) {
			t.Fatalf("%d bytes: %v, want errBadConnData", n, err)
		}
	}
}

func TestConnDataRefused(t *testing.T) {
	for name, patch := range map[string]func(b []byte){
		"version 0":     func(b []byte) { b[0] = 0 },
		"version 2":     func(b []byte) { b[0] = 2 },
		"no ring entry": func(b []byte) { copy(b[20:24], []byte{0, 0, 0, 0}) },
		"empty buffer":  func(b []byte) { copy(b[36:40], []byte{0, 0, 0, 0}) },
		"no credits":    func(b []byte) { b[2], b[3] = 0, 0 },
	} {
		b := bytes.Clone(rsConnData)
		patch(b)
		if _, err := parseConnData(b); !errors.Is(err, errBadConnData) {
			t.Errorf("%s: %v, want errBadConnData", name, err)
		}
	}
}

// Ring SGEs travel in the writer's host order, or the reader's when they
// differ (RS_OPT_SWAP_SGL): both orders, byte for byte.
func TestRingSGEOrders(t *testing.T) {
	s := sge{addr: 0x0102030405060708, key: 0x11121314, length: 0x21222324}
	le := mustHex("0807060504030201" + "14131211" + "24232221")
	be := mustHex("0102030405060708" + "11121314" + "21222324")
	if b := appendSGE(nil, s, false); !bytes.Equal(b, le) {
		t.Errorf("little-endian % x, want % x", b, le)
	}
	if b := appendSGE(nil, s, true); !bytes.Equal(b, be) {
		t.Errorf("big-endian % x, want % x", b, be)
	}
	if getSGE(le, false) != s || getSGE(be, true) != s {
		t.Error("decoding differs from the encoding")
	}
}

func TestMsg(t *testing.T) {
	// RS_OP_CTRL << 29 | RS_CTRL_SHUTDOWN, and a 64 KiB data message.
	if m := msg(opCtrl, ctrlShutdown); m != 0xE0000002 {
		t.Errorf("shutdown %#x", m)
	}
	if m := msg(opData, 65536); m != 0x00010000 || msgOp(m) != opData || msgData(m) != 65536 {
		t.Errorf("data %#x", m)
	}
	if m := msg(opSGL, 65535+384); msgOp(m) != opSGL || msgData(m) != 65535+384 {
		t.Errorf("credits %#x", m)
	}
}

// rsIOMap is an rs_iomap as riostream's riomap(buf, size, PROT_WRITE, 0,
// 0) on x86 writes it into the peer's table: offset 0, then the region's
// rs_sge (address 0x7f0012340000, rkey 0x5678, 4 KiB), little-endian as
// the host's order.
var rsIOMap = mustHex("0000000000000000" + "00003412007f0000" + "78560000" + "00100000")

func TestIOMapKnownEncoding(t *testing.T) {
	want := ioMap{offset: 0, region: sge{addr: 0x7f0012340000, key: 0x5678, length: 4096}}
	got, err := parseIOMap(rsIOMap)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("parsed %+v, want %+v", got, want)
	}
	if b := appendIOMap(nil, want, false); !bytes.Equal(b, rsIOMap) {
		t.Fatalf("encoded % x\nwant    % x", b, rsIOMap)
	}
	// To a big-endian peer, every field swapped.
	be := mustHex("0000000000000000" + "00007f0012340000" + "00005678" + "00001000")
	if b := appendIOMap(nil, want, true); !bytes.Equal(b, be) {
		t.Fatalf("big-endian % x\nwant       % x", b, be)
	}
	for n := range ioMapLen {
		if _, err := parseIOMap(rsIOMap[:n]); !errors.Is(err, errProtocol) {
			t.Fatalf("%d bytes: %v, want errProtocol", n, err)
		}
	}
	for name, m := range map[string]ioMap{
		"empty":         {offset: 5, region: sge{addr: 0x1000, key: 1}},
		"offset wraps":  {offset: 1<<64 - 10, region: sge{addr: 0x1000, key: 1, length: 11}},
		"address wraps": {offset: 0, region: sge{addr: 1<<64 - 4096, key: 1, length: 4097}},
	} {
		if _, err := parseIOMap(appendIOMap(nil, m, false)); !errors.Is(err, errProtocol) {
			t.Errorf("%s: %v, want errProtocol", name, err)
		}
	}
}

// The 8-bit scale of target_iomap_size (rs_value_to_scale and
// rs_scale_to_value): exact up to 128, then multiples of 256.
func TestIOMapScale(t *testing.T) {
	for _, c := range []struct {
		v     int
		scale uint8
		back  int
	}{{0, 0, 0}, {1, 1, 1}, {128, 128, 128}, {200, 0x80, 128}, {256, 0x81, 256}, {300, 0x81, 256}, {32512, 0xff, 32512}} {
		if s := toScale(c.v); s != c.scale || fromScale(s) != c.back {
			t.Errorf("%d: scale %#x back %d, want %#x and %d", c.v, s, fromScale(s), c.scale, c.back)
		}
	}
}
