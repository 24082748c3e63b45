package verbs_test

import (
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
)

// Ports rdma-core's tests/test_srq.py (create, modify limit, resize) and the
// receive bad flows of test_qpex.py applied to an SRQ.

func TestCreateSRQ(t *testing.T) {
	d := rdmatest.OpenDevice(t, verbs.DeviceConfig{Limits: &verbs.DeviceAttr{MaxSRQWR: 16, MaxSRQSGE: 4}})
	pd := rdmatest.PD(t, d)
	tests := []struct {
		name  string
		attr  verbs.SRQInitAttr
		want  error
		field string
		query verbs.SRQAttr
	}{
		{"ok", verbs.SRQInitAttr{MaxWR: 16, MaxSGE: 4}, nil, "", verbs.SRQAttr{MaxWR: 16, MaxSGE: 4}},
		{"sge 0 means 1", verbs.SRQInitAttr{MaxWR: 1}, nil, "", verbs.SRQAttr{MaxWR: 1, MaxSGE: 1}},
		{"armed at creation", verbs.SRQInitAttr{MaxWR: 8, MaxSGE: 1, SRQLimit: 8}, nil, "", verbs.SRQAttr{MaxWR: 8, MaxSGE: 1, SRQLimit: 8}},
		{"max_wr 0", verbs.SRQInitAttr{MaxWR: 0}, verbs.ErrInvalidArgument, "max_wr", verbs.SRQAttr{}},
		{"max_wr over", verbs.SRQInitAttr{MaxWR: 17}, verbs.ErrInvalidArgument, "max_wr", verbs.SRQAttr{}},
		{"max_sge over", verbs.SRQInitAttr{MaxWR: 4, MaxSGE: 5}, verbs.ErrInvalidArgument, "max_sge", verbs.SRQAttr{}},
		{"max_sge negative", verbs.SRQInitAttr{MaxWR: 4, MaxSGE: -1}, verbs.ErrInvalidArgument, "max_sge", verbs.SRQAttr{}},
		{"limit over max_wr", verbs.SRQInitAttr{MaxWR: 4, SRQLimit: 5}, verbs.ErrInvalidArgument, "srq_limit", verbs.SRQAttr{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srq, err := pd.CreateSRQ(tt.attr)
			rdmatest.WantError(t, err, tt.want, tt.field)
			if err != nil {
				return
			}
			if q, err := srq.Query(); err != nil || q != tt.query {
				t.Errorf("Query = %+v, %v; want %+v", q, err, tt.query)
			}
			if srq.PD() != pd {
				t.Error("SRQ.PD")
			}
			if err := srq.Destroy(); err != nil {
				t.Fatal(err)
			}
			rdmatest.WantError(t, srq.Destroy(), verbs.ErrClosed, "srq")
			_, err = srq.Query()
			rdmatest.WantError(t, err, verbs.ErrClosed, "srq")
			rdmatest.WantError(t, srq.Modify(&verbs.SRQAttr{SRQLimit: 1}, verbs.SRQLimit), verbs.ErrClosed, "srq")
			rdmatest.WantError(t, srq.PostRecv(&verbs.RecvWR{}), verbs.ErrClosed, "srq")
		})
	}
}

func TestSRQPostRecvAndLimit(t *testing.T) {
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	srq, err := pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 4, MaxSGE: 2})
	if err != nil {
		t.Fatal(err)
	}
	sges := []verbs.SGE{{Addr: 1, Length: 2, LKey: 3}, {Addr: 4, Length: 5, LKey: 6}}
	rdmatest.WantError(t, srq.PostRecv(&verbs.RecvWR{SGList: make([]verbs.SGE, 3)}), verbs.ErrInvalidArgument, "num_sge")
	rdmatest.WantError(t, srq.PostRecv(nil), verbs.ErrInvalidArgument, "wr")
	for i := range uint64(4) {
		if err := srq.PostRecv(&verbs.RecvWR{WRID: i, SGList: sges[:i%3]}); err != nil {
			t.Fatalf("PostRecv %d: %v", i, err)
		}
	}
	rdmatest.WantError(t, srq.PostRecv(&verbs.RecvWR{WRID: 9}), verbs.ErrNoMemory, "srq")

	// Arm at 2: taking work requests until fewer than 2 remain fires the
	// limit once and disarms it.
	if err := srq.Modify(&verbs.SRQAttr{SRQLimit: 2}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	for i := range uint64(4) {
		wr, length, ok := verbs.SRQTake(srq)
		if !ok || wr.WRID != i || len(wr.SGList) != int(i%3) {
			t.Fatalf("take %d = %+v, %v", i, wr, ok)
		}
		if i == 2 && (wr.SGList[0] != sges[0] || wr.SGList[1] != sges[1] || length != 7) {
			t.Errorf("SGEs not copied: %+v (%d bytes)", wr, length)
		}
		wantEvents := uint64(0)
		if i >= 2 { // 1 or 0 left
			wantEvents = 1
		}
		if n := verbs.SRQLimitEvents(srq); n != wantEvents {
			t.Fatalf("after take %d: %d limit events, want %d", i, n, wantEvents)
		}
	}
	if q, _ := srq.Query(); q.SRQLimit != 0 {
		t.Errorf("limit %d after firing, want 0 (disarmed)", q.SRQLimit)
	}
	if _, _, ok := verbs.SRQTake(srq); ok {
		t.Error("take from an empty SRQ")
	}
}

