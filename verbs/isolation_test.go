package verbs

import (
	"testing"
)

// TestIsolation checks protection domains and access rights end to end:
// one row per violation, each on a fresh connection, with the completion
// status on both sides, each side's QP state and the responder's
// asynchronous events.
//
// The requester's memory errors complete its work request with
// LOC_PROT_ERR and leave the responder alone. A remote key the responder
// refuses (another PD, a missing right) is a remote access error: NAK,
// REM_ACCESS_ERR at the requester, the responder's QP in ERR with
// QP_ACCESS_ERR (IBTA C9-222.1.1) unless a receive work request carries
// the error (WRITE with immediate). A receive buffer the responder cannot
// write is a remote operational error: REM_OP_ERR at the requester,
// LOC_PROT_ERR on the receive. An operation the responder QP's access
// flags do not enable is an invalid request (rxe's behaviour):
// REM_INV_REQ_ERR and QP_REQ_ERR.
func TestIsolation(t *testing.T) {
	const none = WCStatus(0xFF) // no completion expected on the responder
	type env struct {
		a, b       *rcEnd
		aPD2, bPD2 *PD
	}
	// region registers n bytes of its own in pd with access.
	region := func(t *testing.T, pd *PD, access AccessFlags) *MR {
		return mustMR2(t, pd, make([]byte, 64), access)
	}
	write := func(l SGE, raddr uint64, rkey uint32) SendWR {
		return SendWR{Opcode: WRRDMAWrite, SGList: []SGE{l}, RDMA: RDMAParams{RemoteAddr: raddr, RKey: rkey}}
	}
	read := func(l SGE, raddr uint64, rkey uint32) SendWR {
		return SendWR{Opcode: WRRDMARead, SGList: []SGE{l}, RDMA: RDMAParams{RemoteAddr: raddr, RKey: rkey}}
	}
	atomic := func(l SGE, raddr uint64, rkey uint32) SendWR {
		return SendWR{Opcode: WRAtomicFetchAndAdd, SGList: []SGE{l}, Atomic: AtomicParams{RemoteAddr: raddr, RKey: rkey, CompareAdd: 1}}
	}
	cases := []struct {
		name    string
		bAccess AccessFlags // the responder QP's access flags; default rcAccess
		// wr returns the request; recv, if set, replaces the responder's
		// receive (WRID 500).
		wr     func(t *testing.T, e *env) SendWR
		recv   func(t *testing.T, e *env) SGE
		wantA  WCStatus
		wantB  WCStatus // the receive's completion; none if it stays posted
		bErr   bool
		events []AsyncEventType
	}{
		{name: "send from an lkey of another PD", wantA: WCLocProtErr, wantB: none,
			wr: func(t *testing.T, e *env) SendWR {
				return SendWR{Opcode: WRSend, SGList: []SGE{region(t, e.aPD2, AccessLocalWrite).SGE(0, 8)}}
			}},
		{name: "READ into an lkey of another PD", wantA: WCLocProtErr, wantB: none,
			wr: func(t *testing.T, e *env) SendWR {
				return read(region(t, e.aPD2, AccessLocalWrite).SGE(0, 8), e.b.mr.IOVA(), e.b.mr.RKey())
			}},
		{name: "receive into an lkey of another PD", wantA: WCRemOpErr, wantB: WCLocProtErr, bErr: true,
			recv: func(t *testing.T, e *env) SGE { return region(t, e.bPD2, AccessLocalWrite).SGE(0, 64) },
			wr: func(t *testing.T, e *env) SendWR {
				return SendWR{Opcode: WRSend, SGList: []SGE{e.a.mr.SGE(0, 8)}}
			}},
		{name: "WRITE to an rkey of another PD", wantA: WCRemAccessErr, wantB: WCWRFlushErr, bErr: true, events: []AsyncEventType{EventQPAccessErr},
			wr: func(t *testing.T, e *env) SendWR {
				mr := region(t, e.bPD2, rcAccess)
				return write(e.a.mr.SGE(0, 8), mr.IOVA(), mr.RKey())
			}},
		{name: "READ from an rkey of another PD", wantA: WCRemAccessErr, wantB: WCWRFlushErr, bErr: true, events: []AsyncEventType{EventQPAccessErr},
			wr: func(t *testing.T, e *env) SendWR {
				mr := region(t, e.bPD2, rcAccess)
				return read(e.a.mr.SGE(0, 8), mr.IOVA(), mr.RKey())
			}},
		{name: "atomic on an rkey of another PD", wantA: WCRemAccessErr, wantB: WCWRFlushErr, bErr: true, events: []AsyncEventType{EventQPAccessErr},
			wr: func(t *testing.T, e *env) SendWR {
				mr := region(t, e.bPD2, rcAccess)
				return atomic(e.a.mr.SGE(0, 8), mr.IOVA(), mr.RKey())
			}},
		{name: "WRITE without REMOTE_WRITE", wantA: WCRemAccessErr, wantB: WCWRFlushErr, bErr: true, events: []AsyncEventType{EventQPAccessErr},
			wr: func(t *testing.T, e *env) SendWR {
				mr := region(t, e.b.pd, AccessLocalWrite|AccessRemoteRead|AccessRemoteAtomic)
				return write(e.a.mr.SGE(0, 8), mr.IOVA(), mr.RKey())
			}},
		{name: "WRITE with immediate without REMOTE_WRITE", wantA: WCRemAccessErr, wantB: WCRemAccessErr, bErr: true,
			wr: func(t *testing.T, e *env) SendWR {
				mr := region(t, e.b.pd, AccessRemoteRead)
				wr := write(e.a.mr.SGE(0, 8), mr.IOVA(), mr.RKey())
				wr.Opcode = WRRDMAWriteWithImm
				return wr
			}},
		{name: "READ without REMOTE_READ", wantA: WCRemAccessErr, wantB: WCWRFlushErr, bErr: true, events: []AsyncEventType{EventQPAccessErr},
			wr: func(t *testing.T, e *env) SendWR {
				mr := region(t, e.b.pd, AccessLocalWrite|AccessRemoteWrite|AccessRemoteAtomic)
				return read(e.a.mr.SGE(0, 8), mr.IOVA(), mr.RKey())
			}},
		{name: "atomic without REMOTE_ATOMIC", wantA: WCRemAccessErr, wantB: WCWRFlushErr, bErr: true, events: []AsyncEventType{EventQPAccessErr},
			wr: func(t *testing.T, e *env) SendWR {
				mr := region(t, e.b.pd, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
				return atomic(e.a.mr.SGE(0, 8), mr.IOVA(), mr.RKey())
			}},
		{name: "READ into a region without LOCAL_WRITE", wantA: WCLocProtErr, wantB: none,
			wr: func(t *testing.T, e *env) SendWR {
				return read(region(t, e.a.pd, AccessRemoteRead).SGE(0, 8), e.b.mr.IOVA(), e.b.mr.RKey())
			}},
		{name: "atomic result into a region without LOCAL_WRITE", wantA: WCLocProtErr, wantB: none,
			wr: func(t *testing.T, e *env) SendWR {
				return atomic(region(t, e.a.pd, AccessRemoteRead).SGE(0, 8), e.b.mr.IOVA(), e.b.mr.RKey())
			}},
		{name: "receive into a region without LOCAL_WRITE", wantA: WCRemOpErr, wantB: WCLocProtErr, bErr: true,
			recv: func(t *testing.T, e *env) SGE { return region(t, e.b.pd, AccessRemoteRead).SGE(0, 64) },
			wr: func(t *testing.T, e *env) SendWR {
				return SendWR{Opcode: WRSend, SGList: []SGE{e.a.mr.SGE(0, 8)}}
			}},
		{name: "WRITE on a QP without REMOTE_WRITE", bAccess: AccessRemoteRead | AccessRemoteAtomic,
			wantA: WCRemInvReqErr, wantB: WCWRFlushErr, bErr: true, events: []AsyncEventType{EventQPReqErr},
			wr: func(t *testing.T, e *env) SendWR { return write(e.a.mr.SGE(0, 8), e.b.mr.IOVA(), e.b.mr.RKey()) }},
		{name: "READ on a QP without REMOTE_READ", bAccess: AccessRemoteWrite | AccessRemoteAtomic,
			wantA: WCRemInvReqErr, wantB: WCWRFlushErr, bErr: true, events: []AsyncEventType{EventQPReqErr},
			wr: func(t *testing.T, e *env) SendWR { return read(e.a.mr.SGE(0, 8), e.b.mr.IOVA(), e.b.mr.RKey()) }},
		{name: "atomic on a QP without REMOTE_ATOMIC", bAccess: AccessRemoteWrite | AccessRemoteRead,
			wantA: WCRemInvReqErr, wantB: WCWRFlushErr, bErr: true, events: []AsyncEventType{EventQPReqErr},
			wr: func(t *testing.T, e *env) SendWR { return atomic(e.a.mr.SGE(0, 8), e.b.mr.IOVA(), e.b.mr.RKey()) }},
		{name: "send from a region without any right", wantA: WCSuccess, wantB: WCSuccess,
			wr: func(t *testing.T, e *env) SendWR {
				return SendWR{Opcode: WRSend, SGList: []SGE{region(t, e.a.pd, 0).SGE(0, 8)}}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := &env{a: newEnd(t, "127.0.1.1", endOpts{}), b: newEnd(t, "127.0.1.2", endOpts{})}
			e.aPD2, e.bPD2 = mustPD(t, e.a.dev), mustPD(t, e.b.dev)
			lb := defaultLink()
			if c.bAccess != 0 {
				lb.access = c.bAccess
			}
			connect(t, e.a, e.b, defaultLink(), lb)
			recv := e.b.mr.SGE(recvOff, 64)
			if c.recv != nil {
				recv = c.recv(t, e)
			}
			mustPostRecv(t, e.b.qp, RecvWR{WRID: 500, SGList: []SGE{recv}})
			wr := c.wr(t, e)
			wr.WRID, wr.SendFlags = 1, SendSignaled
			mustPostSend(t, e.a.qp, wr)

			if wc := waitWC(t, e.a.cq); wc.WRID != 1 || wc.Status != c.wantA {
				t.Fatalf("requester completion %+v, want %v", wc, c.wantA)
			}
			if c.wantA != WCSuccess {
				checkFlushed(t, e.a)
			}
			if c.wantB == none {
				expectEmpty(t, e.b.cq)
			} else if wc := waitWC(t, e.b.cq); wc.WRID != 500 || wc.Status != c.wantB {
				t.Fatalf("responder's receive completed %+v, want %v", wc, c.wantB)
			}
			if c.bErr {
				checkFlushed(t, e.b)
			} else if s := e.b.qp.State(); s != QPStateRTS {
				t.Fatalf("responder in %v, want RTS", s)
			}
			evs := pendingEvents(e.b.dev)
			if len(evs) != len(c.events) {
				t.Fatalf("responder events %+v, want %v", evs, c.events)
			}
			for i, ev := range evs {
				if ev.Type != c.events[i] || ev.QP != e.b.qp {
					t.Fatalf("responder event %v, want %v for its QP", ev.Type, c.events[i])
				}
			}
			if evs := pendingEvents(e.a.dev); len(evs) != 0 {
				t.Fatalf("requester events %+v, want none: its completion reports the error", evs)
			}
		})
	}
}
