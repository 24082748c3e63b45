package verbs

import "github.com/goroce/goroce/internal/ibv"

// WorkCompletion reports the outcome of a work request (struct ibv_wc). For
// an unsuccessful completion only WRID, Status, QPNum and VendorErr are
// meaningful, as in libibverbs.
type WorkCompletion struct {
	WRID      uint64
	Status    WCStatus
	Opcode    WCOpcode
	VendorErr uint32
	ByteLen   uint32 // bytes received (receive completions) or transferred

	// ImmData is valid when WCFlags has WCWithImm. It holds the 32 bits
	// as carried on the wire, read big-endian: a value a C peer sends as
	// htonl(x) arrives here as x.
	ImmData uint32

	// InvalidatedRKey is valid when WCFlags has WCWithInv.
	InvalidatedRKey uint32

	QPNum        uint32 // local QP the work request belonged to
	SrcQP        uint32 // remote QP (UD receives)
	WCFlags      WCFlags
	PKeyIndex    uint16
	SLID         uint16 // no meaning on RoCE
	SL           uint8
	DLIDPathBits uint8

	// Solicited reports a receive completion of a message that carried
	// the Solicited Event bit (IBV_SEND_SOLICITED at the sender), which
	// satisfies ReqNotify(true). struct ibv_wc has no such field: a
	// provider keeps it to itself, as goroce-nic does for its clients.
	Solicited bool
}

// WCStatus is a completion status (enum ibv_wc_status). Its String method
// returns the text of ibv_wc_status_str, e.g. "success" or "transport retry
// counter exceeded"; "unknown" for other values.
type WCStatus = ibv.WCStatus

// Completion statuses, with the libibverbs values. WorkCompletion.Err
// turns an unsuccessful one into an error that wraps the status's sentinel
// (ErrRemoteAccess, ...) and lists its likely causes, as below.
const (
	WCSuccess WCStatus = ibv.WCSuccess // IBV_WC_SUCCESS

	// WCLocLenErr (IBV_WC_LOC_LEN_ERR): a message longer than the receive
	// buffer it arrived in; post larger receive buffers (a UD buffer
	// also holds the 40-byte GRH area).
	WCLocLenErr WCStatus = ibv.WCLocLenErr
	// WCLocQPOpErr (IBV_WC_LOC_QP_OP_ERR): a work request the QP cannot
	// execute.
	WCLocQPOpErr  WCStatus = ibv.WCLocQPOpErr
	WCLocEECOpErr WCStatus = ibv.WCLocEECOpErr // IBV_WC_LOC_EEC_OP_ERR (RD only; never)
	// WCLocProtErr (IBV_WC_LOC_PROT_ERR): a local SGE's lkey is wrong or
	// of another PD, its range is outside its region, or the region lacks
	// LOCAL_WRITE where the device stores (receives, READ and atomic
	// results).
	WCLocProtErr WCStatus = ibv.WCLocProtErr
	// WCWRFlushErr (IBV_WC_WR_FLUSH_ERR): the QP went to ERR before the
	// work request executed, which was therefore not performed: the first
	// failed completion on the QP (or the peer's asynchronous event) has
	// the cause. Modify to ERR and disconnection flush too.
	WCWRFlushErr WCStatus = ibv.WCWRFlushErr
	// WCMWBindErr (IBV_WC_MW_BIND_ERR): a memory window bind broke a rule
	// when it executed (see QP.BindMW).
	WCMWBindErr WCStatus = ibv.WCMWBindErr
	// WCBadRespErr (IBV_WC_BAD_RESP_ERR): a response of the wrong kind or
	// length: a peer bug, or path MTUs the two QPs disagree on.
	WCBadRespErr WCStatus = ibv.WCBadRespErr
	// WCLocAccessErr (IBV_WC_LOC_ACCESS_ERR): a local access the region's
	// rights do not allow.
	WCLocAccessErr WCStatus = ibv.WCLocAccessErr
	// WCRemInvReqErr (IBV_WC_REM_INV_REQ_ERR): the peer's QP refused the
	// request as invalid: its access flags lack the operation's right
	// (goroce and rxe report a missing QP right here), its
	// max_dest_rd_atomic is 0, an atomic is misaligned, a SEND is longer
	// than the receive buffer, or a length exceeds 2^31. The peer's
	// QP_REQ_ERR event says which (AsyncEvent.Refusal).
	WCRemInvReqErr WCStatus = ibv.WCRemInvReqErr
	// WCRemAccessErr (IBV_WC_REM_ACCESS_ERR): the rkey is wrong or
	// revoked, the region or window lacks the right
	// (REMOTE_READ/WRITE/ATOMIC), the range is outside it, or it is in
	// another PD than the peer's QP (hardware also reports a peer QP
	// lacking the right here). The peer's QP_ACCESS_ERR event says which.
	WCRemAccessErr WCStatus = ibv.WCRemAccessErr
	// WCRemOpErr (IBV_WC_REM_OP_ERR): the peer could not write the
	// receive buffer it posted (a bad lkey or range, no LOCAL_WRITE).
	WCRemOpErr WCStatus = ibv.WCRemOpErr
	// WCRetryExcErr (IBV_WC_RETRY_EXC_ERR): no answer through retry_cnt
	// retries: the peer is gone, unreachable, or its device is not
	// running; or the address vector or dest_qp_num is wrong.
	WCRetryExcErr WCStatus = ibv.WCRetryExcErr
	// WCRNRRetryExcErr (IBV_WC_RNR_RETRY_EXC_ERR): the peer had no
	// receive posted for a SEND or a WRITE with immediate through
	// rnr_retry retries: post receives first, or set rnr_retry 7
	// (infinite).
	WCRNRRetryExcErr   WCStatus = ibv.WCRNRRetryExcErr
	WCLocRDDViolErr    WCStatus = ibv.WCLocRDDViolErr    // IBV_WC_LOC_RDD_VIOL_ERR (RD only; never)
	WCRemInvRDReqErr   WCStatus = ibv.WCRemInvRDReqErr   // IBV_WC_REM_INV_RD_REQ_ERR (RD only; never)
	WCRemAbortErr      WCStatus = ibv.WCRemAbortErr      // IBV_WC_REM_ABORT_ERR
	WCInvEECNErr       WCStatus = ibv.WCInvEECNErr       // IBV_WC_INV_EECN_ERR (RD only; never)
	WCInvEECStateErr   WCStatus = ibv.WCInvEECStateErr   // IBV_WC_INV_EEC_STATE_ERR (RD only; never)
	WCFatalErr         WCStatus = ibv.WCFatalErr         // IBV_WC_FATAL_ERR
	WCRespTimeoutErr   WCStatus = ibv.WCRespTimeoutErr   // IBV_WC_RESP_TIMEOUT_ERR
	WCGeneralErr       WCStatus = ibv.WCGeneralErr       // IBV_WC_GENERAL_ERR
	WCTMErr            WCStatus = ibv.WCTMErr            // IBV_WC_TM_ERR (tag matching; never)
	WCTMRndvIncomplete WCStatus = ibv.WCTMRndvIncomplete // IBV_WC_TM_RNDV_INCOMPLETE (tag matching; never)
)

