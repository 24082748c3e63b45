package transport

import "errors"

// Access is a set of access rights, with the values of enum ibv_access_flags.
// It is both what a memory access needs (Memory) and what a QP's responder
// allows for incoming RDMA operations (QP.SetAccessFlags).
type Access uint32

// Access rights, with the libibverbs values.
const (
	AccessLocalWrite   Access = 1 << 0 // IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite  Access = 1 << 1 // IBV_ACCESS_REMOTE_WRITE
	AccessRemoteRead   Access = 1 << 2 // IBV_ACCESS_REMOTE_READ
	AccessRemoteAtomic Access = 1 << 3 // IBV_ACCESS_REMOTE_ATOMIC
	AccessZeroBased    Access = 1 << 5 // IBV_ACCESS_ZERO_BASED (memory windows)

	// AccessFlushGlobal and AccessFlushPersistent allow a FLUSH of the
	// corresponding placement type (IBA 1.5 FLUSH; rxe checks them on the
	// QP's access flags and on the memory region).
	AccessFlushGlobal     Access = 1 << 8 // IBV_ACCESS_FLUSH_GLOBAL
	AccessFlushPersistent Access = 1 << 9 // IBV_ACCESS_FLUSH_PERSISTENT
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
	Remote(pd uint32, rkey uint32, va uint64, length uint32, need Access) ([]byte, Ref, error)
	// Local resolves a scatter/gather element of a local work request. A
	// failure completes the work request with LOC_PROT_ERR.
	Local(pd uint32, lkey uint32, addr uint64, length uint32, need Access) ([]byte, Ref, error)
}

// RemoteChecker is implemented by a Memory that can authorise a remote
// access without performing it: the responder checks the whole range of a
// WRITE with it on the message's first packet, before any packet stores.
// A Memory without it is asked with Remote and an immediate Release.
type RemoteChecker interface {
	CheckRemote(pd uint32, rkey uint32, va uint64, length uint32, need Access) error
}

// Ref pins memory returned by Memory until Release.
type Ref interface{ Release() }

// HoldableRef is implemented by a Ref that may stay pinned until the
// Output that holds it is reset (Output.SetZeroCopy), after the packets
// built since are sent, when Holdable reports true. Memory whose
// revocation the receive path itself can wait for (a memory window that a
// later SEND_WITH_INVALIDATE of the same batch invalidates) must report
// false: that wait would never end. Without the method a Ref is not held.
type HoldableRef interface {
	Ref
	Holdable() bool
}

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

// WROpcode is the operation of a send work request, with the values of enum
// ibv_wr_opcode.
type WROpcode uint8

// Send work request opcodes supported by the RC transport.
const (
	WRRDMAWrite        WROpcode = 0  // IBV_WR_RDMA_WRITE
	WRRDMAWriteWithImm WROpcode = 1  // IBV_WR_RDMA_WRITE_WITH_IMM
	WRSend             WROpcode = 2  // IBV_WR_SEND
	WRSendWithImm      WROpcode = 3  // IBV_WR_SEND_WITH_IMM
	WRRDMARead         WROpcode = 4  // IBV_WR_RDMA_READ
	WRAtomicCmpAndSwp  WROpcode = 5  // IBV_WR_ATOMIC_CMP_AND_SWP
	WRAtomicFetchAdd   WROpcode = 6  // IBV_WR_ATOMIC_FETCH_AND_ADD
	WRLocalInv         WROpcode = 7  // IBV_WR_LOCAL_INV (a local operation)
	WRBindMW           WROpcode = 8  // IBV_WR_BIND_MW (a local operation)
	WRSendWithInv      WROpcode = 9  // IBV_WR_SEND_WITH_INV
	WRFlush            WROpcode = 14 // IBV_WR_FLUSH
	WRAtomicWrite      WROpcode = 15 // IBV_WR_ATOMIC_WRITE
)

var wrOpcodeNames = [...]string{
	WRRDMAWrite:        "RDMA_WRITE",
	WRRDMAWriteWithImm: "RDMA_WRITE_WITH_IMM",
	WRSend:             "SEND",
	WRSendWithImm:      "SEND_WITH_IMM",
	WRRDMARead:         "RDMA_READ",
	WRAtomicCmpAndSwp:  "ATOMIC_CMP_AND_SWP",
	WRAtomicFetchAdd:   "ATOMIC_FETCH_AND_ADD",
	WRLocalInv:         "LOCAL_INV",
	WRBindMW:           "BIND_MW",
	WRSendWithInv:      "SEND_WITH_INV",
	WRFlush:            "FLUSH",
	WRAtomicWrite:      "ATOMIC_WRITE",
}

