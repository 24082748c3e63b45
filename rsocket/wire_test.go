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
