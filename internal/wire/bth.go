package wire

import (
	"encoding/binary"
	"slices"

	"github.com/goroce/goroce/internal/psn"
)

// BTHLen is the length of the base transport header.
const BTHLen = 12

// DefaultPKey is the default partition key, the only one RoCE peers use in
// practice.
const DefaultPKey = 0xFFFF

// BTH offsets and bits. Layout (IBTA 9.2, rxe_hdr.h):
//
//	byte 0      opcode
//	byte 1      SE:1 MigReq:1 PadCnt:2 TVer:4
//	bytes 2-3   P_Key
//	byte 4      FECN:1 BECN:1 reserved:6
//	bytes 5-7   DestQP
//	byte 8      AckReq:1 reserved:7
//	bytes 9-11  PSN
const (
	bthOpcode = 0
	bthFlags  = 1
	bthPKey   = 2
	bthQPN    = 4 // 32-bit word: FECN, BECN, resv6, DestQP
	bthPSN    = 8 // 32-bit word: AckReq, resv7, PSN

	bthSE       = 0x80
	bthMigReq   = 0x40
	bthPadMask  = 0x30
	bthPadShift = 4
	bthTVerMask = 0x0F

	bthFECN      = 0x80 // in byte 4
	bthBECN      = 0x40 // in byte 4
	bthResv6Mask = 0x3F // in byte 4

	bthAckReq    = 0x80 // in byte 8
	bthResv7Mask = 0x7F // in byte 8
)

// BTH is a view of a base transport header: the first 12 bytes of every
// RoCEv2 packet after the UDP header. The slice must be at least BTHLen long;
// Packet.Parse guarantees that for the views it returns.
type BTH []byte

// Opcode returns the opcode, which selects the transport service and the
// operation.
func (b BTH) Opcode() Opcode { return Opcode(b[bthOpcode]) }

// SolicitedEvent reports whether the SE bit is set: the responder should raise
// a completion event for this message if the consumer asked for solicited
// events only.
func (b BTH) SolicitedEvent() bool { return b[bthFlags]&bthSE != 0 }

// MigReq reports the migration state bit, used by automatic path migration.
// Receivers without APM must ignore it (ConnectX sets it on ACKs, rxe does not).
func (b BTH) MigReq() bool { return b[bthFlags]&bthMigReq != 0 }

// PadCount returns the number of pad bytes (0-3) between the payload and the
// ICRC.
func (b BTH) PadCount() uint8 { return (b[bthFlags] & bthPadMask) >> bthPadShift }

// TVer returns the transport header version; 0 is the only defined value.
func (b BTH) TVer() uint8 { return b[bthFlags] & bthTVerMask }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[bthPKey:]) }

// FECN reports the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[bthQPN]&bthFECN != 0 }

// BECN reports the backward explicit congestion notification bit, set on
// congestion notification packets.
func (b BTH) BECN() bool { return b[bthQPN]&bthBECN != 0 }

// Resv6 returns the six reserved bits that follow BECN. They are zero on the
// wire; the accessor exists so that a re-encoded header is byte-exact.
func (b BTH) Resv6() uint8 { return b[bthQPN] & bthResv6Mask }

// DestQP returns the destination queue pair number.
func (b BTH) DestQP() QPN { return QPN(binary.BigEndian.Uint32(b[bthQPN:]) & QPNMask) }

// AckReq reports whether the requester asks the responder for an
// acknowledgement of this packet.
func (b BTH) AckReq() bool { return b[bthPSN]&bthAckReq != 0 }

// Resv7 returns the seven reserved bits that follow AckReq. Unlike Resv6 they
// are covered by the ICRC unmasked.
func (b BTH) Resv7() uint8 { return b[bthPSN] & bthResv7Mask }

// PSN returns the packet sequence number.
func (b BTH) PSN() psn.PSN { return psn.PSN(binary.BigEndian.Uint32(b[bthPSN:]) & psn.Mask) }

// SetOpcode sets the opcode.
func (b BTH) SetOpcode(o Opcode) { b[bthOpcode] = byte(o) }

// SetSolicitedEvent sets or clears the SE bit.
func (b BTH) SetSolicitedEvent(v bool) { setBit(&b[bthFlags], bthSE, v) }

// SetMigReq sets or clears the MigReq bit.
func (b BTH) SetMigReq(v bool) { setBit(&b[bthFlags], bthMigReq, v) }

// SetPadCount sets the pad count; only the low two bits of n are used.
func (b BTH) SetPadCount(n uint8) {
	b[bthFlags] = b[bthFlags]&^bthPadMask | (n<<bthPadShift)&bthPadMask
}

// SetTVer sets the transport header version; only the low four bits of v are
// used.
func (b BTH) SetTVer(v uint8) { b[bthFlags] = b[bthFlags]&^bthTVerMask | v&bthTVerMask }

