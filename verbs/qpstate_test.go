package verbs

import (
	"fmt"
	"testing"
)

var allQPTypes = []QPType{QPTypeRC, QPTypeUC, QPTypeUD}

// reach moves a fresh QP to any state.
func reach(t *testing.T, qp *QP, s QPState) {
	t.Helper()
	switch s {
	case QPStateReset, QPStateInit, QPStateRTR, QPStateRTS:
		toState(t, qp, s)
	case QPStateSQD:
		toState(t, qp, QPStateRTS)
		mustModify(t, qp, step{QPAttr{QPState: QPStateSQD}, QPAttrState})
	case QPStateSQE:
		toState(t, qp, QPStateRTS)
		forceState(qp, QPStateSQE)
	case QPStateErr:
		toState(t, qp, QPStateInit) // RESET -> ERR is not a transition
		mustModify(t, qp, step{QPAttr{QPState: QPStateErr}, QPAttrState})
	default:
		t.Fatalf("cannot reach %v", s)
	}
}

func TestValidTransitions(t *testing.T) {
	type tc struct {
		from  QPState
		step  step
		types []QPType
	}
	to := func(s QPState) step { return step{QPAttr{QPState: s}, QPAttrState} }
	with := func(s step, f func(*QPAttr), m QPAttrMask) step {
		f(&s.attr)
		s.mask |= m
		return s
	}
	var tests []tc
	for _, typ := range allQPTypes {
		tests = append(tests,
			tc{QPStateReset, to(QPStateReset), []QPType{typ}},
			tc{QPStateReset, initStep(typ), []QPType{typ}},
			tc{QPStateInit, rtrStep(typ), []QPType{typ}},
			tc{QPStateRTR, rtsStep(typ), []QPType{typ}},
		)
	}
	for _, s := range []QPState{QPStateInit, QPStateRTR, QPStateRTS, QPStateSQD, QPStateErr} {
		tests = append(tests, tc{s, to(QPStateReset), allQPTypes}, tc{s, to(QPStateErr), allQPTypes})
	}
	tests = append(tests,
		// INIT -> INIT with the optional attributes.
		tc{QPStateInit, with(to(QPStateInit), func(a *QPAttr) { a.PortNum = 1; a.QPAccessFlags = AccessRemoteRead }, QPAttrPort|QPAttrPKeyIndex|QPAttrAccessFlags), []QPType{QPTypeRC, QPTypeUC}},
		tc{QPStateInit, with(to(QPStateInit), func(a *QPAttr) { a.PortNum = 1; a.QKey = 5 }, QPAttrPort|QPAttrPKeyIndex|QPAttrQKey), []QPType{QPTypeUD}},
		tc{QPStateInit, to(QPStateInit), allQPTypes},
		// INIT -> RTR with optional attributes.
		tc{QPStateInit, with(rtrStep(QPTypeRC), func(a *QPAttr) {}, QPAttrPKeyIndex|QPAttrAccessFlags), []QPType{QPTypeRC}},
		tc{QPStateInit, with(rtrStep(QPTypeUD), func(a *QPAttr) { a.QKey = 9 }, QPAttrPKeyIndex|QPAttrQKey), []QPType{QPTypeUD}},
		// RTR -> RTS with optional attributes.
		tc{QPStateRTR, with(rtsStep(QPTypeRC), func(a *QPAttr) { a.CurQPState = QPStateRTR; a.MinRNRTimer = 3 }, QPAttrCurState|QPAttrMinRNRTimer|QPAttrAccessFlags|QPAttrPathMigState), []QPType{QPTypeRC}},
		tc{QPStateRTR, with(rtsStep(QPTypeUD), func(a *QPAttr) { a.CurQPState = QPStateRTR }, QPAttrCurState|QPAttrQKey), []QPType{QPTypeUD}},
		// RTS -> RTS, RTS -> SQD, SQD -> SQD, SQD -> RTS.
		tc{QPStateRTS, to(QPStateRTS), allQPTypes},
		tc{QPStateRTS, with(to(QPStateRTS), func(a *QPAttr) { a.CurQPState = QPStateRTS; a.MinRNRTimer = 1 }, QPAttrCurState|QPAttrMinRNRTimer|QPAttrAccessFlags), []QPType{QPTypeRC}},
		tc{QPStateRTS, with(to(QPStateRTS), func(a *QPAttr) { a.QKey = 1 }, QPAttrQKey), []QPType{QPTypeUD}},
		tc{QPStateRTS, to(QPStateSQD), allQPTypes},
		tc{QPStateRTS, with(to(QPStateSQD), func(a *QPAttr) { a.EnSQDAsyncNotify = true }, QPAttrEnSQDAsyncNotify), allQPTypes},
		tc{QPStateSQD, to(QPStateSQD), allQPTypes},
		tc{QPStateSQD, with(to(QPStateSQD), func(a *QPAttr) { a.AHAttr = remoteAV(); a.Timeout = 3; a.MaxRdAtomic = 4; a.PortNum = 1 },
			QPAttrAV|QPAttrTimeout|QPAttrRetryCnt|QPAttrRNRRetry|QPAttrMaxQPRdAtomic|QPAttrMaxDestRdAtomic|QPAttrPort), []QPType{QPTypeRC}},
		tc{QPStateSQD, with(to(QPStateSQD), func(a *QPAttr) { a.AHAttr = remoteAV() }, QPAttrAV|QPAttrPKeyIndex), []QPType{QPTypeUC}},
		tc{QPStateSQD, with(to(QPStateSQD), func(a *QPAttr) { a.QKey = 3 }, QPAttrQKey|QPAttrPKeyIndex), []QPType{QPTypeUD}},
		tc{QPStateSQD, to(QPStateRTS), allQPTypes},
		tc{QPStateSQD, with(to(QPStateRTS), func(a *QPAttr) { a.CurQPState = QPStateSQD }, QPAttrCurState), allQPTypes},
		// SQE (UC and UD only reach it) -> RTS, ERR, RESET.
		tc{QPStateSQE, to(QPStateRTS), []QPType{QPTypeUC, QPTypeUD}},
		tc{QPStateSQE, with(to(QPStateRTS), func(a *QPAttr) { a.CurQPState = QPStateSQE }, QPAttrCurState|QPAttrAccessFlags), []QPType{QPTypeUC}},
		tc{QPStateSQE, with(to(QPStateRTS), func(a *QPAttr) { a.CurQPState = QPStateSQE; a.QKey = 2 }, QPAttrCurState|QPAttrQKey), []QPType{QPTypeUD}},
		tc{QPStateSQE, to(QPStateErr), []QPType{QPTypeUC, QPTypeUD}},
		tc{QPStateSQE, to(QPStateReset), []QPType{QPTypeUC, QPTypeUD}},
		// ERR -> ERR.
		tc{QPStateErr, to(QPStateErr), allQPTypes},
	)

	d := newDevice(t)
	pd := mustPD(t, d)
	cq := mustCQ(t, d, 64)
	for _, tt := range tests {
		for _, typ := range tt.types {
			want := tt.from
			if tt.step.mask&QPAttrState != 0 {
				want = tt.step.attr.QPState
			}
			t.Run(fmt.Sprintf("%v/%v->%v/%v", typ, tt.from, want, tt.step.mask), func(t *testing.T) {
				qp := mustQP(t, pd, typ, cq)
				defer qp.Destroy()
				reach(t, qp, tt.from)
				mustModify(t, qp, tt.step)
				if qp.State() != want {
					t.Fatalf("state %v, want %v", qp.State(), want)
				}
			})
		}
	}
}

