package rsocket

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The bytes rsockets exchanges, apart from the state that uses them: the
// connect private data (struct rs_conn_data), the 32-bit messages carried
// as immediate data, and the SGEs one side writes into the other's target
// SGL ring.

// connDataLen is the size of struct rs_conn_data: version, flags, credits,
// three reserved bytes, the iomap size, then two SGEs.
const connDataLen = 40

// sgeLen is the size of struct rs_sge on the wire: a 64-bit address, a
// 32-bit key and a 32-bit length, in that order.
const sgeLen = 16

// connVersion is the only version of rs_conn_data there is.
const connVersion = 1

// rs_conn_data flags. connFlagNet says the side's host is big-endian: the
// SGEs it writes into the peer's target SGL ring are in its host order,
// and a peer of the other order swaps those it writes (RS_OPT_SWAP_SGL).
// connFlagIOMap says target_iomap_size is meaningful.
const (
	connFlagNet   = 1 << 0
	connFlagIOMap = 1 << 1
)

// errBadConnData is wrapped by every error parseConnData returns.
var errBadConnData = errors.New("rsocket: bad connection data")

// sge is struct rs_sge: a region of the peer's memory.
type sge struct {
	addr   uint64
	key    uint32
	length uint32
}

// connData is struct rs_conn_data. Its multi-byte fields travel big-endian
// whatever the hosts' order; only the SGEs written later into the target
// SGL ring are in host order (connFlagNet).
type connData struct {
	version   uint8
	flags     uint8
	credits   uint16 // receive work requests the side posted: its rq_size
	iomapSize uint8  // target_iomap_size, scaled (rs_value_to_scale, 8 bits)
	targetSGL sge    // where the peer writes SGEs for this side (length: entries)
	dataBuf   sge    // the first region of this side's receive buffer
}

// parseConnData reads the rs_conn_data at the start of b (a REQ's or REP's
// private data, zero-padded by the CM). It refuses a short b, a version
// other than 1, a target SGL ring without entries and an empty data
// buffer: rsockets checks the version only, and would then write nowhere.
func parseConnData(b []byte) (connData, error) {
	var c connData
	if len(b) < connDataLen {
		return c, fmt.Errorf("%w: %d bytes, want %d", errBadConnData, len(b), connDataLen)
	}
	c.version, c.flags = b[0], b[1]
	c.credits = binary.BigEndian.Uint16(b[2:])
	c.iomapSize = b[7]
	c.targetSGL = getSGE(b[8:], true)
	c.dataBuf = getSGE(b[24:], true)
	switch {
	case c.version != connVersion:
		return c, fmt.Errorf("%w: version %d, want %d", errBadConnData, c.version, connVersion)
	case c.targetSGL.length == 0:
		return c, fmt.Errorf("%w: target SGL ring of no entries", errBadConnData)
	case c.dataBuf.length == 0:
		return c, fmt.Errorf("%w: empty data buffer", errBadConnData)
	case c.credits == 0:
		return c, fmt.Errorf("%w: no credits", errBadConnData)
	}
	return c, nil
}

// append appends c's 40 bytes to b.
func (c *connData) append(b []byte) []byte {
	b = append(b, c.version, c.flags)
	b = binary.BigEndian.AppendUint16(b, c.credits)
	b = append(b, 0, 0, 0, c.iomapSize)
	b = appendSGE(b, c.targetSGL, true)
	return appendSGE(b, c.dataBuf, true)
}

// getSGE reads an rs_sge, big-endian or little-endian.
func getSGE(b []byte, bigEndian bool) sge {
	var o binary.ByteOrder = binary.LittleEndian
	if bigEndian {
		o = binary.BigEndian
	}
	return sge{addr: o.Uint64(b), key: o.Uint32(b[8:]), length: o.Uint32(b[12:])}
}

// appendSGE appends an rs_sge, big-endian or little-endian.
func appendSGE(b []byte, s sge, bigEndian bool) []byte {
	var o binary.AppendByteOrder = binary.LittleEndian
	if bigEndian {
		o = binary.BigEndian
	}
	b = o.AppendUint64(b, s.addr)
	b = o.AppendUint32(b, s.key)
	return o.AppendUint32(b, s.length)
}

// ioMapLen is the size of struct rs_iomap: the offset the mapping
// answers to (riomap's offset), then its rs_sge.
const ioMapLen = 8 + sgeLen

// maxIOMapEntries is the largest iomap table rs_conn_data can announce:
// target_iomap_size is 8 bits, values above 128 scaled by 256.
const maxIOMapEntries = 0x7f << 8

// ioMap is struct rs_iomap: a region of the peer's memory that riowrite
// (Conn.IOWrite) addresses by offset, the peer's choice of numbers.
type ioMap struct {
	offset uint64
	region sge
}

