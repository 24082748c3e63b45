package verbs

import (
	"math/bits"
	"strconv"
	"strings"
)

// QPType is a queue pair's transport service (enum ibv_qp_type).
type QPType int

// QP types, with the libibverbs values. RC, UC and UD are supported.
const (
	QPTypeRC        QPType = 2    // IBV_QPT_RC: reliable connection
	QPTypeUC        QPType = 3    // IBV_QPT_UC: unreliable connection
	QPTypeUD        QPType = 4    // IBV_QPT_UD: unreliable datagram
	QPTypeRawPacket QPType = 8    // IBV_QPT_RAW_PACKET (not supported)
	QPTypeXRCSend   QPType = 9    // IBV_QPT_XRC_SEND (not supported)
	QPTypeXRCRecv   QPType = 10   // IBV_QPT_XRC_RECV (not supported)
	QPTypeDriver    QPType = 0xff // IBV_QPT_DRIVER (not supported)
)

// String returns the type's name, e.g. "RC".
func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUC:
		return "UC"
	case QPTypeUD:
		return "UD"
	case QPTypeRawPacket:
		return "RAW_PACKET"
	case QPTypeXRCSend:
		return "XRC_SEND"
	case QPTypeXRCRecv:
		return "XRC_RECV"
	case QPTypeDriver:
		return "DRIVER"
	}
	return "QPType(" + strconv.Itoa(int(t)) + ")"
}

// QPState is a queue pair state (enum ibv_qp_state).
type QPState int

// QP states, with the libibverbs values.
const (
	QPStateReset   QPState = 0 // IBV_QPS_RESET
	QPStateInit    QPState = 1 // IBV_QPS_INIT
	QPStateRTR     QPState = 2 // IBV_QPS_RTR: ready to receive
	QPStateRTS     QPState = 3 // IBV_QPS_RTS: ready to send
	QPStateSQD     QPState = 4 // IBV_QPS_SQD: send queue drained
	QPStateSQE     QPState = 5 // IBV_QPS_SQE: send queue error (UC, UD)
	QPStateErr     QPState = 6 // IBV_QPS_ERR
	QPStateUnknown QPState = 7 // IBV_QPS_UNKNOWN
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN"}

// String returns the state's name, e.g. "RTS".
func (s QPState) String() string {
	if s < 0 || int(s) >= len(qpStateNames) {
		return "QPState(" + strconv.Itoa(int(s)) + ")"
	}
	return qpStateNames[s]
}

// MigState is the path migration state (enum ibv_mig_state). RoCE has no
// alternate paths, so it stays MigMigrated.
type MigState int

// Path migration states.
const (
	MigMigrated MigState = 0 // IBV_MIG_MIGRATED
	MigRearm    MigState = 1 // IBV_MIG_REARM
	MigArmed    MigState = 2 // IBV_MIG_ARMED
)

// QPCap are a QP's queue sizes (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR     int // send queue entries
	MaxRecvWR     int // receive queue entries (0 with an SRQ)
	MaxSendSGE    int // SGEs per send work request
	MaxRecvSGE    int // SGEs per receive work request (0 with an SRQ)
	MaxInlineData int // bytes of SendInline data per send work request
}

// QPInitAttr are the creation attributes of a QP (struct
// ibv_qp_init_attr).
type QPInitAttr struct {
	QPType QPType
	SendCQ *CQ  // completions of send work requests
	RecvCQ *CQ  // completions of receive work requests
	SRQ    *SRQ // if not nil, receives come from this SRQ
	Cap    QPCap
	// SQSigAll makes every send work request generate a completion, as if
	// each had SendSignaled.
	SQSigAll bool
}

// QPAttr are the attributes of a QP (struct ibv_qp_attr). ModifyQP reads
// the fields selected by its mask; Query fills them all.
type QPAttr struct {
	QPState      QPState
	CurQPState   QPState
	PathMTU      MTU
	PathMigState MigState
	QKey         uint32 // UD: the Q_Key of the QP
	RQPSN        uint32 // expected PSN of the next request received (24 bits)
	SQPSN        uint32 // PSN of the next request sent (24 bits)
	DestQPNum    uint32 // RC, UC: the remote QP number (24 bits)

	// QPAccessFlags are the incoming operations the responder accepts:
	// AccessRemoteWrite, AccessRemoteRead, AccessRemoteAtomic.
	QPAccessFlags AccessFlags
	Cap           QPCap
	AHAttr        AddressVector // RC, UC: path to the remote QP

	PKeyIndex        int
	EnSQDAsyncNotify bool
	SQDraining       bool // read-only
	MaxRdAtomic      int  // RDMA READs/atomics outstanding as initiator
	MaxDestRdAtomic  int  // RDMA READs/atomics accepted as responder
	MinRNRTimer      uint8
	PortNum          int
	Timeout          uint8 // local ACK timeout: 4.096 µs × 2^Timeout; 0 = infinite
	RetryCnt         uint8 // transport retries (3 bits); 7 is not infinite
	RNRRetry         uint8 // RNR retries (3 bits); 7 = infinite
	RateLimit        uint32
}

// QPAttrMask selects QPAttr fields (enum ibv_qp_attr_mask).
type QPAttrMask uint32

