package verbs

import (
	"fmt"
	"testing"

	"github.com/goroce/goroce/internal/transport"
)

// depths returns the transport's view of a QP's queues.
func depths(qp *QP) transport.Snapshot {
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	return qp.tq.Snapshot()
}

// Ports the bad flows of rdma-core's tests (utils.py post_rq_state_bad_flow,
// post_sq_state_bad_flow, full_rq_bad_flow, create_rq_with_larger_sgl_bad_flow)
// and checks the send work request validation of rxe.

func TestPostRecvStates(t *testing.T) {
	d := newDevice(t)
	pd := mustPD(t, d)
	cq := mustCQ(t, d, 16)
	for _, s := range []QPState{QPStateReset, QPStateInit, QPStateRTR, QPStateRTS, QPStateSQD, QPStateSQE, QPStateErr} {
		t.Run(s.String(), func(t *testing.T) {
			qp := mustQP(t, pd, QPTypeRC, cq)
			defer qp.Destroy()
			reach(t, qp, s)
			err := qp.PostRecv(&RecvWR{WRID: 1})
			if s == QPStateReset {
				wantErr(t, err, ErrInvalidState, "qp_state")
				return
			}
			wantErr(t, err, nil, "")
			got := pollAll(t, cq)
			if s == QPStateErr {
				if len(got) != 1 || got[0] != flushRecvWC(1, qp.QPN()) {
					t.Errorf("receive posted in ERR: completions %+v", got)
				}
			} else if len(got) != 0 {
				t.Errorf("completions %+v", got)
			}
		})
	}
}

func TestPostRecvAfterResetFromRTS(t *testing.T) {
	// post_rq_state_bad_flow: RTS -> RESET, then post_recv fails.
	d := newDevice(t)
	pd := mustPD(t, d)
	cq := mustCQ(t, d, 4)
	qp := mustQP(t, pd, QPTypeRC, cq)
	toState(t, qp, QPStateRTS)
	mustModify(t, qp, step{QPAttr{QPState: QPStateReset, CurQPState: QPStateRTS}, QPAttrState})
	wantErr(t, qp.PostRecv(&RecvWR{}), ErrInvalidState, "qp_state")
	wantErr(t, qp.PostSend(&SendWR{Opcode: WRSend}), ErrInvalidState, "qp_state")
}

func TestPostRecvQueue(t *testing.T) {
	d := newDevice(t)
	pd := mustPD(t, d)
	cq := mustCQ(t, d, 16)
	qp := mustQP(t, pd, QPTypeRC, cq)
	toState(t, qp, QPStateInit)
	c := qp.Cap()
	// Larger SGL than max_recv_sge.
	wantErr(t, qp.PostRecv(&RecvWR{SGList: make([]SGE, c.MaxRecvSGE+1)}), ErrInvalidArgument, "num_sge")
	wantErr(t, qp.PostRecv(nil), ErrInvalidArgument, "wr")
	wantErr(t, qp.PostRecv(&RecvWR{SGList: []SGE{{Length: 1 << 31}}}), ErrInvalidArgument, "sg_list")
	// Full RQ.
	for i := range c.MaxRecvWR {
		if err := qp.PostRecv(&RecvWR{WRID: uint64(i), SGList: []SGE{{Addr: uint64(i), Length: 8, LKey: 5}}}); err != nil {
			t.Fatalf("PostRecv %d: %v", i, err)
		}
	}
	wantErr(t, qp.PostRecv(&RecvWR{}), ErrNoMemory, "rq")
	if n := depths(qp).RQDepth; n != c.MaxRecvWR {
		t.Errorf("%d receives queued, want %d", n, c.MaxRecvWR)
	}
	// UC and UD queue receives as RC does.
	for _, typ := range []QPType{QPTypeUC, QPTypeUD} {
		other := mustQP(t, pd, typ, cq)
		toState(t, other, QPStateInit)
		for i := range c.MaxRecvWR {
			if err := other.PostRecv(&RecvWR{WRID: uint64(i)}); err != nil {
				t.Fatalf("%v PostRecv %d: %v", typ, i, err)
			}
		}
		wantErr(t, other.PostRecv(&RecvWR{}), ErrNoMemory, "rq")
	}
}

