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
// they announce (at least one), credits none or one SGE, the reserved
// operations are refused. Unknown control values pass (rsockets ignores
// them, as keepalives).
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
	case opCtrl, opWrite, opIOMapSGL:
	default:
		return m, fmt.Errorf("%w: reserved operation %d", errProtocol, m.op)
	}
	return m, nil
}

// errProtocol is wrapped by the errors of a peer that breaks rsockets'
// rules (writes beyond its credits, reserved operations).
var errProtocol = errors.New("rsocket: protocol violation")
