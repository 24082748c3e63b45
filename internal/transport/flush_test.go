package transport

import (
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/wire"
)

// flushOpts allows both flush placement types on the QPs, as rdma-core's
// tests do.
func flushOpts() pairOpts {
	o := defaultOpts()
	o.access |= ibv.AccessFlushGlobal | ibv.AccessFlushPersistent
	return o
}

func flushReq(p uint32, rkey uint32, va uint64, l uint32, typ ibv.FlushType, level ibv.FlushLevel) []byte {
	return req(wire.RCFlush, base.Add(p), true, nil, func(h *wire.Headers) {
		h.FETH = wire.FETHFields{PlacementType: uint8(typ), SelectivityLevel: uint8(level)}
		h.RETH = wire.RETHFields{VA: va, RKey: rkey, DMALength: l}
	})
}

func atomicWriteReq(p uint32, rkey uint32, va uint64, l uint32, v []byte) []byte {
	return req(wire.RCAtomicWrite, base.Add(p), true, v, func(h *wire.Headers) {
		h.RETH = wire.RETHFields{VA: va, RKey: rkey, DMALength: l}
	})
}

// TestFlushAndAtomicWriteReplay: both are answered with a zero-length READ
// RESPONSE ONLY, and a duplicate is answered again from the responder
// resources without being executed again (oA19-14, oA19-15); one that fell
// out of the resources ring is dropped.
func TestFlushAndAtomicWriteReplay(t *testing.T) {
	o := flushOpts()
	o.rdAtomic = 2
	a, b := newPair(t, o)
	l := newLink(t, a, b)
	mem := make([]byte, 64)
	key := b.mem.register(pd, mem, 0, ibv.AccessRemoteWrite|ibv.AccessRemoteRead|ibv.AccessFlushGlobal)
	eq(t, "flush", l.inject(a, b, flushReq(0, key, 0, 64, ibv.FlushGlobal, ibv.FlushRange)),
		"RC RDMA_READ_RESPONSE_ONLY@0 ACK credits=31")
	aw := atomicWriteReq(1, key, 8, 8, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	eq(t, "atomic write", l.inject(a, b, aw), "RC RDMA_READ_RESPONSE_ONLY@1 ACK credits=31")
	wantBytes(t, "written", mem[8:16], []byte{1, 2, 3, 4, 5, 6, 7, 8})
	mem[8] = 0xEE
	eq(t, "duplicate atomic write", l.inject(a, b, aw), "RC RDMA_READ_RESPONSE_ONLY@1 ACK credits=31")
	if mem[8] != 0xEE {
		t.Fatal("a duplicate ATOMIC_WRITE was executed again")
	}
	eq(t, "duplicate flush", l.inject(a, b, flushReq(0, key, 0, 64, ibv.FlushGlobal, ibv.FlushRange)),
		"RC RDMA_READ_RESPONSE_ONLY@0 ACK credits=31")
	// Two more push both out of the 2-entry ring.
	l.inject(a, b, flushReq(2, key, 0, 8, ibv.FlushGlobal, ibv.FlushMR))
	l.inject(a, b, atomicWriteReq(3, key, 0, 8, make([]byte, 8)))
	eq(t, "forgotten atomic write", l.inject(a, b, aw))
	eq(t, "forgotten flush", l.inject(a, b, flushReq(0, key, 0, 64, ibv.FlushGlobal, ibv.FlushRange)))
	if s := b.qp.Snapshot(); s.MSN != 4 || s.ExpectedPSN != base.Add(4) || b.qp.State() != ibv.QPStateRTS || b.mem.refs != 0 {
		t.Fatalf("MSN %v ePSN %v state %v refs %d", s.MSN, s.ExpectedPSN, b.qp.State(), b.mem.refs)
	}
}

// TestFlushAndAtomicWriteErrors: the responder's checks, in rxe's order:
// the QP's access flags (invalid request), responder resources, the rkey
// with the memory's rights and range (remote access error), then the
// ATOMIC_WRITE's length and alignment (invalid request).
func TestFlushAndAtomicWriteErrors(t *testing.T) {
	const (
		global  = ibv.FlushGlobal
		persist = ibv.FlushPersistent
	)
	cases := []struct {
		name     string
		qpAccess ibv.AccessFlags
		rdAtomic int
		mr       ibv.AccessFlags
		pkt      func(key uint32) []byte
		want     string
	}{
		{"flush: QP without FLUSH_GLOBAL", ibv.AccessRemoteWrite | ibv.AccessFlushPersistent, 16, ibv.AccessFlushGlobal,
			func(k uint32) []byte { return flushReq(0, k, 0, 8, global, ibv.FlushRange) }, "NAK invalid request"},
		{"flush: QP without FLUSH_PERSISTENT", ibv.AccessFlushGlobal, 16, ibv.AccessFlushGlobal | ibv.AccessFlushPersistent,
			func(k uint32) []byte { return flushReq(0, k, 0, 8, persist, ibv.FlushMR) }, "NAK invalid request"},
		{"flush: no responder resources", flushOpts().access, 0, ibv.AccessFlushGlobal,
			func(k uint32) []byte { return flushReq(0, k, 0, 8, global, ibv.FlushRange) }, "NAK invalid request"},
		{"flush: placement type violation", flushOpts().access, 16, ibv.AccessFlushGlobal,
			func(k uint32) []byte { return flushReq(0, k, 0, 8, persist, ibv.FlushRange) }, "NAK remote access error"},
		{"flush: whole region, type violation", flushOpts().access, 16, ibv.AccessFlushGlobal,
			func(k uint32) []byte { return flushReq(0, k, 0, 8, global|persist, ibv.FlushMR) }, "NAK remote access error"},
		{"flush: range outside", flushOpts().access, 16, ibv.AccessFlushGlobal,
			func(k uint32) []byte { return flushReq(0, k, 60, 8, global, ibv.FlushRange) }, "NAK remote access error"},
		{"flush: bad rkey", flushOpts().access, 16, ibv.AccessFlushGlobal,
			func(k uint32) []byte { return flushReq(0, k+0x100, 0, 8, global, ibv.FlushMR) }, "NAK remote access error"},
		// Without RKeyChecker the address must lie in the region.
		{"flush: whole region ignores the length", flushOpts().access, 16, ibv.AccessFlushGlobal,
			func(k uint32) []byte { return flushReq(0, k, 8, 1<<31, global, ibv.FlushMR) }, "ACK credits=31"},
		{"atomic write: QP without REMOTE_WRITE", ibv.AccessRemoteAtomic, 16, ibv.AccessRemoteWrite,
			func(k uint32) []byte { return atomicWriteReq(0, k, 0, 8, make([]byte, 8)) }, "NAK invalid request"},
		{"atomic write: region without REMOTE_WRITE", flushOpts().access, 16, ibv.AccessRemoteAtomic | ibv.AccessRemoteRead,
			func(k uint32) []byte { return atomicWriteReq(0, k, 0, 8, make([]byte, 8)) }, "NAK remote access error"},
		{"atomic write: RETH length 4", flushOpts().access, 16, ibv.AccessRemoteWrite,
			func(k uint32) []byte { return atomicWriteReq(0, k, 0, 4, make([]byte, 8)) }, "NAK invalid request"},
		{"atomic write: misaligned", flushOpts().access, 16, ibv.AccessRemoteWrite,
			func(k uint32) []byte { return atomicWriteReq(0, k, 4, 8, make([]byte, 8)) }, "NAK invalid request"},
		{"atomic write: outside", flushOpts().access, 16, ibv.AccessRemoteWrite,
			func(k uint32) []byte { return atomicWriteReq(0, k, 64, 8, make([]byte, 8)) }, "NAK remote access error"},
		{"atomic write: no responder resources", flushOpts().access, 0, ibv.AccessRemoteWrite,
			func(k uint32) []byte { return atomicWriteReq(0, k, 0, 8, make([]byte, 8)) }, "NAK invalid request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := defaultOpts()
			o.access, o.rdAtomic = c.qpAccess, c.rdAtomic
			a, b := newPair(t, o)
			l := newLink(t, a, b)
			mem := make([]byte, 64)
			key := b.mem.register(pd, mem, 0, c.mr)
			got := l.inject(a, b, c.pkt(key))
			if len(got) != 1 {
				t.Fatalf("answer %q", got)
			}
			op := "RC ACKNOWLEDGE@0 "
			if c.want == "ACK credits=31" {
				op = "RC RDMA_READ_RESPONSE_ONLY@0 "
			}
			eq(t, "answer", got, op+c.want)
			if c.want != "ACK credits=31" && b.qp.State() != ibv.QPStateErr {
				t.Fatalf("responder in %v, want ERR", b.qp.State())
			}
			if c.want != "ACK credits=31" && mem != nil {
				for _, v := range mem {
					if v != 0 {
						t.Fatal("memory changed by a refused request")
					}
				}
			}
			if b.mem.refs != 0 {
				t.Fatalf("%d references leaked", b.mem.refs)
			}
		})
	}
}

