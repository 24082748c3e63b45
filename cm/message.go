package cm

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/verbs"
)

// Wire format of the connection manager's messages (all integers
// big-endian). Every message is a frame: an 8-byte header and a body of the
// length the header gives.
//
//	header  0  magic "GRCM"
//	        4  version (protocolVersion)
//	        5  type: REQ 1, REP 2, RTU 3, REJ 4, DREQ 5
//	        6  body length (uint16)
//
//	REQ, REP  0  QP type (enum ibv_qp_type)
//	          1  path MTU (enum ibv_mtu)
//	          2  responder resources
//	          3  initiator depth
//	          4  QP number (24 bits in 32)
//	          8  starting PSN (24 bits in 32)
//	         12  GID (16 bytes)
//	         28  UDP port of the device
//	         30  retry count
//	         31  RNR retry count
//	         32  min RNR timer
//	         33  local ACK timeout
//	         34  private data, to the end of the body
//
//	REJ       0  reason (uint16, IB CM REJ reason codes)
//	          2  info length n
//	          3  info: n bytes of text explaining the rejection
//	        3+n  private data, to the end of the body
//
//	RTU, DREQ    private data (empty when sent by this package)
//
// The header layout is the same in every version, so a receiver can tell
// a peer of another version from garbage and answer it with a REJ in a
// version it understands. Fields mirror the IB CM's REQ/REP/REJ (IBA vol. 1
// chapter 12) so that the same message struct can later travel in MADs on
// QP1; the REJ reasons already use the IB CM codes.

const (
	magic           = 0x4752434D // "GRCM"
	protocolVersion = 1
	headerLen       = 8

	connFixedLen = 34 // fixed part of a REQ or REP body
	rejFixedLen  = 3  // fixed part of a REJ body

	// maxInfoLen is the longest REJ info text (its length is one byte).
	maxInfoLen = 255

	// maxBodyLen bounds the body of any message: a REJ with the longest
	// info and private data. Longer frames are refused before their body
	// is read, so a peer cannot make the receiver allocate much.
	maxBodyLen = rejFixedLen + maxInfoLen + MaxPrivateData
)

// msgType is the type of a CM message. The names are the IB CM's.
type msgType uint8

const (
	msgREQ  msgType = 1 // connection request, active → passive
	msgREP  msgType = 2 // reply, passive → active
	msgRTU  msgType = 3 // ready to use, active → passive
	msgREJ  msgType = 4 // reject, either way
	msgDREQ msgType = 5 // disconnection request, either way
)

// String returns the IB CM name of the message type.
func (t msgType) String() string {
	switch t {
	case msgREQ:
		return "REQ"
	case msgREP:
		return "REP"
	case msgRTU:
		return "RTU"
	case msgREJ:
		return "REJ"
	case msgDREQ:
		return "DREQ"
	}
	return "msgType(" + strconv.Itoa(int(t)) + ")"
}

// message is one CM message, independent of how it travels. Which fields
// are meaningful depends on typ (see the wire format above).
type message struct {
	typ msgType

	// REQ and REP: the sender's QP and the connection it proposes (REQ)
	// or accepts (REP).
	qpType             verbs.QPType
	mtu                verbs.MTU
	responderResources uint8
	initiatorDepth     uint8
	qpn                uint32
	psn                uint32
	gid                verbs.GID
	udpPort            uint16
	retryCount         uint8
	rnrRetryCount      uint8
	minRNRTimer        uint8
	timeout            uint8

	// REJ.
	reason RejectReason
	info   string

	// Every type.
	privateData []byte
}

// bodyLen returns the length of m's encoded body.
func (m *message) bodyLen() int {
	switch m.typ {
	case msgREQ, msgREP:
		return connFixedLen + len(m.privateData)
	case msgREJ:
		return rejFixedLen + len(m.info) + len(m.privateData)
	}
	return len(m.privateData)
}

// append appends m's encoding to b. The caller keeps the fields within
// their wire sizes (private data up to MaxPrivateData, info up to
// maxInfoLen, QPN and PSN within 24 bits); encode checks them.
func (m *message) append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, magic)
	b = append(b, protocolVersion, byte(m.typ))
	b = binary.BigEndian.AppendUint16(b, uint16(m.bodyLen()))
	switch m.typ {
	case msgREQ, msgREP:
		b = append(b, byte(m.qpType), byte(m.mtu), m.responderResources, m.initiatorDepth)
		b = binary.BigEndian.AppendUint32(b, m.qpn)
		b = binary.BigEndian.AppendUint32(b, m.psn)
		b = append(b, m.gid[:]...)
		b = binary.BigEndian.AppendUint16(b, m.udpPort)
		b = append(b, m.retryCount, m.rnrRetryCount, m.minRNRTimer, m.timeout)
	case msgREJ:
		b = binary.BigEndian.AppendUint16(b, uint16(m.reason))
		b = append(b, byte(len(m.info)))
		b = append(b, m.info...)
	}
	return append(b, m.privateData...)
}

