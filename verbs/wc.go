package verbs

import "strconv"

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
}

// WCStatus is a completion status (enum ibv_wc_status).
type WCStatus int

// Completion statuses, with the libibverbs values.
const (
	WCSuccess          WCStatus = iota // IBV_WC_SUCCESS
	WCLocLenErr                        // IBV_WC_LOC_LEN_ERR
	WCLocQPOpErr                       // IBV_WC_LOC_QP_OP_ERR
	WCLocEECOpErr                      // IBV_WC_LOC_EEC_OP_ERR
	WCLocProtErr                       // IBV_WC_LOC_PROT_ERR
	WCWRFlushErr                       // IBV_WC_WR_FLUSH_ERR
	WCMWBindErr                        // IBV_WC_MW_BIND_ERR
	WCBadRespErr                       // IBV_WC_BAD_RESP_ERR
	WCLocAccessErr                     // IBV_WC_LOC_ACCESS_ERR
	WCRemInvReqErr                     // IBV_WC_REM_INV_REQ_ERR
	WCRemAccessErr                     // IBV_WC_REM_ACCESS_ERR
	WCRemOpErr                         // IBV_WC_REM_OP_ERR
	WCRetryExcErr                      // IBV_WC_RETRY_EXC_ERR
	WCRNRRetryExcErr                   // IBV_WC_RNR_RETRY_EXC_ERR
	WCLocRDDViolErr                    // IBV_WC_LOC_RDD_VIOL_ERR
	WCRemInvRDReqErr                   // IBV_WC_REM_INV_RD_REQ_ERR
	WCRemAbortErr                      // IBV_WC_REM_ABORT_ERR
	WCInvEECNErr                       // IBV_WC_INV_EECN_ERR
	WCInvEECStateErr                   // IBV_WC_INV_EEC_STATE_ERR
	WCFatalErr                         // IBV_WC_FATAL_ERR
	WCRespTimeoutErr                   // IBV_WC_RESP_TIMEOUT_ERR
	WCGeneralErr                       // IBV_WC_GENERAL_ERR
	WCTMErr                            // IBV_WC_TM_ERR
	WCTMRndvIncomplete                 // IBV_WC_TM_RNDV_INCOMPLETE
)

// wcStatusText is libibverbs' ibv_wc_status_str table.
var wcStatusText = [...]string{
	WCSuccess:          "success",
	WCLocLenErr:        "local length error",
	WCLocQPOpErr:       "local QP operation error",
	WCLocEECOpErr:      "local EE context operation error",
	WCLocProtErr:       "local protection error",
	WCWRFlushErr:       "Work Request Flushed Error",
	WCMWBindErr:        "memory management operation error",
	WCBadRespErr:       "bad response error",
	WCLocAccessErr:     "local access error",
	WCRemInvReqErr:     "remote invalid request error",
	WCRemAccessErr:     "remote access error",
	WCRemOpErr:         "remote operation error",
	WCRetryExcErr:      "transport retry counter exceeded",
	WCRNRRetryExcErr:   "RNR retry counter exceeded",
	WCLocRDDViolErr:    "local RDD violation error",
	WCRemInvRDReqErr:   "remote invalid RD request",
	WCRemAbortErr:      "aborted error",
	WCInvEECNErr:       "invalid EE context number",
	WCInvEECStateErr:   "invalid EE context state",
	WCFatalErr:         "fatal error",
	WCRespTimeoutErr:   "response timeout error",
	WCGeneralErr:       "general error",
	WCTMErr:            "TM error",
	WCTMRndvIncomplete: "TM software rendezvous",
}

// String returns the text of ibv_wc_status_str, e.g. "success" or
// "transport retry counter exceeded"; "unknown" for other values.
func (s WCStatus) String() string {
	if s < 0 || int(s) >= len(wcStatusText) {
		return "unknown"
	}
	return wcStatusText[s]
}

// WCOpcode is the operation a completion reports (enum ibv_wc_opcode).
// Receive opcodes have the WCRecv bit set, so op&WCRecv != 0 tests for a
// receive completion.
type WCOpcode int

// Completion opcodes, with the libibverbs values.
const (
	WCSend            WCOpcode = 0   // IBV_WC_SEND
	WCRDMAWrite       WCOpcode = 1   // IBV_WC_RDMA_WRITE
	WCRDMARead        WCOpcode = 2   // IBV_WC_RDMA_READ
	WCCompSwap        WCOpcode = 3   // IBV_WC_COMP_SWAP
	WCFetchAdd        WCOpcode = 4   // IBV_WC_FETCH_ADD
	WCBindMW          WCOpcode = 5   // IBV_WC_BIND_MW
	WCLocalInv        WCOpcode = 6   // IBV_WC_LOCAL_INV
	WCTSO             WCOpcode = 7   // IBV_WC_TSO
	WCFlush           WCOpcode = 8   // IBV_WC_FLUSH
	WCAtomicWrite     WCOpcode = 9   // IBV_WC_ATOMIC_WRITE
	WCRecv            WCOpcode = 128 // IBV_WC_RECV
	WCRecvRDMAWithImm WCOpcode = 129 // IBV_WC_RECV_RDMA_WITH_IMM
)

var wcOpcodeNames = map[WCOpcode]string{
	WCSend:            "SEND",
	WCRDMAWrite:       "RDMA_WRITE",
	WCRDMARead:        "RDMA_READ",
	WCCompSwap:        "COMP_SWAP",
	WCFetchAdd:        "FETCH_ADD",
	WCBindMW:          "BIND_MW",
	WCLocalInv:        "LOCAL_INV",
	WCTSO:             "TSO",
	WCFlush:           "FLUSH",
	WCAtomicWrite:     "ATOMIC_WRITE",
	WCRecv:            "RECV",
	WCRecvRDMAWithImm: "RECV_RDMA_WITH_IMM",
}

// String returns the enumerator name without the IBV_WC_ prefix.
func (o WCOpcode) String() string {
	if s, ok := wcOpcodeNames[o]; ok {
		return s
	}
	return "WCOpcode(" + strconv.Itoa(int(o)) + ")"
}

// WCFlags qualify a completion (enum ibv_wc_flags).
type WCFlags uint32

// Completion flags, with the libibverbs values.
const (
	WCGRH      WCFlags = 1 << 0 // a GRH precedes the payload (UD receives)
	WCWithImm  WCFlags = 1 << 1 // ImmData is valid
	WCIPCsumOK WCFlags = 1 << 2 // IP checksum verified
	WCWithInv  WCFlags = 1 << 3 // InvalidatedRKey is valid
)