func TestInvalidTransitions(t *testing.T) {
	pairs := [][2]QPState{
		{QPStateReset, QPStateRTR}, {QPStateReset, QPStateRTS}, {QPStateReset, QPStateSQD},
		{QPStateReset, QPStateSQE}, {QPStateReset, QPStateErr},
		{QPStateInit, QPStateRTS}, {QPStateInit, QPStateSQD}, {QPStateInit, QPStateSQE},
		{QPStateRTR, QPStateRTR}, {QPStateRTR, QPStateInit}, {QPStateRTR, QPStateSQD},
		{QPStateRTS, QPStateInit}, {QPStateRTS, QPStateRTR}, {QPStateRTS, QPStateSQE},
		{QPStateSQD, QPStateInit}, {QPStateSQD, QPStateRTR},
		{QPStateSQE, QPStateSQE}, {QPStateSQE, QPStateInit}, {QPStateSQE, QPStateSQD},
		{QPStateErr, QPStateInit}, {QPStateErr, QPStateRTS}, {QPStateErr, QPStateRTR},
	}
	d := newDevice(t)
	pd := mustPD(t, d)
	cq := mustCQ(t, d, 64)
	for _, typ := range allQPTypes {
		for _, p := range pairs {
			t.Run(fmt.Sprintf("%v/%v->%v", typ, p[0], p[1]), func(t *testing.T) {
				qp := mustQP(t, pd, typ, cq)
				defer qp.Destroy()
				reach(t, qp, p[0])
				err := qp.Modify(&QPAttr{QPState: p[1]}, QPAttrState)
				wantErr(t, err, ErrInvalidState, "qp_state")
				if qp.State() != p[0] {
					t.Errorf("state changed to %v", qp.State())
				}
			})
		}
	}
	// Modifying attributes without a state change is the cur -> cur
	// transition, which RTR does not have.
	qp := mustQP(t, pd, QPTypeRC, cq)
	reach(t, qp, QPStateRTR)
	wantErr(t, qp.Modify(&QPAttr{MinRNRTimer: 1}, QPAttrMinRNRTimer), ErrInvalidState, "qp_state")
	// An out-of-range state value.
	for _, s := range []QPState{-1, QPStateUnknown, 42} {
		wantErr(t, qp.Modify(&QPAttr{QPState: s}, QPAttrState), ErrInvalidArgument, "qp_state")
	}
}

