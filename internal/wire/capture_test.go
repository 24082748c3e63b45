package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strconv"
	"testing"

	"github.com/goroce/goroce/internal/pcap/pcaptest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

// capture is one RoCEv2 packet of a capture file, as internal/pcap decodes
// it (that package is checked against tshark's frame counts on its own; the
// per-file counts below keep this test from passing on an empty read).
type capture struct {
	file      string
	frame     int // 1-based, as tshark numbers frames
	ip        []byte
	udp       []byte
	transport []byte // UDP payload: BTH through ICRC
}

func (c capture) String() string { return c.file + ":" + strconv.Itoa(c.frame) }

// loadCaptures returns every RoCEv2 packet (UDP to port 4791) of every
// rxe capture (testkit.Captures, whose ICRCs are all valid except the
// probes made bad on purpose), or skips the test if they are absent.
func loadCaptures(t testing.TB) []capture {
	t.Helper()
	var all []capture
	for _, f := range testkit.Captures(t) {
		for _, fr := range pcaptest.Frames(t, f) {
			if fr.DstPort != RoCEv2Port || fr.Record.Truncated() {
				continue
			}
			all = append(all, capture{file: fr.File, frame: fr.Number,
				ip: fr.IPHeader, udp: fr.UDPHeader, transport: fr.UDPPayload})
		}
	}
	return all
}

// badICRCFrames are the packets craft_probe.py sent with a wrong ICRC on
// purpose: three with a flipped bit, three whose ICRC assumed IP id 0 while
// the kernel chose another.
var badICRCFrames = map[string]bool{
	"host_crafted_probe.pcap:4": true, "host_crafted_probe.pcap:5": true, "host_crafted_probe.pcap:6": true,
	"host_crafted_probe.pcap:7": true, "host_crafted_probe.pcap:8": true, "host_crafted_probe.pcap:9": true,
}

// wantPackets is the number of RoCEv2 packets per file, as icrc_check.py
// counts them.
var wantPackets = map[string]int{
	"atomic_cswap.pcap": 16, "atomic_fadd.pcap": 16, "host_crafted_probe.pcap": 9,
	"rc_pingpong.pcap": 24, "read_bw.pcap": 40, "rping.pcap": 41, "send_bw.pcap": 40,
	"send_lat.pcap": 32, "uc_pingpong.pcap": 16, "ud_pingpong.pcap": 8,
	"vm_to_host_unanswered.pcap": 73, "write_bw.pcap": 40, "write_bw_rdmacm.pcap": 114,
	"write_lat.pcap": 32,
}

func TestCapturesICRC(t *testing.T) {
	caps := loadCaptures(t)
	count := map[string]int{}
	for _, c := range caps {
		count[c.file]++
		stored := binary.LittleEndian.Uint32(c.transport[len(c.transport)-ICRCLen:])
		got := ICRC(c.ip, c.udp, c.transport[:len(c.transport)-ICRCLen])
		if want := refICRC(c.ip, c.udp, c.transport[:len(c.transport)-ICRCLen]); got != want {
			t.Errorf("%v: ICRC = %#08x, reference = %#08x", c, got, want)
		}
		bad := badICRCFrames[c.String()]
		if ok := CheckICRC(c.ip, c.udp, c.transport); ok == bad {
			t.Errorf("%v: CheckICRC = %v, want %v (stored %#08x, computed %#08x)", c, ok, !bad, stored, got)
		}
		if !bad && got != stored {
			t.Errorf("%v: ICRC = %#08x, stored %#08x", c, got, stored)
		}
	}
	for f, n := range wantPackets {
		if count[f] != n {
			t.Errorf("%s: %d RoCEv2 packets, want %d", f, count[f], n)
		}
	}
}

