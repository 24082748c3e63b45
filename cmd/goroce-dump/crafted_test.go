package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/pcap"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// The rxe captures are all Ethernet and IPv4 with well-formed packets. These
// tests craft what they lack: IPv6 in a Linux cooked capture, NAKs, immediate
// data, invalidation, congestion bits, broken packets and a capture cut at
// its snapshot length.

var (
	srcIPv6 = [16]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}
	dstIPv6 = [16]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3}
)

// sll2IPv6 wraps a UDP payload to port dport in IPv6 and a Linux cooked v2
// header; the ICRC is appended when withICRC is set.
func sll2IPv6(dport uint16, transport []byte, withICRC bool) []byte {
	n := len(transport)
	if withICRC {
		n += wire.ICRCLen
	}
	udp := (&wire.UDPFields{SrcPort: 0xc001, DstPort: dport, Length: uint16(wire.UDPHeaderLen + n)}).Append(nil)
	ip := (&wire.IPv6Fields{PayloadLength: uint16(len(udp) + n), NextHeader: wire.IPProtocolUDP, HopLimit: 64,
		Src: srcIPv6, Dst: dstIPv6}).Append(nil)
	if withICRC {
		transport = wire.AppendICRC(transport, wire.ICRC(ip, udp, transport))
	}
	sll2 := make([]byte, 20)
	binary.BigEndian.PutUint16(sll2[0:], 0x86dd)
	binary.BigEndian.PutUint16(sll2[8:], 1) // ARPHRD_ETHER
	sll2[11] = 6
	return append(append(append(sll2, ip...), udp...), transport...)
}

func roce(h wire.Headers, payload []byte) []byte {
	if h.BTH.PKey == 0 {
		h.BTH.PKey = wire.DefaultPKey
	}
	h.BTH.PadCount = wire.PadCount(len(payload))
	b := wire.AppendHeaders(nil, &h)
	b = append(b, payload...)
	return wire.AppendPad(b, h.BTH.PadCount)
}

