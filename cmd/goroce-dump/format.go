package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/goroce/goroce/internal/pcap"
	"github.com/goroce/goroce/internal/wire"
)

// Column widths of the one-line format. Everything of fixed width comes
// first so that columns line up; the extension headers, whose length
// varies, come last, and the ICRC status ends the line.
const (
	srcWidth    = len("255.255.255.255:65535")
	dstWidth    = len("255.255.255.255")
	opcodeWidth = len("RC RDMA_READ_RESPONSE_MIDDLE")
)

// writeLine prints the one-line summary of p.
func writeLine(w *bufio.Writer, p *roceFrame) {
	f := &p.frame
	var src any = netip.AddrPortFrom(f.Src, f.SrcPort)
	if f.DstPort == 0 {
		src = f.Src // the UDP header was not decoded: the port is unknown
	}
	fmt.Fprintf(w, "%5d %s  %-*v → %-*s  ", p.index, relTime(p.rel, p.nano), srcWidth, src, dstWidth, f.Dst)
	if p.frameErr != nil {
		fmt.Fprintf(w, "malformed: %v", p.frameErr)
		if p.rec.Truncated() {
			fmt.Fprintf(w, " (capture holds %d of %d bytes)", p.rec.CaptureLength(), p.rec.OriginalLength)
		}
		w.WriteByte('\n')
		return
	}
	if p.parseErr != nil {
		fmt.Fprintf(w, "malformed: %v", p.parseErr)
		if b := f.UDPPayload; len(b) >= wire.BTHLen {
			bth := wire.BTH(b)
			fmt.Fprintf(w, " (opcode=0x%02x qpn=0x%06x psn=0x%06x, %d bytes)", uint8(bth.Opcode()), uint32(bth.DestQP()), uint32(bth.PSN()), len(b))
		} else {
			fmt.Fprintf(w, " (%d bytes)", len(b))
		}
		writeICRC(w, p)
		w.WriteByte('\n')
		return
	}

	pkt := &p.pkt
	bth := pkt.BTH
	fmt.Fprintf(w, "%-*s qpn=0x%06x psn=0x%06x %c%c%c  pay=%-4d", opcodeWidth, bth.Opcode(),
		uint32(bth.DestQP()), uint32(bth.PSN()),
		flagChar(bth.AckReq(), 'A'), flagChar(bth.SolicitedEvent(), 'S'), flagChar(bth.MigReq(), 'M'),
		len(pkt.Payload))
	// Rare BTH values, worth seeing when they occur: congestion marks and
	// a partition other than the default.
	sep := "  "
	if bth.FECN() {
		w.WriteString(sep + "FECN")
		sep = " "
	}
	if bth.BECN() {
		w.WriteString(sep + "BECN")
		sep = " "
	}
	if k := bth.PKey(); k != wire.DefaultPKey {
		fmt.Fprintf(w, "%spkey=0x%04x", sep, k)
	}
	writeExtHeaders(w, pkt)
	writeICRC(w, p)
	w.WriteByte('\n')
}

func flagChar(set bool, c byte) byte {
	if set {
		return c
	}
	return '-'
}

// relTime formats d as seconds with the resolution of the capture, right
// aligned.
func relTime(d time.Duration, nano bool) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	sec, frac := d/time.Second, d%time.Second
	if nano {
		return fmt.Sprintf("%14s", fmt.Sprintf("%s%d.%09d", sign, sec, frac))
	}
	return fmt.Sprintf("%11s", fmt.Sprintf("%s%d.%06d", sign, sec, frac/time.Microsecond))
}

