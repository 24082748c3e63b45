package wire

import "encoding/binary"

// FETHLen is the length of the FLUSH extended transport header.
const FETHLen = 4

// FETH bits, in the 32-bit big-endian word (IBTA 1.5 FLUSH, rxe_hdr.h).
const (
	fethPlacementMask   = 0x0000000F // bits 3:0
	fethSelectivityMask = 0x00000030 // bits 5:4
	fethSelectivityLow  = 4
	fethReservedMask    = 0xFFFFFFC0 // bits 31:6
)

// FETH is a view of the FLUSH extended transport header, which precedes the
// RETH in a FLUSH request. Its placement type and selectivity level hold the
// values of ibv.FlushType and ibv.FlushLevel (libibverbs' enums are the
// IBTA's there).
type FETH []byte

// Word returns the whole header as a big-endian word, reserved bits included.
func (b FETH) Word() uint32 { return binary.BigEndian.Uint32(b) }

// PlacementType returns the placement type bits (3:0).
func (b FETH) PlacementType() uint8 { return uint8(b.Word() & fethPlacementMask) }

// SelectivityLevel returns the selectivity level (bits 5:4).
func (b FETH) SelectivityLevel() uint8 {
	return uint8(b.Word() & fethSelectivityMask >> fethSelectivityLow)
}

// SetWord sets the whole header.
func (b FETH) SetWord(w uint32) { binary.BigEndian.PutUint32(b, w) }

// SetPlacementType sets the placement type; only the low 4 bits are used.
func (b FETH) SetPlacementType(t uint8) {
	b.SetWord(b.Word()&^fethPlacementMask | uint32(t)&fethPlacementMask)
}

// SetSelectivityLevel sets the selectivity level; only the low 2 bits are
// used.
func (b FETH) SetSelectivityLevel(l uint8) {
	b.SetWord(b.Word()&^fethSelectivityMask | uint32(l)<<fethSelectivityLow&fethSelectivityMask)
}

// FETHFields holds the values of the FETH fields.
type FETHFields struct {
	PlacementType    uint8  // bits 3:0
	SelectivityLevel uint8  // bits 5:4
	Reserved         uint32 // bits 31:6 (shifted down by 6), normally 0
}

// Fields returns the values of all fields of b.
func (b FETH) Fields() FETHFields {
	w := b.Word()
	return FETHFields{
		PlacementType:    uint8(w & fethPlacementMask),
		SelectivityLevel: uint8(w & fethSelectivityMask >> fethSelectivityLow),
		Reserved:         w & fethReservedMask >> 6,
	}
}

// Encode writes f into b.
func (b FETH) Encode(f *FETHFields) {
	b.SetWord(uint32(f.PlacementType)&fethPlacementMask |
		uint32(f.SelectivityLevel)<<fethSelectivityLow&fethSelectivityMask |
		f.Reserved<<6&fethReservedMask)
}

// Append appends the encoded header to b and returns the extended slice.
func (f *FETHFields) Append(b []byte) []byte {
	b, h := grow(b, FETHLen)
	FETH(h).Encode(f)
	return b
}
