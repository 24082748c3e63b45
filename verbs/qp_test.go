package verbs_test

import (
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// Ports rdma-core's tests/test_qp.py: create RC, UC and UD QPs, illegal
// caps, query.

func TestCreateQP(t *testing.T) {
	d := rdmatest.OpenDevice(t, verbs.DeviceConfig{Limits: &verbs.DeviceAttr{MaxQPWR: 64, MaxSGE: 8, MaxInlineData: 128}})
	pd := rdmatest.PD(t, d)
	cq := rdmatest.CQ(t, d, 16)
	otherCQ := rdmatest.CQ(t, rdmatest.OpenDevice(t, verbs.DeviceConfig{Addr: testkit.Addr(5)}), 4)
	withCap := func(f func(*verbs.QPCap)) verbs.QPCap {
		c := defaultCap
		f(&c)
		return c
	}
	tests := []struct {
		name  string
		init  verbs.QPInitAttr
		want  error
		field string
	}{
		{"RC", verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: defaultCap}, nil, ""},
		{"UC", verbs.QPInitAttr{QPType: verbs.QPTypeUC, SendCQ: cq, RecvCQ: cq, Cap: defaultCap}, nil, ""},
		{"UD", verbs.QPInitAttr{QPType: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq, Cap: defaultCap, SQSigAll: true}, nil, ""},
		{"no caps", verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq}, nil, ""},
		{"max caps", verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{64, 64, 8, 8, 128}}, nil, ""},
		{"RAW_PACKET", verbs.QPInitAttr{QPType: verbs.QPTypeRawPacket, SendCQ: cq, RecvCQ: cq}, verbs.ErrNotSupported, "qp_type"},
		{"XRC_SEND", verbs.QPInitAttr{QPType: verbs.QPTypeXRCSend, SendCQ: cq, RecvCQ: cq}, verbs.ErrNotSupported, "qp_type"},
		{"type 0", verbs.QPInitAttr{QPType: 0, SendCQ: cq, RecvCQ: cq}, verbs.ErrInvalidArgument, "qp_type"},
		{"no send CQ", verbs.QPInitAttr{QPType: verbs.QPTypeRC, RecvCQ: cq}, verbs.ErrInvalidArgument, "send_cq"},
		{"no recv CQ", verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq}, verbs.ErrInvalidArgument, "recv_cq"},
		{"send CQ of another device", verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: otherCQ, RecvCQ: cq}, verbs.ErrInvalidArgument, "send_cq"},
		{"recv CQ of another device", verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: otherCQ}, verbs.ErrInvalidArgument, "recv_cq"},
		{"max_send_wr", verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: withCap(func(c *verbs.QPCap) { c.MaxSendWR = 65 })}, verbs.ErrInvalidArgument, "max_send_wr"},
		{"max_send_wr uint32", verbs.QPInitAttr{QPType: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq, Cap: withCap(func(c *verbs.QPCap) { c.MaxSendWR = 0xffffffff })}, verbs.ErrInvalidArgument, "max_send_wr"},
		{"max_recv_wr", verbs.QPInitAttr{QPType: verbs.QPTypeUC, SendCQ: cq, RecvCQ: cq, Cap: withCap(func(c *verbs.QPCap) { c.MaxRecvWR = 65 })}, verbs.ErrInvalidArgument, "max_recv_wr"},
		{"max_send_sge", verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: withCap(func(c *verbs.QPCap) { c.MaxSendSGE = 0xffff })}, verbs.ErrInvalidArgument, "max_send_sge"},
		{"max_recv_sge", verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: withCap(func(c *verbs.QPCap) { c.MaxRecvSGE = 9 })}, verbs.ErrInvalidArgument, "max_recv_sge"},
		{"max_inline_data", verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: withCap(func(c *verbs.QPCap) { c.MaxInlineData = 129 })}, verbs.ErrInvalidArgument, "max_inline_data"},
		{"negative", verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: withCap(func(c *verbs.QPCap) { c.MaxSendWR = -1 })}, verbs.ErrInvalidArgument, "max_send_wr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			qp, err := pd.CreateQP(tt.init)
			rdmatest.WantError(t, err, tt.want, tt.field)
			if err != nil {
				return
			}
			if qp.State() != verbs.QPStateReset || qp.Type() != tt.init.QPType || qp.PD() != pd {
				t.Errorf("new QP: state %v type %v", qp.State(), qp.Type())
			}
			if qp.QPN() < 2 || qp.QPN() > 0xFFFFFF {
				t.Errorf("QPN %#x", qp.QPN())
			}
			if qp.Cap() != tt.init.Cap {
				t.Errorf("Cap = %+v, want %+v", qp.Cap(), tt.init.Cap)
			}
			attr, init, err := qp.Query(0)
			if err != nil {
				t.Fatal(err)
			}
			if init != tt.init {
				t.Errorf("Query init = %+v, want %+v", init, tt.init)
			}
			if attr.QPState != verbs.QPStateReset || attr.CurQPState != verbs.QPStateReset || attr.Cap != tt.init.Cap || attr.PortNum != 1 {
				t.Errorf("Query attr = %+v", attr)
			}
			if err := qp.Destroy(); err != nil {
				t.Fatal(err)
			}
			rdmatest.WantError(t, qp.Destroy(), verbs.ErrClosed, "qp")
			_, _, err = qp.Query(0)
			rdmatest.WantError(t, err, verbs.ErrClosed, "qp")
			rdmatest.WantError(t, qp.Modify(&verbs.QPAttr{}, verbs.QPAttrState), verbs.ErrClosed, "qp")
			rdmatest.WantError(t, qp.PostRecv(&verbs.RecvWR{}), verbs.ErrClosed, "qp")
			rdmatest.WantError(t, qp.PostSend(&verbs.SendWR{}), verbs.ErrClosed, "qp")
		})
	}
	// Every failed creation released what it took.
	if err := cq.Destroy(); err != nil {
		t.Errorf("CQ Destroy: %v", err)
	}
	if err := pd.Dealloc(); err != nil {
		t.Errorf("PD Dealloc: %v", err)
	}
}

