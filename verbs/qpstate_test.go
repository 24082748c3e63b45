package verbs_test

import (
	"fmt"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
)

var allQPTypes = []verbs.QPType{verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD}

// reach moves a fresh QP to any state.
func reach(t *testing.T, qp *verbs.QP, s verbs.QPState) {
	t.Helper()
	switch s {
	case verbs.QPStateReset, verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS:
		toState(t, qp, s)
	case verbs.QPStateSQD:
		toState(t, qp, verbs.QPStateRTS)
		rdmatest.Modify(t, qp, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateSQD}, Mask: verbs.QPAttrState})
	case verbs.QPStateSQE:
		toState(t, qp, verbs.QPStateRTS)
		verbs.ForceState(qp, verbs.QPStateSQE)
	case verbs.QPStateErr:
		toState(t, qp, verbs.QPStateInit) // RESET -> ERR is not a transition
		rdmatest.Modify(t, qp, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateErr}, Mask: verbs.QPAttrState})
	default:
		t.Fatalf("cannot reach %v", s)
	}
}

func TestValidTransitions(t *testing.T) {
	type tc struct {
		from  verbs.QPState
		step  rdmatest.Transition
		types []verbs.QPType
	}
	to := func(s verbs.QPState) rdmatest.Transition {
		return rdmatest.Transition{Attr: verbs.QPAttr{QPState: s}, Mask: verbs.QPAttrState}
	}
	with := func(s rdmatest.Transition, f func(*verbs.QPAttr), m verbs.QPAttrMask) rdmatest.Transition {
		f(&s.Attr)
		s.Mask |= m
		return s
	}
	var tests []tc
	for _, typ := range allQPTypes {
		tests = append(tests,
			tc{verbs.QPStateReset, to(verbs.QPStateReset), []verbs.QPType{typ}},
			tc{verbs.QPStateReset, initStep(typ), []verbs.QPType{typ}},
			tc{verbs.QPStateInit, rtrStep(typ), []verbs.QPType{typ}},
			tc{verbs.QPStateRTR, rtsStep(typ), []verbs.QPType{typ}},
		)
	}
	for _, s := range []verbs.QPState{verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS, verbs.QPStateSQD, verbs.QPStateErr} {
		tests = append(tests, tc{s, to(verbs.QPStateReset), allQPTypes}, tc{s, to(verbs.QPStateErr), allQPTypes})
	}
	tests = append(tests,
		// INIT -> INIT with the optional attributes.
		tc{verbs.QPStateInit, with(to(verbs.QPStateInit), func(a *verbs.QPAttr) { a.PortNum = 1; a.QPAccessFlags = verbs.AccessRemoteRead }, verbs.QPAttrPort|verbs.QPAttrPKeyIndex|verbs.QPAttrAccessFlags), []verbs.QPType{verbs.QPTypeRC, verbs.QPTypeUC}},
		tc{verbs.QPStateInit, with(to(verbs.QPStateInit), func(a *verbs.QPAttr) { a.PortNum = 1; a.QKey = 5 }, verbs.QPAttrPort|verbs.QPAttrPKeyIndex|verbs.QPAttrQKey), []verbs.QPType{verbs.QPTypeUD}},
		tc{verbs.QPStateInit, to(verbs.QPStateInit), allQPTypes},
		// INIT -> RTR with optional attributes.
		tc{verbs.QPStateInit, with(rtrStep(verbs.QPTypeRC), func(a *verbs.QPAttr) {}, verbs.QPAttrPKeyIndex|verbs.QPAttrAccessFlags), []verbs.QPType{verbs.QPTypeRC}},
		tc{verbs.QPStateInit, with(rtrStep(verbs.QPTypeUD), func(a *verbs.QPAttr) { a.QKey = 9 }, verbs.QPAttrPKeyIndex|verbs.QPAttrQKey), []verbs.QPType{verbs.QPTypeUD}},
		// RTR -> RTS with optional attributes.
		tc{verbs.QPStateRTR, with(rtsStep(verbs.QPTypeRC), func(a *verbs.QPAttr) { a.CurQPState = verbs.QPStateRTR; a.MinRNRTimer = 3 }, verbs.QPAttrCurState|verbs.QPAttrMinRNRTimer|verbs.QPAttrAccessFlags|verbs.QPAttrPathMigState), []verbs.QPType{verbs.QPTypeRC}},
		tc{verbs.QPStateRTR, with(rtsStep(verbs.QPTypeUD), func(a *verbs.QPAttr) { a.CurQPState = verbs.QPStateRTR }, verbs.QPAttrCurState|verbs.QPAttrQKey), []verbs.QPType{verbs.QPTypeUD}},
		// RTS -> RTS, RTS -> SQD, SQD -> SQD, SQD -> RTS.
		tc{verbs.QPStateRTS, to(verbs.QPStateRTS), allQPTypes},
		tc{verbs.QPStateRTS, with(to(verbs.QPStateRTS), func(a *verbs.QPAttr) { a.CurQPState = verbs.QPStateRTS; a.MinRNRTimer = 1 }, verbs.QPAttrCurState|verbs.QPAttrMinRNRTimer|verbs.QPAttrAccessFlags), []verbs.QPType{verbs.QPTypeRC}},
		tc{verbs.QPStateRTS, with(to(verbs.QPStateRTS), func(a *verbs.QPAttr) { a.QKey = 1 }, verbs.QPAttrQKey), []verbs.QPType{verbs.QPTypeUD}},
		tc{verbs.QPStateRTS, to(verbs.QPStateSQD), allQPTypes},
		tc{verbs.QPStateRTS, with(to(verbs.QPStateSQD), func(a *verbs.QPAttr) { a.EnSQDAsyncNotify = true }, verbs.QPAttrEnSQDAsyncNotify), allQPTypes},
		tc{verbs.QPStateSQD, to(verbs.QPStateSQD), allQPTypes},
		tc{verbs.QPStateSQD, with(to(verbs.QPStateSQD), func(a *verbs.QPAttr) { a.AHAttr = remoteAV(); a.Timeout = 3; a.MaxRdAtomic = 4; a.PortNum = 1 },
			verbs.QPAttrAV|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrPort), []verbs.QPType{verbs.QPTypeRC}},
		tc{verbs.QPStateSQD, with(to(verbs.QPStateSQD), func(a *verbs.QPAttr) { a.AHAttr = remoteAV() }, verbs.QPAttrAV|verbs.QPAttrPKeyIndex), []verbs.QPType{verbs.QPTypeUC}},
		tc{verbs.QPStateSQD, with(to(verbs.QPStateSQD), func(a *verbs.QPAttr) { a.QKey = 3 }, verbs.QPAttrQKey|verbs.QPAttrPKeyIndex), []verbs.QPType{verbs.QPTypeUD}},
		tc{verbs.QPStateSQD, to(verbs.QPStateRTS), allQPTypes},
		tc{verbs.QPStateSQD, with(to(verbs.QPStateRTS), func(a *verbs.QPAttr) { a.CurQPState = verbs.QPStateSQD }, verbs.QPAttrCurState), allQPTypes},
		// SQE (UC and UD only reach it) -> RTS, ERR, RESET.
		tc{verbs.QPStateSQE, to(verbs.QPStateRTS), []verbs.QPType{verbs.QPTypeUC, verbs.QPTypeUD}},
		tc{verbs.QPStateSQE, with(to(verbs.QPStateRTS), func(a *verbs.QPAttr) { a.CurQPState = verbs.QPStateSQE }, verbs.QPAttrCurState|verbs.QPAttrAccessFlags), []verbs.QPType{verbs.QPTypeUC}},
		tc{verbs.QPStateSQE, with(to(verbs.QPStateRTS), func(a *verbs.QPAttr) { a.CurQPState = verbs.QPStateSQE; a.QKey = 2 }, verbs.QPAttrCurState|verbs.QPAttrQKey), []verbs.QPType{verbs.QPTypeUD}},
		tc{verbs.QPStateSQE, to(verbs.QPStateErr), []verbs.QPType{verbs.QPTypeUC, verbs.QPTypeUD}},
		tc{verbs.QPStateSQE, to(verbs.QPStateReset), []verbs.QPType{verbs.QPTypeUC, verbs.QPTypeUD}},
		// ERR -> ERR.
		tc{verbs.QPStateErr, to(verbs.QPStateErr), allQPTypes},
	)

	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	cq := rdmatest.CQ(t, d, 64)
	for _, tt := range tests {
		for _, typ := range tt.types {
			want := tt.from
			if tt.step.Mask&verbs.QPAttrState != 0 {
				want = tt.step.Attr.QPState
			}
			t.Run(fmt.Sprintf("%v/%v->%v/%v", typ, tt.from, want, tt.step.Mask), func(t *testing.T) {
				qp := mustQP(t, pd, typ, cq)
				defer qp.Destroy()
				reach(t, qp, tt.from)
				rdmatest.Modify(t, qp, tt.step)
				if qp.State() != want {
					t.Fatalf("state %v, want %v", qp.State(), want)
				}
			})
		}
	}
}