func TestPostSendStates(t *testing.T) {
	d := newDevice(t)
	pd := mustPD(t, d)
	cq := mustCQ(t, d, 16)
	for _, s := range []QPState{QPStateReset, QPStateInit, QPStateRTR, QPStateRTS, QPStateSQD, QPStateSQE, QPStateErr} {
		t.Run(s.String(), func(t *testing.T) {
			qp := mustQP(t, pd, QPTypeRC, cq)
			defer qp.Destroy()
			reach(t, qp, s)
			err := qp.PostSend(&SendWR{WRID: 7, Opcode: WRSend})
			switch s {
			case QPStateReset, QPStateInit, QPStateRTR:
				wantErr(t, err, ErrInvalidState, "qp_state")
				return
			}
			wantErr(t, err, nil, "")
			got := pollAll(t, cq)
			switch s {
			case QPStateSQE, QPStateErr:
				want := WorkCompletion{WRID: 7, Status: WCWRFlushErr, Opcode: WCSend, QPNum: qp.QPN()}
				if len(got) != 1 || got[0] != want {
					t.Errorf("send posted in %v: completions %+v", s, got)
				}
				if depths(qp).SQDepth != 0 {
					t.Error("flushed send was queued")
				}
			default:
				if n := depths(qp).SQDepth; len(got) != 0 || n != 1 {
					t.Errorf("send posted in %v: completions %+v, queued %d", s, got, n)
				}
			}
		})
	}
}