// QP attribute mask bits, with the libibverbs values.
const (
	QPAttrState            QPAttrMask = 1 << 0  // IBV_QP_STATE
	QPAttrCurState         QPAttrMask = 1 << 1  // IBV_QP_CUR_STATE
	QPAttrEnSQDAsyncNotify QPAttrMask = 1 << 2  // IBV_QP_EN_SQD_ASYNC_NOTIFY
	QPAttrAccessFlags      QPAttrMask = 1 << 3  // IBV_QP_ACCESS_FLAGS
	QPAttrPKeyIndex        QPAttrMask = 1 << 4  // IBV_QP_PKEY_INDEX
	QPAttrPort             QPAttrMask = 1 << 5  // IBV_QP_PORT
	QPAttrQKey             QPAttrMask = 1 << 6  // IBV_QP_QKEY
	QPAttrAV               QPAttrMask = 1 << 7  // IBV_QP_AV
	QPAttrPathMTU          QPAttrMask = 1 << 8  // IBV_QP_PATH_MTU
	QPAttrTimeout          QPAttrMask = 1 << 9  // IBV_QP_TIMEOUT
	QPAttrRetryCnt         QPAttrMask = 1 << 10 // IBV_QP_RETRY_CNT
	QPAttrRNRRetry         QPAttrMask = 1 << 11 // IBV_QP_RNR_RETRY
	QPAttrRQPSN            QPAttrMask = 1 << 12 // IBV_QP_RQ_PSN
	QPAttrMaxQPRdAtomic    QPAttrMask = 1 << 13 // IBV_QP_MAX_QP_RD_ATOMIC
	QPAttrAltPath          QPAttrMask = 1 << 14 // IBV_QP_ALT_PATH (not supported on RoCE)
	QPAttrMinRNRTimer      QPAttrMask = 1 << 15 // IBV_QP_MIN_RNR_TIMER
	QPAttrSQPSN            QPAttrMask = 1 << 16 // IBV_QP_SQ_PSN
	QPAttrMaxDestRdAtomic  QPAttrMask = 1 << 17 // IBV_QP_MAX_DEST_RD_ATOMIC
	QPAttrPathMigState     QPAttrMask = 1 << 18 // IBV_QP_PATH_MIG_STATE
	QPAttrCap              QPAttrMask = 1 << 19 // IBV_QP_CAP
	QPAttrDestQPN          QPAttrMask = 1 << 20 // IBV_QP_DEST_QPN
	QPAttrRateLimit        QPAttrMask = 1 << 25 // IBV_QP_RATE_LIMIT

	qpAttrKnown = 1<<21 - 1 | QPAttrRateLimit
)

// qpAttrFields are the libibverbs field names of the mask bits, by bit
// position; errors name attributes with them.
var qpAttrFields = [...]string{
	0: "qp_state", 1: "cur_qp_state", 2: "en_sqd_async_notify", 3: "qp_access_flags",
	4: "pkey_index", 5: "port_num", 6: "qkey", 7: "ah_attr", 8: "path_mtu",
	9: "timeout", 10: "retry_cnt", 11: "rnr_retry", 12: "rq_psn",
	13: "max_rd_atomic", 14: "alt_ah_attr", 15: "min_rnr_timer", 16: "sq_psn",
	17: "max_dest_rd_atomic", 18: "path_mig_state", 19: "cap", 20: "dest_qp_num",
	25: "rate_limit",
}

// qpAttrMaskNames are the enumerator names without IBV_QP_, by bit.
var qpAttrMaskNames = [...]string{
	0: "STATE", 1: "CUR_STATE", 2: "EN_SQD_ASYNC_NOTIFY", 3: "ACCESS_FLAGS",
	4: "PKEY_INDEX", 5: "PORT", 6: "QKEY", 7: "AV", 8: "PATH_MTU", 9: "TIMEOUT",
	10: "RETRY_CNT", 11: "RNR_RETRY", 12: "RQ_PSN", 13: "MAX_QP_RD_ATOMIC",
	14: "ALT_PATH", 15: "MIN_RNR_TIMER", 16: "SQ_PSN", 17: "MAX_DEST_RD_ATOMIC",
	18: "PATH_MIG_STATE", 19: "CAP", 20: "DEST_QPN", 25: "RATE_LIMIT",
}

// field returns the attribute name of the lowest bit of m.
func (m QPAttrMask) field() string {
	bit := bits.TrailingZeros32(uint32(m))
	if bit < len(qpAttrFields) && qpAttrFields[bit] != "" {
		return qpAttrFields[bit]
	}
	return "attr_mask"
}

// String returns the bits as enumerator names without the IBV_QP_ prefix
// joined by "|", e.g. "STATE|PKEY_INDEX|PORT|ACCESS_FLAGS" (in bit order).
func (m QPAttrMask) String() string {
	if m == 0 {
		return "0"
	}
	var parts []string
	for rest := m; rest != 0; rest &= rest - 1 {
		bit := bits.TrailingZeros32(uint32(rest))
		if bit < len(qpAttrMaskNames) && qpAttrMaskNames[bit] != "" {
			parts = append(parts, qpAttrMaskNames[bit])
		} else {
			parts = append(parts, "0x"+strconv.FormatUint(uint64(1)<<bit, 16))
		}
	}
	return strings.Join(parts, "|")
}
