package verbs

import (
	"errors"
	"math/bits"
	"strconv"
	"strings"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
)

// The QP state machine and attributes (ibv_modify_qp): the attribute types,
// Modify, the IBA transition table, the checks of attribute values and
// their hand-over to the transport.

// QPState is a queue pair state (enum ibv_qp_state). Its String method
// returns the state's name, e.g. "RTS".
type QPState = ibv.QPState

// QP states, with the libibverbs values.
const (
	QPStateReset   QPState = ibv.QPStateReset   // IBV_QPS_RESET
	QPStateInit    QPState = ibv.QPStateInit    // IBV_QPS_INIT
	QPStateRTR     QPState = ibv.QPStateRTR     // IBV_QPS_RTR: ready to receive
	QPStateRTS     QPState = ibv.QPStateRTS     // IBV_QPS_RTS: ready to send
	QPStateSQD     QPState = ibv.QPStateSQD     // IBV_QPS_SQD: send queue drained
	QPStateSQE     QPState = ibv.QPStateSQE     // IBV_QPS_SQE: send queue error (UC, UD)
	QPStateErr     QPState = ibv.QPStateErr     // IBV_QPS_ERR
	QPStateUnknown QPState = ibv.QPStateUnknown // IBV_QPS_UNKNOWN
)

// MigState is the path migration state (enum ibv_mig_state). RoCE has no
// alternate paths, so it stays MigMigrated.
type MigState int

// Path migration states.
const (
	MigMigrated MigState = 0 // IBV_MIG_MIGRATED
	MigRearm    MigState = 1 // IBV_MIG_REARM
	MigArmed    MigState = 2 // IBV_MIG_ARMED
)

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

	// SelectiveRepeat turns on goroce's selective repeat and adaptive
	// retransmission timeout (RC only, on the way to RTR, mask bit
	// QPAttrSelectiveRepeat): out-of-order requests are kept and
	// SACKed, and only lost packets are resent. Set it only when the
	// peer is a goroce QP that sets it too (the connection manager
	// negotiates it: cm.Params.SelectiveRepeat); rxe and NICs do not
	// know the SACK and would drop it. Without it the QP speaks plain
	// IBTA go-back-N. libibverbs has no such attribute.
	SelectiveRepeat bool
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

	// QPAttrSelectiveRepeat selects QPAttr.SelectiveRepeat: goroce's
	// own, on a bit libibverbs does not use.
	QPAttrSelectiveRepeat QPAttrMask = 1 << 31

	qpAttrKnown = 1<<21 - 1 | QPAttrRateLimit | QPAttrSelectiveRepeat
)

// qpAttrFields are the libibverbs field names of the mask bits, by bit
// position; errors name attributes with them.
var qpAttrFields = [...]string{
	0: "qp_state", 1: "cur_qp_state", 2: "en_sqd_async_notify", 3: "qp_access_flags",
	4: "pkey_index", 5: "port_num", 6: "qkey", 7: "ah_attr", 8: "path_mtu",
	9: "timeout", 10: "retry_cnt", 11: "rnr_retry", 12: "rq_psn",
	13: "max_rd_atomic", 14: "alt_ah_attr", 15: "min_rnr_timer", 16: "sq_psn",
	17: "max_dest_rd_atomic", 18: "path_mig_state", 19: "cap", 20: "dest_qp_num",
	25: "rate_limit", 31: "selective_repeat",
}

