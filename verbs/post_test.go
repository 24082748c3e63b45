package verbs_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
)

// Ports the bad flows of rdma-core's tests (utils.py post_rq_state_bad_flow,
// post_sq_state_bad_flow, full_rq_bad_flow, create_rq_with_larger_sgl_bad_flow)
// and checks the send work request validation of rxe.

// flushRecvWC is the completion of a receive work request flushed from
// qp: WR_FLUSH_ERR, with nothing but its wr_id, opcode and QP number.
func flushRecvWC(wrID uint64, qpn uint32) verbs.WorkCompletion {
	return verbs.WorkCompletion{WRID: wrID, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPNum: qpn}
}

func TestPostRecvStates(t *testing.T) {
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	cq := rdmatest.CQ(t, d, 16)
	for _, s := range []verbs.QPState{verbs.QPStateReset, verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS, verbs.QPStateSQD, verbs.QPStateSQE, verbs.QPStateErr} {
		t.Run(s.String(), func(t *testing.T) {
			qp := mustQP(t, pd, verbs.QPTypeRC, cq)
			defer qp.Destroy()
			reach(t, qp, s)
			err := qp.PostRecv(&verbs.RecvWR{WRID: 1})
			if s == verbs.QPStateReset {
				rdmatest.WantError(t, err, verbs.ErrInvalidState, "qp_state")
				return
			}
			rdmatest.WantError(t, err, nil, "")
			got := rdmatest.Poll(t, cq)
			if s == verbs.QPStateErr {
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
	pd := rdmatest.PD(t, d)
	cq := rdmatest.CQ(t, d, 4)
	qp := mustQP(t, pd, verbs.QPTypeRC, cq)
	toState(t, qp, verbs.QPStateRTS)
	rdmatest.Modify(t, qp, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateReset, CurQPState: verbs.QPStateRTS}, Mask: verbs.QPAttrState})
	rdmatest.WantError(t, qp.PostRecv(&verbs.RecvWR{}), verbs.ErrInvalidState, "qp_state")
	rdmatest.WantError(t, qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend}), verbs.ErrInvalidState, "qp_state")
}

func TestPostRecvQueue(t *testing.T) {
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	cq := rdmatest.CQ(t, d, 16)
	qp := mustQP(t, pd, verbs.QPTypeRC, cq)
	toState(t, qp, verbs.QPStateInit)
	c := qp.Cap()
	// Larger SGL than max_recv_sge.
	rdmatest.WantError(t, qp.PostRecv(&verbs.RecvWR{SGList: make([]verbs.SGE, c.MaxRecvSGE+1)}), verbs.ErrInvalidArgument, "num_sge")
	rdmatest.WantError(t, qp.PostRecv(nil), verbs.ErrInvalidArgument, "wr")
	rdmatest.WantError(t, qp.PostRecv(&verbs.RecvWR{SGList: []verbs.SGE{{Length: 1 << 31}}}), verbs.ErrInvalidArgument, "sg_list")
	// Full RQ.
	for i := range c.MaxRecvWR {
		if err := qp.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{{Addr: uint64(i), Length: 8, LKey: 5}}}); err != nil {
			t.Fatalf("PostRecv %d: %v", i, err)
		}
	}
	rdmatest.WantError(t, qp.PostRecv(&verbs.RecvWR{}), verbs.ErrNoMemory, "rq")
	if n := verbs.QPSnapshot(qp).RQDepth; n != c.MaxRecvWR {
		t.Errorf("%d receives queued, want %d", n, c.MaxRecvWR)
	}
	// UC and UD queue receives as RC does.
	for _, typ := range []verbs.QPType{verbs.QPTypeUC, verbs.QPTypeUD} {
		other := mustQP(t, pd, typ, cq)
		toState(t, other, verbs.QPStateInit)
		for i := range c.MaxRecvWR {
			if err := other.PostRecv(&verbs.RecvWR{WRID: uint64(i)}); err != nil {
				t.Fatalf("%v PostRecv %d: %v", typ, i, err)
			}
		}
		rdmatest.WantError(t, other.PostRecv(&verbs.RecvWR{}), verbs.ErrNoMemory, "rq")
	}
}

