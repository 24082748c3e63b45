package wire

import "encoding/binary"

// Lengths of the atomic extended transport headers.
const (
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
)

const (
	atomicVA      = 0
	atomicRKey    = 8
	atomicSwapAdd = 12
	atomicCompare = 20

	atomicAckOrigData = 0
)

// AtomicETH is a view of an atomic extended transport header, carried by
// COMPARE_SWAP and FETCH_ADD requests. Its 64-bit fields sit at offsets that
// are multiples of 4 only, so they are read bytewise.
type AtomicETH []byte

// VA returns the remote virtual address of the 8-byte target.
func (b AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(b[atomicVA:]) }

// RKey returns the remote key.
func (b AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(b[atomicRKey:]) }

// SwapAdd returns the swap value of a COMPARE_SWAP or the addend of a
// FETCH_ADD.
func (b AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(b[atomicSwapAdd:]) }

// Compare returns the compare value of a COMPARE_SWAP (unused by FETCH_ADD).
func (b AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(b[atomicCompare:]) }

// SetVA sets the remote virtual address.
func (b AtomicETH) SetVA(va uint64) { binary.BigEndian.PutUint64(b[atomicVA:], va) }

// SetRKey sets the remote key.
func (b AtomicETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(b[atomicRKey:], k) }

// SetSwapAdd sets the swap or add value.
func (b AtomicETH) SetSwapAdd(v uint64) { binary.BigEndian.PutUint64(b[atomicSwapAdd:], v) }

// SetCompare sets the compare value.
func (b AtomicETH) SetCompare(v uint64) { binary.BigEndian.PutUint64(b[atomicCompare:], v) }

// AtomicETHFields holds the values of the AtomicETH fields.
type AtomicETHFields struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64
	Compare uint64
}

// Fields returns the values of all fields of b.
func (b AtomicETH) Fields() AtomicETHFields {
	_ = b[AtomicETHLen-1]
	return AtomicETHFields{VA: b.VA(), RKey: b.RKey(), SwapAdd: b.SwapAdd(), Compare: b.Compare()}
}

// Encode writes f into b.
func (b AtomicETH) Encode(f *AtomicETHFields) {
	_ = b[AtomicETHLen-1]
	b.SetVA(f.VA)
	b.SetRKey(f.RKey)
	b.SetSwapAdd(f.SwapAdd)
	b.SetCompare(f.Compare)
}

// Append appends the encoded header to b and returns the extended slice.
func (f *AtomicETHFields) Append(b []byte) []byte {
	b, h := grow(b, AtomicETHLen)
	AtomicETH(h).Encode(f)
	return b
}

// AtomicAckETH is a view of an atomic acknowledge extended transport header:
// the value the target held before a COMPARE_SWAP or FETCH_ADD.
type AtomicAckETH []byte

// OrigData returns the original value of the target.
func (b AtomicAckETH) OrigData() uint64 { return binary.BigEndian.Uint64(b[atomicAckOrigData:]) }

// SetOrigData sets the original value.
func (b AtomicAckETH) SetOrigData(v uint64) { binary.BigEndian.PutUint64(b[atomicAckOrigData:], v) }

// AtomicAckETHFields holds the values of the AtomicAckETH fields.
type AtomicAckETHFields struct {
	OrigData uint64
}

// Fields returns the values of all fields of b.
func (b AtomicAckETH) Fields() AtomicAckETHFields {
	return AtomicAckETHFields{OrigData: b.OrigData()}
}

// Encode writes f into b.
func (b AtomicAckETH) Encode(f *AtomicAckETHFields) { b.SetOrigData(f.OrigData) }

// Append appends the encoded header to b and returns the extended slice.
func (f *AtomicAckETHFields) Append(b []byte) []byte {
	b, h := grow(b, AtomicAckETHLen)
	AtomicAckETH(h).Encode(f)
	return b
}