func TestPostSendValidation(t *testing.T) {
	d := newDevice(t)
	pd := mustPD(t, d)
	pd2 := mustPD(t, d)
	cq := mustCQ(t, d, 16)
	mr := mustMR(t, pd, 4096, AccessLocalWrite)
	ah, err := pd.CreateAH(remoteAV())
	if err != nil {
		t.Fatal(err)
	}
	ah2, err := pd2.CreateAH(remoteAV())
	if err != nil {
		t.Fatal(err)
	}
	deadAH, err := pd.CreateAH(remoteAV())
	if err != nil {
		t.Fatal(err)
	}
	if err := deadAH.Destroy(); err != nil {
		t.Fatal(err)
	}
	sge8 := []SGE{mr.SGE(0, 8)}
	ud := func(ah *AH) UDParams { return UDParams{AH: ah, RemoteQPN: 0x10, RemoteQKey: 0x11111111} }

	type tc struct {
		name  string
		typ   QPType
		wr    SendWR
		want  error
		field string
	}
	var tests []tc
	// Opcode validity per QP type (rxe_wr_opcode_info).
	valid := map[WROpcode][]QPType{
		WRRDMAWrite:         {QPTypeRC, QPTypeUC},
		WRRDMAWriteWithImm:  {QPTypeRC, QPTypeUC},
		WRSend:              {QPTypeRC, QPTypeUC, QPTypeUD},
		WRSendWithImm:       {QPTypeRC, QPTypeUC, QPTypeUD},
		WRRDMARead:          {QPTypeRC},
		WRAtomicCmpAndSwp:   {QPTypeRC},
		WRAtomicFetchAndAdd: {QPTypeRC},
		WRSendWithInv:       {QPTypeRC, QPTypeUC},
	}
	for op, types := range valid {
		for _, typ := range allQPTypes {
			wr := SendWR{Opcode: op, UD: ud(ah)}
			if lookupOpcode(op).atomic {
				wr.SGList = sge8
			}
			var want error = ErrInvalidArgument
			for _, ok := range types {
				if ok == typ {
					want = nil
				}
			}
			if op == WRSendWithInv && typ == QPTypeUC {
				// Valid in rxe's table, but no UC opcode carries an IETH.
				want = ErrNotSupported
			}
			tests = append(tests, tc{fmt.Sprintf("%v on %v", op, typ), typ, wr, want, "opcode"})
		}
	}
	// LOCAL_INV, BIND_MW, FLUSH and ATOMIC_WRITE: malformed requests
	// (mw_test.go and flush_test.go cover the rest).
	tests = append(tests,
		tc{"local-inv with data", QPTypeRC, SendWR{Opcode: WRLocalInv, SGList: sge8}, ErrInvalidArgument, "num_sge"},
		tc{"bind-mw without window", QPTypeRC, SendWR{Opcode: WRBindMW}, ErrInvalidArgument, "bind_mw.mw"},
		tc{"flush without placement type", QPTypeRC, SendWR{Opcode: WRFlush}, ErrInvalidArgument, "flush.type"},
		tc{"atomic-write without operand", QPTypeRC, SendWR{Opcode: WRAtomicWrite}, ErrInvalidArgument, "sg_list"},
		tc{"flush on UC", QPTypeUC, SendWR{Opcode: WRFlush}, ErrInvalidArgument, "opcode"},
		tc{"atomic-write on UD", QPTypeUD, SendWR{Opcode: WRAtomicWrite, UD: ud(ah)}, ErrInvalidArgument, "opcode"},
	)
	tests = append(tests,
		tc{"tso", QPTypeUD, SendWR{Opcode: WRTSO, UD: ud(ah)}, ErrInvalidArgument, "opcode"},
		tc{"opcode 12", QPTypeRC, SendWR{Opcode: 12}, ErrInvalidArgument, "opcode"},
		tc{"opcode -1", QPTypeRC, SendWR{Opcode: -1}, ErrInvalidArgument, "opcode"},
		tc{"too many SGEs", QPTypeRC, SendWR{Opcode: WRSend, SGList: make([]SGE, defaultCap.MaxSendSGE+1)}, ErrInvalidArgument, "num_sge"},
		tc{"2^31", QPTypeRC, SendWR{Opcode: WRRDMAWrite, SGList: []SGE{{Length: 1 << 30}, {Length: 1 << 30}}}, nil, ""},
		tc{"over 2^31", QPTypeRC, SendWR{Opcode: WRRDMAWrite, SGList: []SGE{{Length: 1 << 31}, {Length: 1}}}, ErrInvalidArgument, "sg_list"},
		tc{"atomic 4 bytes", QPTypeRC, SendWR{Opcode: WRAtomicFetchAndAdd, SGList: []SGE{mr.SGE(0, 4)}}, ErrInvalidArgument, "sg_list"},
		tc{"atomic no SGE", QPTypeRC, SendWR{Opcode: WRAtomicCmpAndSwp}, ErrInvalidArgument, "sg_list"},
		// The responder refuses a misaligned atomic (REM_INV_REQ_ERR).
		tc{"atomic misaligned", QPTypeRC, SendWR{Opcode: WRAtomicCmpAndSwp, SGList: sge8, Atomic: AtomicParams{RemoteAddr: 0x1004}}, nil, ""},
		tc{"atomic aligned", QPTypeRC, SendWR{Opcode: WRAtomicCmpAndSwp, SGList: sge8, Atomic: AtomicParams{RemoteAddr: 0x1008}}, nil, ""},
		tc{"unknown send flag", QPTypeRC, SendWR{Opcode: WRSend, SendFlags: 1 << 5}, ErrInvalidArgument, "send_flags"},
		tc{"ip csum", QPTypeUD, SendWR{Opcode: WRSend, SendFlags: SendIPCsum, UD: ud(ah)}, ErrNotSupported, "send_flags"},
		tc{"inline read", QPTypeRC, SendWR{Opcode: WRRDMARead, SendFlags: SendInline, SGList: sge8}, ErrInvalidArgument, "send_flags"},
		tc{"inline atomic", QPTypeRC, SendWR{Opcode: WRAtomicFetchAndAdd, SendFlags: SendInline, SGList: sge8}, ErrInvalidArgument, "send_flags"},
		tc{"inline too large", QPTypeRC, SendWR{Opcode: WRSend, SendFlags: SendInline, SGList: []SGE{mr.SGE(0, defaultCap.MaxInlineData+1)}}, ErrInvalidArgument, "sg_list"},
		tc{"inline max", QPTypeUC, SendWR{Opcode: WRRDMAWrite, SendFlags: SendInline, SGList: []SGE{mr.SGE(0, defaultCap.MaxInlineData)}}, nil, ""},
		tc{"inline bad lkey", QPTypeRC, SendWR{Opcode: WRSend, SendFlags: SendInline, SGList: []SGE{{Addr: mr.IOVA(), Length: 4, LKey: mr.LKey() ^ 1}}}, ErrInvalidArgument, "sg_list"},
		tc{"inline out of bounds", QPTypeRC, SendWR{Opcode: WRSend, SendFlags: SendInline, SGList: []SGE{{Addr: mr.IOVA() + 4090, Length: 8, LKey: mr.LKey()}}}, ErrInvalidArgument, "sg_list"},
		tc{"UD without AH", QPTypeUD, SendWR{Opcode: WRSend}, ErrInvalidArgument, "ud.ah"},
		tc{"UD AH of another PD", QPTypeUD, SendWR{Opcode: WRSend, UD: ud(ah2)}, ErrInvalidArgument, "ud.ah"},
		tc{"UD destroyed AH", QPTypeUD, SendWR{Opcode: WRSend, UD: ud(deadAH)}, ErrClosed, "ud.ah"},
		tc{"UD remote QPN", QPTypeUD, SendWR{Opcode: WRSend, UD: UDParams{AH: ah, RemoteQPN: 1 << 24}}, ErrInvalidArgument, "ud.remote_qpn"},
		tc{"UD send", QPTypeUD, SendWR{Opcode: WRSendWithImm, ImmData: 0x1234, SendFlags: SendSignaled | SendSolicited, UD: ud(ah)}, nil, ""},
	)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			qp, err := pd.CreateQP(QPInitAttr{QPType: tt.typ, SendCQ: cq, RecvCQ: cq, Cap: defaultCap})
			if err != nil {
				t.Fatal(err)
			}
			defer qp.Destroy()
			toState(t, qp, QPStateRTS)
			err = qp.PostSend(&tt.wr)
			wantErr(t, err, tt.want, tt.field)
			if tt.typ == QPTypeRC {
				// An accepted request is queued, or already completed
				// (with LOC_PROT_ERR when its lkeys name nothing).
				accepted := 0
				if tt.want == nil {
					accepted = 1
				}
				if n := depths(qp).SQDepth + len(pollAll(t, cq)); n != accepted {
					t.Errorf("%d work requests accepted, want %d", n, accepted)
				}
			}
		})
	}
	qp := mustQP(t, pd, QPTypeRC, cq)
	toState(t, qp, QPStateRTS)
	wantErr(t, qp.PostSend(nil), ErrInvalidArgument, "wr")
}

