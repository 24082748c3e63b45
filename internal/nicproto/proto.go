// Package nicproto is the contract between libgoroce.so, the C library that
// applications load to use goroce through the libibverbs ABI, and goroce-nic,
// the software NIC daemon that owns the goroce devices: the control messages
// exchanged on a SOCK_SEQPACKET Unix socket and the layout of the rings the
// two share in memory. libgoroce/src/proto.h is the C side of the same
// contract; TestLayoutMatchesC compiles it and compares every size and offset.
package nicproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Version is GR_PROTO_VERSION: a HELLO with another version is refused.
const Version = 2

// Limits shared with proto.h.
const (
	NameMax   = 64    // GR_NAME_MAX: device names, NUL-padded
	MaxMsg    = 65536 // GR_MAX_MSG: largest control message
	MaxFDs    = 32    // GR_MAX_FDS: file descriptors per message
	MaxPieces = 1000  // GR_MAX_PIECES: pieces of one registration
	MaxGIDs   = 4     // GR_MAX_GIDS: GID entries in an OPEN response
)

// Op is a control operation (enum gr_op).
type Op uint32

// Control operations, with the values of enum gr_op.
const (
	OpHello Op = iota + 1
	OpList
	OpEnsure
	OpOpen
	OpAllocPD
	OpDeallocPD
	OpRegMR
	OpDeregMR
	OpCreateChannel
	OpDestroyChannel
	OpCreateCQ
	OpDestroyCQ
	OpCreateSRQ
	OpModifySRQ
	OpQuerySRQ
	OpDestroySRQ
	OpCreateQP
	OpModifyQP
	OpQueryQP
	OpDestroyQP
	OpCreateAH
	OpDestroyAH
	OpReregMR
	OpResizeCQ
	OpAllocMW
	OpDeallocMW
	// The connection manager (librdmacm), on a session of its own: cm.go.
	OpCMCreateChannel
	OpCMDestroyChannel
	OpCMCreateID
	OpCMDestroyID
	OpCMBindAddr
	OpCMResolveAddr
	OpCMResolveRoute
	OpCMListen
	OpCMConnect
	OpCMAccept
	OpCMReject
	OpCMDisconnect
	OpCMEstablish
	OpCMInitQPAttr
	OpCMSetOption
	OpCMMigrate
	OpCMQuery
	opMax
)

var opNames = [...]string{"", "HELLO", "LIST", "ENSURE", "OPEN", "ALLOC_PD", "DEALLOC_PD",
	"REG_MR", "DEREG_MR", "CREATE_CHANNEL", "DESTROY_CHANNEL", "CREATE_CQ", "DESTROY_CQ",
	"CREATE_SRQ", "MODIFY_SRQ", "QUERY_SRQ", "DESTROY_SRQ", "CREATE_QP", "MODIFY_QP",
	"QUERY_QP", "DESTROY_QP", "CREATE_AH", "DESTROY_AH", "REREG_MR", "RESIZE_CQ", "ALLOC_MW", "DEALLOC_MW",
	"CM_CREATE_CHANNEL", "CM_DESTROY_CHANNEL", "CM_CREATE_ID", "CM_DESTROY_ID", "CM_BIND_ADDR",
	"CM_RESOLVE_ADDR", "CM_RESOLVE_ROUTE", "CM_LISTEN", "CM_CONNECT", "CM_ACCEPT", "CM_REJECT",
	"CM_DISCONNECT", "CM_ESTABLISH", "CM_INIT_QP_ATTR", "CM_SET_OPTION", "CM_MIGRATE", "CM_QUERY"}

// String returns the operation's name, e.g. "REG_MR".
func (o Op) String() string {
	if o > 0 && o < opMax {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint32(o))
}

// Valid reports whether o is a known operation.
func (o Op) Valid() bool { return o > 0 && o < opMax }

// HeaderSize is the encoded size of Header.
const HeaderSize = 16

// ErrShort reports a message shorter than its structures.
var ErrShort = errors.New("nicproto: message too short")

// ParseHeader decodes a message's header and checks it against the bytes
// received: the length must match and the operation be known.
func ParseHeader(msg []byte) (Header, error) {
	var h Header
	if len(msg) < HeaderSize {
		return h, ErrShort
	}
	h.Op = Op(binary.LittleEndian.Uint32(msg[0:]))
	h.Status = int32(binary.LittleEndian.Uint32(msg[4:]))
	h.Len = binary.LittleEndian.Uint32(msg[8:])
	h.NFDs = binary.LittleEndian.Uint32(msg[12:])
	if int(h.Len) != len(msg) {
		return h, fmt.Errorf("nicproto: header length %d, message %d bytes", h.Len, len(msg))
	}
	if !h.Op.Valid() {
		return h, fmt.Errorf("nicproto: unknown operation %d", uint32(h.Op))
	}
	return h, nil
}

// Decode reads the fixed-size structure v (a pointer) from body and returns
// the bytes after it.
func Decode(body []byte, v any) ([]byte, error) {
	n, err := binary.Decode(body, binary.LittleEndian, v)
	if err != nil {
		return nil, ErrShort
	}
	return body[n:], nil
}

// Message builds an outgoing message: a header and structures appended in order.
type Message struct {
	buf bytes.Buffer
}

// NewMessage starts a message for op with status (errno; 0 for requests
// and successful responses).
func NewMessage(op Op, status int32) *Message {
	m := &Message{}
	m.buf.Write(make([]byte, HeaderSize))
	b := m.buf.Bytes()
	binary.LittleEndian.PutUint32(b[0:], uint32(op))
	binary.LittleEndian.PutUint32(b[4:], uint32(status))
	return m
}

// Append encodes the fixed-size structures vs after what the message holds.
func (m *Message) Append(vs ...any) *Message {
	for _, v := range vs {
		if err := binary.Write(&m.buf, binary.LittleEndian, v); err != nil {
			panic(fmt.Sprintf("nicproto: %T is not a fixed-size structure: %v", v, err))
		}
	}
	return m
}

// Bytes finishes the message: nfds file descriptors will travel with it.
func (m *Message) Bytes(nfds int) []byte {
	b := m.buf.Bytes()
	binary.LittleEndian.PutUint32(b[8:], uint32(len(b)))
	binary.LittleEndian.PutUint32(b[12:], uint32(nfds))
	return b
}

// PutName copies a device name into a NUL-padded field.
func PutName(dst *[NameMax]byte, name string) {
	*dst = [NameMax]byte{}
	copy(dst[:NameMax-1], name)
}

// Name returns the NUL-terminated string of a name field.
func Name(b [NameMax]byte) string {
	if i := bytes.IndexByte(b[:], 0); i >= 0 {
		return string(b[:i])
	}
	return string(b[:])
}
