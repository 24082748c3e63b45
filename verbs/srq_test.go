package verbs

import "testing"

// Ports rdma-core's tests/test_srq.py (create, modify limit, resize) and the
// receive bad flows of test_qpex.py applied to an SRQ.

func TestCreateSRQ(t *testing.T) {
	d := openDevice(t, DeviceConfig{Limits: &DeviceAttr{MaxSRQWR: 16, MaxSRQSGE: 4}})
	pd := mustPD(t, d)
	tests := []struct {
		name  string
		attr  SRQInitAttr
		want  error
		field string
		query SRQAttr
	}{
		{"ok", SRQInitAttr{MaxWR: 16, MaxSGE: 4}, nil, "", SRQAttr{MaxWR: 16, MaxSGE: 4}},
		{"sge 0 means 1", SRQInitAttr{MaxWR: 1}, nil, "", SRQAttr{MaxWR: 1, MaxSGE: 1}},
		{"armed at creation", SRQInitAttr{MaxWR: 8, MaxSGE: 1, SRQLimit: 8}, nil, "", SRQAttr{MaxWR: 8, MaxSGE: 1, SRQLimit: 8}},
		{"max_wr 0", SRQInitAttr{MaxWR: 0}, ErrInvalidArgument, "max_wr", SRQAttr{}},
		{"max_wr over", SRQInitAttr{MaxWR: 17}, ErrInvalidArgument, "max_wr", SRQAttr{}},
		{"max_sge over", SRQInitAttr{MaxWR: 4, MaxSGE: 5}, ErrInvalidArgument, "max_sge", SRQAttr{}},
		{"max_sge negative", SRQInitAttr{MaxWR: 4, MaxSGE: -1}, ErrInvalidArgument, "max_sge", SRQAttr{}},
		{"limit over max_wr", SRQInitAttr{MaxWR: 4, SRQLimit: 5}, ErrInvalidArgument, "srq_limit", SRQAttr{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srq, err := pd.CreateSRQ(tt.attr)
			wantErr(t, err, tt.want, tt.field)
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
			wantErr(t, srq.Destroy(), ErrClosed, "srq")
			_, err = srq.Query()
			wantErr(t, err, ErrClosed, "srq")
			wantErr(t, srq.Modify(SRQAttr{SRQLimit: 1}, SRQLimit), ErrClosed, "srq")
			wantErr(t, srq.PostRecv(&RecvWR{}), ErrClosed, "srq")
		})
	}
}

func TestSRQPostRecvAndLimit(t *testing.T) {
	d := newDevice(t)
	pd := mustPD(t, d)
	srq, err := pd.CreateSRQ(SRQInitAttr{MaxWR: 4, MaxSGE: 2})
	if err != nil {
		t.Fatal(err)
	}
	sges := []SGE{{Addr: 1, Length: 2, LKey: 3}, {Addr: 4, Length: 5, LKey: 6}}
	wantErr(t, srq.PostRecv(&RecvWR{SGList: make([]SGE, 3)}), ErrInvalidArgument, "num_sge")
	wantErr(t, srq.PostRecv(nil), ErrInvalidArgument, "wr")
	for i := range uint64(4) {
		if err := srq.PostRecv(&RecvWR{WRID: i, SGList: sges[:i%3]}); err != nil {
			t.Fatalf("PostRecv %d: %v", i, err)
		}
	}
	wantErr(t, srq.PostRecv(&RecvWR{WRID: 9}), ErrNoMemory, "srq")

	// Arm at 2: taking work requests until fewer than 2 remain fires the
	// limit once and disarms it.
	if err := srq.Modify(SRQAttr{SRQLimit: 2}, SRQLimit); err != nil {
		t.Fatal(err)
	}
	dst := recvWQE{sge: make([]SGE, 0, 2)}
	for i := range uint64(4) {
		if !srqTake(srq, &dst) || dst.wrID != i || len(dst.sge) != int(i%3) {
			t.Fatalf("take %d = %+v", i, dst)
		}
		if i == 2 && (dst.sge[0] != sges[0] || dst.sge[1] != sges[1] || dst.length != 7) {
			t.Errorf("SGEs not copied: %+v", dst)
		}
		wantEvents := uint64(0)
		if i >= 2 { // 1 or 0 left
			wantEvents = 1
		}
		if srq.limitEvents != wantEvents {
			t.Fatalf("after take %d: %d limit events, want %d", i, srq.limitEvents, wantEvents)
		}
	}
	if q, _ := srq.Query(); q.SRQLimit != 0 {
		t.Errorf("limit %d after firing, want 0 (disarmed)", q.SRQLimit)
	}
	if srqTake(srq, &dst) {
		t.Error("take from an empty SRQ")
	}
}