// TestFlushAndAtomicWriteRequester: the requester sends FETH+RETH and
// RETH+8 bytes, the completer completes them on their zero-length READ
// responses, with the FLUSH and ATOMIC_WRITE opcodes, across the PSN wrap
// and behind a WRITE.
func TestFlushAndAtomicWriteRequester(t *testing.T) {
	a, b := newPair(t, flushOpts())
	l := newLink(t, a, b)
	src := pattern(64, 3)
	lkey := a.mem.register(pd, src, 0x1000, 0)
	dst := make([]byte, 64)
	rkey := b.mem.register(pd, dst, 0x8000, ibv.AccessRemoteWrite|ibv.AccessFlushGlobal|ibv.AccessFlushPersistent)
	l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRRDMAWrite, SGL: []SGE{{0x1000, 32, lkey}}, RemoteAddr: 0x8000, RKey: rkey})
	l.post(a, SendWQE{WRID: 2, Opcode: ibv.WRFlush, Flags: ibv.SendSignaled, RemoteAddr: 0x8000, RKey: rkey,
		FlushLength: 32, FlushType: ibv.FlushPersistent, FlushLevel: ibv.FlushRange})
	l.post(a, SendWQE{WRID: 3, Opcode: ibv.WRAtomicWrite, Flags: ibv.SendSignaled, SGL: []SGE{{0x1000 + 40, 8, lkey}}, RemoteAddr: 0x8000 + 40, RKey: rkey})
	l.post(a, SendWQE{WRID: 4, Opcode: ibv.WRFlush, Flags: ibv.SendSignaled, RemoteAddr: 0x8000, RKey: rkey,
		FlushType: ibv.FlushGlobal, FlushLevel: ibv.FlushMR})
	l.run(time.Second)
	wantCompletions(t, a.scq.take(),
		Completion{WRID: 2, Status: ibv.WCSuccess, Opcode: ibv.WCFlush, ByteLen: 32, QPN: qpnA},
		Completion{WRID: 3, Status: ibv.WCSuccess, Opcode: ibv.WCAtomicWrite, ByteLen: 8, QPN: qpnA},
		Completion{WRID: 4, Status: ibv.WCSuccess, Opcode: ibv.WCFlush, QPN: qpnA})
	wantBytes(t, "written", dst[:32], src[:32])
	wantBytes(t, "atomically written", dst[40:48], src[40:48])
	if c := a.qp.Counters(); c.StaleResponses != 0 {
		t.Fatalf("counters %+v", c)
	}
	// A READ response with data at a FLUSH's PSN is a bad response.
	l.post(a, SendWQE{WRID: 5, Opcode: ibv.WRFlush, Flags: ibv.SendSignaled, RKey: rkey,
		FlushType: ibv.FlushGlobal, FlushLevel: ibv.FlushMR})
	pkts := a.out.Packets()
	if len(pkts) != 1 {
		t.Fatalf("%d packets for a FLUSH", len(pkts))
	}
	p := l.parse(a, pkts[0].Bytes)
	if p.BTH.Opcode() != wire.RCFlush || ibv.FlushLevel(p.FETH.SelectivityLevel()) != ibv.FlushMR || !p.BTH.AckReq() {
		t.Fatalf("FLUSH packet %+v", p.Headers())
	}
	P := p.BTH.PSN()
	a.out.Reset()
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadResponseOnly, PKey: wire.DefaultPKey, DestQP: qpnA, PSN: P},
		AETH: wire.AETHFields{Syndrome: wire.SyndromeAckUnlimited}}
	bad := append(wire.AppendHeaders(nil, &h), 1, 2, 3, 4)
	l.inject(b, a, bad)
	wantCompletions(t, a.scq.take(), Completion{WRID: 5, Status: ibv.WCBadRespErr, Opcode: ibv.WCFlush, QPN: qpnA})
}