// TestCapturesParseReencode parses every captured packet, rebuilds it from
// the parsed field values with the builders and compares the bytes.
func TestCapturesParseReencode(t *testing.T) {
	caps := loadCaptures(t)
	seen := map[Opcode]bool{}
	var p Packet
	for _, c := range caps {
		for _, mtu := range []int{0, 1024} {
			if err := p.Parse(c.transport, mtu); err != nil {
				t.Fatalf("%v: Parse(mtu %d): %v", c, mtu, err)
			}
		}
		seen[p.BTH.Opcode()] = true
		h := p.Headers()
		hdr := AppendHeaders(nil, &h)
		if !bytes.Equal(hdr, p.HeaderBytes()) {
			t.Fatalf("%v: re-encoded headers\n%x\nwant\n%x", c, hdr, p.HeaderBytes())
		}
		if h.BTH.PadCount != PadCount(len(p.Payload)) {
			t.Errorf("%v: pad count %d for %d payload bytes", c, h.BTH.PadCount, len(p.Payload))
		}
		whole := append(hdr, p.Payload...)
		whole = AppendPad(whole, h.BTH.PadCount)
		whole = AppendICRC(whole, p.StoredICRC())
		if !bytes.Equal(whole, c.transport) {
			t.Fatalf("%v: rebuilt packet differs", c)
		}
		if badICRCFrames[c.String()] {
			continue
		}

		// The send-path ICRC variants agree with the stored value.
		if got := ICRCParts(c.ip, c.udp, hdr, p.Payload, p.Pad); got != p.StoredICRC() {
			t.Errorf("%v: ICRCParts = %#08x, want %#08x", c, got, p.StoredICRC())
		}
		ip := IPv4(c.ip)
		u := UDP(c.udp)
		if got := ICRCv4(ip.Src(), ip.Dst(), ip.ID(), u.SrcPort(), u.DstPort(), hdr, p.Payload); got != p.StoredICRC() {
			t.Errorf("%v: ICRCv4 = %#08x, want %#08x", c, got, p.StoredICRC())
		}
	}
	// The captures exercise these opcodes; make sure none went missing.
	for _, o := range []Opcode{RCSendFirst, RCSendMiddle, RCSendLast, RCSendOnly, RCRDMAWriteFirst,
		RCRDMAWriteMiddle, RCRDMAWriteLast, RCRDMAWriteOnly, RCRDMAReadRequest, RCRDMAReadResponseFirst,
		RCRDMAReadResponseMiddle, RCRDMAReadResponseLast, RCRDMAReadResponseOnly, RCAcknowledge,
		RCAtomicAcknowledge, RCCompareSwap, RCFetchAdd, UCSendFirst, UCSendLast, UDSendOnly} {
		if !seen[o] {
			t.Errorf("no %v packet in the captures", o)
		}
	}
}