// SetPKey sets the partition key.
func (b BTH) SetPKey(k uint16) { binary.BigEndian.PutUint16(b[bthPKey:], k) }

// SetFECN sets or clears the FECN bit.
func (b BTH) SetFECN(v bool) { setBit(&b[bthQPN], bthFECN, v) }

// SetBECN sets or clears the BECN bit.
func (b BTH) SetBECN(v bool) { setBit(&b[bthQPN], bthBECN, v) }

// SetResv6 sets the six reserved bits after BECN; only the low six bits of v
// are used.
func (b BTH) SetResv6(v uint8) { b[bthQPN] = b[bthQPN]&^bthResv6Mask | v&bthResv6Mask }

// SetDestQP sets the destination queue pair number; only the low 24 bits of q
// are used.
func (b BTH) SetDestQP(q QPN) { put24(b[bthQPN+1:], uint32(q)) }

// SetAckReq sets or clears the AckReq bit.
func (b BTH) SetAckReq(v bool) { setBit(&b[bthPSN], bthAckReq, v) }

// SetResv7 sets the seven reserved bits after AckReq; only the low seven bits
// of v are used.
func (b BTH) SetResv7(v uint8) { b[bthPSN] = b[bthPSN]&^bthResv7Mask | v&bthResv7Mask }

// SetPSN sets the packet sequence number; only the low 24 bits of p are used.
func (b BTH) SetPSN(p psn.PSN) { put24(b[bthPSN+1:], uint32(p)) }

// BTHFields holds the values of every BTH field, reserved bits included.
type BTHFields struct {
	Opcode         Opcode
	SolicitedEvent bool
	MigReq         bool
	PadCount       uint8 // 0-3
	TVer           uint8 // 0 on the wire
	PKey           uint16
	FECN           bool
	BECN           bool
	Resv6          uint8 // 6 reserved bits after BECN, normally 0
	DestQP         QPN
	AckReq         bool
	Resv7          uint8 // 7 reserved bits after AckReq, normally 0
	PSN            psn.PSN
}

// Fields returns the values of all fields of b.
func (b BTH) Fields() BTHFields {
	_ = b[BTHLen-1]
	return BTHFields{
		Opcode:         b.Opcode(),
		SolicitedEvent: b.SolicitedEvent(),
		MigReq:         b.MigReq(),
		PadCount:       b.PadCount(),
		TVer:           b.TVer(),
		PKey:           b.PKey(),
		FECN:           b.FECN(),
		BECN:           b.BECN(),
		Resv6:          b.Resv6(),
		DestQP:         b.DestQP(),
		AckReq:         b.AckReq(),
		Resv7:          b.Resv7(),
		PSN:            b.PSN(),
	}
}

// Encode writes all of f into b, every byte included. Out-of-range values are
// truncated to their field widths.
func (b BTH) Encode(f *BTHFields) {
	_ = b[BTHLen-1]
	b[bthOpcode] = byte(f.Opcode)
	b[bthFlags] = bit(f.SolicitedEvent, bthSE) | bit(f.MigReq, bthMigReq) |
		(f.PadCount<<bthPadShift)&bthPadMask | f.TVer&bthTVerMask
	binary.BigEndian.PutUint16(b[bthPKey:], f.PKey)
	binary.BigEndian.PutUint32(b[bthQPN:], uint32(bit(f.FECN, bthFECN)|bit(f.BECN, bthBECN)|f.Resv6&bthResv6Mask)<<24|
		uint32(f.DestQP)&QPNMask)
	binary.BigEndian.PutUint32(b[bthPSN:], uint32(bit(f.AckReq, bthAckReq)|f.Resv7&bthResv7Mask)<<24|
		uint32(f.PSN)&psn.Mask)
}

// Append appends the encoded header to b and returns the extended slice.
func (f *BTHFields) Append(b []byte) []byte {
	b, h := grow(b, BTHLen)
	BTH(h).Encode(f)
	return b
}

// setBit sets or clears mask in *p.
func setBit(p *byte, mask byte, v bool) {
	if v {
		*p |= mask
	} else {
		*p &^= mask
	}
}

// bit returns mask if v is true and 0 otherwise.
func bit(v bool, mask byte) byte {
	if v {
		return mask
	}
	return 0
}

// put24 writes the low 24 bits of v big-endian into b[0:3].
func put24(b []byte, v uint32) {
	_ = b[2]
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}

// grow extends b by n bytes, reallocating only when its capacity is too small,
// and returns the extended slice and its new n-byte tail. The tail is not
// cleared: every encoder writes all bytes of its header.
func grow(b []byte, n int) (all, tail []byte) {
	l := len(b)
	b = slices.Grow(b, n)[:l+n]
	return b, b[l:]
}
