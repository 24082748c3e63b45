package verbs

import "github.com/goroce/goroce/internal/ibv"

// SGE is a scatter/gather entry (struct ibv_sge): Length bytes at address
// Addr of the memory region with local key LKey. Addr is in the region's
// IOVA space (MR.IOVA() + offset); MR.SGE builds one. Keys and bounds are
// checked when the device uses the entry, as hardware does, and a bad entry
// completes the work request with a local protection or length error.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// RecvWR is a receive work request (struct ibv_recv_wr): where to scatter
// the next incoming message. The SGEs are copied when posted.
type RecvWR struct {
	WRID   uint64
	SGList []SGE
}

// WROpcode is a send work request's operation (enum ibv_wr_opcode). Its
// String method returns the text of ibv_wr_opcode_str, e.g. "rdma-write".
type WROpcode = ibv.WROpcode

// Send opcodes, with the libibverbs values.
const (
	WRRDMAWrite         WROpcode = ibv.WRRDMAWrite         // IBV_WR_RDMA_WRITE (RC, UC)
	WRRDMAWriteWithImm  WROpcode = ibv.WRRDMAWriteWithImm  // IBV_WR_RDMA_WRITE_WITH_IMM (RC, UC)
	WRSend              WROpcode = ibv.WRSend              // IBV_WR_SEND (RC, UC, UD)
	WRSendWithImm       WROpcode = ibv.WRSendWithImm       // IBV_WR_SEND_WITH_IMM (RC, UC, UD)
	WRRDMARead          WROpcode = ibv.WRRDMARead          // IBV_WR_RDMA_READ (RC)
	WRAtomicCmpAndSwp   WROpcode = ibv.WRAtomicCmpAndSwp   // IBV_WR_ATOMIC_CMP_AND_SWP (RC)
	WRAtomicFetchAndAdd WROpcode = ibv.WRAtomicFetchAndAdd // IBV_WR_ATOMIC_FETCH_AND_ADD (RC)
	WRLocalInv          WROpcode = ibv.WRLocalInv          // IBV_WR_LOCAL_INV (RC)
	WRBindMW            WROpcode = ibv.WRBindMW            // IBV_WR_BIND_MW (RC, UC)
	WRSendWithInv       WROpcode = ibv.WRSendWithInv       // IBV_WR_SEND_WITH_INV (RC, UC)
	WRTSO               WROpcode = ibv.WRTSO               // IBV_WR_TSO (RAW_PACKET only; not supported)
	WRDriver1           WROpcode = ibv.WRDriver1           // IBV_WR_DRIVER1 (not supported)
	WRFlush             WROpcode = ibv.WRFlush             // IBV_WR_FLUSH (RC)
	WRAtomicWrite       WROpcode = ibv.WRAtomicWrite       // IBV_WR_ATOMIC_WRITE (RC)
)

// SendFlags modify a send work request (enum ibv_send_flags).
type SendFlags = ibv.SendFlags

// Send flags, with the libibverbs values.
const (
	// SendFence (IBV_SEND_FENCE) waits for earlier RDMA READs and
	// atomics to complete.
	SendFence SendFlags = ibv.SendFence
	// SendSignaled (IBV_SEND_SIGNALED) asks for a completion; without it
	// (and without QPInitAttr.SQSigAll) a successful work request
	// completes silently.
	SendSignaled SendFlags = ibv.SendSignaled
	// SendSolicited (IBV_SEND_SOLICITED) sets the Solicited Event bit,
	// which wakes a receiver armed with ReqNotify(true).
	SendSolicited SendFlags = ibv.SendSolicited
	// SendInline (IBV_SEND_INLINE) copies the data into the work request
	// at post time, so the buffer may be reused as soon as PostSend
	// returns. The SGEs must still name registered memory (Go has no raw
	// pointers to read), but no access right is needed.
	SendInline SendFlags = ibv.SendInline
	// SendIPCsum (IBV_SEND_IP_CSUM) asks for checksum offload
	// (RAW_PACKET/UD; not supported).
	SendIPCsum SendFlags = ibv.SendIPCsum

	sendFlagsKnown = SendFence | SendSignaled | SendSolicited | SendInline | SendIPCsum
)