func TestSRQModify(t *testing.T) {
	d := rdmatest.OpenDevice(t, verbs.DeviceConfig{Limits: &verbs.DeviceAttr{MaxSRQWR: 32}})
	pd := rdmatest.PD(t, d)
	srq, err := pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 8, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint64(5) {
		if err := srq.PostRecv(&verbs.RecvWR{WRID: i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Modify(&verbs.SRQAttr{SRQLimit: 3}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		attr  verbs.SRQAttr
		mask  verbs.SRQAttrMask
		want  error
		field string
	}{
		{"below posted", verbs.SRQAttr{MaxWR: 4}, verbs.SRQMaxWR, verbs.ErrInvalidArgument, "max_wr"},
		{"zero", verbs.SRQAttr{MaxWR: 0}, verbs.SRQMaxWR, verbs.ErrInvalidArgument, "max_wr"},
		{"over device", verbs.SRQAttr{MaxWR: 33}, verbs.SRQMaxWR, verbs.ErrInvalidArgument, "max_wr"},
		{"limit over size", verbs.SRQAttr{SRQLimit: 9}, verbs.SRQLimit, verbs.ErrInvalidArgument, "srq_limit"},
		{"limit negative", verbs.SRQAttr{SRQLimit: -1}, verbs.SRQLimit, verbs.ErrInvalidArgument, "srq_limit"},
		{"shrink under new limit", verbs.SRQAttr{MaxWR: 6, SRQLimit: 7}, verbs.SRQMaxWR | verbs.SRQLimit, verbs.ErrInvalidArgument, "srq_limit"},
		{"unknown mask", verbs.SRQAttr{}, 4, verbs.ErrInvalidArgument, "srq_attr_mask"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rdmatest.WantError(t, srq.Modify(&tt.attr, tt.mask), tt.want, tt.field)
			if q, _ := srq.Query(); q.MaxWR != 8 || q.SRQLimit != 3 {
				t.Errorf("failed Modify changed the SRQ: %+v", q)
			}
		})
	}
	// Shrink to the posted count, keeping the entries in order.
	if err := srq.Modify(&verbs.SRQAttr{MaxWR: 5}, verbs.SRQMaxWR); err != nil {
		t.Fatal(err)
	}
	rdmatest.WantError(t, srq.PostRecv(&verbs.RecvWR{}), verbs.ErrNoMemory, "srq")
	// Grow and arm at once.
	if err := srq.Modify(&verbs.SRQAttr{MaxWR: 32, SRQLimit: 10}, verbs.SRQMaxWR|verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	if q, _ := srq.Query(); q.MaxWR != 32 || q.SRQLimit != 10 {
		t.Errorf("Query = %+v", q)
	}
	for i := range uint64(5) {
		if wr, _, ok := verbs.SRQTake(srq); !ok || wr.WRID != i {
			t.Fatalf("entry %d lost in resize: %+v", i, wr)
		}
	}
	// Disarm with 0.
	if err := srq.Modify(&verbs.SRQAttr{SRQLimit: 0}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
}

func TestSRQWithQPs(t *testing.T) {
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	cq := rdmatest.CQ(t, d, 8)
	srq, err := pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	var qps []*verbs.QP
	for _, typ := range []verbs.QPType{verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD} {
		qp, err := pd.CreateQP(verbs.QPInitAttr{QPType: typ, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: defaultCap})
		if err != nil {
			t.Fatalf("CreateQP(%v) with SRQ: %v", typ, err)
		}
		if c := qp.Cap(); c.MaxRecvWR != 0 || c.MaxRecvSGE != 0 {
			t.Errorf("receive caps with an SRQ: %+v", c)
		}
		toState(t, qp, verbs.QPStateRTS)
		rdmatest.WantError(t, qp.PostRecv(&verbs.RecvWR{}), verbs.ErrInvalidArgument, "srq")
		qps = append(qps, qp)
	}
	if err := srq.PostRecv(&verbs.RecvWR{WRID: 1}); err != nil {
		t.Fatal(err)
	}
	rdmatest.WantError(t, srq.Destroy(), verbs.ErrBusy, "srq")
	// A QP going to ERR leaves the SRQ's work requests alone.
	rdmatest.Modify(t, qps[0], rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateErr}, Mask: verbs.QPAttrState})
	if got := rdmatest.Poll(t, cq); len(got) != 0 {
		t.Errorf("SRQ work requests flushed: %v", got)
	}
	for _, qp := range qps {
		if err := qp.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Destroy(); err != nil {
		t.Errorf("Destroy after the QPs: %v", err)
	}
	_, err = pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, SRQ: srq})
	rdmatest.WantError(t, err, verbs.ErrClosed, "srq")
}