func TestPostSendStates(t *testing.T) {
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	cq := rdmatest.CQ(t, d, 16)
	for _, s := range []verbs.QPState{verbs.QPStateReset, verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS, verbs.QPStateSQD, verbs.QPStateSQE, verbs.QPStateErr} {
		t.Run(s.String(), func(t *testing.T) {
			qp := mustQP(t, pd, verbs.QPTypeRC, cq)
			defer qp.Destroy()
			reach(t, qp, s)
			err := qp.PostSend(&verbs.SendWR{WRID: 7, Opcode: verbs.WRSend})
			switch s {
			case verbs.QPStateReset, verbs.QPStateInit, verbs.QPStateRTR:
				rdmatest.WantError(t, err, verbs.ErrInvalidState, "qp_state")
				return
			}
			rdmatest.WantError(t, err, nil, "")
			got := rdmatest.Poll(t, cq)
			switch s {
			case verbs.QPStateSQE, verbs.QPStateErr:
				want := verbs.WorkCompletion{WRID: 7, Status: verbs.WCWRFlushErr, Opcode: verbs.WCSend, QPNum: qp.QPN()}
				if len(got) != 1 || got[0] != want {
					t.Errorf("send posted in %v: completions %+v", s, got)
				}
				if verbs.QPSnapshot(qp).SQDepth != 0 {
					t.Error("flushed send was queued")
				}
			default:
				if n := verbs.QPSnapshot(qp).SQDepth; len(got) != 0 || n != 1 {
					t.Errorf("send posted in %v: completions %+v, queued %d", s, got, n)
				}
			}
		})
	}
}

