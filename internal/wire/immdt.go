package wire

import "encoding/binary"

// Lengths of the 4-byte extended transport headers.
const (
	ImmDtLen = 4
	IETHLen  = 4
	// RDETHLen is the length of the reliable datagram extended transport
	// header. RD is not supported (RD opcodes are unknown to the parser); the
	// constant completes the list of IBTA header sizes.
	RDETHLen = 4
)

// ImmDt is a view of the immediate data header of the *_WITH_IMMEDIATE
// opcodes.
//
// Imm is the four wire bytes read as a big-endian uint32. libibverbs declares
// imm_data as __be32, holding the same four bytes in memory, so Imm equals
// ntohl(wr.imm_data) and a verbs layer converts with a byte swap on
// little-endian hosts; nothing in this package reorders the bytes otherwise.
type ImmDt []byte

// Imm returns the immediate data (the wire bytes as big-endian).
func (b ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(b) }

// SetImm sets the immediate data, written big-endian.
func (b ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(b, v) }

// ImmDtFields holds the value of the ImmDt field.
type ImmDtFields struct {
	Imm uint32
}

// Fields returns the value of b.
func (b ImmDt) Fields() ImmDtFields { return ImmDtFields{Imm: b.Imm()} }

// Encode writes f into b.
func (b ImmDt) Encode(f *ImmDtFields) { b.SetImm(f.Imm) }

// Append appends the encoded header to b and returns the extended slice.
func (f *ImmDtFields) Append(b []byte) []byte {
	b, h := grow(b, ImmDtLen)
	ImmDt(h).Encode(f)
	return b
}

// IETH is a view of the invalidate extended transport header of
// SEND_*_WITH_INVALIDATE: the rkey the responder invalidates.
type IETH []byte

// RKey returns the remote key to invalidate.
func (b IETH) RKey() uint32 { return binary.BigEndian.Uint32(b) }

// SetRKey sets the remote key to invalidate.
func (b IETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(b, k) }

// IETHFields holds the value of the IETH field.
type IETHFields struct {
	RKey uint32
}

// Fields returns the value of b.
func (b IETH) Fields() IETHFields { return IETHFields{RKey: b.RKey()} }

// Encode writes f into b.
func (b IETH) Encode(f *IETHFields) { b.SetRKey(f.RKey) }

// Append appends the encoded header to b and returns the extended slice.
func (f *IETHFields) Append(b []byte) []byte {
	b, h := grow(b, IETHLen)
	IETH(h).Encode(f)
	return b
}
