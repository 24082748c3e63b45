package verbs

import (
	"net/netip"
	"testing"
)

// Ports rdma-core's tests/test_qp.py: create RC, UC and UD QPs, illegal
// caps, query.

func TestCreateQP(t *testing.T) {
	d := openDevice(t, DeviceConfig{Limits: &DeviceAttr{MaxQPWR: 64, MaxSGE: 8, MaxInlineData: 128}})
	pd := mustPD(t, d)
	cq := mustCQ(t, d, 16)
	otherCQ := mustCQ(t, openDevice(t, DeviceConfig{Addr: netip.MustParseAddr("127.0.1.5")}), 4)
	withCap := func(f func(*QPCap)) QPCap {
		c := defaultCap
		f(&c)
		return c
	}
	tests := []struct {
		name  string
		init  QPInitAttr
		want  error
		field string
	}{
		{"RC", QPInitAttr{QPType: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: defaultCap}, nil, ""},
		{"UC", QPInitAttr{QPType: QPTypeUC, SendCQ: cq, RecvCQ: cq, Cap: defaultCap}, nil, ""},
		{"UD", QPInitAttr{QPType: QPTypeUD, SendCQ: cq, RecvCQ: cq, Cap: defaultCap, SQSigAll: true}, nil, ""},
		{"no caps", QPInitAttr{QPType: QPTypeRC, SendCQ: cq, RecvCQ: cq}, nil, ""},
		{"max caps", QPInitAttr{QPType: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{64, 64, 8, 8, 128}}, nil, ""},
		{"RAW_PACKET", QPInitAttr{QPType: QPTypeRawPacket, SendCQ: cq, RecvCQ: cq}, ErrNotSupported, "qp_type"},
		{"XRC_SEND", QPInitAttr{QPType: QPTypeXRCSend, SendCQ: cq, RecvCQ: cq}, ErrNotSupported, "qp_type"},
		{"type 0", QPInitAttr{QPType: 0, SendCQ: cq, RecvCQ: cq}, ErrInvalidArgument, "qp_type"},
		{"no send CQ", QPInitAttr{QPType: QPTypeRC, RecvCQ: cq}, ErrInvalidArgument, "send_cq"},
		{"no recv CQ", QPInitAttr{QPType: QPTypeRC, SendCQ: cq}, ErrInvalidArgument, "recv_cq"},
		{"send CQ of another device", QPInitAttr{QPType: QPTypeRC, SendCQ: otherCQ, RecvCQ: cq}, ErrInvalidArgument, "send_cq"},
		{"recv CQ of another device", QPInitAttr{QPType: QPTypeRC, SendCQ: cq, RecvCQ: otherCQ}, ErrInvalidArgument, "recv_cq"},
		{"max_send_wr", QPInitAttr{QPType: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: withCap(func(c *QPCap) { c.MaxSendWR = 65 })}, ErrInvalidArgument, "max_send_wr"},
		{"max_send_wr uint32", QPInitAttr{QPType: QPTypeUD, SendCQ: cq, RecvCQ: cq, Cap: withCap(func(c *QPCap) { c.MaxSendWR = 0xffffffff })}, ErrInvalidArgument, "max_send_wr"},
		{"max_recv_wr", QPInitAttr{QPType: QPTypeUC, SendCQ: cq, RecvCQ: cq, Cap: withCap(func(c *QPCap) { c.MaxRecvWR = 65 })}, ErrInvalidArgument, "max_recv_wr"},
		{"max_send_sge", QPInitAttr{QPType: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: withCap(func(c *QPCap) { c.MaxSendSGE = 0xffff })}, ErrInvalidArgument, "max_send_sge"},
		{"max_recv_sge", QPInitAttr{QPType: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: withCap(func(c *QPCap) { c.MaxRecvSGE = 9 })}, ErrInvalidArgument, "max_recv_sge"},
		{"max_inline_data", QPInitAttr{QPType: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: withCap(func(c *QPCap) { c.MaxInlineData = 129 })}, ErrInvalidArgument, "max_inline_data"},
		{"negative", QPInitAttr{QPType: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: withCap(func(c *QPCap) { c.MaxSendWR = -1 })}, ErrInvalidArgument, "max_send_wr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			qp, err := pd.CreateQP(tt.init)
			wantErr(t, err, tt.want, tt.field)
			if err != nil {
				return
			}
			if qp.State() != QPStateReset || qp.Type() != tt.init.QPType || qp.PD() != pd {
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
			if attr.QPState != QPStateReset || attr.CurQPState != QPStateReset || attr.Cap != tt.init.Cap || attr.PortNum != 1 {
				t.Errorf("Query attr = %+v", attr)
			}
			if err := qp.Destroy(); err != nil {
				t.Fatal(err)
			}
			wantErr(t, qp.Destroy(), ErrClosed, "qp")
			_, _, err = qp.Query(0)
			wantErr(t, err, ErrClosed, "qp")
			wantErr(t, qp.Modify(&QPAttr{}, QPAttrState), ErrClosed, "qp")
			wantErr(t, qp.PostRecv(&RecvWR{}), ErrClosed, "qp")
			wantErr(t, qp.PostSend(&SendWR{}), ErrClosed, "qp")
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
	pd := mustPD(t, d)
	cq := mustCQ(t, d, 4)
	for _, typ := range []QPType{QPTypeRC, QPTypeUC, QPTypeUD} {
		qp := mustQP(t, pd, typ, cq)
		toState(t, qp, QPStateRTS)
		a, _, err := qp.Query(QPAttrState)
		if err != nil {
			t.Fatal(err)
		}
		if a.QPState != QPStateRTS || a.SQPSN != 0x77 {
			t.Errorf("%v: %+v", typ, a)
		}
		switch typ {
		case QPTypeRC:
			if a.Timeout != 14 || a.RetryCnt != 7 || a.RNRRetry != 7 || a.MaxRdAtomic != 1 ||
				a.MaxDestRdAtomic != 1 || a.MinRNRTimer != 12 || a.DestQPNum != 0x123 ||
				a.RQPSN != 0x42 || a.PathMTU != MTU1024 || a.AHAttr != remoteAV() ||
				a.QPAccessFlags != AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic {
				t.Errorf("RC attributes %+v", a)
			}
		case QPTypeUD:
			if a.QKey != 0x11111111 || a.PathMTU != MTU4096 {
				t.Errorf("UD attributes %+v", a)
			}
		}
		// pyverbs' modify_ud_qp: back to RESET keeps the QP usable.
		mustModify(t, qp, step{QPAttr{QPState: QPStateReset}, QPAttrState})
		if qp.State() != QPStateReset {
			t.Errorf("state %v", qp.State())
		}
		toState(t, qp, QPStateRTS)
	}
}