func TestSRQModify(t *testing.T) {
	d := openDevice(t, DeviceConfig{Limits: &DeviceAttr{MaxSRQWR: 32}})
	pd := mustPD(t, d)
	srq, err := pd.CreateSRQ(SRQInitAttr{MaxWR: 8, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint64(5) {
		if err := srq.PostRecv(&RecvWR{WRID: i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Modify(SRQAttr{SRQLimit: 3}, SRQLimit); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		attr  SRQAttr
		mask  SRQAttrMask
		want  error
		field string
	}{
		{"below posted", SRQAttr{MaxWR: 4}, SRQMaxWR, ErrInvalidArgument, "max_wr"},
		{"zero", SRQAttr{MaxWR: 0}, SRQMaxWR, ErrInvalidArgument, "max_wr"},
		{"over device", SRQAttr{MaxWR: 33}, SRQMaxWR, ErrInvalidArgument, "max_wr"},
		{"limit over size", SRQAttr{SRQLimit: 9}, SRQLimit, ErrInvalidArgument, "srq_limit"},
		{"limit negative", SRQAttr{SRQLimit: -1}, SRQLimit, ErrInvalidArgument, "srq_limit"},
		{"shrink under new limit", SRQAttr{MaxWR: 6, SRQLimit: 7}, SRQMaxWR | SRQLimit, ErrInvalidArgument, "srq_limit"},
		{"unknown mask", SRQAttr{}, 4, ErrInvalidArgument, "srq_attr_mask"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantErr(t, srq.Modify(tt.attr, tt.mask), tt.want, tt.field)
			if q, _ := srq.Query(); q.MaxWR != 8 || q.SRQLimit != 3 {
				t.Errorf("failed Modify changed the SRQ: %+v", q)
			}
		})
	}
	// Shrink to the posted count, keeping the entries in order.
	if err := srq.Modify(SRQAttr{MaxWR: 5}, SRQMaxWR); err != nil {
		t.Fatal(err)
	}
	wantErr(t, srq.PostRecv(&RecvWR{}), ErrNoMemory, "srq")
	// Grow and arm at once.
	if err := srq.Modify(SRQAttr{MaxWR: 32, SRQLimit: 10}, SRQMaxWR|SRQLimit); err != nil {
		t.Fatal(err)
	}
	if q, _ := srq.Query(); q.MaxWR != 32 || q.SRQLimit != 10 {
		t.Errorf("Query = %+v", q)
	}
	dst := recvWQE{sge: make([]SGE, 0, 1)}
	for i := range uint64(5) {
		if !srqTake(srq, &dst) || dst.wrID != i {
			t.Fatalf("entry %d lost in resize: %+v", i, dst)
		}
	}
	// Disarm with 0.
	if err := srq.Modify(SRQAttr{SRQLimit: 0}, SRQLimit); err != nil {
		t.Fatal(err)
	}
}

func TestSRQWithQPs(t *testing.T) {
	d := newDevice(t)
	pd := mustPD(t, d)
	cq := mustCQ(t, d, 8)
	srq, err := pd.CreateSRQ(SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	var qps []*QP
	for _, typ := range []QPType{QPTypeRC, QPTypeUC, QPTypeUD} {
		qp, err := pd.CreateQP(QPInitAttr{QPType: typ, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: defaultCap})
		if err != nil {
			t.Fatalf("CreateQP(%v) with SRQ: %v", typ, err)
		}
		if c := qp.Cap(); c.MaxRecvWR != 0 || c.MaxRecvSGE != 0 {
			t.Errorf("receive caps with an SRQ: %+v", c)
		}
		toState(t, qp, QPStateRTS)
		wantErr(t, qp.PostRecv(&RecvWR{}), ErrInvalidArgument, "srq")
		qps = append(qps, qp)
	}
	if err := srq.PostRecv(&RecvWR{WRID: 1}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, srq.Destroy(), ErrBusy, "srq")
	// A QP going to ERR leaves the SRQ's work requests alone.
	mustModify(t, qps[0], step{QPAttr{QPState: QPStateErr}, QPAttrState})
	if got := pollAll(t, cq); len(got) != 0 {
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
	_, err = pd.CreateQP(QPInitAttr{QPType: QPTypeRC, SendCQ: cq, RecvCQ: cq, SRQ: srq})
	wantErr(t, err, ErrClosed, "srq")
}