// localOpsMemory is a testMemory that executes local operations, recording
// them.
type localOpsMemory struct {
	*testMemory
	binds []MWBind
	invs  []uint32
	fail  bool
}

func (m *localOpsMemory) BindMW(_ uint32, b *MWBind) bool {
	m.binds = append(m.binds, *b)
	return !m.fail
}

func (m *localOpsMemory) LocalInvalidate(_ uint32, rkey uint32) bool {
	m.invs = append(m.invs, rkey)
	return !m.fail
}

// TestLocalOps: BIND_MW and LOCAL_INV take no PSN and send nothing; they
// execute when the requester reaches them (a fenced one once everything
// before it completed) and complete in posting order; a failure completes
// with MW_BIND_ERR or LOC_QP_OP_ERR and moves the QP to ERR.
func TestLocalOps(t *testing.T) {
	for _, fail := range []bool{false, true} {
		a, b := newPair(t, defaultOpts())
		lm := &localOpsMemory{testMemory: a.mem, fail: fail}
		a.qp.mem = lm
		l := newLink(t, a, b)
		src := pattern(16, 1)
		lkey := a.mem.register(pd, src, 0x100, 0)
		rkey := b.mem.register(pd, make([]byte, 16), 0, ibv.AccessRemoteWrite)
		l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled, SGL: []SGE{{0x100, 16, lkey}}, RKey: rkey})
		l.post(a, SendWQE{WRID: 2, Opcode: ibv.WRBindMW, Flags: ibv.SendSignaled, Bind: MWBind{MWRKey: 0x40001FF, RKey: 0x4000100, Length: 8}})
		l.post(a, SendWQE{WRID: 3, Opcode: ibv.WRLocalInv, Flags: ibv.SendSignaled | ibv.SendFence, InvalidateRKey: 0x4000100})
		if len(a.out.Packets()) != 1 {
			t.Fatalf("%d packets, want the WRITE only", len(a.out.Packets()))
		}
		if len(lm.binds) != 1 || lm.binds[0].MWRKey != 0x40001FF {
			t.Fatalf("binds %+v: BIND_MW not executed when reached", lm.binds)
		}
		if len(lm.invs) != 0 || len(a.scq.c) != 0 {
			t.Fatalf("LOCAL_INV ran before its fence (%v), completions %+v", lm.invs, a.scq.c)
		}
		l.run(time.Second)
		if !fail {
			wantCompletions(t, a.scq.take(),
				Completion{WRID: 1, Status: ibv.WCSuccess, Opcode: ibv.WCRDMAWrite, ByteLen: 16, QPN: qpnA},
				Completion{WRID: 2, Status: ibv.WCSuccess, Opcode: ibv.WCBindMW, QPN: qpnA},
				Completion{WRID: 3, Status: ibv.WCSuccess, Opcode: ibv.WCLocalInv, QPN: qpnA})
			if len(lm.invs) != 1 {
				t.Fatalf("invalidations %v", lm.invs)
			}
			// With nothing outstanding, a local operation completes
			// within PostSend.
			l.post(a, SendWQE{WRID: 4, Opcode: ibv.WRLocalInv, Flags: ibv.SendSignaled, InvalidateRKey: 7})
			wantCompletions(t, a.scq.take(), Completion{WRID: 4, Status: ibv.WCSuccess, Opcode: ibv.WCLocalInv, QPN: qpnA})
			continue
		}
		wantCompletions(t, a.scq.take(),
			Completion{WRID: 1, Status: ibv.WCSuccess, Opcode: ibv.WCRDMAWrite, ByteLen: 16, QPN: qpnA},
			Completion{WRID: 2, Status: ibv.WCMWBindErr, Opcode: ibv.WCBindMW, QPN: qpnA},
			Completion{WRID: 3, Status: ibv.WCWRFlushErr, Opcode: ibv.WCLocalInv, QPN: qpnA})
		if a.qp.State() != ibv.QPStateErr {
			t.Fatalf("state %v after a failed bind", a.qp.State())
		}
	}
	// A Memory without LocalOps fails them.
	a, _ := newPair(t, defaultOpts())
	l := newLink(t, a, a)
	l.post(a, SendWQE{WRID: 9, Opcode: ibv.WRLocalInv, InvalidateRKey: 7})
	wantCompletions(t, a.scq.take(), Completion{WRID: 9, Status: ibv.WCLocQPOpErr, Opcode: ibv.WCLocalInv, QPN: qpnA})
	for _, w := range []SendWQE{
		{Opcode: ibv.WRBindMW, SGL: []SGE{{0, 8, 1}}},
		{Opcode: ibv.WRFlush, SGL: []SGE{{0, 8, 1}}},
		{Opcode: ibv.WRAtomicWrite, SGL: []SGE{{0, 4, 1}}},
	} {
		if err := a.qp.PostSend(&w, l.now, &a.out); err == nil {
			t.Errorf("%v with %v accepted", w.Opcode, w.SGL)
		}
	}
}
