package wire

import "encoding/binary"

// DETHLen is the length of the datagram extended transport header.
const DETHLen = 8

// GSIQKey is the Q_Key of QP1, used by communication management MADs.
const GSIQKey = 0x80010000

const (
	dethQKey  = 0
	dethResv8 = 4
	dethSrcQP = 4 // 32-bit word: resv8, SrcQP
)

// DETH is a view of a datagram extended transport header, carried by every UD
// packet right after the BTH.
type DETH []byte

// QKey returns the queue key, checked by the receiving UD QP.
func (b DETH) QKey() uint32 { return binary.BigEndian.Uint32(b[dethQKey:]) }

// Resv8 returns the reserved byte before SrcQP, zero on the wire.
func (b DETH) Resv8() uint8 { return b[dethResv8] }

// SrcQP returns the sender's queue pair number.
func (b DETH) SrcQP() QPN { return QPN(binary.BigEndian.Uint32(b[dethSrcQP:]) & QPNMask) }

// SetQKey sets the queue key.
func (b DETH) SetQKey(k uint32) { binary.BigEndian.PutUint32(b[dethQKey:], k) }

// SetResv8 sets the reserved byte.
func (b DETH) SetResv8(v uint8) { b[dethResv8] = v }

// SetSrcQP sets the source queue pair number; only the low 24 bits are used.
func (b DETH) SetSrcQP(q QPN) { put24(b[dethSrcQP+1:], uint32(q)) }

// DETHFields holds the values of the DETH fields.
type DETHFields struct {
	QKey  uint32
	Resv8 uint8 // reserved, normally 0
	SrcQP QPN
}

// Fields returns the values of all fields of b.
func (b DETH) Fields() DETHFields {
	_ = b[DETHLen-1]
	return DETHFields{QKey: b.QKey(), Resv8: b.Resv8(), SrcQP: b.SrcQP()}
}

// Encode writes f into b.
func (b DETH) Encode(f *DETHFields) {
	_ = b[DETHLen-1]
	b.SetQKey(f.QKey)
	binary.BigEndian.PutUint32(b[dethSrcQP:], uint32(f.Resv8)<<24|uint32(f.SrcQP)&QPNMask)
}

// Append appends the encoded header to b and returns the extended slice.
func (f *DETHFields) Append(b []byte) []byte {
	b, h := grow(b, DETHLen)
	DETH(h).Encode(f)
	return b
}
