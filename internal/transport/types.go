package transport

import (
	"errors"

	"github.com/goroce/goroce/internal/ibv"
)

// Memory resolves memory keys to bytes. It is the transport's only view of
// registered memory, so that the transport does not depend on the verbs
// package (which implements Memory over its MR and MW tables).
//
// Both methods return the bytes [va, va+length) of the registration, pinned
// until the returned Ref is released; the transport releases it as soon as
// it has copied, without doing I/O in between. On failure they return an
// error, preferably an AccessError so that counters can tell the reasons
// apart; any error is treated as an access fault.
type Memory interface {
	// Remote authorises an access by a remote peer: rkey must name a
	// registration in protection domain pd that grants need and holds the
	// whole range. A failure makes the responder NAK with a remote access
	// error.
	Remote(pd uint32, rkey uint32, va uint64, length uint32, need ibv.AccessFlags) ([]byte, Ref, error)
	// Local resolves a scatter/gather element of a local work request. A
	// failure completes the work request with LOC_PROT_ERR.
	Local(pd uint32, lkey uint32, addr uint64, length uint32, need ibv.AccessFlags) ([]byte, Ref, error)
}

// RemoteChecker is implemented by a Memory that can authorise a remote
// access without performing it: the responder checks the whole range of a
// WRITE with it on the message's first packet, before any packet stores.
// A Memory without it is asked with Remote and an immediate Release.
type RemoteChecker interface {
	CheckRemote(pd uint32, rkey uint32, va uint64, length uint32, need ibv.AccessFlags) error
}

// LocalRepinner is implemented by a Memory that can let a pin it gave cover
// a further access: before Local, the requester offers it the pin its
// Output took last, so that the packets of one message, or of a post
// list's messages from one buffer, share one pin (two atomic operations on
// a line every poster and responder touches) instead of taking one each.
type LocalRepinner interface {
	// LocalAgain returns the bytes [addr, addr+length) that lkey names,
	// as Local would, if held pins that very registration, still valid
	// (not revoked), and the access passes Local's checks (rights need);
	// ok is false otherwise. Nothing new is pinned: held, released later,
	// covers it.
	LocalAgain(held Ref, pd uint32, lkey uint32, addr uint64, length uint32, need ibv.AccessFlags) (b []byte, ok bool)
}

// Ref pins memory returned by Memory until Release.
type Ref interface{ Release() }

// RKeyInvalidator is implemented by a Memory that supports remote
// invalidation: the responder calls it for SEND_WITH_INVALIDATE. A Memory
// without it makes such sends fail with an invalid request NAK.
type RKeyInvalidator interface {
	InvalidateRKey(pd uint32, rkey uint32) error
}

// AccessError is the reason a Memory refuses an access. Returning one does
// not allocate.
type AccessError uint8

// Access faults.
const (
	ErrInvalidKey   AccessError = iota + 1 // no registration with this key
	ErrWrongPD                             // registration in another protection domain
	ErrAccessDenied                        // registration lacks a needed right
	ErrOutOfBounds                         // range outside the registration
)

func (e AccessError) Error() string {
	switch e {
	case ErrInvalidKey:
		return "transport: invalid memory key"
	case ErrWrongPD:
		return "transport: memory key of another protection domain"
	case ErrAccessDenied:
		return "transport: access not permitted by the memory region"
	case ErrOutOfBounds:
		return "transport: access outside the memory region"
	}
	return "transport: memory access fault"
}

// SGE is a scatter/gather element (struct ibv_sge): a range of registered
// local memory.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// supportedOpcode reports the send opcodes the transport implements.
func supportedOpcode(o ibv.WROpcode) bool {
	return o >= 0 && o <= ibv.WRSendWithInv || o == ibv.WRFlush || o == ibv.WRAtomicWrite
}

// isLocal reports the local operations (rxe WR_LOCAL_OP_MASK): executed by
// the requester when it reaches them, without a packet or a PSN, and
// completed in order behind the work requests posted before them.
func isLocal(o ibv.WROpcode) bool { return o == ibv.WRLocalInv || o == ibv.WRBindMW }

func isSend(o ibv.WROpcode) bool {
	return o == ibv.WRSend || o == ibv.WRSendWithImm || o == ibv.WRSendWithInv
}

func isWrite(o ibv.WROpcode) bool { return o == ibv.WRRDMAWrite || o == ibv.WRRDMAWriteWithImm }

func isAtomic(o ibv.WROpcode) bool { return o == ibv.WRAtomicCmpAndSwp || o == ibv.WRAtomicFetchAndAdd }

// isReadOrAtomic reports the operations answered with a response of their
// own rather than an ACK, which count against max_rd_atomic and are not
// acknowledged by a coalesced ACK: READ, the atomics, and FLUSH and
// ATOMIC_WRITE, which the responder answers with a zero-length READ
// response and keeps in its responder resources.
func isReadOrAtomic(o ibv.WROpcode) bool {
	return o == ibv.WRRDMARead || isAtomic(o) || o == ibv.WRFlush || o == ibv.WRAtomicWrite
}

// wcOpcode is the completion opcode of a send work request (rxe
// wr_to_wc_opcode).
func wcOpcode(o ibv.WROpcode) ibv.WCOpcode {
	switch o {
	case ibv.WRRDMAWrite, ibv.WRRDMAWriteWithImm:
		return ibv.WCRDMAWrite
	case ibv.WRRDMARead:
		return ibv.WCRDMARead
	case ibv.WRAtomicCmpAndSwp:
		return ibv.WCCompSwap
	case ibv.WRAtomicFetchAndAdd:
		return ibv.WCFetchAdd
	case ibv.WRLocalInv:
		return ibv.WCLocalInv
	case ibv.WRBindMW:
		return ibv.WCBindMW
	case ibv.WRFlush:
		return ibv.WCFlush
	case ibv.WRAtomicWrite:
		return ibv.WCAtomicWrite
	}
	return ibv.WCSend
}