func TestInvalidTransitions(t *testing.T) {
	pairs := [][2]verbs.QPState{
		{verbs.QPStateReset, verbs.QPStateRTR}, {verbs.QPStateReset, verbs.QPStateRTS}, {verbs.QPStateReset, verbs.QPStateSQD},
		{verbs.QPStateReset, verbs.QPStateSQE}, {verbs.QPStateReset, verbs.QPStateErr},
		{verbs.QPStateInit, verbs.QPStateRTS}, {verbs.QPStateInit, verbs.QPStateSQD}, {verbs.QPStateInit, verbs.QPStateSQE},
		{verbs.QPStateRTR, verbs.QPStateRTR}, {verbs.QPStateRTR, verbs.QPStateInit}, {verbs.QPStateRTR, verbs.QPStateSQD},
		{verbs.QPStateRTS, verbs.QPStateInit}, {verbs.QPStateRTS, verbs.QPStateRTR}, {verbs.QPStateRTS, verbs.QPStateSQE},
		{verbs.QPStateSQD, verbs.QPStateInit}, {verbs.QPStateSQD, verbs.QPStateRTR},
		{verbs.QPStateSQE, verbs.QPStateSQE}, {verbs.QPStateSQE, verbs.QPStateInit}, {verbs.QPStateSQE, verbs.QPStateSQD},
		{verbs.QPStateErr, verbs.QPStateInit}, {verbs.QPStateErr, verbs.QPStateRTS}, {verbs.QPStateErr, verbs.QPStateRTR},
	}
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	cq := rdmatest.CQ(t, d, 64)
	for _, typ := range allQPTypes {
		for _, p := range pairs {
			t.Run(fmt.Sprintf("%v/%v->%v", typ, p[0], p[1]), func(t *testing.T) {
				qp := mustQP(t, pd, typ, cq)
				defer qp.Destroy()
				reach(t, qp, p[0])
				err := qp.Modify(&verbs.QPAttr{QPState: p[1]}, verbs.QPAttrState)
				rdmatest.WantError(t, err, verbs.ErrInvalidState, "qp_state")
				if qp.State() != p[0] {
					t.Errorf("state changed to %v", qp.State())
				}
			})
		}
	}
	// Modifying attributes without a state change is the cur -> cur
	// transition, which RTR does not have.
	qp := mustQP(t, pd, verbs.QPTypeRC, cq)
	reach(t, qp, verbs.QPStateRTR)
	rdmatest.WantError(t, qp.Modify(&verbs.QPAttr{MinRNRTimer: 1}, verbs.QPAttrMinRNRTimer), verbs.ErrInvalidState, "qp_state")
	// An out-of-range state value.
	for _, s := range []verbs.QPState{-1, verbs.QPStateUnknown, 42} {
		rdmatest.WantError(t, qp.Modify(&verbs.QPAttr{QPState: s}, verbs.QPAttrState), verbs.ErrInvalidArgument, "qp_state")
	}
}