// qpAttrMaskNames are the enumerator names without IBV_QP_, by bit.
var qpAttrMaskNames = [...]string{
	0: "STATE", 1: "CUR_STATE", 2: "EN_SQD_ASYNC_NOTIFY", 3: "ACCESS_FLAGS",
	4: "PKEY_INDEX", 5: "PORT", 6: "QKEY", 7: "AV", 8: "PATH_MTU", 9: "TIMEOUT",
	10: "RETRY_CNT", 11: "RNR_RETRY", 12: "RQ_PSN", 13: "MAX_QP_RD_ATOMIC",
	14: "ALT_PATH", 15: "MIN_RNR_TIMER", 16: "SQ_PSN", 17: "MAX_DEST_RD_ATOMIC",
	18: "PATH_MIG_STATE", 19: "CAP", 20: "DEST_QPN", 25: "RATE_LIMIT",
	31: "SELECTIVE_REPEAT",
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

// Modify changes the attributes selected by mask (ibv_modify_qp), usually
// together with a state transition (QPAttrState).
//
// The transition and the mask are checked against the IBA state machine as
// the Linux kernel encodes it: an impossible transition fails with
// ErrInvalidState naming "qp_state"; a missing required attribute or an
// attribute the transition does not accept fails with ErrInvalidArgument
// naming it. The values are then checked (port 1, P_Key index 0, PSNs and
// QP numbers within 24 bits, timeout and min_rnr_timer within 5 bits, retry
// counts within 3, path MTU up to the port's maximum, rd_atomic values up to
// the device limits, a valid address vector, QP access flags). With
// QPAttrCurState, CurQPState must equal the current state. A failed Modify
// changes nothing.
//
// Moving to RESET discards all posted work requests. Moving to ERR
// completes them with WCWRFlushErr on the QP's CQs (receive work requests of
// an SRQ stay in the SRQ).
func (qp *QP) Modify(attr *QPAttr, mask QPAttrMask) error {
	const op = "ModifyQP"
	if attr == nil {
		return newError(op, "attr", ErrInvalidArgument, "nil")
	}
	if unknown := mask &^ qpAttrKnown; unknown != 0 {
		return errorf(op, "attr_mask", ErrNotSupported, "unknown bits %#x", uint32(unknown))
	}
	if qp.hw != nil {
		return hwModify(qp, attr, mask)
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closed.Load() {
		return closedError(op, "qp")
	}
	// The current state is read under xmu: the transport may move the QP
	// to ERR at any time, and a transition must start from the state the
	// QP is really in (no RTS->RTS that would revive a failed QP).
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	// What the receive path built for the end of its batch leaves before
	// the transition (which discards the Output); a move to ERR it made,
	// not mirrored yet, counts, with its events.
	qp.transmitDeferredLocked()
	if mask&QPAttrState != 0 && attr.QPState == QPStateErr {
		// So do the replies (ACKs) the batch took from the QP into the
		// device's reply batch: a move to ERR is the first step of a
		// teardown, and what follows it (rdma_cm's DREQ, on QP 1) must
		// not overtake the ACK of a receive the application holds, or
		// the peer sees the disconnect before its send completes (seen:
		// goroce-perf -R's server failed its last write with EOF).
		// Lock order: xmu, then the batch's mu.
		qp.dev.eng.flushReplies()
	}
	qp.noteTransportErrorLocked()
	cur := qp.State()
	next := cur
	if mask&QPAttrState != 0 {
		if attr.QPState < QPStateReset || attr.QPState > QPStateErr {
			return errorf(op, "qp_state", ErrInvalidArgument, "%v", attr.QPState)
		}
		next = attr.QPState
	}
	if mask&QPAttrCurState != 0 && attr.CurQPState != cur {
		return errorf(op, "cur_qp_state", ErrInvalidState, "%v, but the QP is in %v", attr.CurQPState, cur)
	}
	if err := checkTransition(op, qp.qpType, cur, next, mask); err != nil {
		return err
	}
	if err := qp.checkAttrValues(op, attr, mask); err != nil {
		return err
	}

	a := qp.attr
	applyQPAttr(&a, attr, mask)

	if err := qp.applyTransportLocked(op, &a, mask, cur, next); err != nil {
		return err
	}
	qp.attr = a
	qp.state.Store(int32(next))
	if next == QPStateErr && cur != QPStateErr {
		qp.raiseQPEventsLocked(false)
	}
	// This move raised the events of an ERR it enters (the transport's
	// own errors raise theirs in noteTransportErrorLocked); leaving ERR
	// lets the next error raise them again.
	qp.errNoted = next == QPStateErr
	// IBA 11.6.3: SQ Drained is raised when asked for by the move to SQD.
	qp.sqDraining = next == QPStateSQD && (qp.sqDraining ||
		cur != QPStateSQD && mask&QPAttrEnSQDAsyncNotify != 0 && attr.EnSQDAsyncNotify)
	qp.checkSQDrainedLocked()
	return nil
}

// The QP state machine of the IBA (chapter 10.3), as the Linux kernel encodes
// it in qp_state_table and ib_modify_qp_is_ok (drivers/infiniband/core/
// verbs.c): for each current and next state, whether the transition is
// allowed and, per QP type, which attributes it requires and which it
// optionally accepts. QPAttrState is always accepted. Only the RC, UC and UD
// columns are kept.

// transition is one cell of the table.
type transition struct {
	valid bool
	req   [3]QPAttrMask // by qpTypeIndex
	opt   [3]QPAttrMask
}

// qpTypeIndex maps a supported QP type to its column.
func qpTypeIndex(t QPType) int {
	switch t {
	case QPTypeRC:
		return 0
	case QPTypeUC:
		return 1
	}
	return 2 // QPTypeUD
}

// Columns of a table row: RC, UC, UD.
func byType(rc, uc, ud QPAttrMask) [3]QPAttrMask { return [3]QPAttrMask{rc, uc, ud} }

var qpTransitions = [QPStateErr + 1][QPStateErr + 1]transition{
	QPStateReset: {
		QPStateReset: {valid: true},
		QPStateInit: {valid: true, req: byType(
			QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags,
			QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags,
			QPAttrPKeyIndex|QPAttrPort|QPAttrQKey,
		)},
	},
	QPStateInit: {
		QPStateReset: {valid: true},
		QPStateErr:   {valid: true},
		QPStateInit: {valid: true, opt: byType(
			QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags,
			QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags,
			QPAttrPKeyIndex|QPAttrPort|QPAttrQKey,
		)},
		QPStateRTR: {valid: true,
			req: byType(
				QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRdAtomic|QPAttrMinRNRTimer,
				QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN,
				0,
			),
			opt: byType(
				QPAttrAltPath|QPAttrAccessFlags|QPAttrPKeyIndex|QPAttrSelectiveRepeat,
				QPAttrAltPath|QPAttrAccessFlags|QPAttrPKeyIndex,
				QPAttrPKeyIndex|QPAttrQKey,
			),
		},
	},
	QPStateRTR: {
		QPStateReset: {valid: true},
		QPStateErr:   {valid: true},
		QPStateRTS: {valid: true,
			req: byType(
				QPAttrTimeout|QPAttrRetryCnt|QPAttrRNRRetry|QPAttrSQPSN|QPAttrMaxQPRdAtomic,
				QPAttrSQPSN,
				QPAttrSQPSN,
			),
			opt: byType(
				QPAttrCurState|QPAttrAltPath|QPAttrAccessFlags|QPAttrMinRNRTimer|QPAttrPathMigState,
				QPAttrCurState|QPAttrAltPath|QPAttrAccessFlags|QPAttrPathMigState,
				QPAttrCurState|QPAttrQKey,
			),
		},
	},
	QPStateRTS: {
		QPStateReset: {valid: true},
		QPStateErr:   {valid: true},
		QPStateRTS: {valid: true, opt: byType(
			QPAttrCurState|QPAttrAccessFlags|QPAttrAltPath|QPAttrPathMigState|QPAttrMinRNRTimer,
			QPAttrCurState|QPAttrAccessFlags|QPAttrAltPath|QPAttrPathMigState,
			QPAttrCurState|QPAttrQKey,
		)},
		QPStateSQD: {valid: true, opt: byType(
			QPAttrEnSQDAsyncNotify,
			QPAttrEnSQDAsyncNotify,
			QPAttrEnSQDAsyncNotify,
		)},
	},
	QPStateSQD: {
		QPStateReset: {valid: true},
		QPStateErr:   {valid: true},
		QPStateRTS: {valid: true, opt: byType(
			QPAttrCurState|QPAttrAltPath|QPAttrAccessFlags|QPAttrMinRNRTimer|QPAttrPathMigState,
			QPAttrCurState|QPAttrAltPath|QPAttrAccessFlags|QPAttrPathMigState,
			QPAttrCurState|QPAttrQKey,
		)},
		QPStateSQD: {valid: true, opt: byType(
			QPAttrPort|QPAttrAV|QPAttrTimeout|QPAttrRetryCnt|QPAttrRNRRetry|
				QPAttrMaxQPRdAtomic|QPAttrMaxDestRdAtomic|QPAttrAltPath|
				QPAttrAccessFlags|QPAttrPKeyIndex|QPAttrMinRNRTimer|QPAttrPathMigState,
			QPAttrAV|QPAttrAltPath|QPAttrAccessFlags|QPAttrPKeyIndex|QPAttrPathMigState,
			QPAttrPKeyIndex|QPAttrQKey,
		)},
	},
	QPStateSQE: {
		QPStateReset: {valid: true},
		QPStateErr:   {valid: true},
		QPStateRTS: {valid: true, opt: byType(
			0,
			QPAttrCurState|QPAttrAccessFlags,
			QPAttrCurState|QPAttrQKey,
		)},
	},
	QPStateErr: {
		QPStateReset: {valid: true},
		QPStateErr:   {valid: true},
	},
}

// checkTransition validates the state change cur -> next of a QP of type t
// with attribute mask mask against the table. It names the first missing
// required attribute, or the first attribute the transition does not accept.
func checkTransition(op string, t QPType, cur, next QPState, mask QPAttrMask) error {
	tr := qpTransitions[cur][next]
	if !tr.valid {
		return errorf(op, "qp_state", ErrInvalidState, "%v QP cannot go from %v to %v", t, cur, next)
	}
	col := qpTypeIndex(t)
	req, opt := tr.req[col], tr.opt[col]
	if missing := req &^ mask; missing != 0 {
		return errorf(op, missing.field(), ErrInvalidArgument, "required for %v %v -> %v", t, cur, next)
	}
	if extra := mask &^ (req | opt | QPAttrState); extra != 0 {
		return errorf(op, extra.field(), ErrInvalidArgument, "not allowed for %v %v -> %v", t, cur, next)
	}
	return nil
}

// checkAttrValues validates the values of the attributes in mask.
func (qp *QP) checkAttrValues(op string, attr *QPAttr, mask QPAttrMask) error {
	d := qp.dev
	if mask&QPAttrAltPath != 0 {
		// The kernel refuses alternate paths on RoCE: there is no APM.
		return newError(op, "alt_ah_attr", ErrNotSupported, "alternate paths on RoCE")
	}
	if mask&QPAttrAccessFlags != 0 {
		if err := validateQPAccess(op, attr.QPAccessFlags); err != nil {
			return err
		}
	}
	if mask&QPAttrPKeyIndex != 0 && (attr.PKeyIndex < 0 || attr.PKeyIndex >= d.port.PKeyTblLen) {
		return errorf(op, "pkey_index", ErrInvalidArgument, "%d outside the P_Key table (length %d)", attr.PKeyIndex, d.port.PKeyTblLen)
	}
	if mask&QPAttrPort != 0 {
		if err := d.checkPort(op, "port_num", attr.PortNum); err != nil {
			return err
		}
	}
	if mask&QPAttrAV != 0 {
		if err := d.checkAV(op, "ah_attr", &attr.AHAttr); err != nil {
			return err
		}
	}
	if mask&QPAttrPathMTU != 0 && (!attr.PathMTU.Valid() || attr.PathMTU > d.port.MaxMTU) {
		return errorf(op, "path_mtu", ErrInvalidArgument, "%v is not an MTU up to %v", attr.PathMTU, d.port.MaxMTU)
	}
	type bound struct {
		bit   QPAttrMask
		value uint64
		max   uint64
	}
	for _, b := range [...]bound{
		{QPAttrTimeout, uint64(attr.Timeout), 31},
		{QPAttrRetryCnt, uint64(attr.RetryCnt), 7},
		{QPAttrRNRRetry, uint64(attr.RNRRetry), 7},
		{QPAttrMinRNRTimer, uint64(attr.MinRNRTimer), 31},
		{QPAttrRQPSN, uint64(attr.RQPSN), 0xFFFFFF},
		{QPAttrSQPSN, uint64(attr.SQPSN), 0xFFFFFF},
		{QPAttrDestQPN, uint64(attr.DestQPNum), 0xFFFFFF},
		{QPAttrPathMigState, uint64(attr.PathMigState), uint64(MigArmed)},
	} {
		if mask&b.bit != 0 && b.value > b.max {
			return errorf(op, b.bit.field(), ErrInvalidArgument, "%d exceeds %d", b.value, b.max)
		}
	}
	if mask&QPAttrMaxQPRdAtomic != 0 && (attr.MaxRdAtomic < 0 || attr.MaxRdAtomic > d.attr.MaxQPInitRdAtom) {
		return errorf(op, "max_rd_atomic", ErrInvalidArgument, "%d outside 0..%d", attr.MaxRdAtomic, d.attr.MaxQPInitRdAtom)
	}
	if mask&QPAttrMaxDestRdAtomic != 0 && (attr.MaxDestRdAtomic < 0 || attr.MaxDestRdAtomic > d.attr.MaxQPRdAtom) {
		return errorf(op, "max_dest_rd_atomic", ErrInvalidArgument, "%d outside 0..%d", attr.MaxDestRdAtomic, d.attr.MaxQPRdAtom)
	}
	return nil
}

// applyQPAttr copies the attributes selected by mask from src into a.
func applyQPAttr(a, src *QPAttr, mask QPAttrMask) {
	if mask&QPAttrEnSQDAsyncNotify != 0 {
		a.EnSQDAsyncNotify = src.EnSQDAsyncNotify
	}
	if mask&QPAttrAccessFlags != 0 {
		a.QPAccessFlags = src.QPAccessFlags
	}
	if mask&QPAttrPKeyIndex != 0 {
		a.PKeyIndex = src.PKeyIndex
	}
	if mask&QPAttrPort != 0 {
		a.PortNum = src.PortNum
	}
	if mask&QPAttrQKey != 0 {
		a.QKey = src.QKey
	}
	if mask&QPAttrAV != 0 {
		a.AHAttr = src.AHAttr
	}
	if mask&QPAttrPathMTU != 0 {
		a.PathMTU = src.PathMTU
	}
	if mask&QPAttrTimeout != 0 {
		a.Timeout = src.Timeout
	}
	if mask&QPAttrRetryCnt != 0 {
		a.RetryCnt = src.RetryCnt
	}
	if mask&QPAttrRNRRetry != 0 {
		a.RNRRetry = src.RNRRetry
	}
	if mask&QPAttrRQPSN != 0 {
		a.RQPSN = src.RQPSN
	}
	if mask&QPAttrMaxQPRdAtomic != 0 {
		a.MaxRdAtomic = src.MaxRdAtomic
	}
	if mask&QPAttrMinRNRTimer != 0 {
		a.MinRNRTimer = src.MinRNRTimer
	}
	if mask&QPAttrSQPSN != 0 {
		a.SQPSN = src.SQPSN
	}
	if mask&QPAttrMaxDestRdAtomic != 0 {
		a.MaxDestRdAtomic = src.MaxDestRdAtomic
	}
	if mask&QPAttrPathMigState != 0 {
		a.PathMigState = src.PathMigState
	}
	if mask&QPAttrDestQPN != 0 {
		a.DestQPNum = src.DestQPNum
	}
	if mask&QPAttrSelectiveRepeat != 0 {
		a.SelectiveRepeat = src.SelectiveRepeat
	}
}

// applyTransportLocked hands the new attributes to the transport state
// machines and, on the way to RTR, connects the QP to its peer. Values were
// validated; what can still fail is the socket for the source port, and
// then nothing has changed. The caller holds mu and xmu.
func (qp *QP) applyTransportLocked(op string, a *QPAttr, mask QPAttrMask, cur, next QPState) error {
	tq := qp.tq
	if tq == nil {
		return nil
	}
	if mask&(QPAttrAV|QPAttrDestQPN) != 0 && next != QPStateReset && next != QPStateErr {
		if err := qp.connectLocked(op, a); err != nil {
			return err
		}
	}
	if qp.qpType == QPTypeUD && qp.sender == nil && next != QPStateReset && next != QPStateErr {
		if err := qp.openDatagramLocked(op); err != nil {
			return err
		}
	}
	if mask&QPAttrQKey != 0 {
		tq.SetQKey(a.QKey)
	}
	var errs []error
	set := func(bit QPAttrMask, err error) {
		if mask&bit != 0 && err != nil {
			errs = append(errs, err)
		}
	}
	if mask&QPAttrPathMTU != 0 {
		set(QPAttrPathMTU, tq.SetPathMTU(a.PathMTU.Bytes()))
	}
	if mask&QPAttrRQPSN != 0 {
		tq.SetRQPSN(psn.PSN(a.RQPSN))
	}
	if mask&QPAttrSQPSN != 0 {
		tq.SetSQPSN(psn.PSN(a.SQPSN))
	}
	if mask&QPAttrDestQPN != 0 {
		tq.SetDestQPN(a.DestQPNum)
	}
	set(QPAttrTimeout, tq.SetTimeout(a.Timeout))
	set(QPAttrRetryCnt, tq.SetRetryCnt(a.RetryCnt))
	set(QPAttrRNRRetry, tq.SetRNRRetry(a.RNRRetry))
	set(QPAttrMinRNRTimer, tq.SetMinRNRTimer(a.MinRNRTimer))
	set(QPAttrMaxQPRdAtomic, tq.SetMaxRdAtomic(a.MaxRdAtomic))
	set(QPAttrMaxDestRdAtomic, tq.SetMaxDestRdAtomic(a.MaxDestRdAtomic))
	if mask&QPAttrAccessFlags != 0 {
		tq.SetAccessFlags(a.QPAccessFlags)
	}
	if mask&QPAttrSelectiveRepeat != 0 {
		tq.SetSelectiveRepeat(a.SelectiveRepeat)
	}
	if len(errs) > 0 {
		// checkAttrValues admits only values the transport takes.
		return newError(op, "attr", ErrInvalidArgument, errors.Join(errs...).Error())
	}
	if next != cur || mask&QPAttrState != 0 {
		tq.SetState(next)
		if next == QPStateReset {
			qp.disconnectLocked()
			qp.dropKeysLocked()
			qp.sendCQ.dropClaims(qp.qpn, newError("PostSendWait", "qp", ErrInvalidState, "the QP was reset: its work requests were discarded"))
		}
	}
	qp.releaseOutputLocked()
	// RESET empties the queues; ERR flushes them through the CQs; RTS
	// starts work posted in SQD: the transport says when to run next.
	qp.dev.eng.schedule(qp)
	return nil
}

// noteTransportErrorLocked mirrors a move to ERR that the transport made by
// itself (an error completion, exhausted retries, a CQ overrun) into the
// QP's state, so that State and Query report ERR afterwards, as
// ibv_query_qp does on rxe. The caller holds xmu.
func (qp *QP) noteTransportErrorLocked() {
	if qp.tq != nil && qp.tq.State() == QPStateErr && !qp.errNoted {
		qp.errNoted = true
		qp.state.Store(int32(QPStateErr)) // already, from EnteringError
		qp.raiseQPEventsLocked(true)
	}
}

// checkSQDrainedLocked raises EventSQDrained once the send queue of a QP
// moved to SQD with en_sqd_async_notify has no work request in flight.
// The caller holds xmu.
func (qp *QP) checkSQDrainedLocked() {
	if qp.sqDraining && qp.State() == QPStateSQD && qp.tq != nil && qp.tq.SendQueueDrained() {
		qp.sqDraining = false
		qp.dev.events().post(AsyncEvent{Type: EventSQDrained, QP: qp})
	}
}