// writeExtHeaders prints the extension headers in wire order, each as
// key=value tokens.
func writeExtHeaders(w *bufio.Writer, pkt *wire.Packet) {
	if h := pkt.DETH; h != nil {
		fmt.Fprintf(w, "  qkey=0x%08x srcqp=0x%06x", h.QKey(), uint32(h.SrcQP()))
	}
	if h := pkt.FETH; h != nil {
		fmt.Fprintf(w, "  placement=%d selectivity=%d", h.PlacementType(), h.SelectivityLevel())
	}
	if h := pkt.RETH; h != nil {
		fmt.Fprintf(w, "  va=0x%x rkey=0x%08x dlen=%d", h.VA(), h.RKey(), h.DMALength())
	}
	if h := pkt.AtomicETH; h != nil {
		fmt.Fprintf(w, "  va=0x%x rkey=0x%08x", h.VA(), h.RKey())
		if pkt.BTH.Opcode() == wire.RCCompareSwap {
			fmt.Fprintf(w, " swap=0x%x cmp=0x%x", h.SwapAdd(), h.Compare())
		} else {
			fmt.Fprintf(w, " add=%d", h.SwapAdd())
		}
	}
	if h := pkt.AETH; h != nil {
		fmt.Fprintf(w, "  aeth=%s msn=%d", syndrome(h.Syndrome()), uint32(h.MSN()))
	}
	if h := pkt.AtomicAckETH; h != nil {
		fmt.Fprintf(w, " orig=0x%x", h.OrigData())
	}
	if h := pkt.ImmDt; h != nil {
		fmt.Fprintf(w, "  imm=0x%08x", h.Imm())
	}
	if h := pkt.IETH; h != nil {
		fmt.Fprintf(w, "  inv_rkey=0x%08x", h.RKey())
	}
	if m, ok := parseMAD(pkt); ok {
		fmt.Fprintf(w, "  mad=%s", m.name())
		writeCMLine(w, pkt)
	}
}

// syndrome formats an AETH syndrome as one token: ACK (with the credit
// code unless it is 31, "unlimited", as rxe always sends), RNR_NAK with the
// timer, NAK with the code name.
func syndrome(s wire.AETHSyndrome) string {
	switch s.Kind() {
	case wire.AETHAck:
		if s.Credits() == 31 {
			return "ACK"
		}
		return fmt.Sprintf("ACK credits=%d", s.Credits())
	case wire.AETHRNRNak:
		return fmt.Sprintf("RNR_NAK timer=%d(%dus)", s.RNRTimer(), wire.RNRDelay(s.RNRTimer())/time.Microsecond)
	case wire.AETHNak:
		return "NAK:" + nakName(s.NAKCode())
	}
	return fmt.Sprintf("RESERVED(0x%02x)", uint8(s))
}

// nakName names a NAK code as rxe's and rdma-core's enums do, in one word.
func nakName(c wire.NAKCode) string {
	switch c {
	case wire.NAKPSNSequenceError:
		return "PSN_SEQUENCE_ERROR"
	case wire.NAKInvalidRequest:
		return "INVALID_REQUEST"
	case wire.NAKRemoteAccessError:
		return "REMOTE_ACCESS_ERROR"
	case wire.NAKRemoteOperationalError:
		return "REMOTE_OPERATIONAL_ERROR"
	case wire.NAKInvalidRDRequest:
		return "INVALID_RD_REQUEST"
	}
	return fmt.Sprintf("RESERVED_%d", uint8(c))
}

func writeICRC(w *bufio.Writer, p *roceFrame) {
	switch {
	case !p.hasICRC:
	case p.icrcBad():
		fmt.Fprintf(w, "  icrc=BAD(got 0x%08x, want 0x%08x)", p.icrcGot, p.icrcWant)
	default:
		w.WriteString("  icrc=ok")
	}
}

// payloadPreview is how many payload bytes -v shows.
const payloadPreview = 32

