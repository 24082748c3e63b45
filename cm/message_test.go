package cm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/goroce/goroce/verbs"
)

// sampleMessages are one message of each type, with and without private
// data.
func sampleMessages() map[string]message {
	gid := verbs.GIDFromAddr(netip.MustParseAddr("10.1.16.62"))
	req := validREQ(gid)
	rep := req
	rep.typ, rep.qpn, rep.psn, rep.privateData = msgREP, 0x11, 0, nil
	full := req
	full.privateData = bytes.Repeat([]byte{0xA5}, MaxPrivateData)
	return map[string]message{
		"REQ":            req,
		"REQ max data":   full,
		"REP no data":    rep,
		"RTU":            {typ: msgRTU},
		"RTU data":       {typ: msgRTU, privateData: []byte{1, 2, 3}},
		"REJ consumer":   {typ: msgREJ, reason: RejectConsumer, privateData: []byte("busy")},
		"REJ info":       {typ: msgREJ, reason: RejectInvalidMTU, info: "REQ path MTU 9"},
		"REJ max info":   {typ: msgREJ, reason: RejectVersion, info: strings.Repeat("x", maxInfoLen), privateData: make([]byte, MaxPrivateData)},
		"REJ unknown":    {typ: msgREJ, reason: 0xFFFF},
		"DREQ":           {typ: msgDREQ},
		"REQ IPv6 GID":   func() message { m := req; m.gid = verbs.GIDFromAddr(netip.MustParseAddr("fe80::1")); return m }(),
		"REQ 24-bit max": func() message { m := req; m.qpn, m.psn = 0xFFFFFF, 0xFFFFFF; return m }(),
	}
}

func TestMessageRoundTrip(t *testing.T) {
	for name, m := range sampleMessages() {
		t.Run(name, func(t *testing.T) {
			b, err := m.encode()
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			if got, want := len(b), headerLen+m.bodyLen(); got != want {
				t.Errorf("encoded %d bytes, want %d", got, want)
			}
			got, err := decodeMessage(b)
			if err != nil {
				t.Fatalf("decodeMessage: %v", err)
			}
			if !reflect.DeepEqual(got, m) {
				t.Errorf("decodeMessage = %+v, want %+v", got, m)
			}
			// The stream reader agrees, and stops at the frame's end.
			r := bytes.NewReader(append(b, 0xEE))
			got, err = readMessage(r)
			if err != nil {
				t.Fatalf("readMessage: %v", err)
			}
			if !reflect.DeepEqual(got, m) {
				t.Errorf("readMessage = %+v, want %+v", got, m)
			}
			if r.Len() != 1 {
				t.Errorf("readMessage left %d bytes, want 1", r.Len())
			}
		})
	}
}

// TestMessageLayout pins the wire format with a hand-written REQ.
func TestMessageLayout(t *testing.T) {
	m := message{
		typ: msgREQ, qpType: verbs.QPTypeUC, mtu: verbs.MTU2048,
		responderResources: 0x10, initiatorDepth: 0x20,
		qpn: 0x010203, psn: 0x040506,
		gid:     verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.2")),
		udpPort: 4791, retryCount: 6, rnrRetryCount: 5, minRNRTimer: 12, timeout: 14,
		privateData: []byte{0xCA, 0xFE},
	}
	want := []byte{
		'G', 'R', 'C', 'M', 1, 1, 0, 36, // header: magic, version, REQ, length
		3, 4, 0x10, 0x20, // UC, MTU2048, responder resources, initiator depth
		0, 1, 2, 3, // QPN
		0, 4, 5, 6, // PSN
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 127, 0, 0, 2, // GID
		0x12, 0xB7, // UDP port 4791
		6, 5, 12, 14, // retry, RNR retry, min RNR timer, timeout
		0xCA, 0xFE, // private data
	}
	got, err := m.encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("REQ encoding\n got % x\nwant % x", got, want)
	}
	rej := message{typ: msgREJ, reason: RejectConsumer, info: "no", privateData: []byte{9}}
	want = []byte{'G', 'R', 'C', 'M', 1, 4, 0, 6, 0, 28, 2, 'n', 'o', 9}
	if got, _ := rej.encode(); !bytes.Equal(got, want) {
		t.Errorf("REJ encoding\n got % x\nwant % x", got, want)
	}
}

// TestDecodeTruncated cuts every sample at every length: each prefix must
// be refused, by decodeMessage and by the stream reader.
func TestDecodeTruncated(t *testing.T) {
	for name, m := range sampleMessages() {
		b, err := m.encode()
		if err != nil {
			t.Fatalf("%s: encode: %v", name, err)
		}
		for n := 0; n < len(b); n++ {
			if _, err := decodeMessage(b[:n]); !errors.Is(err, ErrProtocol) {
				t.Fatalf("%s: decodeMessage of %d/%d bytes: %v, want ErrProtocol", name, n, len(b), err)
			}
			_, err := readMessage(bytes.NewReader(b[:n]))
			if want := io.ErrUnexpectedEOF; n == 0 {
				if err != io.EOF {
					t.Fatalf("%s: readMessage of 0 bytes: %v, want io.EOF", name, err)
				}
			} else if !errors.Is(err, want) {
				t.Fatalf("%s: readMessage of %d/%d bytes: %v, want %v", name, n, len(b), err, want)
			}
		}
	}
}

