package verbs

import (
	"errors"
	"fmt"
)

// Completion errors: WorkCompletion.Err wraps one of them, by status, so
// callers branch with errors.Is. Their text is the status's
// ibv_wc_status_str; the *WCError that wraps them adds the work request
// and the likely causes.
var (
	ErrLocalLength          = errors.New("local length error")               // WCLocLenErr
	ErrLocalQPOperation     = errors.New("local QP operation error")         // WCLocQPOpErr
	ErrLocalProtection      = errors.New("local protection error")           // WCLocProtErr
	ErrFlushed              = errors.New("work request flushed")             // WCWRFlushErr
	ErrMWBind               = errors.New("memory window bind error")         // WCMWBindErr
	ErrBadResponse          = errors.New("bad response error")               // WCBadRespErr
	ErrLocalAccess          = errors.New("local access error")               // WCLocAccessErr
	ErrRemoteInvalidRequest = errors.New("remote invalid request error")     // WCRemInvReqErr
	ErrRemoteAccess         = errors.New("remote access error")              // WCRemAccessErr
	ErrRemoteOperation      = errors.New("remote operation error")           // WCRemOpErr
	ErrRetryExceeded        = errors.New("transport retry counter exceeded") // WCRetryExcErr
	ErrRNRRetryExceeded     = errors.New("RNR retry counter exceeded")       // WCRNRRetryExcErr
	ErrRemoteAborted        = errors.New("remote aborted error")             // WCRemAbortErr
	ErrResponseTimeout      = errors.New("response timeout error")           // WCRespTimeoutErr
	ErrFatal                = errors.New("fatal error")                      // WCFatalErr
	ErrCompletion           = errors.New("unsuccessful work completion")     // any other status
)

// WCError is the error of an unsuccessful work completion: the status and
// the work request it ended. It wraps the status's sentinel (ErrRemoteAccess
// for WCRemAccessErr, ...), and its text names the status as libibverbs
// does, with the likely causes and what to change, e.g.
//
//	verbs: RDMA_READ work request 7 on QP 0x12a: REM_ACCESS_ERR (remote
//	access error): the rkey is wrong, ...
type WCError struct {
	Status WCStatus
	Opcode WCOpcode // goroce fills it in for unsuccessful completions too
	WRID   uint64
	QPNum  uint32
}

// Err returns nil for a successful completion and otherwise a *WCError
// that wraps the sentinel of its status (errors.Is(err, ErrRemoteAccess),
// ...) and says what likely went wrong. It allocates only for an
// unsuccessful completion.
func (wc *WorkCompletion) Err() error {
	if wc.Status == WCSuccess {
		return nil
	}
	return &WCError{Status: wc.Status, Opcode: wc.Opcode, WRID: wc.WRID, QPNum: wc.QPNum}
}

// Error formats the completion's failure with its likely causes.
func (e *WCError) Error() string {
	s := fmt.Sprintf("verbs: %v work request %d on QP %#x: %s (%v)", e.Opcode, e.WRID, e.QPNum, wcStatusName(e.Status), e.Status)
	if h := wcStatusHint(e.Status); h != "" {
		s += ": " + h
	}
	return s
}

// Unwrap returns the status's sentinel error.
func (e *WCError) Unwrap() error { return wcStatusErr(e.Status) }

// wcStatusErr returns the sentinel of an unsuccessful status.
func wcStatusErr(s WCStatus) error {
	switch s {
	case WCLocLenErr:
		return ErrLocalLength
	case WCLocQPOpErr:
		return ErrLocalQPOperation
	case WCLocProtErr:
		return ErrLocalProtection
	case WCWRFlushErr:
		return ErrFlushed
	case WCMWBindErr:
		return ErrMWBind
	case WCBadRespErr:
		return ErrBadResponse
	case WCLocAccessErr:
		return ErrLocalAccess
	case WCRemInvReqErr:
		return ErrRemoteInvalidRequest
	case WCRemAccessErr:
		return ErrRemoteAccess
	case WCRemOpErr:
		return ErrRemoteOperation
	case WCRetryExcErr:
		return ErrRetryExceeded
	case WCRNRRetryExcErr:
		return ErrRNRRetryExceeded
	case WCRemAbortErr:
		return ErrRemoteAborted
	case WCRespTimeoutErr:
		return ErrResponseTimeout
	case WCFatalErr:
		return ErrFatal
	}
	return ErrCompletion
}