func TestTransitionAttributeRules(t *testing.T) {
	add := func(s step, m QPAttrMask) step { s.mask |= m; return s }
	drop := func(s step, m QPAttrMask) step { s.mask &^= m; return s }
	tests := []struct {
		typ   QPType
		from  QPState
		step  step
		want  error
		field string
	}{
		// The first missing attribute in bit order: ACCESS_FLAGS (1<<3).
		{QPTypeRC, QPStateReset, step{QPAttr{QPState: QPStateInit}, QPAttrState}, ErrInvalidArgument, "qp_access_flags"},
		{QPTypeUD, QPStateReset, step{QPAttr{QPState: QPStateInit}, QPAttrState}, ErrInvalidArgument, "pkey_index"},
		{QPTypeRC, QPStateReset, drop(initStep(QPTypeRC), QPAttrAccessFlags), ErrInvalidArgument, "qp_access_flags"},
		{QPTypeUC, QPStateReset, drop(initStep(QPTypeUC), QPAttrPort), ErrInvalidArgument, "port_num"},
		{QPTypeUD, QPStateReset, drop(initStep(QPTypeUD), QPAttrQKey), ErrInvalidArgument, "qkey"},
		{QPTypeUD, QPStateReset, add(initStep(QPTypeUD), QPAttrAccessFlags), ErrInvalidArgument, "qp_access_flags"},
		{QPTypeRC, QPStateReset, add(initStep(QPTypeRC), QPAttrQKey), ErrInvalidArgument, "qkey"},
		{QPTypeRC, QPStateReset, add(step{QPAttr{QPState: QPStateReset}, QPAttrState}, QPAttrPort), ErrInvalidArgument, "port_num"},
		{QPTypeRC, QPStateInit, drop(rtrStep(QPTypeRC), QPAttrMinRNRTimer), ErrInvalidArgument, "min_rnr_timer"},
		{QPTypeRC, QPStateInit, drop(rtrStep(QPTypeRC), QPAttrAV|QPAttrDestQPN), ErrInvalidArgument, "ah_attr"},
		{QPTypeRC, QPStateInit, add(rtrStep(QPTypeRC), QPAttrCap), ErrInvalidArgument, "cap"},
		{QPTypeRC, QPStateInit, add(rtrStep(QPTypeRC), QPAttrSQPSN), ErrInvalidArgument, "sq_psn"},
		{QPTypeUC, QPStateInit, add(rtrStep(QPTypeUC), QPAttrMaxDestRdAtomic), ErrInvalidArgument, "max_dest_rd_atomic"},
		{QPTypeUD, QPStateInit, add(rtrStep(QPTypeUD), QPAttrAV), ErrInvalidArgument, "ah_attr"},
		{QPTypeUD, QPStateInit, add(rtrStep(QPTypeUD), QPAttrDestQPN), ErrInvalidArgument, "dest_qp_num"},
		{QPTypeRC, QPStateRTR, drop(rtsStep(QPTypeRC), QPAttrTimeout), ErrInvalidArgument, "timeout"},
		{QPTypeRC, QPStateRTR, drop(rtsStep(QPTypeRC), QPAttrMaxQPRdAtomic), ErrInvalidArgument, "max_rd_atomic"},
		{QPTypeUD, QPStateRTR, drop(rtsStep(QPTypeUD), QPAttrSQPSN), ErrInvalidArgument, "sq_psn"},
		{QPTypeUC, QPStateRTR, add(rtsStep(QPTypeUC), QPAttrTimeout), ErrInvalidArgument, "timeout"},
		{QPTypeUC, QPStateRTR, add(rtsStep(QPTypeUC), QPAttrMinRNRTimer), ErrInvalidArgument, "min_rnr_timer"},
		{QPTypeRC, QPStateRTR, add(rtsStep(QPTypeRC), QPAttrRateLimit), ErrInvalidArgument, "rate_limit"},
		{QPTypeRC, QPStateRTS, add(step{QPAttr{QPState: QPStateRTS}, QPAttrState}, QPAttrSQPSN), ErrInvalidArgument, "sq_psn"},
		{QPTypeRC, QPStateRTS, add(step{QPAttr{QPState: QPStateSQD}, QPAttrState}, QPAttrPort), ErrInvalidArgument, "port_num"},
		{QPTypeRC, QPStateInit, add(step{QPAttr{QPState: QPStateInit, CurQPState: QPStateInit}, QPAttrState}, QPAttrCurState), ErrInvalidArgument, "cur_qp_state"},
		{QPTypeUD, QPStateErr, add(step{QPAttr{QPState: QPStateReset}, QPAttrState}, QPAttrQKey), ErrInvalidArgument, "qkey"},
		{QPTypeRC, QPStateInit, add(rtrStep(QPTypeRC), 1<<21), ErrNotSupported, "attr_mask"},
		{QPTypeRC, QPStateInit, add(rtrStep(QPTypeRC), QPAttrAltPath), ErrNotSupported, "alt_ah_attr"},
		// CUR_STATE must be the actual state.
		{QPTypeRC, QPStateRTS, step{QPAttr{QPState: QPStateRTS, CurQPState: QPStateRTR}, QPAttrState | QPAttrCurState}, ErrInvalidState, "cur_qp_state"},
		{QPTypeUD, QPStateSQE, step{QPAttr{QPState: QPStateRTS, CurQPState: QPStateRTS}, QPAttrState | QPAttrCurState}, ErrInvalidState, "cur_qp_state"},
	}
	d := newDevice(t)
	pd := mustPD(t, d)
	cq := mustCQ(t, d, 64)
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/%v/%v", tt.typ, tt.from, tt.field), func(t *testing.T) {
			qp := mustQP(t, pd, tt.typ, cq)
			defer qp.Destroy()
			reach(t, qp, tt.from)
			before, _, _ := qp.Query(0)
			wantErr(t, qp.Modify(&tt.step.attr, tt.step.mask), tt.want, tt.field)
			if after, _, _ := qp.Query(0); after != before {
				t.Errorf("failed Modify changed the QP:\n%+v\n%+v", before, after)
			}
		})
	}
	qp := mustQP(t, pd, QPTypeRC, cq)
	wantErr(t, qp.Modify(nil, QPAttrState), ErrInvalidArgument, "attr")
}