func TestDecodeInvalid(t *testing.T) {
	gid := verbs.GIDFromAddr(netip.MustParseAddr("127.0.2.1"))
	req, err := (&message{typ: msgREQ, qpn: 2, gid: gid}).encode()
	if err != nil {
		t.Fatal(err)
	}
	// edit returns a copy of req changed by f.
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), req...)) }
	header := func(version, typ byte, n uint16) []byte {
		b := []byte{'G', 'R', 'C', 'M', version, typ, 0, 0}
		binary.BigEndian.PutUint16(b[6:], n)
		return append(b, make([]byte, n)...)
	}
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrProtocol},
		{"bad magic", edit(func(b []byte) []byte { b[0] = 'H'; return b }), ErrProtocol},
		{"text", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), ErrProtocol},
		{"version 0", header(0, 1, 34), ErrVersion},
		{"version 2", header(2, 1, 34), ErrVersion},
		{"version 255", header(255, 9, 0), ErrVersion},
		{"type 0", header(1, 0, 0), ErrProtocol},
		{"type 6", header(1, 6, 0), ErrProtocol},
		{"REQ body short", header(1, 1, connFixedLen-1), ErrProtocol},
		{"REP body long", header(1, 2, connFixedLen+MaxPrivateData+1), ErrProtocol},
		{"REJ body short", header(1, 4, 2), ErrProtocol},
		{"REJ body long", header(1, 4, maxBodyLen+1), ErrProtocol},
		{"RTU body long", header(1, 3, MaxPrivateData+1), ErrProtocol},
		{"DREQ body long", header(1, 5, 0xFFFF), ErrProtocol},
		{"QPN 25 bits", edit(func(b []byte) []byte { b[headerLen+4] = 1; return b }), ErrProtocol},
		{"PSN 25 bits", edit(func(b []byte) []byte { b[headerLen+8] = 0x80; return b }), ErrProtocol},
		{"trailing byte", edit(func(b []byte) []byte { return append(b, 0) }), ErrProtocol},
		{"length beyond frame", edit(func(b []byte) []byte { b[7]++; return b }), ErrProtocol},
	}
	// A REJ whose info length exceeds its body.
	rej := header(1, 4, 4)
	rej[headerLen+2] = 2
	tests = append(tests, struct {
		name string
		b    []byte
		want error
	}{"REJ info length", rej, ErrProtocol})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decodeMessage(tt.b); !errors.Is(err, tt.want) {
				t.Errorf("decodeMessage: %v, want %v", err, tt.want)
			}
		})
	}
}

func TestEncodeInvalid(t *testing.T) {
	tests := []struct {
		name string
		m    message
	}{
		{"type 0", message{}},
		{"type 6", message{typ: 6}},
		{"private data", message{typ: msgREQ, privateData: make([]byte, MaxPrivateData+1)}},
		{"info", message{typ: msgREJ, info: strings.Repeat("x", maxInfoLen+1)}},
		{"QPN", message{typ: msgREP, qpn: 1 << 24}},
		{"PSN", message{typ: msgREQ, psn: 1 << 24}},
	}
	for _, tt := range tests {
		if b, err := tt.m.encode(); err == nil {
			t.Errorf("%s: encode = % x, want an error", tt.name, b)
		}
	}
}

func TestRejectError(t *testing.T) {
	tests := []struct {
		reason RejectReason
		want   []error
		not    []error
	}{
		{RejectConsumer, []error{ErrRejected}, []error{ErrMismatch, ErrVersion}},
		{RejectTimeout, []error{ErrRejected}, []error{ErrMismatch, ErrVersion}},
		{RejectNoResources, []error{ErrRejected}, []error{ErrMismatch}},
		{RejectVersion, []error{ErrRejected, ErrVersion}, []error{ErrMismatch}},
		{RejectInvalidMTU, []error{ErrRejected, ErrMismatch}, []error{ErrVersion}},
		{RejectInvalidTransportType, []error{ErrRejected, ErrMismatch}, nil},
		{RejectInvalidGID, []error{ErrRejected, ErrMismatch}, nil},
		{RejectUnsupported, []error{ErrRejected, ErrMismatch}, nil},
		{RejectReason(999), []error{ErrRejected}, []error{ErrMismatch, ErrVersion}},
	}
	for _, tt := range tests {
		err := error(&RejectError{Reason: tt.reason, Info: "a\nb", PrivateData: []byte{1}})
		for _, target := range tt.want {
			if !errors.Is(err, target) {
				t.Errorf("%v: errors.Is(%v) = false", tt.reason, target)
			}
		}
		for _, target := range tt.not {
			if errors.Is(err, target) {
				t.Errorf("%v: errors.Is(%v) = true", tt.reason, target)
			}
		}
		// Info comes from the network: it must not break the line.
		if s := err.Error(); strings.Contains(s, "\n") || !strings.Contains(s, tt.reason.String()) {
			t.Errorf("%v: Error() = %q", tt.reason, s)
		}
	}
}

// FuzzDecodeMessage feeds arbitrary frames to the decoder: it must not
// panic, must agree with the stream reader, and whatever it accepts must
// encode back to the same bytes (the format has one encoding per message).
func FuzzDecodeMessage(f *testing.F) {
	for _, m := range sampleMessages() {
		if b, err := m.encode(); err == nil && len(b) < 512 {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage(b)
		rm, rerr := readMessage(bytes.NewReader(b))
		if err != nil {
			if errors.Is(err, ErrVersion) != errors.Is(rerr, ErrVersion) {
				t.Fatalf("decodeMessage: %v; readMessage: %v", err, rerr)
			}
			return
		}
		if rerr != nil || !reflect.DeepEqual(m, rm) {
			t.Fatalf("readMessage = %+v, %v; decodeMessage = %+v", rm, rerr, m)
		}
		out, err := m.encode()
		if err != nil {
			t.Fatalf("encode of a decoded %v: %v", m.typ, err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("re-encoding differs\n  in % x\n out % x", b, out)
		}
	})
}
