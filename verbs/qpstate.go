package verbs

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
				QPAttrAltPath|QPAttrAccessFlags|QPAttrPKeyIndex,
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