// String returns the IBV_WR_ name without its prefix, e.g. "RDMA_READ".
func (o WROpcode) String() string {
	if int(o) < len(wrOpcodeNames) && wrOpcodeNames[o] != "" {
		return wrOpcodeNames[o]
	}
	return "WR_OPCODE(" + itoa(uint64(o)) + ")"
}

func (o WROpcode) valid() bool {
	return o <= WRSendWithInv || o == WRFlush || o == WRAtomicWrite
}

// isLocal reports the local operations (rxe WR_LOCAL_OP_MASK): executed by
// the requester when it reaches them, without a packet or a PSN, and
// completed in order behind the work requests posted before them.
func (o WROpcode) isLocal() bool { return o == WRLocalInv || o == WRBindMW }

func (o WROpcode) isSend() bool {
	return o == WRSend || o == WRSendWithImm || o == WRSendWithInv
}

func (o WROpcode) isWrite() bool { return o == WRRDMAWrite || o == WRRDMAWriteWithImm }

func (o WROpcode) isAtomic() bool { return o == WRAtomicCmpAndSwp || o == WRAtomicFetchAdd }

// isReadOrAtomic reports the operations answered with a response of their
// own rather than an ACK, which count against max_rd_atomic and are not
// acknowledged by a coalesced ACK: READ, the atomics, and FLUSH and
// ATOMIC_WRITE, which the responder answers with a zero-length READ
// response and keeps in its responder resources.
func (o WROpcode) isReadOrAtomic() bool {
	return o == WRRDMARead || o.isAtomic() || o == WRFlush || o == WRAtomicWrite
}

// wcOpcode is the completion opcode of a send work request (rxe
// wr_to_wc_opcode).
func (o WROpcode) wcOpcode() WCOpcode {
	switch o {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	case WRAtomicFetchAdd:
		return WCFetchAdd
	case WRLocalInv:
		return WCLocalInv
	case WRBindMW:
		return WCBindMW
	case WRFlush:
		return WCFlush
	case WRAtomicWrite:
		return WCAtomicWrite
	}
	return WCSend
}

// SendFlags are the flags of a send work request (enum ibv_send_flags).
type SendFlags uint8

// Send flags, with the libibverbs values.
const (
	SendFence     SendFlags = 1 << 0 // IBV_SEND_FENCE
	SendSignaled  SendFlags = 1 << 1 // IBV_SEND_SIGNALED
	SendSolicited SendFlags = 1 << 2 // IBV_SEND_SOLICITED
	SendInline    SendFlags = 1 << 3 // IBV_SEND_INLINE
)