// RDMAParams are the remote side of an RDMA READ or WRITE.
type RDMAParams struct {
	RemoteAddr uint64 // in the remote region's IOVA space
	RKey       uint32
}

// AtomicParams are the operands of a compare-and-swap or fetch-and-add.
type AtomicParams struct {
	RemoteAddr uint64 // 8-byte aligned, in the remote region's IOVA space
	CompareAdd uint64 // compare value (CAS) or addend (FAA)
	Swap       uint64 // swap value (CAS)
	RKey       uint32
}

// UDParams address a UD send.
type UDParams struct {
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32 // with the high bit set, the QP's own Q_Key is used
}

// FlushType is the placement type of a FLUSH (enum ibv_placement_type): a
// set of bits.
type FlushType = ibv.FlushType

// FLUSH placement types, with the libibverbs values.
const (
	FlushGlobal     FlushType = ibv.FlushGlobal     // IBV_FLUSH_GLOBAL: global visibility
	FlushPersistent FlushType = ibv.FlushPersistent // IBV_FLUSH_PERSISTENT: persistence
)

// FlushLevel is the selectivity level of a FLUSH (enum
// ibv_selectivity_level).
type FlushLevel = ibv.FlushLevel

// FLUSH selectivity levels, with the libibverbs values.
const (
	FlushRange FlushLevel = ibv.FlushRange // IBV_FLUSH_RANGE: [RemoteAddr, RemoteAddr+Length)
	FlushMR    FlushLevel = ibv.FlushMR    // IBV_FLUSH_MR: the whole region (or window) of RKey
)

// FlushParams are the operands of a FLUSH (ibv_wr_flush's arguments). The
// target's memory must grant the rights of Type: AccessFlushGlobal for
// FlushGlobal, AccessFlushPersistent for FlushPersistent, and so must the
// target QP's access flags; otherwise the FLUSH completes with
// WCRemAccessErr (memory) or WCRemInvReqErr (QP).
type FlushParams struct {
	RemoteAddr uint64
	RKey       uint32
	Length     uint32 // at most 2^31; ignored with FlushMR
	Type       FlushType
	Level      FlushLevel
}

// SendWR is a send work request (struct ibv_send_wr). Which fields matter
// depends on Opcode: RDMA for READ and WRITE, Atomic for the atomics, UD for
// sends on a UD QP, ImmData for the *_WITH_IMM opcodes, InvalidateRKey for
// SEND_WITH_INV and LOCAL_INV, BindMW for BIND_MW, Flush for FLUSH.
//
// ATOMIC_WRITE (ibv_wr_atomic_write) takes its target from RDMA, which
// must be 8-byte aligned, and its 8 bytes from SGList, one 8-byte entry
// read when the request is sent: the bytes are stored as they are, in the
// target's memory order, with no byte swapping (rxe copies them). The
// target memory needs AccessRemoteWrite, as does the target QP.
//
// The request is copied when posted; the SGList memory must stay registered
// until the work request completes (unless SendInline).
type SendWR struct {
	WRID      uint64
	SGList    []SGE
	Opcode    WROpcode
	SendFlags SendFlags

	// ImmData is carried big-endian on the wire: the receiver's
	// WorkCompletion.ImmData reads the same uint32.
	ImmData        uint32
	InvalidateRKey uint32

	RDMA   RDMAParams
	Atomic AtomicParams
	UD     UDParams
	BindMW MWBindParams
	Flush  FlushParams

	// bindType1 marks the BIND_MW that QP.BindMW posts for a type 1
	// window, and bindFrom is the window's rkey it expects to replace;
	// PostSend refuses type 1 windows otherwise.
	bindType1 bool
	bindFrom  uint32
}