func TestPostSendValidation(t *testing.T) {
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	pd2 := rdmatest.PD(t, d)
	cq := rdmatest.CQ(t, d, 16)
	mr := mustMR(t, pd, 4096, verbs.AccessLocalWrite)
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
	sge8 := []verbs.SGE{mr.SGE(0, 8)}
	ud := func(ah *verbs.AH) verbs.UDParams {
		return verbs.UDParams{AH: ah, RemoteQPN: 0x10, RemoteQKey: 0x11111111}
	}

	type tc struct {
		name  string
		typ   verbs.QPType
		wr    verbs.SendWR
		want  error
		field string
	}
	var tests []tc
	// Opcode validity per QP type (rxe_wr_opcode_info).
	valid := map[verbs.WROpcode][]verbs.QPType{
		verbs.WRRDMAWrite:         {verbs.QPTypeRC, verbs.QPTypeUC},
		verbs.WRRDMAWriteWithImm:  {verbs.QPTypeRC, verbs.QPTypeUC},
		verbs.WRSend:              {verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD},
		verbs.WRSendWithImm:       {verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD},
		verbs.WRRDMARead:          {verbs.QPTypeRC},
		verbs.WRAtomicCmpAndSwp:   {verbs.QPTypeRC},
		verbs.WRAtomicFetchAndAdd: {verbs.QPTypeRC},
		verbs.WRSendWithInv:       {verbs.QPTypeRC, verbs.QPTypeUC},
	}
	for op, types := range valid {
		for _, typ := range allQPTypes {
			wr := verbs.SendWR{Opcode: op, UD: ud(ah)}
			if op == verbs.WRAtomicCmpAndSwp || op == verbs.WRAtomicFetchAndAdd {
				wr.SGList = sge8
			}
			var want error = verbs.ErrInvalidArgument
			for _, ok := range types {
				if ok == typ {
					want = nil
				}
			}
			if op == verbs.WRSendWithInv && typ == verbs.QPTypeUC {
				// Valid in rxe's table, but no UC opcode carries an IETH.
				want = verbs.ErrNotSupported
			}
			tests = append(tests, tc{fmt.Sprintf("%v on %v", op, typ), typ, wr, want, "opcode"})
		}
	}
	// LOCAL_INV, BIND_MW, FLUSH and ATOMIC_WRITE: malformed requests
	// (mw_test.go and flush_test.go cover the rest).
	tests = append(tests,
		tc{"local-inv with data", verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WRLocalInv, SGList: sge8}, verbs.ErrInvalidArgument, "num_sge"},
		tc{"bind-mw without window", verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WRBindMW}, verbs.ErrInvalidArgument, "bind_mw.mw"},
		tc{"flush without placement type", verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WRFlush}, verbs.ErrInvalidArgument, "flush.type"},
		tc{"atomic-write without operand", verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WRAtomicWrite}, verbs.ErrInvalidArgument, "sg_list"},
		tc{"flush on UC", verbs.QPTypeUC, verbs.SendWR{Opcode: verbs.WRFlush}, verbs.ErrInvalidArgument, "opcode"},
		tc{"atomic-write on UD", verbs.QPTypeUD, verbs.SendWR{Opcode: verbs.WRAtomicWrite, UD: ud(ah)}, verbs.ErrInvalidArgument, "opcode"},
	)
	tests = append(tests,
		tc{"tso", verbs.QPTypeUD, verbs.SendWR{Opcode: verbs.WRTSO, UD: ud(ah)}, verbs.ErrInvalidArgument, "opcode"},
		tc{"opcode 12", verbs.QPTypeRC, verbs.SendWR{Opcode: 12}, verbs.ErrInvalidArgument, "opcode"},
		tc{"opcode -1", verbs.QPTypeRC, verbs.SendWR{Opcode: -1}, verbs.ErrInvalidArgument, "opcode"},
		tc{"too many SGEs", verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WRSend, SGList: make([]verbs.SGE, defaultCap.MaxSendSGE+1)}, verbs.ErrInvalidArgument, "num_sge"},
		tc{"2^31", verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{{Length: 1 << 30}, {Length: 1 << 30}}}, nil, ""},
		tc{"over 2^31", verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{{Length: 1 << 31}, {Length: 1}}}, verbs.ErrInvalidArgument, "sg_list"},
		tc{"atomic 4 bytes", verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, SGList: []verbs.SGE{mr.SGE(0, 4)}}, verbs.ErrInvalidArgument, "sg_list"},
		tc{"atomic no SGE", verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp}, verbs.ErrInvalidArgument, "sg_list"},
		// The responder refuses a misaligned atomic (REM_INV_REQ_ERR).
		tc{"atomic misaligned", verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, SGList: sge8, Atomic: verbs.AtomicParams{RemoteAddr: 0x1004}}, nil, ""},
		tc{"atomic aligned", verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, SGList: sge8, Atomic: verbs.AtomicParams{RemoteAddr: 0x1008}}, nil, ""},
		tc{"unknown send flag", verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WRSend, SendFlags: 1 << 5}, verbs.ErrInvalidArgument, "send_flags"},
		tc{"ip csum", verbs.QPTypeUD, verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendIPCsum, UD: ud(ah)}, verbs.ErrNotSupported, "send_flags"},
		tc{"inline read", verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WRRDMARead, SendFlags: verbs.SendInline, SGList: sge8}, verbs.ErrInvalidArgument, "send_flags"},
		tc{"inline atomic", verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendInline, SGList: sge8}, verbs.ErrInvalidArgument, "send_flags"},
		tc{"inline too large", verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendInline, SGList: []verbs.SGE{mr.SGE(0, defaultCap.MaxInlineData+1)}}, verbs.ErrInvalidArgument, "sg_list"},
		tc{"inline max", verbs.QPTypeUC, verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendInline, SGList: []verbs.SGE{mr.SGE(0, defaultCap.MaxInlineData)}}, nil, ""},
		tc{"inline bad lkey", verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendInline, SGList: []verbs.SGE{{Addr: mr.IOVA(), Length: 4, LKey: mr.LKey() ^ 1}}}, verbs.ErrInvalidArgument, "sg_list"},
		tc{"inline out of bounds", verbs.QPTypeRC, verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendInline, SGList: []verbs.SGE{{Addr: mr.IOVA() + 4090, Length: 8, LKey: mr.LKey()}}}, verbs.ErrInvalidArgument, "sg_list"},
		tc{"UD without AH", verbs.QPTypeUD, verbs.SendWR{Opcode: verbs.WRSend}, verbs.ErrInvalidArgument, "ud.ah"},
		tc{"UD AH of another PD", verbs.QPTypeUD, verbs.SendWR{Opcode: verbs.WRSend, UD: ud(ah2)}, verbs.ErrInvalidArgument, "ud.ah"},
		tc{"UD destroyed AH", verbs.QPTypeUD, verbs.SendWR{Opcode: verbs.WRSend, UD: ud(deadAH)}, verbs.ErrClosed, "ud.ah"},
		tc{"UD remote QPN", verbs.QPTypeUD, verbs.SendWR{Opcode: verbs.WRSend, UD: verbs.UDParams{AH: ah, RemoteQPN: 1 << 24}}, verbs.ErrInvalidArgument, "ud.remote_qpn"},
		tc{"UD send", verbs.QPTypeUD, verbs.SendWR{Opcode: verbs.WRSendWithImm, ImmData: 0x1234, SendFlags: verbs.SendSignaled | verbs.SendSolicited, UD: ud(ah)}, nil, ""},
	)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			qp, err := pd.CreateQP(verbs.QPInitAttr{QPType: tt.typ, SendCQ: cq, RecvCQ: cq, Cap: defaultCap})
			if err != nil {
				t.Fatal(err)
			}
			defer qp.Destroy()
			toState(t, qp, verbs.QPStateRTS)
			err = qp.PostSend(&tt.wr)
			rdmatest.WantError(t, err, tt.want, tt.field)
			if tt.typ == verbs.QPTypeRC {
				// An accepted request is queued, or already completed
				// (with LOC_PROT_ERR when its lkeys name nothing).
				accepted := 0
				if tt.want == nil {
					accepted = 1
				}
				if n := verbs.QPSnapshot(qp).SQDepth + len(rdmatest.Poll(t, cq)); n != accepted {
					t.Errorf("%d work requests accepted, want %d", n, accepted)
				}
			}
		})
	}
	qp := mustQP(t, pd, verbs.QPTypeRC, cq)
	toState(t, qp, verbs.QPStateRTS)
	rdmatest.WantError(t, qp.PostSend(nil), verbs.ErrInvalidArgument, "wr")
}