// SendWQE is a send work request. PostSend copies it, its SGL and its
// inline data into a slot of the send queue, so the caller may reuse all of
// them as soon as PostSend returns.
type SendWQE struct {
	WRID   uint64
	Opcode ibv.WROpcode
	// SGL is the local memory to send from (SEND, WRITE) or to receive
	// into (READ; atomics: one 8-byte element for the original value).
	SGL []SGE
	// Inline is the payload of a send or write with SendInline: the bytes
	// themselves, copied at post time, instead of SGL.
	Inline []byte
	// RemoteAddr and RKey name the remote memory of a WRITE, READ or atomic.
	RemoteAddr uint64
	RKey       uint32
	Flags      ibv.SendFlags // beside RKey: the slot copied at post has no padding
	// CompareAdd is the compare value of a compare-and-swap and the addend
	// of a fetch-and-add; Swap is the swap value of a compare-and-swap.
	CompareAdd uint64
	Swap       uint64
	// Imm is the immediate data of the *_WITH_IMM opcodes: the 32 bits as
	// carried on the wire, read big-endian (wire.ImmDt).
	Imm uint32
	// InvalidateRKey is the rkey a SEND_WITH_INV invalidates at the
	// responder, or a LOCAL_INV locally.
	InvalidateRKey uint32
	// FlushLength, FlushType and FlushLevel describe a FLUSH of
	// [RemoteAddr, RemoteAddr+FlushLength) under RKey, with the placement
	// type and selectivity level of its FETH.
	FlushLength uint32
	FlushType   ibv.FlushType
	FlushLevel  ibv.FlushLevel
	// Bind is the memory window binding of a BIND_MW, executed through
	// the QP's Memory (LocalOps).
	Bind MWBind
	// RemoteQPN, RemoteQKey and Dest address a send on a UD QP: the
	// destination QP, its Q_Key (with the high bit set, the QP's own
	// Q_Key is sent instead, IBTA 10.2.5) and the opaque destination
	// tagged on the packet in place of the one given to SetDest.
	RemoteQPN  uint32
	RemoteQKey uint32
	Dest       any
}

// RecvWQE is a receive work request: the local memory an incoming SEND (or
// the immediate of an RDMA WRITE) is placed in. PostRecv copies it.
type RecvWQE struct {
	WRID uint64
	SGL  []SGE
}

// Completion is a work completion. For an unsuccessful completion only WRID,
// Status and QPN are meaningful, as in libibverbs.
type Completion struct {
	WRID   uint64
	Status ibv.WCStatus
	Opcode ibv.WCOpcode
	// ByteLen is the number of bytes received (receive completions) or
	// transferred (send completions).
	ByteLen         uint32
	Imm             uint32 // valid with WCWithImm
	InvalidatedRKey uint32 // valid with WCWithInv
	QPN             uint32 // the local QP
	SrcQP           uint32 // the remote QP (receive completions)
	Flags           ibv.WCFlags
	// Solicited reports a receive completion for a message whose last
	// packet had the solicited event bit set.
	Solicited bool
}

// SharedRecvQueue is where a QP attached to a shared receive queue takes
// its receive work requests from. SRQ implements it; so does the verbs
// package's SRQ, which adds resizing and the limit event. Several QPs take
// from one queue concurrently, so implementations lock.
type SharedRecvQueue interface {
	// TakeRecv moves the oldest receive work request into w: its WRID,
	// and its SGEs appended to w.SGL[:0], whose capacity is at least
	// MaxRecvSGE. It reports false if the queue is empty.
	TakeRecv(w *RecvWQE) bool
	// MaxRecvSGE returns the most SGEs a work request of the queue has.
	MaxRecvSGE() int
}

// CompletionQueue receives completions. Push copies *c (which is only valid
// during the call) and reports false if the queue is full; the transport
// then moves the QP to the error state, as an overflowed CQ does in IBTA.
type CompletionQueue interface {
	Push(c *Completion) (ok bool)
}

// Errors returned by PostSend, PostRecv and SRQ.PostRecv. They describe a
// work request the transport refused; nothing was queued.
var (
	ErrSendQueueFull = errors.New("transport: send queue full")
	ErrRecvQueueFull = errors.New("transport: receive queue full")
	ErrSRQFull       = errors.New("transport: shared receive queue full")
	ErrQPState       = errors.New("transport: work request not allowed in the QP's state")
	ErrTooManySGE    = errors.New("transport: more scatter/gather elements than max_sge")
	ErrInlineTooLong = errors.New("transport: inline data longer than max_inline_data")
	ErrBadOpcode     = errors.New("transport: opcode not supported on an RC QP")
	ErrBadAtomicSGL  = errors.New("transport: an atomic needs one 8-byte scatter/gather element")
	ErrTooLong       = errors.New("transport: message longer than 2^31 bytes")
	ErrNoRdAtomic    = errors.New("transport: READ or atomic on a QP with max_rd_atomic 0")
	ErrHasSRQ        = errors.New("transport: the QP receives from a shared receive queue")
	ErrBadAttr       = errors.New("transport: attribute value out of range")
)