func TestPostSendQueueFull(t *testing.T) {
	d := newDevice(t)
	pd := mustPD(t, d)
	cq := mustCQ(t, d, 16)
	mr := mustMR(t, pd, 64, AccessLocalWrite)
	rc := mustQP(t, pd, QPTypeRC, cq)
	toState(t, rc, QPStateRTS)
	// Nothing answers at the AV's address, so every request stays
	// outstanding until its retries run out, long after this test.
	for range rc.Cap().MaxSendWR {
		if err := rc.PostSend(&SendWR{Opcode: WRSend, SGList: []SGE{mr.SGE(0, 8)}}); err != nil {
			t.Fatal(err)
		}
	}
	wantErr(t, rc.PostSend(&SendWR{Opcode: WRSend}), ErrNoMemory, "sq")
}

func TestFlushOnError(t *testing.T) {
	d := newDevice(t)
	pd := mustPD(t, d)
	scq, rcq := mustCQ(t, d, 16), mustCQ(t, d, 16)
	qp, err := pd.CreateQP(QPInitAttr{QPType: QPTypeRC, SendCQ: scq, RecvCQ: rcq, Cap: defaultCap})
	if err != nil {
		t.Fatal(err)
	}
	toState(t, qp, QPStateRTS)
	for i := range uint64(3) {
		if err := qp.PostRecv(&RecvWR{WRID: 100 + i}); err != nil {
			t.Fatal(err)
		}
	}
	ops := []WROpcode{WRSend, WRRDMAWrite, WRRDMARead}
	for i, op := range ops {
		if err := qp.PostSend(&SendWR{WRID: uint64(i), Opcode: op}); err != nil {
			t.Fatal(err)
		}
	}
	mustModify(t, qp, step{QPAttr{QPState: QPStateErr}, QPAttrState})
	sent := pollAll(t, scq)
	wantOps := []WCOpcode{WCSend, WCRDMAWrite, WCRDMARead}
	if len(sent) != 3 {
		t.Fatalf("send completions %+v", sent)
	}
	for i, wc := range sent {
		// Unsignaled work requests complete too: errors always do.
		if wc.WRID != uint64(i) || wc.Status != WCWRFlushErr || wc.Opcode != wantOps[i] || wc.QPNum != qp.QPN() {
			t.Errorf("send completion %d = %+v", i, wc)
		}
	}
	recv := pollAll(t, rcq)
	if len(recv) != 3 {
		t.Fatalf("receive completions %+v", recv)
	}
	for i, wc := range recv {
		if wc != flushRecvWC(100+uint64(i), qp.QPN()) {
			t.Errorf("receive completion %d = %+v", i, wc)
		}
	}
	// ERR -> ERR flushes nothing more; ERR -> RESET -> RTS works again.
	mustModify(t, qp, step{QPAttr{QPState: QPStateErr}, QPAttrState})
	if len(pollAll(t, scq))+len(pollAll(t, rcq)) != 0 {
		t.Error("ERR -> ERR produced completions")
	}
	mustModify(t, qp, step{QPAttr{QPState: QPStateReset}, QPAttrState})
	toState(t, qp, QPStateRTS)
	if err := qp.PostSend(&SendWR{Opcode: WRSend}); err != nil {
		t.Errorf("PostSend after recovery: %v", err)
	}
}