// TestCapturesKnownFields spot-checks field values against what tshark and
// the tools' logs show for the same frames.
func TestCapturesKnownFields(t *testing.T) {
	caps := loadCaptures(t)
	byName := map[string]capture{}
	for _, c := range caps {
		byName[c.String()] = c
	}
	var pkt Packet
	get := func(name string) *Packet {
		t.Helper()
		c, ok := byName[name]
		if !ok {
			t.Fatalf("frame %s not found", name)
		}
		if err := pkt.Parse(c.transport, 1024); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return &pkt
	}

	// tshark: frame 10, RC Send First QP=0x000011, PSN 13539132 (0xce973c,
	// the PSN rc_pingpong.log prints), 1024 bytes of 0x7b, ICRC 0x502b325e
	// printed byte-reversed.
	p := get("rc_pingpong.pcap:10")
	if p.BTH.Opcode() != RCSendFirst || p.BTH.DestQP() != 0x11 || p.BTH.PSN() != 0xce973c ||
		p.BTH.PKey() != DefaultPKey || p.BTH.AckReq() || len(p.Payload) != 1024 || p.Payload[0] != 0x7b {
		t.Errorf("rc_pingpong:10 = %+v", p.BTH.Fields())
	}
	if got := binary.BigEndian.Uint32(p.ICRC); got != 0x502b325e {
		t.Errorf("rc_pingpong:10 ICRC bytes %#08x, want 0x502b325e as tshark shows them", got)
	}

	// A SEND_ONLY with a 2-byte payload and pad count 2 (rdma_cm private
	// data exchange in perftest -R).
	found := false
	for _, c := range caps {
		if c.file != "write_bw_rdmacm.pcap" || len(c.transport) != 20 || BTH(c.transport).PadCount() != 2 {
			continue
		}
		found = true
		p := get(c.String())
		if p.BTH.Opcode() != RCSendOnly || len(p.Payload) != 2 || len(p.Pad) != 2 {
			t.Errorf("%v: payload %d pad %d", c, len(p.Payload), len(p.Pad))
		}
	}
	if !found {
		t.Error("no padded SEND_ONLY in write_bw_rdmacm.pcap")
	}

	// Every ACK rxe sends says "ACK credits=31", and every CM MAD is a UD
	// SEND_ONLY to QP1 with the GSI Q_Key from QP1.
	for _, c := range caps {
		p := get(c.String())
		switch p.BTH.Opcode() {
		case RCAcknowledge, RCAtomicAcknowledge:
			if s := p.AETH.Syndrome(); s != SyndromeAckUnlimited || s.String() != "ACK credits=31" {
				t.Errorf("%v: syndrome %v", c, s)
			}
		case UDSendOnly:
			if p.BTH.DestQP() == GSIQPN && (p.DETH.QKey() != GSIQKey || p.DETH.SrcQP() != GSIQPN || len(p.Payload) != 256) {
				t.Errorf("%v: MAD with DETH %+v, %d bytes", c, p.DETH.Fields(), len(p.Payload))
			}
		case RCCompareSwap, RCFetchAdd:
			if p.AtomicETH.VA()%8 != 0 || !p.BTH.AckReq() {
				t.Errorf("%v: atomic %+v", c, p.AtomicETH.Fields())
			}
		}
	}
}

// TestCapturesTruncated cuts every captured packet at every length: Parse
// must never panic, must report ErrTruncated while the headers or the ICRC
// are incomplete, and any shorter packet it accepts (a variable payload cut
// by a multiple of 4 bytes is well-formed) must fail the ICRC check.
func TestCapturesTruncated(t *testing.T) {
	caps := loadCaptures(t)
	if testing.Short() {
		caps = caps[:len(caps)/4]
	}
	var p Packet
	for _, c := range caps {
		if badICRCFrames[c.String()] {
			continue
		}
		info := BTH(c.transport).Opcode().Info()
		for n := range len(c.transport) {
			b := c.transport[:n]
			for _, mtu := range []int{0, 1024} {
				err := p.Parse(b, mtu)
				if n < info.HeaderLen()+ICRCLen {
					if !errors.Is(err, ErrTruncated) {
						t.Fatalf("%v cut to %d (mtu %d): err = %v, want ErrTruncated", c, n, mtu, err)
					}
					continue
				}
				if err == nil && CheckICRC(c.ip, c.udp, b) {
					t.Fatalf("%v cut to %d (mtu %d): parsed and passed the ICRC check", c, n, mtu)
				}
			}
		}
	}
}

func TestCapturesSplitIPUDP(t *testing.T) {
	caps := loadCaptures(t)
	for _, c := range caps {
		// Rebuild the IP packet from the pieces the test reader found,
		// with some trailing link-layer padding.
		pkt := append(append(append([]byte(nil), c.ip...), c.udp...), c.transport...)
		pkt = append(pkt, 0, 0, 0)
		ip, udp, payload, err := SplitIPUDP(pkt)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		if !bytes.Equal(ip, c.ip) || !bytes.Equal(udp, c.udp) || !bytes.Equal(payload, c.transport) {
			t.Fatalf("%v: SplitIPUDP pieces differ", c)
		}
		h := IPv4(ip)
		if !IPv4(pkt).Valid() || h.Protocol() != IPProtocolUDP || h.Flags() != IPv4DontFragment || UDP(udp).DstPort() != RoCEv2Port {
			t.Errorf("%v: unexpected IP/UDP fields", c)
		}
		if got := h.ComputeChecksum(); got != h.Checksum() {
			t.Errorf("%v: IPv4 checksum %#04x, header says %#04x", c, got, h.Checksum())
		}
	}
}
