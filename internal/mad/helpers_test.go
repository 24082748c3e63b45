package mad

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/pcap"
	"github.com/goroce/goroce/internal/pcap/pcaptest"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/wire"
)

// cmCaptures are the rxe captures (testkit.Captures) with RDMA CM
// connection setup in them.
var cmCaptures = []string{"rping.pcap", "write_bw_rdmacm.pcap"}

// frameMAD is a CM MAD found in a pcap file.
type frameMAD struct {
	file    string
	frame   int // 1-based, as tshark numbers frames
	src     wire.QPN
	udpSrc  uint16
	mad     []byte
	payload []byte // the whole UDP payload, BTH through ICRC
}

func (f frameMAD) String() string { return f.file + ":" + strconv.Itoa(f.frame) }

// readMADs returns the UD SEND Only packets to QP 1 of a pcap file: the
// MADs, checked for an ICRC, the GSI Q_Key and a 256-byte payload.
func readMADs(t testing.TB, path string) []frameMAD {
	t.Helper()
	var out []frameMAD
	for _, fr := range pcaptest.Frames(t, path) {
		if fr.DstPort != wire.RoCEv2Port {
			continue
		}
		var p wire.Packet
		if err := p.Parse(fr.UDPPayload, 0); err != nil {
			t.Fatalf("%s: frame %d: %v", path, fr.Number, err)
		}
		if p.BTH.Opcode() != wire.UDSendOnly || p.BTH.DestQP() != wire.GSIQPN {
			continue
		}
		if !wire.CheckICRC(fr.IPHeader, fr.UDPHeader, fr.UDPPayload) {
			t.Fatalf("%s: frame %d: bad ICRC", path, fr.Number)
		}
		if p.DETH.QKey() != wire.GSIQKey || len(p.Payload) != MADSize {
			t.Fatalf("%s: frame %d: Q_Key %#x, payload %d bytes", path, fr.Number, p.DETH.QKey(), len(p.Payload))
		}
		out = append(out, frameMAD{file: fr.File, frame: fr.Number, src: p.DETH.SrcQP(),
			udpSrc: fr.SrcPort, mad: p.Payload, payload: fr.UDPPayload})
	}
	return out
}

// captureMADs returns the CM MADs of the rdma_cm captures, or skips the
// test if the captures are absent.
func captureMADs(t testing.TB) []frameMAD {
	t.Helper()
	var all []frameMAD
	for _, p := range testkit.Captures(t, cmCaptures...) {
		all = append(all, readMADs(t, p)...)
	}
	return all
}

// haveCaptures reports whether the rdma_cm captures are at hand.
func haveCaptures() bool {
	for _, f := range cmCaptures {
		if _, err := os.Stat(filepath.Join(testkit.CapturesDir(), f)); err != nil {
			return false
		}
	}
	return true
}

// craftFrame wraps a MAD in Ethernet, IPv4, UDP, BTH and DETH as rxe sends
// it from QP 1 to QP 1, with a valid ICRC.
func craftFrame(mad []byte, seq uint32) []byte {
	var h wire.Headers
	h.BTH = wire.BTHFields{Opcode: wire.UDSendOnly, PKey: 0xFFFF, DestQP: wire.GSIQPN, AckReq: true, PSN: psn.PSN(seq)}
	h.DETH = wire.DETHFields{QKey: wire.GSIQKey, SrcQP: wire.GSIQPN}
	transport := wire.AppendHeaders(nil, &h)
	transport = append(transport, mad...)

	udpLen := 8 + len(transport) + wire.ICRCLen
	ip := make([]byte, 20)
	ip[0], ip[6], ip[8], ip[9] = 0x45, 0x40, 64, 17 // version/IHL, DF, TTL, UDP
	binary.BigEndian.PutUint16(ip[2:], uint16(20+udpLen))
	copy(ip[12:], []byte{10, 99, 0, 2})
	copy(ip[16:], []byte{10, 99, 0, 3})
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	udp := make([]byte, 8)
	binary.BigEndian.PutUint16(udp[0:], 0xd872)
	binary.BigEndian.PutUint16(udp[2:], wire.RoCEv2Port)
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	transport = wire.AppendICRC(transport, wire.ICRC(ip, udp, transport))

	frame := []byte{0x52, 0x54, 0, 0x99, 0, 3, 0x52, 0x54, 0, 0x99, 0, 2, 0x08, 0x00}
	frame = append(frame, ip...)
	frame = append(frame, udp...)
	return append(frame, transport...)
}

func ipChecksum(h []byte) uint16 {
	var s uint32
	for i := 0; i < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s > 0xFFFF {
		s = s&0xFFFF + s>>16
	}
	return ^uint16(s)
}

// writePcap writes frames as an Ethernet pcap file, one second apart.
func writePcap(t testing.TB, frames [][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := pcap.NewWriter(&buf, pcap.LinkTypeEthernet, 65535)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range frames {
		if err := w.WritePacket(time.Unix(int64(1700000000+i), 0), f); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}