// wcStatusNames are the enum ibv_wc_status names without the IBV_WC_
// prefix, as RDMA programmers quote them.
var wcStatusNames = [...]string{
	WCSuccess:          "SUCCESS",
	WCLocLenErr:        "LOC_LEN_ERR",
	WCLocQPOpErr:       "LOC_QP_OP_ERR",
	WCLocEECOpErr:      "LOC_EEC_OP_ERR",
	WCLocProtErr:       "LOC_PROT_ERR",
	WCWRFlushErr:       "WR_FLUSH_ERR",
	WCMWBindErr:        "MW_BIND_ERR",
	WCBadRespErr:       "BAD_RESP_ERR",
	WCLocAccessErr:     "LOC_ACCESS_ERR",
	WCRemInvReqErr:     "REM_INV_REQ_ERR",
	WCRemAccessErr:     "REM_ACCESS_ERR",
	WCRemOpErr:         "REM_OP_ERR",
	WCRetryExcErr:      "RETRY_EXC_ERR",
	WCRNRRetryExcErr:   "RNR_RETRY_EXC_ERR",
	WCLocRDDViolErr:    "LOC_RDD_VIOL_ERR",
	WCRemInvRDReqErr:   "REM_INV_RD_REQ_ERR",
	WCRemAbortErr:      "REM_ABORT_ERR",
	WCInvEECNErr:       "INV_EECN_ERR",
	WCInvEECStateErr:   "INV_EEC_STATE_ERR",
	WCFatalErr:         "FATAL_ERR",
	WCRespTimeoutErr:   "RESP_TIMEOUT_ERR",
	WCGeneralErr:       "GENERAL_ERR",
	WCTMErr:            "TM_ERR",
	WCTMRndvIncomplete: "TM_RNDV_INCOMPLETE",
}

// wcStatusName returns the status's enumerator name, e.g. "REM_ACCESS_ERR".
func wcStatusName(s WCStatus) string {
	if s >= 0 && int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("WC_STATUS(%d)", int(s))
}

// wcStatusHints are the likely causes of each status on goroce, and what
// to change. The WCStatus constants' comments say the same.
var wcStatusHints = [...]string{
	WCLocLenErr: "the message that arrived is longer than the receive buffer: post larger receive buffers " +
		"(a UD buffer also holds the 40-byte GRH area); the sender's work request failed with REM_INV_REQ_ERR",
	WCLocQPOpErr: "the work request does not fit the QP (an operation its type or state does not allow)",
	WCLocProtErr: "a local SGE's lkey is wrong or of another PD, its range is outside its memory region, " +
		"or the region lacks LOCAL_WRITE where the device stores into it (a receive, a READ's or an atomic's result)",
	WCWRFlushErr: "the QP went to ERR before this work request executed, so it was not performed: " +
		"look for the first failed completion on this QP, or the peer's asynchronous event, for the cause; " +
		"a QP also flushes its work requests when moved to ERR by Modify or a disconnection",
	WCMWBindErr: "the bind broke a rule when it executed: the region is gone, lacks MW_BIND or is zero-based, " +
		"is in another PD than the window, or the window is not inside it",
	WCBadRespErr:   "the peer answered with a response of the wrong kind or length (a peer bug, or a path MTU the two QPs disagree on)",
	WCLocAccessErr: "a local memory access the region's rights do not allow",
	WCRemInvReqErr: "the peer's QP refused the request as invalid: its access flags lack the operation's right " +
		"(REMOTE_READ/WRITE/ATOMIC in its QPAccessFlags: goroce and rxe report this case here, not as REM_ACCESS_ERR), " +
		"its max_dest_rd_atomic is 0, an atomic's address is not 8-byte aligned, a SEND is longer than its receive buffer, " +
		"or a length over 2^31; the peer's QP_REQ_ERR event (AsyncEvent.Refusal), or its QP.Refusal, says which",
	WCRemAccessErr: "the rkey is wrong or revoked, the region or window lacks the right (REMOTE_READ/WRITE/ATOMIC), " +
		"the range is outside it, or it is in another PD than the peer's QP (hardware also reports here a peer QP " +
		"not given the right in its access flags); the peer's QP_ACCESS_ERR event (AsyncEvent.Refusal) says which",
	WCRemOpErr: "the peer could not complete the operation: it could not write its receive buffer " +
		"(a bad lkey or range, or no LOCAL_WRITE in the receive work request it posted)",
	WCRetryExcErr: "no answer within retry_cnt retries of the local ACK timeout: the peer is gone, unreachable, " +
		"or its device is not running; or the QP's address vector (dgid, UDP port) or dest_qp_num is wrong",
	WCRNRRetryExcErr: "the peer had no receive work request posted for a SEND or a WRITE with immediate, " +
		"through rnr_retry retries: post receives before the peer sends (and keep enough posted), or set rnr_retry 7 (infinite)",
	WCRemAbortErr:    "the peer aborted the operation",
	WCFatalErr:       "the device failed",
	WCRespTimeoutErr: "no response within the response timeout",
}

// wcStatusHint returns the likely causes of a status, or "".
func wcStatusHint(s WCStatus) string {
	if s >= 0 && int(s) < len(wcStatusHints) {
		return wcStatusHints[s]
	}
	return ""
}