func TestTransitionAttributeRules(t *testing.T) {
	add := func(s rdmatest.Transition, m verbs.QPAttrMask) rdmatest.Transition { s.Mask |= m; return s }
	drop := func(s rdmatest.Transition, m verbs.QPAttrMask) rdmatest.Transition { s.Mask &^= m; return s }
	tests := []struct {
		typ   verbs.QPType
		from  verbs.QPState
		step  rdmatest.Transition
		want  error
		field string
	}{
		// The first missing attribute in bit order: ACCESS_FLAGS (1<<3).
		{verbs.QPTypeRC, verbs.QPStateReset, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateInit}, Mask: verbs.QPAttrState}, verbs.ErrInvalidArgument, "qp_access_flags"},
		{verbs.QPTypeUD, verbs.QPStateReset, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateInit}, Mask: verbs.QPAttrState}, verbs.ErrInvalidArgument, "pkey_index"},
		{verbs.QPTypeRC, verbs.QPStateReset, drop(initStep(verbs.QPTypeRC), verbs.QPAttrAccessFlags), verbs.ErrInvalidArgument, "qp_access_flags"},
		{verbs.QPTypeUC, verbs.QPStateReset, drop(initStep(verbs.QPTypeUC), verbs.QPAttrPort), verbs.ErrInvalidArgument, "port_num"},
		{verbs.QPTypeUD, verbs.QPStateReset, drop(initStep(verbs.QPTypeUD), verbs.QPAttrQKey), verbs.ErrInvalidArgument, "qkey"},
		{verbs.QPTypeUD, verbs.QPStateReset, add(initStep(verbs.QPTypeUD), verbs.QPAttrAccessFlags), verbs.ErrInvalidArgument, "qp_access_flags"},
		{verbs.QPTypeRC, verbs.QPStateReset, add(initStep(verbs.QPTypeRC), verbs.QPAttrQKey), verbs.ErrInvalidArgument, "qkey"},
		{verbs.QPTypeRC, verbs.QPStateReset, add(rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateReset}, Mask: verbs.QPAttrState}, verbs.QPAttrPort), verbs.ErrInvalidArgument, "port_num"},
		{verbs.QPTypeRC, verbs.QPStateInit, drop(rtrStep(verbs.QPTypeRC), verbs.QPAttrMinRNRTimer), verbs.ErrInvalidArgument, "min_rnr_timer"},
		{verbs.QPTypeRC, verbs.QPStateInit, drop(rtrStep(verbs.QPTypeRC), verbs.QPAttrAV|verbs.QPAttrDestQPN), verbs.ErrInvalidArgument, "ah_attr"},
		{verbs.QPTypeRC, verbs.QPStateInit, add(rtrStep(verbs.QPTypeRC), verbs.QPAttrCap), verbs.ErrInvalidArgument, "cap"},
		{verbs.QPTypeRC, verbs.QPStateInit, add(rtrStep(verbs.QPTypeRC), verbs.QPAttrSQPSN), verbs.ErrInvalidArgument, "sq_psn"},
		{verbs.QPTypeUC, verbs.QPStateInit, add(rtrStep(verbs.QPTypeUC), verbs.QPAttrMaxDestRdAtomic), verbs.ErrInvalidArgument, "max_dest_rd_atomic"},
		{verbs.QPTypeUD, verbs.QPStateInit, add(rtrStep(verbs.QPTypeUD), verbs.QPAttrAV), verbs.ErrInvalidArgument, "ah_attr"},
		{verbs.QPTypeUD, verbs.QPStateInit, add(rtrStep(verbs.QPTypeUD), verbs.QPAttrDestQPN), verbs.ErrInvalidArgument, "dest_qp_num"},
		{verbs.QPTypeRC, verbs.QPStateRTR, drop(rtsStep(verbs.QPTypeRC), verbs.QPAttrTimeout), verbs.ErrInvalidArgument, "timeout"},
		{verbs.QPTypeRC, verbs.QPStateRTR, drop(rtsStep(verbs.QPTypeRC), verbs.QPAttrMaxQPRdAtomic), verbs.ErrInvalidArgument, "max_rd_atomic"},
		{verbs.QPTypeUD, verbs.QPStateRTR, drop(rtsStep(verbs.QPTypeUD), verbs.QPAttrSQPSN), verbs.ErrInvalidArgument, "sq_psn"},
		{verbs.QPTypeUC, verbs.QPStateRTR, add(rtsStep(verbs.QPTypeUC), verbs.QPAttrTimeout), verbs.ErrInvalidArgument, "timeout"},
		{verbs.QPTypeUC, verbs.QPStateRTR, add(rtsStep(verbs.QPTypeUC), verbs.QPAttrMinRNRTimer), verbs.ErrInvalidArgument, "min_rnr_timer"},
		{verbs.QPTypeRC, verbs.QPStateRTR, add(rtsStep(verbs.QPTypeRC), verbs.QPAttrRateLimit), verbs.ErrInvalidArgument, "rate_limit"},
		{verbs.QPTypeRC, verbs.QPStateRTS, add(rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateRTS}, Mask: verbs.QPAttrState}, verbs.QPAttrSQPSN), verbs.ErrInvalidArgument, "sq_psn"},
		{verbs.QPTypeRC, verbs.QPStateRTS, add(rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateSQD}, Mask: verbs.QPAttrState}, verbs.QPAttrPort), verbs.ErrInvalidArgument, "port_num"},
		{verbs.QPTypeRC, verbs.QPStateInit, add(rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateInit, CurQPState: verbs.QPStateInit}, Mask: verbs.QPAttrState}, verbs.QPAttrCurState), verbs.ErrInvalidArgument, "cur_qp_state"},
		{verbs.QPTypeUD, verbs.QPStateErr, add(rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateReset}, Mask: verbs.QPAttrState}, verbs.QPAttrQKey), verbs.ErrInvalidArgument, "qkey"},
		{verbs.QPTypeRC, verbs.QPStateInit, add(rtrStep(verbs.QPTypeRC), 1<<21), verbs.ErrNotSupported, "attr_mask"},
		{verbs.QPTypeRC, verbs.QPStateInit, add(rtrStep(verbs.QPTypeRC), verbs.QPAttrAltPath), verbs.ErrNotSupported, "alt_ah_attr"},
		// CUR_STATE must be the actual state.
		{verbs.QPTypeRC, verbs.QPStateRTS, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateRTS, CurQPState: verbs.QPStateRTR}, Mask: verbs.QPAttrState | verbs.QPAttrCurState}, verbs.ErrInvalidState, "cur_qp_state"},
		{verbs.QPTypeUD, verbs.QPStateSQE, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateRTS, CurQPState: verbs.QPStateRTS}, Mask: verbs.QPAttrState | verbs.QPAttrCurState}, verbs.ErrInvalidState, "cur_qp_state"},
	}
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	cq := rdmatest.CQ(t, d, 64)
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/%v/%v", tt.typ, tt.from, tt.field), func(t *testing.T) {
			qp := mustQP(t, pd, tt.typ, cq)
			defer qp.Destroy()
			reach(t, qp, tt.from)
			before, _, _ := qp.Query(0)
			rdmatest.WantError(t, qp.Modify(&tt.step.Attr, tt.step.Mask), tt.want, tt.field)
			if after, _, _ := qp.Query(0); after != before {
				t.Errorf("failed Modify changed the QP:\n%+v\n%+v", before, after)
			}
		})
	}
	qp := mustQP(t, pd, verbs.QPTypeRC, cq)
	rdmatest.WantError(t, qp.Modify(nil, verbs.QPAttrState), verbs.ErrInvalidArgument, "attr")
}