func TestCraftedFrames(t *testing.T) {
	bth := func(op wire.Opcode, qpn wire.QPN, p uint32) wire.BTHFields {
		return wire.BTHFields{Opcode: op, DestQP: qpn, PSN: psn.PSN(p)}
	}
	sendImm := wire.Headers{BTH: bth(wire.RCSendOnlyWithImmediate, 0x12, 5), ImmDt: wire.ImmDtFields{Imm: 0x12345678}}
	sendImm.BTH.AckReq = true
	nak := wire.Headers{BTH: bth(wire.RCAcknowledge, 0x34, 6), AETH: wire.AETHFields{Syndrome: wire.NakSyndrome(wire.NAKRemoteAccessError), MSN: 7}}
	rnr := wire.Headers{BTH: bth(wire.RCAcknowledge, 0x34, 7), AETH: wire.AETHFields{Syndrome: wire.RNRNakSyndrome(12), MSN: 7}}
	inv := wire.Headers{BTH: bth(wire.RCSendOnlyWithInvalidate, 0x12, 8), IETH: wire.IETHFields{RKey: 0x1234}}
	congested := wire.Headers{BTH: bth(wire.RCSendOnly, 0x12, 9)}
	congested.BTH.AckReq, congested.BTH.SolicitedEvent, congested.BTH.MigReq = true, true, true
	congested.BTH.FECN, congested.BTH.BECN, congested.BTH.PKey = true, true, 0x7fff
	big := roce(wire.Headers{BTH: bth(wire.RCSendOnly, 0x12, 10)}, make([]byte, 1024))

	tcp := sll2IPv6(4791, nil, false)
	tcp[20+6] = 6 // next header TCP
	frames := []struct {
		data []byte
		want string // in the frame's line; "" for a skipped frame
	}{
		{sll2IPv6(4791, roce(sendImm, []byte("hello")), true),
			"[fd00::2]:49153       → fd00::3          RC SEND_ONLY_WITH_IMMEDIATE  qpn=0x000012 psn=0x000005 A--  pay=5     imm=0x12345678  icrc=ok"},
		{sll2IPv6(4791, roce(nak, nil), true), "RC ACKNOWLEDGE               qpn=0x000034 psn=0x000006 ---  pay=0     aeth=NAK:REMOTE_ACCESS_ERROR msn=7  icrc=ok"},
		{sll2IPv6(4791, roce(rnr, nil), true), "aeth=RNR_NAK timer=12(640us) msn=7  icrc=ok"},
		{sll2IPv6(4791, roce(inv, []byte("x")), true), "RC SEND_ONLY_WITH_INVALIDATE qpn=0x000012 psn=0x000008 ---  pay=1     inv_rkey=0x00001234  icrc=ok"},
		{sll2IPv6(4791, roce(congested, nil), true), "qpn=0x000012 psn=0x000009 ASM  pay=0     FECN BECN pkey=0x7fff  icrc=ok"},
		{sll2IPv6(4791, []byte("shortBTH"), false), "malformed: wire: BTH: packet shorter than the BTH (8 bytes)"},
		{sll2IPv6(4791, big, true), "[fd00::2]:49153       → fd00::3          malformed: pcap: truncated: IPv6 packet needs 1088 bytes, frame has 80 (capture holds 100 of 1108 bytes)"},
		{tcp, ""},
		{sll2IPv6(53, []byte("dns"), false), ""},
		{sll2IPv6(53, make([]byte, 1000), false), ""}, // cut too, but its port says it is not RoCEv2
	}

	var file bytes.Buffer
	w, err := pcap.NewNanosecondWriter(&file, pcap.LinkTypeLinuxSLL2, 100)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1700000000, 0)
	for i, f := range frames {
		if err := w.WritePacket(ts.Add(time.Duration(i)*1500*time.Nanosecond), f.data); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "crafted.pcap")
	if err := os.WriteFile(path, file.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	code, out, stderr := dump(t, "--check", path)
	if code != exitCheckFail || stderr != "" {
		t.Errorf("exit %d, stderr %q; want %d", code, stderr, exitCheckFail)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	i := 0
	for n, f := range frames {
		if f.want == "" {
			continue
		}
		if i >= len(lines) {
			t.Fatalf("frame %d missing from\n%s", n+1, out)
		}
		line := lines[i]
		i++
		// Frame numbers count skipped frames too; nanosecond timestamps
		// keep the 1.5 µs spacing.
		fields := strings.Fields(line)
		if wantTime := fmt.Sprintf("0.%09d", n*1500); fields[0] != strconv.Itoa(n+1) || fields[1] != wantTime {
			t.Errorf("frame %d line starts %q %q, want %d %s", n+1, fields[0], fields[1], n+1, wantTime)
		}
		if !strings.Contains(line, f.want) {
			t.Errorf("frame %d:\n got %s\nwant …%s", n+1, line, f.want)
		}
	}
	if want := "check: 7 RoCEv2 packets, 2 malformed, 0 bad ICRC, 3 other frames skipped: FAIL"; lastLine(out) != want {
		t.Errorf("summary %q, want %q", lastLine(out), want)
	}

	// -v on the malformed packet shows its raw bytes, and the LINK line of
	// a cooked capture.
	_, out, _ = dump(t, "-v", path)
	for _, want := range []string{
		"        LINK  LINUX_SLL2 hdr=20 type=0x86dd\n",
		"        IPv6  fd00::2 → fd00::3 tc=0x00 flow=0x00000 plen=36 next=17 hop=64\n",
		"        RAW   8 bytes 73 68 6f 72 74 42 54 48\n",
		"        ImmDt imm=0x12345678\n",
		"        IETH  rkey=0x00001234\n",
		"        AETH  syndrome=0x62(NAK remote access error) msn=7\n",
		"        BTH   opcode=0x04(RC SEND_ONLY) se=1 m=1 pad=0 tver=0 pkey=0x7fff fecn=1 becn=1 resv6=0x00 destqp=0x000012 ackreq=1 resv7=0x00 psn=0x000009\n",
		"        PAY   5 bytes 68 65 6c 6c 6f\n        PAD   00 00 00\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("-v output lacks %q", want)
		}
	}
}
