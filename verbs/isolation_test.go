package verbs_test

import (
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
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
	const none = verbs.WCStatus(0xFF) // no completion expected on the responder
	type env struct {
		a, b       *rdmatest.End
		aPD2, bPD2 *verbs.PD
	}
	// region registers n bytes of its own in pd with access.
	region := func(t *testing.T, pd *verbs.PD, access verbs.AccessFlags) *verbs.MR {
		return rdmatest.MR(t, pd, make([]byte, 64), access)
	}
	write := func(l verbs.SGE, raddr uint64, rkey uint32) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{l}, RDMA: verbs.RDMAParams{RemoteAddr: raddr, RKey: rkey}}
	}
	read := func(l verbs.SGE, raddr uint64, rkey uint32) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{l}, RDMA: verbs.RDMAParams{RemoteAddr: raddr, RKey: rkey}}
	}
	atomic := func(l verbs.SGE, raddr uint64, rkey uint32) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, SGList: []verbs.SGE{l}, Atomic: verbs.AtomicParams{RemoteAddr: raddr, RKey: rkey, CompareAdd: 1}}
	}
	cases := []struct {
		name    string
		bAccess verbs.AccessFlags // the responder QP's access flags; default rdmatest.RCAccess
		// wr returns the request; recv, if set, replaces the responder's
		// receive (WRID 500).
		wr     func(t *testing.T, e *env) verbs.SendWR
		recv   func(t *testing.T, e *env) verbs.SGE
		wantA  verbs.WCStatus
		wantB  verbs.WCStatus // the receive's completion; none if it stays posted
		bErr   bool
		events []verbs.AsyncEventType
	}{
		{name: "send from an lkey of another PD", wantA: verbs.WCLocProtErr, wantB: none,
			wr: func(t *testing.T, e *env) verbs.SendWR {
				return verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{region(t, e.aPD2, verbs.AccessLocalWrite).SGE(0, 8)}}
			}},
		{name: "READ into an lkey of another PD", wantA: verbs.WCLocProtErr, wantB: none,
			wr: func(t *testing.T, e *env) verbs.SendWR {
				return read(region(t, e.aPD2, verbs.AccessLocalWrite).SGE(0, 8), e.b.MR.IOVA(), e.b.MR.RKey())
			}},
		{name: "receive into an lkey of another PD", wantA: verbs.WCRemOpErr, wantB: verbs.WCLocProtErr, bErr: true,
			recv: func(t *testing.T, e *env) verbs.SGE { return region(t, e.bPD2, verbs.AccessLocalWrite).SGE(0, 64) },
			wr: func(t *testing.T, e *env) verbs.SendWR {
				return verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{e.a.MR.SGE(0, 8)}}
			}},
		{name: "WRITE to an rkey of another PD", wantA: verbs.WCRemAccessErr, wantB: verbs.WCWRFlushErr, bErr: true, events: []verbs.AsyncEventType{verbs.EventQPAccessErr},
			wr: func(t *testing.T, e *env) verbs.SendWR {
				mr := region(t, e.bPD2, rdmatest.RCAccess)
				return write(e.a.MR.SGE(0, 8), mr.IOVA(), mr.RKey())
			}},
		{name: "READ from an rkey of another PD", wantA: verbs.WCRemAccessErr, wantB: verbs.WCWRFlushErr, bErr: true, events: []verbs.AsyncEventType{verbs.EventQPAccessErr},
			wr: func(t *testing.T, e *env) verbs.SendWR {
				mr := region(t, e.bPD2, rdmatest.RCAccess)
				return read(e.a.MR.SGE(0, 8), mr.IOVA(), mr.RKey())
			}},
		{name: "atomic on an rkey of another PD", wantA: verbs.WCRemAccessErr, wantB: verbs.WCWRFlushErr, bErr: true, events: []verbs.AsyncEventType{verbs.EventQPAccessErr},
			wr: func(t *testing.T, e *env) verbs.SendWR {
				mr := region(t, e.bPD2, rdmatest.RCAccess)
				return atomic(e.a.MR.SGE(0, 8), mr.IOVA(), mr.RKey())
			}},
		{name: "WRITE without REMOTE_WRITE", wantA: verbs.WCRemAccessErr, wantB: verbs.WCWRFlushErr, bErr: true, events: []verbs.AsyncEventType{verbs.EventQPAccessErr},
			wr: func(t *testing.T, e *env) verbs.SendWR {
				mr := region(t, e.b.PD, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
				return write(e.a.MR.SGE(0, 8), mr.IOVA(), mr.RKey())
			}},
		{name: "WRITE with immediate without REMOTE_WRITE", wantA: verbs.WCRemAccessErr, wantB: verbs.WCRemAccessErr, bErr: true,
			wr: func(t *testing.T, e *env) verbs.SendWR {
				mr := region(t, e.b.PD, verbs.AccessRemoteRead)
				wr := write(e.a.MR.SGE(0, 8), mr.IOVA(), mr.RKey())
				wr.Opcode = verbs.WRRDMAWriteWithImm
				return wr
			}},
		{name: "READ without REMOTE_READ", wantA: verbs.WCRemAccessErr, wantB: verbs.WCWRFlushErr, bErr: true, events: []verbs.AsyncEventType{verbs.EventQPAccessErr},
			wr: func(t *testing.T, e *env) verbs.SendWR {
				mr := region(t, e.b.PD, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic)
				return read(e.a.MR.SGE(0, 8), mr.IOVA(), mr.RKey())
			}},
		{name: "atomic without REMOTE_ATOMIC", wantA: verbs.WCRemAccessErr, wantB: verbs.WCWRFlushErr, bErr: true, events: []verbs.AsyncEventType{verbs.EventQPAccessErr},
			wr: func(t *testing.T, e *env) verbs.SendWR {
				mr := region(t, e.b.PD, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
				return atomic(e.a.MR.SGE(0, 8), mr.IOVA(), mr.RKey())
			}},
		{name: "READ into a region without LOCAL_WRITE", wantA: verbs.WCLocProtErr, wantB: none,
			wr: func(t *testing.T, e *env) verbs.SendWR {
				return read(region(t, e.a.PD, verbs.AccessRemoteRead).SGE(0, 8), e.b.MR.IOVA(), e.b.MR.RKey())
			}},
		{name: "atomic result into a region without LOCAL_WRITE", wantA: verbs.WCLocProtErr, wantB: none,
			wr: func(t *testing.T, e *env) verbs.SendWR {
				return atomic(region(t, e.a.PD, verbs.AccessRemoteRead).SGE(0, 8), e.b.MR.IOVA(), e.b.MR.RKey())
			}},
		{name: "receive into a region without LOCAL_WRITE", wantA: verbs.WCRemOpErr, wantB: verbs.WCLocProtErr, bErr: true,
			recv: func(t *testing.T, e *env) verbs.SGE { return region(t, e.b.PD, verbs.AccessRemoteRead).SGE(0, 64) },
			wr: func(t *testing.T, e *env) verbs.SendWR {
				return verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{e.a.MR.SGE(0, 8)}}
			}},
		{name: "WRITE on a QP without REMOTE_WRITE", bAccess: verbs.AccessRemoteRead | verbs.AccessRemoteAtomic,
			wantA: verbs.WCRemInvReqErr, wantB: verbs.WCWRFlushErr, bErr: true, events: []verbs.AsyncEventType{verbs.EventQPReqErr},
			wr: func(t *testing.T, e *env) verbs.SendWR { return write(e.a.MR.SGE(0, 8), e.b.MR.IOVA(), e.b.MR.RKey()) }},
		{name: "READ on a QP without REMOTE_READ", bAccess: verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic,
			wantA: verbs.WCRemInvReqErr, wantB: verbs.WCWRFlushErr, bErr: true, events: []verbs.AsyncEventType{verbs.EventQPReqErr},
			wr: func(t *testing.T, e *env) verbs.SendWR { return read(e.a.MR.SGE(0, 8), e.b.MR.IOVA(), e.b.MR.RKey()) }},
		{name: "atomic on a QP without REMOTE_ATOMIC", bAccess: verbs.AccessRemoteWrite | verbs.AccessRemoteRead,
			wantA: verbs.WCRemInvReqErr, wantB: verbs.WCWRFlushErr, bErr: true, events: []verbs.AsyncEventType{verbs.EventQPReqErr},
			wr: func(t *testing.T, e *env) verbs.SendWR { return atomic(e.a.MR.SGE(0, 8), e.b.MR.IOVA(), e.b.MR.RKey()) }},
		{name: "send from a region without any right", wantA: verbs.WCSuccess, wantB: verbs.WCSuccess,
			wr: func(t *testing.T, e *env) verbs.SendWR {
				return verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{region(t, e.a.PD, 0).SGE(0, 8)}}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := &env{a: newEnd(t, 1, rdmatest.EndOptions{}), b: newEnd(t, 2, rdmatest.EndOptions{})}
			e.aPD2, e.bPD2 = rdmatest.PD(t, e.a.Dev), rdmatest.PD(t, e.b.Dev)
			lb := rdmatest.DefaultLink()
			if c.bAccess != 0 {
				lb.Access = c.bAccess
			}
			rdmatest.Connect(t, e.a, e.b, rdmatest.DefaultLink(), lb)
			recv := e.b.MR.SGE(recvOff, 64)
			if c.recv != nil {
				recv = c.recv(t, e)
			}
			rdmatest.PostRecv(t, e.b.QP, verbs.RecvWR{WRID: 500, SGList: []verbs.SGE{recv}})
			wr := c.wr(t, e)
			wr.WRID, wr.SendFlags = 1, verbs.SendSignaled
			rdmatest.PostSend(t, e.a.QP, wr)

			if wc := rdmatest.WaitOne(t, e.a.CQ); wc.WRID != 1 || wc.Status != c.wantA {
				t.Fatalf("requester completion %+v, want %v", wc, c.wantA)
			}
			if c.wantA != verbs.WCSuccess {
				checkFlushed(t, e.a)
			}
			if c.wantB == none {
				rdmatest.ExpectEmpty(t, e.b.CQ)
			} else if wc := rdmatest.WaitOne(t, e.b.CQ); wc.WRID != 500 || wc.Status != c.wantB {
				t.Fatalf("responder's receive completed %+v, want %v", wc, c.wantB)
			}
			if c.bErr {
				checkFlushed(t, e.b)
			} else if s := e.b.QP.State(); s != verbs.QPStateRTS {
				t.Fatalf("responder in %v, want RTS", s)
			}
			evs := pendingEvents(e.b.Dev)
			if len(evs) != len(c.events) {
				t.Fatalf("responder events %+v, want %v", evs, c.events)
			}
			for i, ev := range evs {
				if ev.Type != c.events[i] || ev.QP != e.b.QP {
					t.Fatalf("responder event %v, want %v for its QP", ev.Type, c.events[i])
				}
			}
			if evs := pendingEvents(e.a.Dev); len(evs) != 0 {
				t.Fatalf("requester events %+v, want none: its completion reports the error", evs)
			}
		})
	}
}