func TestQueryQPAfterModify(t *testing.T) {
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	cq := rdmatest.CQ(t, d, 4)
	for _, typ := range []verbs.QPType{verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD} {
		qp := mustQP(t, pd, typ, cq)
		toState(t, qp, verbs.QPStateRTS)
		a, _, err := qp.Query(verbs.QPAttrState)
		if err != nil {
			t.Fatal(err)
		}
		if a.QPState != verbs.QPStateRTS || a.SQPSN != 0x77 {
			t.Errorf("%v: %+v", typ, a)
		}
		switch typ {
		case verbs.QPTypeRC:
			if a.Timeout != 14 || a.RetryCnt != 7 || a.RNRRetry != 7 || a.MaxRdAtomic != 1 ||
				a.MaxDestRdAtomic != 1 || a.MinRNRTimer != 12 || a.DestQPNum != 0x123 ||
				a.RQPSN != 0x42 || a.PathMTU != verbs.MTU1024 || a.AHAttr != remoteAV() ||
				a.QPAccessFlags != verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic {
				t.Errorf("RC attributes %+v", a)
			}
		case verbs.QPTypeUD:
			if a.QKey != 0x11111111 || a.PathMTU != verbs.MTU4096 {
				t.Errorf("UD attributes %+v", a)
			}
		}
		// pyverbs' modify_ud_qp: back to RESET keeps the QP usable.
		rdmatest.Modify(t, qp, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateReset}, Mask: verbs.QPAttrState})
		if qp.State() != verbs.QPStateReset {
			t.Errorf("state %v", qp.State())
		}
		toState(t, qp, verbs.QPStateRTS)
	}
}