// writeVerbose prints every header field of p, one header per line.
func writeVerbose(w *bufio.Writer, p *roceFrame) {
	const ind = "        "
	f := &p.frame
	switch f.LinkType {
	case pcap.LinkTypeEthernet:
		h := f.LinkHeader
		if len(h) >= 14 {
			fmt.Fprintf(w, "%sETH   %v → %v type=0x%04x", ind, net.HardwareAddr(h[6:12]), net.HardwareAddr(h[0:6]), f.EtherType)
			if f.VLANTags > 0 {
				fmt.Fprintf(w, " vlan=%d tags=%d", f.VLANID, f.VLANTags)
			}
			w.WriteByte('\n')
		}
	default:
		if len(f.LinkHeader) > 0 {
			fmt.Fprintf(w, "%sLINK  %v hdr=%d type=0x%04x\n", ind, f.LinkType, len(f.LinkHeader), f.EtherType)
		}
	}
	switch h := f.IPHeader; {
	case f.IPVersion == 4 && len(h) >= wire.IPv4MinHeaderLen:
		ip := wire.IPv4(h)
		fmt.Fprintf(w, "%sIPv4  %v → %v hdr=%d tos=0x%02x len=%d id=0x%04x df=%d mf=%d frag=%d ttl=%d proto=%d csum=0x%04x\n",
			ind, f.Src, f.Dst, len(h), ip.TOS(), ip.TotalLength(), ip.ID(), bit(f.DontFragment), bit(f.MoreFragments),
			f.FragmentOffset, ip.TTL(), ip.Protocol(), ip.Checksum())
	case f.IPVersion == 6 && len(h) >= wire.IPv6HeaderLen:
		ip := wire.IPv6(h)
		fmt.Fprintf(w, "%sIPv6  %v → %v tc=0x%02x flow=0x%05x plen=%d next=%d hop=%d", ind, f.Src, f.Dst,
			ip.TrafficClass(), ip.FlowLabel(), ip.PayloadLength(), ip.NextHeader(), ip.HopLimit())
		if n := len(f.IPv6ExtHeaders); n > 0 {
			fmt.Fprintf(w, " ext=%d bytes", n)
		}
		w.WriteByte('\n')
	}
	if u := wire.UDP(f.UDPHeader); len(u) == wire.UDPHeaderLen {
		fmt.Fprintf(w, "%sUDP   %d → %d len=%d csum=0x%04x\n", ind, u.SrcPort(), u.DstPort(), u.Length(), u.Checksum())
	}
	if p.malformed() {
		if b := f.UDPPayload; len(b) > 0 {
			fmt.Fprintf(w, "%sRAW   %d bytes %s\n", ind, len(b), hexPreview(b, 64))
		}
		writeVerboseICRC(w, ind, p)
		return
	}

	pkt := &p.pkt
	b := pkt.BTH.Fields()
	fmt.Fprintf(w, "%sBTH   opcode=0x%02x(%v) se=%d m=%d pad=%d tver=%d pkey=0x%04x fecn=%d becn=%d resv6=0x%02x destqp=0x%06x ackreq=%d resv7=0x%02x psn=0x%06x\n",
		ind, uint8(b.Opcode), b.Opcode, bit(b.SolicitedEvent), bit(b.MigReq), b.PadCount, b.TVer, b.PKey,
		bit(b.FECN), bit(b.BECN), b.Resv6, uint32(b.DestQP), bit(b.AckReq), b.Resv7, uint32(b.PSN))
	if h := pkt.DETH; h != nil {
		fmt.Fprintf(w, "%sDETH  qkey=0x%08x resv8=0x%02x srcqp=0x%06x\n", ind, h.QKey(), h.Resv8(), uint32(h.SrcQP()))
	}
	if h := pkt.FETH; h != nil {
		fmt.Fprintf(w, "%sFETH  word=0x%08x placement=%d selectivity=%d\n", ind, h.Word(), h.PlacementType(), h.SelectivityLevel())
	}
	if h := pkt.RETH; h != nil {
		fmt.Fprintf(w, "%sRETH  va=0x%016x rkey=0x%08x dmalen=%d\n", ind, h.VA(), h.RKey(), h.DMALength())
	}
	if h := pkt.AtomicETH; h != nil {
		fmt.Fprintf(w, "%sAtomicETH va=0x%016x rkey=0x%08x swap_add=0x%016x compare=0x%016x\n", ind, h.VA(), h.RKey(), h.SwapAdd(), h.Compare())
	}
	if h := pkt.AETH; h != nil {
		fmt.Fprintf(w, "%sAETH  syndrome=0x%02x(%v) msn=%d\n", ind, uint8(h.Syndrome()), h.Syndrome(), uint32(h.MSN()))
	}
	if h := pkt.AtomicAckETH; h != nil {
		fmt.Fprintf(w, "%sAtomicAckETH orig=0x%016x\n", ind, h.OrigData())
	}
	if h := pkt.ImmDt; h != nil {
		fmt.Fprintf(w, "%sImmDt imm=0x%08x\n", ind, h.Imm())
	}
	if h := pkt.IETH; h != nil {
		fmt.Fprintf(w, "%sIETH  rkey=0x%08x\n", ind, h.RKey())
	}
	if m, ok := parseMAD(pkt); ok {
		fmt.Fprintf(w, "%sMAD   base=%d class=0x%02x(%s) classver=%d method=0x%02x status=0x%04x tid=0x%016x attr=0x%04x(%s) attrmod=0x%08x\n",
			ind, m.baseVersion, m.class, m.className(), m.classVersion, m.method, m.status, m.tid, m.attr, m.attrName(), m.attrMod)
		writeCMVerbose(w, ind, pkt)
	}
	if len(pkt.Payload) > 0 {
		fmt.Fprintf(w, "%sPAY   %d bytes %s\n", ind, len(pkt.Payload), hexPreview(pkt.Payload, payloadPreview))
	}
	if len(pkt.Pad) > 0 {
		fmt.Fprintf(w, "%sPAD   % x\n", ind, pkt.Pad)
	}
	writeVerboseICRC(w, ind, p)
}

