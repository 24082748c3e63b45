package wire

import "encoding/binary"

// RETHLen is the length of the RDMA extended transport header.
const RETHLen = 16

const (
	rethVA        = 0
	rethRKey      = 8
	rethDMALength = 12
)

// RETH is a view of an RDMA extended transport header: the remote buffer of an
// RDMA WRITE (first or only packet), an RDMA READ request, an ATOMIC WRITE or
// a FLUSH.
type RETH []byte

// VA returns the remote virtual address.
func (b RETH) VA() uint64 { return binary.BigEndian.Uint64(b[rethVA:]) }

// RKey returns the remote key of the target memory region or window.
func (b RETH) RKey() uint32 { return binary.BigEndian.Uint32(b[rethRKey:]) }

// DMALength returns the length of the whole message in bytes (not of this
// packet's payload).
func (b RETH) DMALength() uint32 { return binary.BigEndian.Uint32(b[rethDMALength:]) }

// SetVA sets the remote virtual address.
func (b RETH) SetVA(va uint64) { binary.BigEndian.PutUint64(b[rethVA:], va) }

// SetRKey sets the remote key.
func (b RETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(b[rethRKey:], k) }

// SetDMALength sets the message length.
func (b RETH) SetDMALength(n uint32) { binary.BigEndian.PutUint32(b[rethDMALength:], n) }

// RETHFields holds the values of the RETH fields.
type RETHFields struct {
	VA        uint64
	RKey      uint32
	DMALength uint32
}

// Fields returns the values of all fields of b.
func (b RETH) Fields() RETHFields {
	_ = b[RETHLen-1]
	return RETHFields{VA: b.VA(), RKey: b.RKey(), DMALength: b.DMALength()}
}

// Encode writes f into b.
func (b RETH) Encode(f *RETHFields) {
	_ = b[RETHLen-1]
	b.SetVA(f.VA)
	b.SetRKey(f.RKey)
	b.SetDMALength(f.DMALength)
}

// Append appends the encoded header to b and returns the extended slice.
func (f *RETHFields) Append(b []byte) []byte {
	b, h := grow(b, RETHLen)
	RETH(h).Encode(f)
	return b
}
