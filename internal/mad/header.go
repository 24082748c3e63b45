package mad

import "encoding/binary"

// Sizes of a MAD of base version 1.
const (
	MADSize    = 256                  // every MAD, header included
	HeaderSize = 24                   // the common MAD header
	BodySize   = MADSize - HeaderSize // a CM message
)

// Values of the common header that CM MADs carry.
const (
	BaseVersion    = 0x01 // IB_MGMT_BASE_VERSION
	MgmtClassCM    = 0x07 // IB_MGMT_CLASS_CM
	CMClassVersion = 0x02 // IB_CM_CLASS_VERSION (IBA 1.2 and later)
)

// Header is the 24-byte common MAD header (IBA vol. 1 13.4.2, the kernel's
// struct ib_mad_hdr), every field of it, so that a parsed header
// re-encodes byte for byte.
type Header struct {
	BaseVersion   uint8
	MgmtClass     uint8
	ClassVersion  uint8
	Method        Method
	Status        uint16
	ClassSpecific uint16
	// TID is the transaction ID. A CM REQ, DREQ and SIDR_REQ start a
	// transaction; the MRA, REJ, REP and RTU of a connection reuse its
	// REQ's TID, a DREP its DREQ's, a SIDR_REP its SIDR_REQ's.
	TID     uint64
	AttrID  AttrID
	Resv    uint16 // reserved, zero on the wire
	AttrMod uint32 // for a REQ or REP, the ECE attribute modifier
}

const (
	hdrBaseVersion   = 0
	hdrMgmtClass     = 1
	hdrClassVersion  = 2
	hdrMethod        = 3
	hdrStatus        = 4
	hdrClassSpecific = 6
	hdrTID           = 8
	hdrAttrID        = 16
	hdrResv          = 18
	hdrAttrMod       = 20
)

// CMHeader returns the header the kernel's CM puts on a message: base
// version 1, class CM version 2, method Send, the given attribute and TID,
// status, class-specific field and attribute modifier zero.
func CMHeader(attr AttrID, tid uint64) Header {
	return Header{BaseVersion: BaseVersion, MgmtClass: MgmtClassCM, ClassVersion: CMClassVersion,
		Method: MethodSend, TID: tid, AttrID: attr}
}

// ParseHeader parses the header of mad, a whole MAD. It checks the length
// (exactly MADSize) and the base version (1), nothing that depends on the
// class. It does not allocate.
func ParseHeader(mad []byte) (Header, error) {
	if len(mad) != MADSize {
		return Header{}, errLength
	}
	h := Header{
		BaseVersion:   mad[hdrBaseVersion],
		MgmtClass:     mad[hdrMgmtClass],
		ClassVersion:  mad[hdrClassVersion],
		Method:        Method(mad[hdrMethod]),
		Status:        binary.BigEndian.Uint16(mad[hdrStatus:]),
		ClassSpecific: binary.BigEndian.Uint16(mad[hdrClassSpecific:]),
		TID:           binary.BigEndian.Uint64(mad[hdrTID:]),
		AttrID:        AttrID(binary.BigEndian.Uint16(mad[hdrAttrID:])),
		Resv:          binary.BigEndian.Uint16(mad[hdrResv:]),
		AttrMod:       binary.BigEndian.Uint32(mad[hdrAttrMod:]),
	}
	if h.BaseVersion != BaseVersion {
		return Header{}, errBaseVersion
	}
	return h, nil
}

// ParseCMHeader parses the header of a CM MAD: ParseHeader's checks, then
// management class CM, class version 2, method Send and one of the eleven
// CM attributes. These are the MADs the kernel's CM agent receives; the
// MAD layer drops the others before the CM sees them.
func ParseCMHeader(mad []byte) (Header, error) {
	h, err := ParseHeader(mad)
	switch {
	case err != nil:
		return Header{}, err
	case h.MgmtClass != MgmtClassCM:
		return Header{}, errNotCM
	case h.ClassVersion != CMClassVersion:
		return Header{}, errCMVersion
	case h.Method != MethodSend:
		return Header{}, errMethod
	case !h.AttrID.IsCM():
		return Header{}, errUnknownAttr
	}
	return h, nil
}

// Append appends the encoded header to b.
func (h *Header) Append(b []byte) []byte {
	b = append(b, h.BaseVersion, h.MgmtClass, h.ClassVersion, byte(h.Method))
	b = binary.BigEndian.AppendUint16(b, h.Status)
	b = binary.BigEndian.AppendUint16(b, h.ClassSpecific)
	b = binary.BigEndian.AppendUint64(b, h.TID)
	b = binary.BigEndian.AppendUint16(b, uint16(h.AttrID))
	b = binary.BigEndian.AppendUint16(b, h.Resv)
	return binary.BigEndian.AppendUint32(b, h.AttrMod)
}

// cmBody checks that mad is a CM MAD carrying attr and returns its body.
func cmBody(mad []byte, attr AttrID) ([]byte, error) {
	h, err := ParseCMHeader(mad)
	if err != nil {
		return nil, err
	}
	if h.AttrID != attr {
		return nil, errWrongAttr[int(attr)-attrFirst]
	}
	return mad[HeaderSize:MADSize:MADSize], nil
}