func TestResetDiscardsQueues(t *testing.T) {
	d := newDevice(t)
	pd := mustPD(t, d)
	cq := mustCQ(t, d, 16)
	qp := mustQP(t, pd, QPTypeRC, cq)
	toState(t, qp, QPStateRTS)
	if err := qp.PostRecv(&RecvWR{WRID: 1}); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostSend(&SendWR{WRID: 2, Opcode: WRSend}); err != nil {
		t.Fatal(err)
	}
	mustModify(t, qp, step{QPAttr{QPState: QPStateReset}, QPAttrState})
	if s := depths(qp); s.SQDepth != 0 || s.RQDepth != 0 {
		t.Errorf("RESET kept work requests: %+v", s)
	}
	if got := pollAll(t, cq); len(got) != 0 {
		t.Errorf("RESET produced completions %+v", got)
	}
}

func TestPostDoesNotAllocate(t *testing.T) {
	d := newDevice(t)
	pd := mustPD(t, d)
	cq := mustCQ(t, d, 16)
	mr := mustMR(t, pd, 64, AccessLocalWrite)
	qp := mustQP(t, pd, QPTypeRC, cq)
	toState(t, qp, QPStateRTS)
	send := &SendWR{Opcode: WRRDMAWrite, SGList: []SGE{mr.SGE(0, 8), mr.SGE(8, 8)}}
	inline := &SendWR{Opcode: WRSend, SendFlags: SendInline, SGList: []SGE{mr.SGE(0, 32)}}
	recv := &RecvWR{SGList: []SGE{mr.SGE(0, 64)}}
	allocs := testing.AllocsPerRun(100, func() {
		if err := qp.PostSend(send); err != nil {
			t.Fatal(err)
		}
		if err := qp.PostSend(inline); err != nil {
			t.Fatal(err)
		}
		if err := qp.PostRecv(recv); err != nil {
			t.Fatal(err)
		}
		// Start over with empty queues (RESET discards) without
		// leaving RTS for long.
		qp.xmu.Lock()
		qp.tq.SetState(QPStateReset)
		qp.tq.SetState(QPStateRTS)
		qp.xmu.Unlock()
	})
	if allocs != 0 {
		t.Errorf("posting allocates %v times", allocs)
	}
}