// WCOpcode is the operation a completion reports (enum ibv_wc_opcode).
// Receive opcodes have the WCRecv bit set, so op&WCRecv != 0 tests for a
// receive completion. Its String method returns the enumerator name without
// the IBV_WC_ prefix, e.g. "RDMA_WRITE".
type WCOpcode = ibv.WCOpcode

// Completion opcodes, with the libibverbs values.
const (
	WCSend            WCOpcode = ibv.WCSend            // IBV_WC_SEND
	WCRDMAWrite       WCOpcode = ibv.WCRDMAWrite       // IBV_WC_RDMA_WRITE
	WCRDMARead        WCOpcode = ibv.WCRDMARead        // IBV_WC_RDMA_READ
	WCCompSwap        WCOpcode = ibv.WCCompSwap        // IBV_WC_COMP_SWAP
	WCFetchAdd        WCOpcode = ibv.WCFetchAdd        // IBV_WC_FETCH_ADD
	WCBindMW          WCOpcode = ibv.WCBindMW          // IBV_WC_BIND_MW
	WCLocalInv        WCOpcode = ibv.WCLocalInv        // IBV_WC_LOCAL_INV
	WCTSO             WCOpcode = ibv.WCTSO             // IBV_WC_TSO
	WCFlush           WCOpcode = ibv.WCFlush           // IBV_WC_FLUSH
	WCAtomicWrite     WCOpcode = ibv.WCAtomicWrite     // IBV_WC_ATOMIC_WRITE
	WCRecv            WCOpcode = ibv.WCRecv            // IBV_WC_RECV
	WCRecvRDMAWithImm WCOpcode = ibv.WCRecvRDMAWithImm // IBV_WC_RECV_RDMA_WITH_IMM
)

// WCFlags qualify a completion (enum ibv_wc_flags).
type WCFlags = ibv.WCFlags

// Completion flags, with the libibverbs values.
const (
	WCGRH      WCFlags = ibv.WCGRH      // IBV_WC_GRH: a GRH precedes the payload (UD receives)
	WCWithImm  WCFlags = ibv.WCWithImm  // IBV_WC_WITH_IMM: ImmData is valid
	WCIPCsumOK WCFlags = ibv.WCIPCsumOK // IBV_WC_IP_CSUM_OK: IP checksum verified
	WCWithInv  WCFlags = ibv.WCWithInv  // IBV_WC_WITH_INV: InvalidatedRKey is valid
)