func TestPostSendQueueFull(t *testing.T) {
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	cq := rdmatest.CQ(t, d, 16)
	mr := mustMR(t, pd, 64, verbs.AccessLocalWrite)
	rc := mustQP(t, pd, verbs.QPTypeRC, cq)
	toState(t, rc, verbs.QPStateRTS)
	// Nothing answers at the AV's address, so every request stays
	// outstanding until its retries run out, long after this test.
	for range rc.Cap().MaxSendWR {
		if err := rc.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{mr.SGE(0, 8)}}); err != nil {
			t.Fatal(err)
		}
	}
	rdmatest.WantError(t, rc.PostSend(&verbs.SendWR{Opcode: verbs.WRSend}), verbs.ErrNoMemory, "sq")
}

func TestFlushOnError(t *testing.T) {
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	scq, rcq := rdmatest.CQ(t, d, 16), rdmatest.CQ(t, d, 16)
	qp, err := pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: scq, RecvCQ: rcq, Cap: defaultCap})
	if err != nil {
		t.Fatal(err)
	}
	toState(t, qp, verbs.QPStateRTS)
	for i := range uint64(3) {
		if err := qp.PostRecv(&verbs.RecvWR{WRID: 100 + i}); err != nil {
			t.Fatal(err)
		}
	}
	ops := []verbs.WROpcode{verbs.WRSend, verbs.WRRDMAWrite, verbs.WRRDMARead}
	for i, op := range ops {
		if err := qp.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: op}); err != nil {
			t.Fatal(err)
		}
	}
	rdmatest.Modify(t, qp, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateErr}, Mask: verbs.QPAttrState})
	sent := rdmatest.Poll(t, scq)
	wantOps := []verbs.WCOpcode{verbs.WCSend, verbs.WCRDMAWrite, verbs.WCRDMARead}
	if len(sent) != 3 {
		t.Fatalf("send completions %+v", sent)
	}
	for i, wc := range sent {
		// Unsignaled work requests complete too: errors always do.
		if wc.WRID != uint64(i) || wc.Status != verbs.WCWRFlushErr || wc.Opcode != wantOps[i] || wc.QPNum != qp.QPN() {
			t.Errorf("send completion %d = %+v", i, wc)
		}
	}
	recv := rdmatest.Poll(t, rcq)
	if len(recv) != 3 {
		t.Fatalf("receive completions %+v", recv)
	}
	for i, wc := range recv {
		if wc != flushRecvWC(100+uint64(i), qp.QPN()) {
			t.Errorf("receive completion %d = %+v", i, wc)
		}
	}
	// ERR -> ERR flushes nothing more; ERR -> RESET -> RTS works again.
	rdmatest.Modify(t, qp, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateErr}, Mask: verbs.QPAttrState})
	if len(rdmatest.Poll(t, scq))+len(rdmatest.Poll(t, rcq)) != 0 {
		t.Error("ERR -> ERR produced completions")
	}
	rdmatest.Modify(t, qp, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateReset}, Mask: verbs.QPAttrState})
	toState(t, qp, verbs.QPStateRTS)
	if err := qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend}); err != nil {
		t.Errorf("PostSend after recovery: %v", err)
	}
}