func TestAttributeValueChecks(t *testing.T) {
	type mod func(*QPAttr)
	tests := []struct {
		typ   QPType
		from  QPState
		base  func(QPType) step
		mod   mod
		want  error
		field string
	}{
		{QPTypeRC, QPStateReset, initStep, func(a *QPAttr) { a.PortNum = 2 }, ErrInvalidArgument, "port_num"},
		{QPTypeRC, QPStateReset, initStep, func(a *QPAttr) { a.PortNum = 0 }, ErrInvalidArgument, "port_num"},
		{QPTypeUD, QPStateReset, initStep, func(a *QPAttr) { a.PKeyIndex = 1 }, ErrInvalidArgument, "pkey_index"},
		{QPTypeRC, QPStateReset, initStep, func(a *QPAttr) { a.QPAccessFlags = AccessMWBind }, ErrInvalidArgument, "qp_access_flags"},
		{QPTypeUD, QPStateReset, initStep, func(a *QPAttr) { a.QKey = 0x80000000 }, nil, ""}, // privileged Q_Key
		{QPTypeRC, QPStateInit, rtrStep, func(a *QPAttr) { a.PathMTU = 6 }, ErrInvalidArgument, "path_mtu"},
		{QPTypeRC, QPStateInit, rtrStep, func(a *QPAttr) { a.PathMTU = 0 }, ErrInvalidArgument, "path_mtu"},
		{QPTypeUC, QPStateInit, rtrStep, func(a *QPAttr) { a.PathMTU = MTU4096 }, nil, ""},
		{QPTypeRC, QPStateInit, rtrStep, func(a *QPAttr) { a.DestQPNum = 1 << 24 }, ErrInvalidArgument, "dest_qp_num"},
		{QPTypeRC, QPStateInit, rtrStep, func(a *QPAttr) { a.DestQPNum = 0xFFFFFF }, nil, ""},
		{QPTypeUC, QPStateInit, rtrStep, func(a *QPAttr) { a.RQPSN = 1 << 24 }, ErrInvalidArgument, "rq_psn"},
		{QPTypeRC, QPStateInit, rtrStep, func(a *QPAttr) { a.RQPSN = 0xFFFFFF }, nil, ""},
		{QPTypeRC, QPStateInit, rtrStep, func(a *QPAttr) { a.MaxDestRdAtomic = 129 }, ErrInvalidArgument, "max_dest_rd_atomic"},
		{QPTypeRC, QPStateInit, rtrStep, func(a *QPAttr) { a.MaxDestRdAtomic = -1 }, ErrInvalidArgument, "max_dest_rd_atomic"},
		{QPTypeRC, QPStateInit, rtrStep, func(a *QPAttr) { a.MaxDestRdAtomic = 128 }, nil, ""},
		{QPTypeRC, QPStateInit, rtrStep, func(a *QPAttr) { a.MinRNRTimer = 32 }, ErrInvalidArgument, "min_rnr_timer"},
		{QPTypeRC, QPStateInit, rtrStep, func(a *QPAttr) { a.MinRNRTimer = 31 }, nil, ""},
		{QPTypeRC, QPStateInit, rtrStep, func(a *QPAttr) { a.AHAttr.IsGlobal = false }, ErrInvalidArgument, "ah_attr.is_global"},
		{QPTypeUC, QPStateInit, rtrStep, func(a *QPAttr) { a.AHAttr.SGIDIndex = 7 }, ErrInvalidArgument, "ah_attr.sgid_index"},
		{QPTypeRC, QPStateInit, rtrStep, func(a *QPAttr) { a.AHAttr.PortNum = 0 }, ErrInvalidArgument, "ah_attr.port_num"},
		{QPTypeRC, QPStateInit, rtrStep, func(a *QPAttr) { a.AHAttr.DGID = GID{} }, ErrInvalidArgument, "ah_attr.dgid"},
		{QPTypeRC, QPStateRTR, rtsStep, func(a *QPAttr) { a.Timeout = 32 }, ErrInvalidArgument, "timeout"},
		{QPTypeRC, QPStateRTR, rtsStep, func(a *QPAttr) { a.Timeout = 31 }, nil, ""},
		{QPTypeRC, QPStateRTR, rtsStep, func(a *QPAttr) { a.Timeout = 0 }, nil, ""},
		{QPTypeRC, QPStateRTR, rtsStep, func(a *QPAttr) { a.RetryCnt = 8 }, ErrInvalidArgument, "retry_cnt"},
		{QPTypeRC, QPStateRTR, rtsStep, func(a *QPAttr) { a.RNRRetry = 8 }, ErrInvalidArgument, "rnr_retry"},
		{QPTypeRC, QPStateRTR, rtsStep, func(a *QPAttr) { a.MaxRdAtomic = 129 }, ErrInvalidArgument, "max_rd_atomic"},
		{QPTypeRC, QPStateRTR, rtsStep, func(a *QPAttr) { a.MaxRdAtomic = 12 }, nil, ""}, // pyverbs test_modify_rc_qp_rd_atomic
		{QPTypeUD, QPStateRTR, rtsStep, func(a *QPAttr) { a.SQPSN = 1 << 24 }, ErrInvalidArgument, "sq_psn"},
		{QPTypeUD, QPStateRTR, rtsStep, func(a *QPAttr) { a.SQPSN = 0x45 }, nil, ""},
	}
	d := newDevice(t)
	pd := mustPD(t, d)
	cq := mustCQ(t, d, 64)
	for i, tt := range tests {
		t.Run(fmt.Sprintf("%d/%v/%v", i, tt.typ, tt.field), func(t *testing.T) {
			qp := mustQP(t, pd, tt.typ, cq)
			defer qp.Destroy()
			reach(t, qp, tt.from)
			s := tt.base(tt.typ)
			tt.mod(&s.attr)
			before, _, _ := qp.Query(0)
			err := qp.Modify(&s.attr, s.mask)
			wantErr(t, err, tt.want, tt.field)
			after, _, _ := qp.Query(0)
			if tt.want != nil && after != before {
				t.Errorf("failed Modify changed the QP")
			}
			if tt.want == nil && after.QPState != s.attr.QPState {
				t.Errorf("state %v, want %v", after.QPState, s.attr.QPState)
			}
		})
	}
	// PSNs and access flags: an RTS -> RTS change of PATH_MIG_STATE.
	qp := mustQP(t, pd, QPTypeRC, cq)
	reach(t, qp, QPStateRTS)
	wantErr(t, qp.Modify(&QPAttr{QPState: QPStateRTS, PathMigState: 3}, QPAttrState|QPAttrPathMigState), ErrInvalidArgument, "path_mig_state")
	wantErr(t, qp.Modify(&QPAttr{QPState: QPStateRTS, PathMigState: MigArmed}, QPAttrState|QPAttrPathMigState), nil, "")
}

func TestTransitionTableShape(t *testing.T) {
	// QPAttrState is never listed (it is always allowed) and no cell lists
	// an attribute as both required and optional.
	for cur := range qpTransitions {
		for next, tr := range qpTransitions[cur] {
			for col := range 3 {
				if (tr.req[col]|tr.opt[col])&QPAttrState != 0 || tr.req[col]&tr.opt[col] != 0 {
					t.Errorf("%v -> %v column %d: req %v opt %v", QPState(cur), QPState(next), col, tr.req[col], tr.opt[col])
				}
				if !tr.valid && (tr.req[col] != 0 || tr.opt[col] != 0) {
					t.Errorf("%v -> %v: attributes on an invalid transition", QPState(cur), QPState(next))
				}
			}
		}
	}
	// Every state can be reset and errored except RESET (only RESET ->
	// RESET and RESET -> INIT are valid from RESET).
	for s := QPStateInit; s <= QPStateErr; s++ {
		if !qpTransitions[s][QPStateReset].valid || !qpTransitions[s][QPStateErr].valid {
			t.Errorf("%v cannot go to RESET or ERR", s)
		}
	}
	if qpTransitions[QPStateReset][QPStateErr].valid {
		t.Error("RESET -> ERR is valid")
	}
}