// SendWQE is a send work request. PostSend copies it, its SGL and its
// inline data into a slot of the send queue, so the caller may reuse all of
// them as soon as PostSend returns.
type SendWQE struct {
	WRID   uint64
	Opcode WROpcode
	Flags  SendFlags
	// SGL is the local memory to send from (SEND, WRITE) or to receive
	// into (READ; atomics: one 8-byte element for the original value).
	SGL []SGE
	// Inline is the payload of a send or write with SendInline: the bytes
	// themselves, copied at post time, instead of SGL.
	Inline []byte
	// RemoteAddr and RKey name the remote memory of a WRITE, READ or atomic.
	RemoteAddr uint64
	RKey       uint32
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
	// [RemoteAddr, RemoteAddr+FlushLength) under RKey: the placement type
	// (wire.FlushGlobalVisibility, wire.FlushPersistence) and the
	// selectivity level (wire.FlushRange, wire.FlushMemoryRegion) of its
	// FETH.
	FlushLength uint32
	FlushType   uint8
	FlushLevel  uint8
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

// Status is the status of a completion, with the values of enum
// ibv_wc_status.
type Status uint8

// Completion statuses, with the libibverbs values.
const (
	StatusSuccess        Status = 0  // IBV_WC_SUCCESS
	StatusLocLenErr      Status = 1  // IBV_WC_LOC_LEN_ERR
	StatusLocQPOpErr     Status = 2  // IBV_WC_LOC_QP_OP_ERR
	StatusLocEECOpErr    Status = 3  // IBV_WC_LOC_EEC_OP_ERR
	StatusLocProtErr     Status = 4  // IBV_WC_LOC_PROT_ERR
	StatusWRFlushErr     Status = 5  // IBV_WC_WR_FLUSH_ERR
	StatusMWBindErr      Status = 6  // IBV_WC_MW_BIND_ERR
	StatusBadRespErr     Status = 7  // IBV_WC_BAD_RESP_ERR
	StatusLocAccessErr   Status = 8  // IBV_WC_LOC_ACCESS_ERR
	StatusRemInvReqErr   Status = 9  // IBV_WC_REM_INV_REQ_ERR
	StatusRemAccessErr   Status = 10 // IBV_WC_REM_ACCESS_ERR
	StatusRemOpErr       Status = 11 // IBV_WC_REM_OP_ERR
	StatusRetryExcErr    Status = 12 // IBV_WC_RETRY_EXC_ERR
	StatusRNRRetryExcErr Status = 13 // IBV_WC_RNR_RETRY_EXC_ERR
	StatusFatalErr       Status = 19 // IBV_WC_FATAL_ERR
	StatusGeneralErr     Status = 21 // IBV_WC_GENERAL_ERR
)

var statusNames = [...]string{
	StatusSuccess:        "SUCCESS",
	StatusLocLenErr:      "LOC_LEN_ERR",
	StatusLocQPOpErr:     "LOC_QP_OP_ERR",
	StatusLocEECOpErr:    "LOC_EEC_OP_ERR",
	StatusLocProtErr:     "LOC_PROT_ERR",
	StatusWRFlushErr:     "WR_FLUSH_ERR",
	StatusMWBindErr:      "MW_BIND_ERR",
	StatusBadRespErr:     "BAD_RESP_ERR",
	StatusLocAccessErr:   "LOC_ACCESS_ERR",
	StatusRemInvReqErr:   "REM_INV_REQ_ERR",
	StatusRemAccessErr:   "REM_ACCESS_ERR",
	StatusRemOpErr:       "REM_OP_ERR",
	StatusRetryExcErr:    "RETRY_EXC_ERR",
	StatusRNRRetryExcErr: "RNR_RETRY_EXC_ERR",
	StatusFatalErr:       "FATAL_ERR",
	StatusGeneralErr:     "GENERAL_ERR",
}

// String returns the IBV_WC_ name without its prefix, e.g. "WR_FLUSH_ERR".
func (s Status) String() string {
	if int(s) < len(statusNames) && statusNames[s] != "" {
		return statusNames[s]
	}
	return "STATUS(" + itoa(uint64(s)) + ")"
}

// WCOpcode is the operation a completion reports, with the values of enum
// ibv_wc_opcode.
type WCOpcode uint8

// Completion opcodes, with the libibverbs values.
const (
	WCSend            WCOpcode = 0   // IBV_WC_SEND
	WCRDMAWrite       WCOpcode = 1   // IBV_WC_RDMA_WRITE
	WCRDMARead        WCOpcode = 2   // IBV_WC_RDMA_READ
	WCCompSwap        WCOpcode = 3   // IBV_WC_COMP_SWAP
	WCFetchAdd        WCOpcode = 4   // IBV_WC_FETCH_ADD
	WCBindMW          WCOpcode = 5   // IBV_WC_BIND_MW
	WCLocalInv        WCOpcode = 6   // IBV_WC_LOCAL_INV
	WCFlush           WCOpcode = 8   // IBV_WC_FLUSH
	WCAtomicWrite     WCOpcode = 9   // IBV_WC_ATOMIC_WRITE
	WCRecv            WCOpcode = 128 // IBV_WC_RECV
	WCRecvRDMAWithImm WCOpcode = 129 // IBV_WC_RECV_RDMA_WITH_IMM
)

// String returns the IBV_WC_ name without its prefix, e.g. "RECV".
func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCFlush:
		return "FLUSH"
	case WCAtomicWrite:
		return "ATOMIC_WRITE"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return "WC_OPCODE(" + itoa(uint64(o)) + ")"
}

// WCFlags are the flags of a completion (enum ibv_wc_flags).
type WCFlags uint8

// Completion flags, with the libibverbs values.
const (
	WCGRH     WCFlags = 1 << 0 // IBV_WC_GRH: a GRH precedes the payload (UD)
	WCWithImm WCFlags = 1 << 1 // IBV_WC_WITH_IMM
	WCWithInv WCFlags = 1 << 3 // IBV_WC_WITH_INV
)

// Completion is a work completion. For an unsuccessful completion only WRID,
// Status and QPN are meaningful, as in libibverbs.
type Completion struct {
	WRID   uint64
	Status Status
	Opcode WCOpcode
	// ByteLen is the number of bytes received (receive completions) or
	// transferred (send completions).
	ByteLen         uint32
	Imm             uint32 // valid with WCWithImm
	InvalidatedRKey uint32 // valid with WCWithInv
	QPN             uint32 // the local QP
	SrcQP           uint32 // the remote QP (receive completions)
	Flags           WCFlags
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

// itoa formats v without fmt, for String methods.
func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return string(b[i:])
}
