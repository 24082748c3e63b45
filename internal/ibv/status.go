package ibv

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