// parseIOMap reads the rs_iomap a peer wrote into this side's iomap table,
// in this side's byte order (little-endian: the order goroce announces).
// It refuses an empty region and one whose offsets or addresses wrap, so
// that covers and the write address computed from it never overflow.
func parseIOMap(b []byte) (ioMap, error) {
	var m ioMap
	if len(b) < ioMapLen {
		return m, fmt.Errorf("%w: iomap entry of %d bytes", errProtocol, len(b))
	}
	m.offset = binary.LittleEndian.Uint64(b)
	m.region = getSGE(b[8:], false)
	n := uint64(m.region.length)
	switch {
	case n == 0:
		return m, fmt.Errorf("%w: empty iomap entry", errProtocol)
	case m.offset+n < m.offset || m.region.addr+n < m.region.addr:
		return m, fmt.Errorf("%w: iomap entry wraps (offset %#x, address %#x, %d bytes)", errProtocol, m.offset, m.region.addr, n)
	}
	return m, nil
}

// covers says whether the mapping holds the byte at offset off.
func (m *ioMap) covers(off uint64) bool {
	return m.region.length != 0 && off >= m.offset && off-m.offset < uint64(m.region.length)
}

// appendIOMap appends an rs_iomap, big-endian or little-endian.
func appendIOMap(b []byte, m ioMap, bigEndian bool) []byte {
	if bigEndian {
		b = binary.BigEndian.AppendUint64(b, m.offset)
	} else {
		b = binary.LittleEndian.AppendUint64(b, m.offset)
	}
	return appendSGE(b, m.region, bigEndian)
}

// toScale and fromScale are rs_value_to_scale and rs_scale_to_value for
// 8 bits, the encoding of target_iomap_size: up to 128 as is, above in
// units of 256 with the top bit set.
func toScale(v int) uint8 {
	if v <= 1<<7 {
		return uint8(v)
	}
	return uint8(1<<7 | v>>8)
}

func fromScale(s uint8) int {
	if s <= 1<<7 {
		return int(s)
	}
	return int(s&^(1<<7)) << 8
}

// The messages rsockets carries in the 32 bits of immediate data: an
// operation in the top 3 bits, 29 bits of data (rs_msg_set).
const (
	opData      = 0 // data written into the receive buffer; data: its length
	opWrite     = 2 // riowrite into a mapped region (never on the wire as such)
	opSGL       = 4 // credits: data is the send sequence number allowed next
	opIOMapSGL  = 6 // an iomap entry was written
	opCtrl      = 7 // control: data is ctrlDisconnect, ctrlKeepalive or ctrlShutdown
	msgDataMask = 1<<29 - 1
)

// Control messages (enum RS_CTRL_*).
const (
	ctrlDisconnect = 0
	ctrlKeepalive  = 1
	ctrlShutdown   = 2
)

// msg builds the immediate data of an operation.
func msg(op, data uint32) uint32 { return op<<29 | data&msgDataMask }

// msgOp and msgData split one.
func msgOp(m uint32) uint32   { return m >> 29 }
func msgData(m uint32) uint32 { return m & msgDataMask }

// peerMsg is a message from the peer: its immediate data split, and for
// RS_OP_SGL whether the write carried an SGE for the target ring.
type peerMsg struct {
	op, data uint32
	region   bool
}

// parseMsg checks a message the peer wrote with immediate data against
// the length of its write (byteLen): data messages carry as many bytes as
// they announce (at least one), credits none or one SGE, iomap updates
// one rs_iomap, the reserved operations are refused. Unknown control
// values pass (rsockets ignores them, as keepalives).
func parseMsg(imm, byteLen uint32) (peerMsg, error) {
	m := peerMsg{op: msgOp(imm), data: msgData(imm)}
	switch m.op {
	case opData:
		if m.data == 0 || byteLen != m.data {
			return m, fmt.Errorf("%w: data message of %d bytes announcing %d", errProtocol, byteLen, m.data)
		}
	case opSGL:
		if byteLen != 0 && byteLen != sgeLen {
			return m, fmt.Errorf("%w: credits with %d bytes", errProtocol, byteLen)
		}
		m.region = byteLen == sgeLen
	case opIOMapSGL:
		if byteLen != ioMapLen {
			return m, fmt.Errorf("%w: iomap entry with %d bytes", errProtocol, byteLen)
		}
	case opCtrl, opWrite:
	default:
		return m, fmt.Errorf("%w: reserved operation %d", errProtocol, m.op)
	}
	return m, nil
}

// errProtocol is wrapped by the errors of a peer that breaks rsockets'
// rules (writes beyond its credits, reserved operations).
var errProtocol = errors.New("rsocket: protocol violation")