func TestAttributeValueChecks(t *testing.T) {
	type mod func(*verbs.QPAttr)
	tests := []struct {
		typ   verbs.QPType
		from  verbs.QPState
		base  func(verbs.QPType) rdmatest.Transition
		mod   mod
		want  error
		field string
	}{
		{verbs.QPTypeRC, verbs.QPStateReset, initStep, func(a *verbs.QPAttr) { a.PortNum = 2 }, verbs.ErrInvalidArgument, "port_num"},
		{verbs.QPTypeRC, verbs.QPStateReset, initStep, func(a *verbs.QPAttr) { a.PortNum = 0 }, verbs.ErrInvalidArgument, "port_num"},
		{verbs.QPTypeUD, verbs.QPStateReset, initStep, func(a *verbs.QPAttr) { a.PKeyIndex = 1 }, verbs.ErrInvalidArgument, "pkey_index"},
		{verbs.QPTypeRC, verbs.QPStateReset, initStep, func(a *verbs.QPAttr) { a.QPAccessFlags = verbs.AccessMWBind }, verbs.ErrInvalidArgument, "qp_access_flags"},
		{verbs.QPTypeUD, verbs.QPStateReset, initStep, func(a *verbs.QPAttr) { a.QKey = 0x80000000 }, nil, ""}, // privileged Q_Key
		{verbs.QPTypeRC, verbs.QPStateInit, rtrStep, func(a *verbs.QPAttr) { a.PathMTU = 6 }, verbs.ErrInvalidArgument, "path_mtu"},
		{verbs.QPTypeRC, verbs.QPStateInit, rtrStep, func(a *verbs.QPAttr) { a.PathMTU = 0 }, verbs.ErrInvalidArgument, "path_mtu"},
		{verbs.QPTypeUC, verbs.QPStateInit, rtrStep, func(a *verbs.QPAttr) { a.PathMTU = verbs.MTU4096 }, nil, ""},
		{verbs.QPTypeRC, verbs.QPStateInit, rtrStep, func(a *verbs.QPAttr) { a.DestQPNum = 1 << 24 }, verbs.ErrInvalidArgument, "dest_qp_num"},
		{verbs.QPTypeRC, verbs.QPStateInit, rtrStep, func(a *verbs.QPAttr) { a.DestQPNum = 0xFFFFFF }, nil, ""},
		{verbs.QPTypeUC, verbs.QPStateInit, rtrStep, func(a *verbs.QPAttr) { a.RQPSN = 1 << 24 }, verbs.ErrInvalidArgument, "rq_psn"},
		{verbs.QPTypeRC, verbs.QPStateInit, rtrStep, func(a *verbs.QPAttr) { a.RQPSN = 0xFFFFFF }, nil, ""},
		{verbs.QPTypeRC, verbs.QPStateInit, rtrStep, func(a *verbs.QPAttr) { a.MaxDestRdAtomic = 129 }, verbs.ErrInvalidArgument, "max_dest_rd_atomic"},
		{verbs.QPTypeRC, verbs.QPStateInit, rtrStep, func(a *verbs.QPAttr) { a.MaxDestRdAtomic = -1 }, verbs.ErrInvalidArgument, "max_dest_rd_atomic"},
		{verbs.QPTypeRC, verbs.QPStateInit, rtrStep, func(a *verbs.QPAttr) { a.MaxDestRdAtomic = 128 }, nil, ""},
		{verbs.QPTypeRC, verbs.QPStateInit, rtrStep, func(a *verbs.QPAttr) { a.MinRNRTimer = 32 }, verbs.ErrInvalidArgument, "min_rnr_timer"},
		{verbs.QPTypeRC, verbs.QPStateInit, rtrStep, func(a *verbs.QPAttr) { a.MinRNRTimer = 31 }, nil, ""},
		{verbs.QPTypeRC, verbs.QPStateInit, rtrStep, func(a *verbs.QPAttr) { a.AHAttr.IsGlobal = false }, verbs.ErrInvalidArgument, "ah_attr.is_global"},
		{verbs.QPTypeUC, verbs.QPStateInit, rtrStep, func(a *verbs.QPAttr) { a.AHAttr.SGIDIndex = 7 }, verbs.ErrInvalidArgument, "ah_attr.sgid_index"},
		{verbs.QPTypeRC, verbs.QPStateInit, rtrStep, func(a *verbs.QPAttr) { a.AHAttr.PortNum = 0 }, verbs.ErrInvalidArgument, "ah_attr.port_num"},
		{verbs.QPTypeRC, verbs.QPStateInit, rtrStep, func(a *verbs.QPAttr) { a.AHAttr.DGID = verbs.GID{} }, verbs.ErrInvalidArgument, "ah_attr.dgid"},
		{verbs.QPTypeRC, verbs.QPStateRTR, rtsStep, func(a *verbs.QPAttr) { a.Timeout = 32 }, verbs.ErrInvalidArgument, "timeout"},
		{verbs.QPTypeRC, verbs.QPStateRTR, rtsStep, func(a *verbs.QPAttr) { a.Timeout = 31 }, nil, ""},
		{verbs.QPTypeRC, verbs.QPStateRTR, rtsStep, func(a *verbs.QPAttr) { a.Timeout = 0 }, nil, ""},
		{verbs.QPTypeRC, verbs.QPStateRTR, rtsStep, func(a *verbs.QPAttr) { a.RetryCnt = 8 }, verbs.ErrInvalidArgument, "retry_cnt"},
		{verbs.QPTypeRC, verbs.QPStateRTR, rtsStep, func(a *verbs.QPAttr) { a.RNRRetry = 8 }, verbs.ErrInvalidArgument, "rnr_retry"},
		{verbs.QPTypeRC, verbs.QPStateRTR, rtsStep, func(a *verbs.QPAttr) { a.MaxRdAtomic = 129 }, verbs.ErrInvalidArgument, "max_rd_atomic"},
		{verbs.QPTypeRC, verbs.QPStateRTR, rtsStep, func(a *verbs.QPAttr) { a.MaxRdAtomic = 12 }, nil, ""}, // pyverbs test_modify_rc_qp_rd_atomic
		{verbs.QPTypeUD, verbs.QPStateRTR, rtsStep, func(a *verbs.QPAttr) { a.SQPSN = 1 << 24 }, verbs.ErrInvalidArgument, "sq_psn"},
		{verbs.QPTypeUD, verbs.QPStateRTR, rtsStep, func(a *verbs.QPAttr) { a.SQPSN = 0x45 }, nil, ""},
	}
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	cq := rdmatest.CQ(t, d, 64)
	for i, tt := range tests {
		t.Run(fmt.Sprintf("%d/%v/%v", i, tt.typ, tt.field), func(t *testing.T) {
			qp := mustQP(t, pd, tt.typ, cq)
			defer qp.Destroy()
			reach(t, qp, tt.from)
			s := tt.base(tt.typ)
			tt.mod(&s.Attr)
			before, _, _ := qp.Query(0)
			err := qp.Modify(&s.Attr, s.Mask)
			rdmatest.WantError(t, err, tt.want, tt.field)
			after, _, _ := qp.Query(0)
			if tt.want != nil && after != before {
				t.Errorf("failed Modify changed the QP")
			}
			if tt.want == nil && after.QPState != s.Attr.QPState {
				t.Errorf("state %v, want %v", after.QPState, s.Attr.QPState)
			}
		})
	}
	// PSNs and access flags: an RTS -> RTS change of PATH_MIG_STATE.
	qp := mustQP(t, pd, verbs.QPTypeRC, cq)
	reach(t, qp, verbs.QPStateRTS)
	rdmatest.WantError(t, qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, PathMigState: 3}, verbs.QPAttrState|verbs.QPAttrPathMigState), verbs.ErrInvalidArgument, "path_mig_state")
	rdmatest.WantError(t, qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, PathMigState: verbs.MigArmed}, verbs.QPAttrState|verbs.QPAttrPathMigState), nil, "")
}
