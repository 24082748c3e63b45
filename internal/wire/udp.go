package wire

import "encoding/binary"

// UDPHeaderLen is the length of a UDP header.
const UDPHeaderLen = 8

// RoCEv2Port is the IANA UDP destination port of RoCEv2.
const RoCEv2Port = 4791

const (
	udpSrcPort  = 0
	udpDstPort  = 2
	udpLength   = 4
	udpChecksum = 6
)

// UDP is a view of a UDP header; the accessors need UDPHeaderLen bytes.
type UDP []byte

// SrcPort returns the source port. rxe derives it from the QPNs (0xC000 |
// 14 bits of hash) so that one QP's packets stay on one ECMP path.
func (b UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(b[udpSrcPort:]) }

// DstPort returns the destination port, RoCEv2Port for RoCEv2.
func (b UDP) DstPort() uint16 { return binary.BigEndian.Uint16(b[udpDstPort:]) }

// Length returns the length of the datagram, header included.
func (b UDP) Length() uint16 { return binary.BigEndian.Uint16(b[udpLength:]) }

// Checksum returns the checksum field; rxe sends 0 over IPv4.
func (b UDP) Checksum() uint16 { return binary.BigEndian.Uint16(b[udpChecksum:]) }

// SetSrcPort sets the source port.
func (b UDP) SetSrcPort(p uint16) { binary.BigEndian.PutUint16(b[udpSrcPort:], p) }

// SetDstPort sets the destination port.
func (b UDP) SetDstPort(p uint16) { binary.BigEndian.PutUint16(b[udpDstPort:], p) }

// SetLength sets the length.
func (b UDP) SetLength(n uint16) { binary.BigEndian.PutUint16(b[udpLength:], n) }

// SetChecksum sets the checksum field.
func (b UDP) SetChecksum(c uint16) { binary.BigEndian.PutUint16(b[udpChecksum:], c) }

// UDPFields holds the values of a UDP header.
type UDPFields struct {
	SrcPort, DstPort uint16
	Length           uint16
	Checksum         uint16
}

// Encode writes f into b.
func (b UDP) Encode(f *UDPFields) {
	_ = b[UDPHeaderLen-1]
	b.SetSrcPort(f.SrcPort)
	b.SetDstPort(f.DstPort)
	b.SetLength(f.Length)
	b.SetChecksum(f.Checksum)
}

// Append appends the encoded header to b and returns the extended slice.
func (f *UDPFields) Append(b []byte) []byte {
	b, h := grow(b, UDPHeaderLen)
	UDP(h).Encode(f)
	return b
}