func TestResetDiscardsQueues(t *testing.T) {
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	cq := rdmatest.CQ(t, d, 16)
	qp := mustQP(t, pd, verbs.QPTypeRC, cq)
	toState(t, qp, verbs.QPStateRTS)
	if err := qp.PostRecv(&verbs.RecvWR{WRID: 1}); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend}); err != nil {
		t.Fatal(err)
	}
	rdmatest.Modify(t, qp, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateReset}, Mask: verbs.QPAttrState})
	if s := verbs.QPSnapshot(qp); s.SQDepth != 0 || s.RQDepth != 0 {
		t.Errorf("RESET kept work requests: %+v", s)
	}
	if got := rdmatest.Poll(t, cq); len(got) != 0 {
		t.Errorf("RESET produced completions %+v", got)
	}
}

func TestPostDoesNotAllocate(t *testing.T) {
	t.Run("inline", func(t *testing.T) { testPostDoesNotAllocate(t, false) })
	t.Run("corked", func(t *testing.T) { testPostDoesNotAllocate(t, true) })
}

// testPostDoesNotAllocate posts sends and receives on a QP whose doorbell
// either sends every post inline (its clock stands still: no send takes
// time) or corks the first post of each round at least (the last send
// took an hour), letting the flusher send a round before the next.
func testPostDoesNotAllocate(t *testing.T, corked bool) {
	d := newDevice(t)
	verbs.DoorbellHooks(d, func() int64 { return 0 }, nil, nil)
	if corked {
		verbs.DoorbellCost(d, int64(time.Hour))
	}
	pd := rdmatest.PD(t, d)
	cq := rdmatest.CQ(t, d, 16)
	mr := mustMR(t, pd, 64, verbs.AccessLocalWrite)
	qp := mustQP(t, pd, verbs.QPTypeRC, cq)
	toState(t, qp, verbs.QPStateRTS)
	send := &verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{mr.SGE(0, 8), mr.SGE(8, 8)}}
	inline := &verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendInline, SGList: []verbs.SGE{mr.SGE(0, 32)}}
	recv := &verbs.RecvWR{SGList: []verbs.SGE{mr.SGE(0, 64)}}
	allocs := testing.AllocsPerRun(100, func() {
		if corked {
			verbs.DoorbellCost(d, int64(time.Hour)) // the flusher measured its last batch
		}
		if err := qp.PostSend(send); err != nil {
			t.Fatal(err)
		}
		if err := qp.PostSend(inline); err != nil {
			t.Fatal(err)
		}
		if err := qp.PostRecv(recv); err != nil {
			t.Fatal(err)
		}
		for verbs.Corked(qp) > 0 {
			runtime.Gosched() // one batch at a time: the pool holds enough
		}
		// Start over with empty queues (RESET discards) without
		// leaving RTS for long.
		verbs.EmptyQueues(qp)
	})
	if allocs != 0 {
		t.Errorf("posting allocates %v times", allocs)
	}
}