// encode returns m's encoding, or an error if a field does not fit its
// wire size.
func (m *message) encode() ([]byte, error) {
	switch {
	case m.typ < msgREQ || m.typ > msgDREQ:
		return nil, fmt.Errorf("cm: encode: unknown message type %v", m.typ)
	case len(m.privateData) > MaxPrivateData:
		return nil, fmt.Errorf("cm: encode %v: %d bytes of private data exceed %d", m.typ, len(m.privateData), MaxPrivateData)
	case len(m.info) > maxInfoLen:
		return nil, fmt.Errorf("cm: encode %v: %d bytes of info exceed %d", m.typ, len(m.info), maxInfoLen)
	case m.qpn > psn.Mask || m.psn > psn.Mask:
		return nil, fmt.Errorf("cm: encode %v: QPN %#x or PSN %#x exceeds 24 bits", m.typ, m.qpn, m.psn)
	}
	return m.append(make([]byte, 0, headerLen+m.bodyLen())), nil
}

// parseHeader checks a frame header and returns the message type and body
// length. A wrong magic is ErrProtocol (the peer does not speak this
// protocol); another version is ErrVersion, reported before the rest of the
// header is interpreted because its meaning may differ between versions.
func parseHeader(h []byte) (msgType, int, error) {
	if len(h) < headerLen {
		return 0, 0, fmt.Errorf("%w: %d-byte header, want %d", ErrProtocol, len(h), headerLen)
	}
	if m := binary.BigEndian.Uint32(h); m != magic {
		return 0, 0, fmt.Errorf("%w: bad magic %#08x: not a goroce CM peer", ErrProtocol, m)
	}
	if v := h[4]; v != protocolVersion {
		return 0, 0, fmt.Errorf("%w: peer speaks version %d, this side %d", ErrVersion, v, protocolVersion)
	}
	typ := msgType(h[5])
	n := int(binary.BigEndian.Uint16(h[6:]))
	lo, hi := 0, MaxPrivateData
	switch typ {
	case msgREQ, msgREP:
		lo, hi = connFixedLen, connFixedLen+MaxPrivateData
	case msgREJ:
		lo, hi = rejFixedLen, maxBodyLen
	case msgRTU, msgDREQ:
	default:
		return 0, 0, fmt.Errorf("%w: unknown message type %d", ErrProtocol, h[5])
	}
	if n < lo || n > hi {
		return 0, 0, fmt.Errorf("%w: %v body of %d bytes, want %d..%d", ErrProtocol, typ, n, lo, hi)
	}
	return typ, n, nil
}

// decodeBody decodes the body of a message of type typ. The message's
// private data aliases body.
func decodeBody(typ msgType, body []byte) (message, error) {
	m := message{typ: typ}
	switch typ {
	case msgREQ, msgREP:
		if len(body) < connFixedLen {
			return message{}, fmt.Errorf("%w: %v body of %d bytes, want at least %d", ErrProtocol, typ, len(body), connFixedLen)
		}
		m.qpType = verbs.QPType(body[0])
		m.mtu = verbs.MTU(body[1])
		m.responderResources = body[2]
		m.initiatorDepth = body[3]
		m.qpn = binary.BigEndian.Uint32(body[4:])
		m.psn = binary.BigEndian.Uint32(body[8:])
		copy(m.gid[:], body[12:28])
		m.udpPort = binary.BigEndian.Uint16(body[28:])
		m.retryCount, m.rnrRetryCount, m.minRNRTimer, m.timeout = body[30], body[31], body[32], body[33]
		if m.qpn > psn.Mask || m.psn > psn.Mask {
			return message{}, fmt.Errorf("%w: %v QPN %#x or PSN %#x exceeds 24 bits", ErrProtocol, typ, m.qpn, m.psn)
		}
		body = body[connFixedLen:]
	case msgREJ:
		if len(body) < rejFixedLen || len(body) < rejFixedLen+int(body[2]) {
			return message{}, fmt.Errorf("%w: REJ body of %d bytes is too short", ErrProtocol, len(body))
		}
		m.reason = RejectReason(binary.BigEndian.Uint16(body))
		n := int(body[2])
		m.info = string(body[rejFixedLen : rejFixedLen+n])
		body = body[rejFixedLen+n:]
	}
	if len(body) > MaxPrivateData {
		return message{}, fmt.Errorf("%w: %v carries %d bytes of private data, at most %d", ErrProtocol, typ, len(body), MaxPrivateData)
	}
	if len(body) > 0 {
		m.privateData = body
	}
	return m, nil
}

// decodeMessage decodes one complete frame: a header and exactly the body
// it announces. The message's private data aliases b.
func decodeMessage(b []byte) (message, error) {
	typ, n, err := parseHeader(b)
	if err != nil {
		return message{}, err
	}
	if len(b) != headerLen+n {
		return message{}, fmt.Errorf("%w: %v frame of %d bytes announces a %d-byte body", ErrProtocol, typ, len(b), n)
	}
	return decodeBody(typ, b[headerLen:])
}
