package wire

import "encoding/binary"

// Headers holds the field values of a BTH and of every extension header, for
// AppendHeaders. Only the extension headers that BTH.Opcode carries are
// encoded; the others are ignored.
type Headers struct {
	BTH          BTHFields
	DETH         DETHFields
	FETH         FETHFields
	RETH         RETHFields
	AtomicETH    AtomicETHFields
	AETH         AETHFields
	AtomicAckETH AtomicAckETHFields
	ImmDt        ImmDtFields
	IETH         IETHFields
}

// Len returns the number of bytes AppendHeaders writes for h: the BTH and the
// opcode's extension headers.
func (h *Headers) Len() int {
	return headerLen(h.BTH.Opcode)
}

// headerLen returns the length of the BTH and the extension headers of o: the
// BTH alone for an unknown opcode.
func headerLen(o Opcode) int {
	if n := o.info().HeaderLen(); n != 0 {
		return n
	}
	return BTHLen
}

// AppendHeaders appends the BTH and the extension headers of h.BTH.Opcode, in
// wire order, and returns the extended slice. It allocates only if b lacks
// the capacity. For an unknown opcode it writes the BTH alone.
//
// It writes the fields as given: the caller sets BTH.PadCount (PadCount) and
// appends the payload, the pad (AppendPad) and the ICRC (AppendICRC).
func AppendHeaders(b []byte, h *Headers) []byte {
	hs := h.BTH.Opcode.info().Headers()
	b, t := grow(b, headerLen(h.BTH.Opcode))
	BTH(t).Encode(&h.BTH)
	if hs == 0 {
		return b
	}
	off := BTHLen
	if hs&HdrDETH != 0 {
		DETH(t[off:]).Encode(&h.DETH)
		off += DETHLen
	}
	if hs&HdrFETH != 0 {
		FETH(t[off:]).Encode(&h.FETH)
		off += FETHLen
	}
	if hs&HdrRETH != 0 {
		RETH(t[off:]).Encode(&h.RETH)
		off += RETHLen
	}
	if hs&HdrAtomicETH != 0 {
		AtomicETH(t[off:]).Encode(&h.AtomicETH)
		off += AtomicETHLen
	}
	if hs&HdrAETH != 0 {
		AETH(t[off:]).Encode(&h.AETH)
		off += AETHLen
	}
	if hs&HdrAtomicAckETH != 0 {
		AtomicAckETH(t[off:]).Encode(&h.AtomicAckETH)
		off += AtomicAckETHLen
	}
	if hs&HdrImmDt != 0 {
		ImmDt(t[off:]).Encode(&h.ImmDt)
		off += ImmDtLen
	}
	if hs&HdrIETH != 0 {
		IETH(t[off:]).Encode(&h.IETH)
	}
	return b
}

// PadCount returns the BTH pad count for a payload of payloadLen bytes: the
// number of bytes that bring it to a multiple of 4.
func PadCount(payloadLen int) uint8 {
	return uint8(-payloadLen & 3)
}

// AppendPad appends n zero pad bytes (n is at most 3).
func AppendPad(b []byte, n uint8) []byte {
	var zero [3]byte
	return append(b, zero[:n&3]...)
}

// AppendICRC appends crc in wire order, least significant byte first.
func AppendICRC(b []byte, crc uint32) []byte {
	return binary.LittleEndian.AppendUint32(b, crc)
}