func writeVerboseICRC(w *bufio.Writer, ind string, p *roceFrame) {
	switch {
	case !p.hasICRC:
	case p.icrcBad():
		fmt.Fprintf(w, "%sICRC  0x%08x BAD, computed 0x%08x\n", ind, p.icrcGot, p.icrcWant)
	default:
		fmt.Fprintf(w, "%sICRC  0x%08x ok\n", ind, p.icrcGot)
	}
}

func bit(b bool) int {
	if b {
		return 1
	}
	return 0
}

// hexPreview formats up to n bytes of b in hex, marking a cut.
func hexPreview(b []byte, n int) string {
	if len(b) <= n {
		return fmt.Sprintf("% x", b)
	}
	return fmt.Sprintf("% x ...", b[:n])
}

// mad is the common header of a management datagram, what rdma_cm sends to
// QP1 as UD SEND_ONLY (IBA 13.4.2).
type mad struct {
	baseVersion, class, classVersion, method uint8
	status                                   uint16
	tid                                      uint64
	attr                                     uint16
	attrMod                                  uint32
}

const (
	madHeaderLen = 24
	madClassCM   = 0x07
)

// parseMAD decodes the MAD header of a UD packet to QP1.
func parseMAD(pkt *wire.Packet) (mad, bool) {
	b := pkt.Payload
	if pkt.DETH == nil || pkt.BTH.DestQP() != wire.GSIQPN || len(b) < madHeaderLen {
		return mad{}, false
	}
	return mad{
		baseVersion:  b[0],
		class:        b[1],
		classVersion: b[2],
		method:       b[3],
		status:       binary.BigEndian.Uint16(b[4:]),
		tid:          binary.BigEndian.Uint64(b[8:]),
		attr:         binary.BigEndian.Uint16(b[16:]),
		attrMod:      binary.BigEndian.Uint32(b[20:]),
	}, true
}

// cmAttrNames are the communication management attribute names (IBA
// 12.6), as the kernel's cm_msgs.h spells them.
var cmAttrNames = map[uint16]string{
	0x0010: "REQ", 0x0011: "MRA", 0x0012: "REJ", 0x0013: "REP", 0x0014: "RTU",
	0x0015: "DREQ", 0x0016: "DREP", 0x0017: "SIDR_REQ", 0x0018: "SIDR_REP",
	0x0019: "LAP", 0x001a: "APR",
}

func (m mad) className() string {
	if m.class == madClassCM {
		return "CM"
	}
	return "?"
}

func (m mad) attrName() string {
	if m.class == madClassCM {
		if n, ok := cmAttrNames[m.attr]; ok {
			return n
		}
	}
	return "?"
}

// name is the one-token form: CM_REQ, or the class and attribute numbers.
func (m mad) name() string {
	if n := m.attrName(); n != "?" {
		return "CM_" + n
	}
	return fmt.Sprintf("class0x%02x/attr0x%04x", m.class, m.attr)
}
