package transport

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// req builds a request packet from a to b (BTH through pad).
func req(op wire.Opcode, p psn.PSN, ackReq bool, payload []byte, set func(h *wire.Headers)) []byte {
	h := wire.Headers{BTH: wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: qpnB, PSN: p, AckReq: ackReq,
		PadCount: wire.PadCount(len(payload))}}
	if set != nil {
		set(&h)
	}
	b := wire.AppendHeaders(nil, &h)
	b = append(b, payload...)
	return wire.AppendPad(b, h.BTH.PadCount)
}

// inject hands a hand-built packet from `from` to `to` and returns what `to`
// answered, summarised.
func (l *link) inject(from, to *endpoint, b []byte) []string {
	l.t.Helper()
	p := l.parse(from, b)
	to.qp.HandlePacket(p, l.now, &to.out)
	return l.drain(to)
}

// drain summarises and discards e's output: "OPCODE@psn" plus the AETH
// syndrome when there is one.
func (l *link) drain(e *endpoint) []string {
	var s []string
	for _, op := range e.out.Packets() {
		p := l.parse(e, op.Bytes)
		// PSNs print relative to base, the first PSN a sends (and b
		// answers with), so tests read small numbers.
		d := fmt.Sprintf("%v@%d", p.BTH.Opcode(), p.BTH.PSN().Sub(base))
		if p.AETH != nil {
			d += " " + p.AETH.Syndrome().String()
		}
		s = append(s, d)
	}
	e.out.Reset()
	return s
}

func eq(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}

var base = defaultOpts().psnA

// TestOutOfSequenceFloodOneNak: a flood of requests ahead of the expected
// PSN, every one asking for an acknowledgement (what an attacker who can
// put packets on the path sends), draws one sequence NAK, not one each:
// no amplification (IBTA 9.7.5.2.2).
func TestOutOfSequenceFloodOneNak(t *testing.T) {
	a, b := newPair(t, defaultOpts())
	l := newLink(t, a, b)
	dst := make([]byte, 64)
	rkey := b.mem.register(pd, dst, 0, ibv.AccessRemoteWrite)
	rng := rand.New(rand.NewPCG(1, 2))
	var naks int
	const flood = 10000
	for range flood {
		// Anywhere ahead of the expected PSN, within half the PSN space.
		p := base.Add(1 + rng.Uint32N(psn.Mask/2))
		pkt := req(wire.RCRDMAWriteOnly, p, true, []byte{1, 2, 3, 4}, func(h *wire.Headers) {
			h.RETH = wire.RETHFields{VA: 0, RKey: rkey, DMALength: 4}
		})
		naks += len(l.inject(a, b, pkt))
	}
	if naks != 1 {
		t.Errorf("%d out-of-sequence requests drew %d replies, want 1 NAK", flood, naks)
	}
	if c := b.qp.Counters(); c.SeqNakSent != 1 || c.OutOfSeqRequest != flood {
		t.Errorf("counters %+v", c)
	}
	if !bytes.Equal(dst, make([]byte, 64)) {
		t.Error("an out-of-sequence WRITE was executed")
	}
	// The episode ends when the expected PSN arrives; the next gap is
	// NAKed again, once.
	write := func(p uint32) []byte {
		return req(wire.RCRDMAWriteOnly, base.Add(p), true, []byte{1, 2, 3, 4}, func(h *wire.Headers) {
			h.RETH = wire.RETHFields{VA: 0, RKey: rkey, DMALength: 4}
		})
	}
	eq(t, "expected", l.inject(a, b, write(0)), "RC ACKNOWLEDGE@0 ACK credits=31")
	eq(t, "next gap", l.inject(a, b, write(5)), "RC ACKNOWLEDGE@1 NAK PSN sequence error")
	eq(t, "next gap again", l.inject(a, b, write(6)))
}

func TestResponderPSN(t *testing.T) {
	a, b := newPair(t, defaultOpts())
	l := newLink(t, a, b)
	dst := make([]byte, 64)
	rkey := b.mem.register(pd, dst, 0, ibv.AccessRemoteWrite)
	write := func(p uint32, ack bool, v byte) []byte {
		return req(wire.RCRDMAWriteOnly, base.Add(p), ack, []byte{v, v, v, v}, func(h *wire.Headers) {
			h.RETH = wire.RETHFields{VA: uint64(4 * p), RKey: rkey, DMALength: 4}
		})
	}
	eq(t, "expected, AckReq", l.inject(a, b, write(0, true, 1)), "RC ACKNOWLEDGE@0 ACK credits=31")
	eq(t, "expected, no AckReq", l.inject(a, b, write(1, false, 2)))
	// A gap: NAK with the expected PSN, then silence until it arrives,
	// even towards a packet that asks for an acknowledgement (see
	// respond).
	eq(t, "ahead", l.inject(a, b, write(3, true, 4)), "RC ACKNOWLEDGE@2 NAK PSN sequence error")
	eq(t, "ahead again", l.inject(a, b, write(4, false, 5)))
	eq(t, "ahead again, AckReq", l.inject(a, b, write(3, true, 4)))
	if dst[12] != 0 || dst[16] != 0 {
		t.Fatal("an out-of-sequence WRITE was executed")
	}
	// Duplicate: re-ACK with the last PSN and do not execute.
	dst[0] = 0
	eq(t, "duplicate", l.inject(a, b, write(0, true, 9)), "RC ACKNOWLEDGE@1 ACK credits=31")
	if dst[0] != 0 {
		t.Fatal("a duplicate WRITE was executed again")
	}
	// The expected PSN arrives: accepted, and the NAK state is re-armed.
	eq(t, "expected", l.inject(a, b, write(2, true, 3)), "RC ACKNOWLEDGE@2 ACK credits=31")
	eq(t, "ahead after recovery", l.inject(a, b, write(9, true, 4)), "RC ACKNOWLEDGE@3 NAK PSN sequence error")
	c := b.qp.Counters()
	if c.OutOfSeqRequest != 4 || c.SeqNakSent != 2 || c.DuplicateRequest != 1 {
		t.Errorf("counters %+v", c)
	}
	if s := b.qp.Snapshot(); s.MSN != 3 || s.ExpectedPSN != base.Add(3) {
		t.Errorf("MSN %v, ePSN %v", s.MSN, s.ExpectedPSN)
	}
}

func TestResponderOpcodeSequence(t *testing.T) {
	mtu := 256
	full := make([]byte, mtu)
	tests := []struct {
		name string
		pkts [][]byte
	}{
		{"middle without first", [][]byte{req(wire.RCSendMiddle, base, false, full, nil)}},
		{"last without first", [][]byte{req(wire.RCRDMAWriteLast, base, true, full[:4], nil)}},
		{"first inside a send", [][]byte{
			req(wire.RCSendFirst, base, false, full, nil),
			req(wire.RCSendFirst, base.Add(1), false, full, nil)}},
		{"write middle inside a send", [][]byte{
			req(wire.RCSendFirst, base, false, full, nil),
			req(wire.RCRDMAWriteMiddle, base.Add(1), false, full, nil)}},
		{"read inside a write", [][]byte{
			req(wire.RCRDMAWriteFirst, base, false, full, func(h *wire.Headers) {
				h.RETH = wire.RETHFields{RKey: 0x15A, DMALength: 1000}
			}),
			req(wire.RCRDMAReadRequest, base.Add(1), true, nil, func(h *wire.Headers) {
				h.RETH = wire.RETHFields{RKey: 0x15A, DMALength: 8}
			})}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := defaultOpts()
			o.mtu = mtu
			a, b := newPair(t, o)
			l := newLink(t, a, b)
			b.mem.register(pd, make([]byte, 4096), 0, ibv.AccessLocalWrite|ibv.AccessRemoteWrite|ibv.AccessRemoteRead) // key 0x15A
			l.recv(b, 8, SGE{0, 4096, 0x15A})
			var got []string
			for _, p := range tc.pkts {
				got = l.inject(a, b, p)
			}
			last := len(tc.pkts) - 1
			eq(t, "answer", got, fmt.Sprintf("RC ACKNOWLEDGE@%d NAK invalid request", last))
			if b.qp.State() != ibv.QPStateErr {
				t.Fatalf("responder state %v, want ERR", b.qp.State())
			}
			// The receive WQE a SEND held completes with the error, any
			// other is flushed.
			c := b.rcq.take()
			if len(c) != 1 || c[0].WRID != 8 || (c[0].Status != ibv.WCRemInvReqErr && c[0].Status != ibv.WCWRFlushErr) {
				t.Fatalf("receive completions %+v", c)
			}
		})
	}
}

// TestResponderLength checks C9-92/C9-94 against the RETH and the receive
// buffer.
func TestResponderLength(t *testing.T) {
	mtu := 256
	type pkt struct {
		op      wire.Opcode
		n       int
		dmaLen  uint32
		withRTH bool
	}
	tests := []struct {
		name     string
		pkts     []pkt
		recvStat ibv.WCStatus // status of the receive WQE, if one is consumed
	}{
		{"write only shorter than RETH", []pkt{{wire.RCRDMAWriteOnly, 10, 20, true}}, ibv.WCWRFlushErr},
		{"write only longer than RETH", []pkt{{wire.RCRDMAWriteOnly, 20, 10, true}}, ibv.WCWRFlushErr},
		{"write first for one MTU", []pkt{{wire.RCRDMAWriteFirst, 256, 256, true}}, ibv.WCWRFlushErr},
		{"write last short of RETH", []pkt{{wire.RCRDMAWriteFirst, 256, 600, true}, {wire.RCRDMAWriteLast, 100, 0, false}}, ibv.WCWRFlushErr},
		{"write last beyond RETH", []pkt{{wire.RCRDMAWriteFirst, 256, 300, true}, {wire.RCRDMAWriteLast, 100, 0, false}}, ibv.WCWRFlushErr},
		{"RETH above 2^31", []pkt{{wire.RCRDMAWriteOnly, 0, 1<<31 + 1, true}}, ibv.WCWRFlushErr},
		{"only above MTU", []pkt{{wire.RCSendOnly, 260, 0, false}}, ibv.WCWRFlushErr},
		{"send beyond the receive buffer", []pkt{{wire.RCSendFirst, 256, 0, false}, {wire.RCSendMiddle, 256, 0, false}, {wire.RCSendLast, 200, 0, false}}, ibv.WCLocLenErr},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := defaultOpts()
			o.mtu = mtu
			a, b := newPair(t, o)
			l := newLink(t, a, b)
			buf := make([]byte, 700)
			key := b.mem.register(pd, buf, 0, ibv.AccessRemoteWrite|ibv.AccessLocalWrite)
			l.recv(b, 1, SGE{0, 600, key})
			var got []string
			for i, pk := range tc.pkts {
				b := req(pk.op, base.Add(uint32(i)), true, make([]byte, pk.n), func(h *wire.Headers) {
					h.RETH = wire.RETHFields{RKey: key, DMALength: pk.dmaLen}
				})
				// Parse without an MTU so the transport's own check runs.
				var p wire.Packet
				must(t, p.Parse(frame(nil, b, addrA, addrB), 0))
				l.b.qp.HandlePacket(&p, l.now, &l.b.out)
				got = l.drain(l.b)
			}
			eq(t, "answer", got, fmt.Sprintf("RC ACKNOWLEDGE@%d NAK invalid request", len(tc.pkts)-1))
			if b.qp.State() != ibv.QPStateErr {
				t.Fatalf("state %v", b.qp.State())
			}
			c := b.rcq.take()
			if len(c) != 1 || c[0].Status != tc.recvStat {
				t.Fatalf("receive completions %+v, want status %v", c, tc.recvStat)
			}
		})
	}
}

// TestRemoteAccessErrors runs end to end: the requester sees
// REM_ACCESS_ERR (or REM_INV_REQ_ERR for what rxe answers with an invalid
// request), the responder goes to ERR, and the memory is untouched.
func TestRemoteAccessErrors(t *testing.T) {
	type target struct {
		pd     uint32
		access ibv.AccessFlags
		size   int
	}
	ok := target{pd, ibv.AccessRemoteWrite | ibv.AccessRemoteRead | ibv.AccessRemoteAtomic, 64}
	tests := []struct {
		name   string
		op     ibv.WROpcode
		tgt    target
		rkey   func(k uint32) uint32
		addr   uint64
		n      int
		qpAcc  ibv.AccessFlags
		status ibv.WCStatus
	}{
		{"write bad rkey", ibv.WRRDMAWrite, ok, func(k uint32) uint32 { return k + 0x100 }, 0, 8, 0, ibv.WCRemAccessErr},
		{"write wrong PD", ibv.WRRDMAWrite, target{2, ok.access, 64}, nil, 0, 8, 0, ibv.WCRemAccessErr},
		{"write beyond", ibv.WRRDMAWrite, ok, nil, 60, 8, 0, ibv.WCRemAccessErr},
		{"write below", ibv.WRRDMAWrite, ok, nil, 0x1000 - 1, 8, 0, ibv.WCRemAccessErr},
		{"write no right", ibv.WRRDMAWrite, target{pd, ibv.AccessRemoteRead, 64}, nil, 0, 8, 0, ibv.WCRemAccessErr},
		{"read no right", ibv.WRRDMARead, target{pd, ibv.AccessRemoteWrite, 64}, nil, 0, 8, 0, ibv.WCRemAccessErr},
		{"read beyond", ibv.WRRDMARead, ok, nil, 0, 65, 0, ibv.WCRemAccessErr},
		{"atomic no right", ibv.WRAtomicFetchAndAdd, target{pd, ibv.AccessRemoteWrite, 64}, nil, 0, 8, 0, ibv.WCRemAccessErr},
		{"atomic misaligned", ibv.WRAtomicFetchAndAdd, ok, nil, 4, 8, 0, ibv.WCRemInvReqErr},
		{"qp disallows write", ibv.WRRDMAWrite, ok, nil, 0, 8, ibv.AccessRemoteRead, ibv.WCRemInvReqErr},
		{"qp disallows read", ibv.WRRDMARead, ok, nil, 0, 8, ibv.AccessRemoteWrite, ibv.WCRemInvReqErr},
		{"qp disallows atomic", ibv.WRAtomicCmpAndSwp, ok, nil, 0, 8, ibv.AccessRemoteWrite, ibv.WCRemInvReqErr},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := defaultOpts()
			a, b := newPair(t, o)
			if tc.qpAcc != 0 {
				b.qp.SetAccessFlags(tc.qpAcc)
			}
			l := newLink(t, a, b)
			mem := make([]byte, tc.tgt.size)
			rkey := b.mem.register(tc.tgt.pd, mem, 0x1000, tc.tgt.access)
			if tc.rkey != nil {
				rkey = tc.rkey(rkey)
			}
			local := pattern(tc.n, 1)
			lkey := a.mem.register(pd, local, 0, ibv.AccessLocalWrite)
			// An unsignaled WQE: errors complete anyway.
			l.post(a, SendWQE{WRID: 5, Opcode: tc.op, SGL: []SGE{{0, uint32(tc.n), lkey}}, RemoteAddr: 0x1000 + tc.addr, RKey: rkey})
			l.post(a, SendWQE{WRID: 6, Opcode: ibv.WRSend, Flags: ibv.SendSignaled})
			l.run(time.Second)
			wantCompletions(t, a.scq.take(),
				Completion{WRID: 5, Status: tc.status, Opcode: wcOpcode(tc.op), QPN: qpnA},
				Completion{WRID: 6, Status: ibv.WCWRFlushErr, Opcode: ibv.WCSend, QPN: qpnA})
			if a.qp.State() != ibv.QPStateErr || b.qp.State() != ibv.QPStateErr {
				t.Errorf("states %v %v, want ERR ERR", a.qp.State(), b.qp.State())
			}
			for _, x := range mem {
				if x != 0 {
					t.Fatal("memory written despite the error")
				}
			}
			if a.mem.refs != 0 || b.mem.refs != 0 {
				t.Error("Refs leaked")
			}
		})
	}
}

// TestZeroLengthSkipsRKey: a zero-length READ or WRITE names no memory
// (C9-88), so any rkey goes.
func TestZeroLengthSkipsRKey(t *testing.T) {
	for _, op := range []ibv.WROpcode{ibv.WRRDMAWrite, ibv.WRRDMARead} {
		a, b := newPair(t, defaultOpts())
		l := newLink(t, a, b)
		l.post(a, SendWQE{WRID: 1, Opcode: op, Flags: ibv.SendSignaled, RKey: 0xDEAD})
		l.run(time.Second)
		wantCompletions(t, a.scq.take(), Completion{WRID: 1, Opcode: wcOpcode(op), QPN: qpnA})
		checkIdle(t, a, b)
	}
}

func TestRNRNakSent(t *testing.T) {
	o := defaultOpts()
	o.minRNR = 5
	a, b := newPair(t, o)
	l := newLink(t, a, b)
	dst := make([]byte, 16)
	key := b.mem.register(pd, dst, 0, ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
	send := req(wire.RCSendOnly, base, true, []byte{1, 2, 3, 4}, nil)
	eq(t, "no receive", l.inject(a, b, send), "RC ACKNOWLEDGE@0 RNR NAK timer=5 (60µs)")
	eq(t, "no receive again", l.inject(a, b, send), "RC ACKNOWLEDGE@0 RNR NAK timer=5 (60µs)")
	wimm := req(wire.RCRDMAWriteOnlyWithImmediate, base, true, []byte{1, 2, 3, 4}, func(h *wire.Headers) {
		h.RETH = wire.RETHFields{RKey: key, DMALength: 4}
	})
	eq(t, "write with imm, no receive", l.inject(a, b, wimm), "RC ACKNOWLEDGE@0 RNR NAK timer=5 (60µs)")
	if dst[0] != 0 {
		t.Fatal("a WRITE refused for RNR was executed")
	}
	if s := b.qp.Snapshot(); s.ExpectedPSN != base || s.MSN != 0 {
		t.Fatalf("RNR advanced the responder: %+v", s)
	}
	l.recv(b, 1, SGE{0, 16, key})
	eq(t, "receive posted", l.inject(a, b, send), "RC ACKNOWLEDGE@0 ACK credits=31")
	wantCompletions(t, b.rcq.take(), Completion{WRID: 1, Opcode: ibv.WCRecv, ByteLen: 4, QPN: qpnB, SrcQP: qpnA})
	if c := b.qp.Counters(); c.RNRNakSent != 3 {
		t.Errorf("RNRNakSent = %d", c.RNRNakSent)
	}
}

// TestMultiPacketSendHoldsWQE: a SEND takes its receive WQE at FIRST and
// keeps it to LAST; an RNR can only happen at FIRST.
func TestMultiPacketSendHoldsWQE(t *testing.T) {
	o := defaultOpts()
	o.mtu = 256
	a, b := newPair(t, o)
	l := newLink(t, a, b)
	dst := make([]byte, 2048)
	key := b.mem.register(pd, dst, 0, ibv.AccessLocalWrite)
	l.recv(b, 1, SGE{0, 1024, key})
	l.recv(b, 2, SGE{1024, 1024, key})
	full := pattern(256, 1)
	eq(t, "first", l.inject(a, b, req(wire.RCSendFirst, base, false, full, nil)))
	eq(t, "middle", l.inject(a, b, req(wire.RCSendMiddle, base.Add(1), false, full, nil)))
	if s := b.qp.Snapshot(); !s.HoldsRecvWQE || !s.InMessage || s.RQDepth != 2 {
		t.Fatalf("snapshot %+v", s)
	}
	eq(t, "last", l.inject(a, b, req(wire.RCSendLast, base.Add(2), true, full[:5], nil)), "RC ACKNOWLEDGE@2 ACK credits=31")
	wantCompletions(t, b.rcq.take(), Completion{WRID: 1, Opcode: ibv.WCRecv, ByteLen: 517, QPN: qpnB, SrcQP: qpnA})
	eq(t, "only", l.inject(a, b, req(wire.RCSendOnly, base.Add(3), true, full[:3], nil)), "RC ACKNOWLEDGE@3 ACK credits=31")
	wantCompletions(t, b.rcq.take(), Completion{WRID: 2, Opcode: ibv.WCRecv, ByteLen: 3, QPN: qpnB, SrcQP: qpnA})
	wantBytes(t, "second", dst[1024:1027], full[:3])
	if s := b.qp.Snapshot(); s.MSN != 2 || s.RQDepth != 0 {
		t.Fatalf("snapshot %+v", s)
	}
}

// TestDuplicateReadAndAtomicReplay: a duplicate READ is answered again from
// memory (its current contents), a duplicate atomic from the saved value
// without executing it again; requests that fell out of the resources ring
// are dropped.
func TestDuplicateReadAndAtomicReplay(t *testing.T) {
	o := defaultOpts()
	o.mtu = 256
	o.rdAtomic = 2
	a, b := newPair(t, o)
	l := newLink(t, a, b)
	mem := pattern(1024, 5)
	binary.NativeEndian.PutUint64(mem[:8], 100)
	key := b.mem.register(pd, mem, 0, ibv.AccessRemoteRead|ibv.AccessRemoteAtomic)
	read := func(p uint32, va uint64, n uint32) []byte {
		return req(wire.RCRDMAReadRequest, base.Add(p), true, nil, func(h *wire.Headers) {
			h.RETH = wire.RETHFields{VA: va, RKey: key, DMALength: n}
		})
	}
	fadd := req(wire.RCFetchAdd, base.Add(3), true, nil, func(h *wire.Headers) {
		h.AtomicETH = wire.AtomicETHFields{VA: 0, RKey: key, SwapAdd: 1}
	})
	eq(t, "read", l.inject(a, b, read(0, 256, 600)),
		"RC RDMA_READ_RESPONSE_FIRST@0 ACK credits=31", "RC RDMA_READ_RESPONSE_MIDDLE@1", "RC RDMA_READ_RESPONSE_LAST@2 ACK credits=31")
	eq(t, "fetch-add", l.inject(a, b, fadd), "RC ATOMIC_ACKNOWLEDGE@3 ACK credits=31")
	if v := binary.NativeEndian.Uint64(mem); v != 101 {
		t.Fatalf("after one FETCH_ADD: %d", v)
	}
	eq(t, "duplicate fetch-add", l.inject(a, b, fadd), "RC ATOMIC_ACKNOWLEDGE@3 ACK credits=31")
	if v := binary.NativeEndian.Uint64(mem); v != 101 {
		t.Fatalf("a duplicate FETCH_ADD was executed: %d", v)
	}
	// The replayed atomic ACK carries the original value again.
	b.qp.HandlePacket(l.parse(a, fadd), l.now, &b.out)
	if p := l.parse(b, b.out.Packets()[0].Bytes); p.AtomicAckETH.OrigData() != 100 {
		t.Fatalf("replayed original value %d", p.AtomicAckETH.OrigData())
	}
	b.out.Reset()
	// Re-reading from the resumed PSN asks for the tail only; it is
	// answered from memory as it is now.
	mem[256+512] = 0xEE
	eq(t, "resumed read", l.inject(a, b, read(2, 256+512, 88)), "RC RDMA_READ_RESPONSE_ONLY@2 ACK credits=31")
	eq(t, "whole read again", l.inject(a, b, read(0, 256, 600)),
		"RC RDMA_READ_RESPONSE_FIRST@0 ACK credits=31", "RC RDMA_READ_RESPONSE_MIDDLE@1", "RC RDMA_READ_RESPONSE_LAST@2 ACK credits=31")
	// Not a subset of the original request: dropped.
	eq(t, "beyond the original", l.inject(a, b, read(2, 256+512, 89)))
	eq(t, "another rkey", l.inject(a, b, req(wire.RCRDMAReadRequest, base, true, nil, func(h *wire.Headers) {
		h.RETH = wire.RETHFields{VA: 256, RKey: key + 0x100, DMALength: 600}
	})))
	// Two more atomics push the READ out of the 2-entry ring.
	for i := uint32(4); i < 6; i++ {
		l.inject(a, b, req(wire.RCCompareSwap, base.Add(i), true, nil, func(h *wire.Headers) {
			h.AtomicETH = wire.AtomicETHFields{VA: 8, RKey: key}
		}))
	}
	eq(t, "forgotten read", l.inject(a, b, read(0, 256, 600)))
	eq(t, "forgotten atomic", l.inject(a, b, fadd))
	// A deregistered MR makes a replayed READ a remote access error.
	eq(t, "replay", l.inject(a, b, req(wire.RCCompareSwap, base.Add(5), true, nil, func(h *wire.Headers) {
		h.AtomicETH = wire.AtomicETHFields{VA: 8, RKey: key}
	})), "RC ATOMIC_ACKNOWLEDGE@5 ACK credits=31")
	if b.qp.State() != ibv.QPStateRTS || b.mem.refs != 0 {
		t.Fatalf("state %v refs %d", b.qp.State(), b.mem.refs)
	}
}

func TestDuplicateReadAfterDeregistration(t *testing.T) {
	a, b := newPair(t, defaultOpts())
	l := newLink(t, a, b)
	key := b.mem.register(pd, make([]byte, 64), 0, ibv.AccessRemoteRead)
	read := req(wire.RCRDMAReadRequest, base, true, nil, func(h *wire.Headers) {
		h.RETH = wire.RETHFields{RKey: key, DMALength: 64}
	})
	eq(t, "read", l.inject(a, b, read), "RC RDMA_READ_RESPONSE_ONLY@0 ACK credits=31")
	b.mem.deregister(key)
	eq(t, "replay", l.inject(a, b, read), "RC ACKNOWLEDGE@0 NAK remote access error")
	if b.qp.State() != ibv.QPStateErr {
		t.Fatal("responder not in ERR")
	}
}

// TestAtomicLocksShared runs atomics from two QPs of one device against the
// same word; with a shared AtomicLocks every increment counts.
func TestAtomicLocksShared(t *testing.T) {
	locks := new(AtomicLocks)
	word := make([]byte, 8)
	const n = 200
	done := make(chan struct{})
	for k := range 2 {
		o := defaultOpts()
		o.locks = locks
		a, b := newPair(t, o)
		l := newLink(t, a, b)
		b.mem.regions[0x15A] = &region{pd: pd, buf: word, access: ibv.AccessRemoteAtomic}
		pkts := make([][]byte, n)
		for i := range pkts {
			pkts[i] = req(wire.RCFetchAdd, base.Add(uint32(i)), true, nil, func(h *wire.Headers) {
				h.AtomicETH = wire.AtomicETHFields{RKey: 0x15A, SwapAdd: 1}
			})
		}
		parsed := make([]wire.Packet, n)
		for i := range pkts {
			must(t, parsed[i].Parse(frame(nil, pkts[i], addrA, addrB), 0))
		}
		_ = k
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range parsed {
				b.qp.HandlePacket(&parsed[i], l.now, &b.out)
				b.out.Reset()
			}
		}()
	}
	<-done
	<-done
	if v := binary.NativeEndian.Uint64(word); v != 2*n {
		t.Fatalf("word = %d, want %d", v, 2*n)
	}
}

// TestReadReplyBursts: a READ reply longer than a burst goes out over
// several calls, driven by Deadline and OnTimer. Requests arriving meanwhile
// are executed; their responses queue behind the reply, an ACK last. A
// duplicate READ restarts the replies where it asks.
func TestReadReplyBursts(t *testing.T) {
	o := defaultOpts()
	o.mtu = 256
	a, b := newPair(t, o)
	l := newLink(t, a, b)
	n := 300*256 - 5
	src := pattern(n, 6)
	dst := make([]byte, 4)
	key := b.mem.register(pd, src, 0, ibv.AccessRemoteRead)
	wkey := b.mem.register(pd, dst, 0, ibv.AccessRemoteWrite)
	read := func(p uint32, va uint64, l uint32) []byte {
		return req(wire.RCRDMAReadRequest, base.Add(p), true, nil, func(h *wire.Headers) {
			h.RETH = wire.RETHFields{VA: va, RKey: key, DMALength: l}
		})
	}
	summary := func(got []string) []string {
		// Runs of MIDDLE responses shown as one entry with a count.
		var s []string
		for i := 0; i < len(got); i++ {
			j := i
			for j+1 < len(got) && strings.HasPrefix(got[j+1], "RC RDMA_READ_RESPONSE_MIDDLE") &&
				strings.HasPrefix(got[i], "RC RDMA_READ_RESPONSE_MIDDLE") {
				j++
			}
			if j > i {
				s = append(s, fmt.Sprintf("%d×%s", j-i+1, got[i]))
			} else {
				s = append(s, got[i])
			}
			i = j
		}
		return s
	}
	timer := func() []string {
		if d, ok := b.qp.Deadline(); !ok || d.After(l.now) {
			t.Fatalf("Deadline %v %v: want now", d, ok)
		}
		b.qp.OnTimer(l.now, &b.out)
		return summary(l.drain(b))
	}
	eq(t, "READ", summary(l.inject(a, b, read(0, 0, uint32(n)))),
		"RC RDMA_READ_RESPONSE_FIRST@0 ACK credits=31", "63×RC RDMA_READ_RESPONSE_MIDDLE@1")
	// A WRITE is executed at once; its ACK waits for the READ's responses.
	write := req(wire.RCRDMAWriteOnly, base.Add(300), true, []byte{1, 2, 3, 4}, func(h *wire.Headers) {
		h.RETH = wire.RETHFields{RKey: wkey, DMALength: 4}
	})
	eq(t, "WRITE", l.inject(a, b, write))
	if dst[0] != 1 {
		t.Fatal("the WRITE was not executed")
	}
	eq(t, "burst 2", timer(), "64×RC RDMA_READ_RESPONSE_MIDDLE@64")
	// A second READ queues behind the first.
	eq(t, "READ 2", summary(l.inject(a, b, read(301, 0, 600))), "64×RC RDMA_READ_RESPONSE_MIDDLE@128")
	eq(t, "burst 4", timer(), "64×RC RDMA_READ_RESPONSE_MIDDLE@192")
	eq(t, "burst 5", timer(), "43×RC RDMA_READ_RESPONSE_MIDDLE@256", "RC RDMA_READ_RESPONSE_LAST@299 ACK credits=31",
		"RC RDMA_READ_RESPONSE_FIRST@301 ACK credits=31", "RC RDMA_READ_RESPONSE_MIDDLE@302",
		"RC RDMA_READ_RESPONSE_LAST@303 ACK credits=31", "RC ACKNOWLEDGE@300 ACK credits=31")
	if _, ok := b.qp.Deadline(); ok {
		t.Fatal("replies still pending")
	}
	// A duplicate READ for the tail of the first replays from its PSN.
	eq(t, "replay", summary(l.inject(a, b, read(100, 100*256, uint32(n-100*256)))),
		"RC RDMA_READ_RESPONSE_FIRST@100 ACK credits=31", "63×RC RDMA_READ_RESPONSE_MIDDLE@101")
	eq(t, "replay 2", timer(), "64×RC RDMA_READ_RESPONSE_MIDDLE@164")
	// A replay of the second READ meanwhile replaces the first's: the
	// requester went back to it.
	eq(t, "replay of READ 2", summary(l.inject(a, b, read(301, 0, 600))),
		"RC RDMA_READ_RESPONSE_FIRST@301 ACK credits=31", "RC RDMA_READ_RESPONSE_MIDDLE@302", "RC RDMA_READ_RESPONSE_LAST@303 ACK credits=31")
	if _, ok := b.qp.Deadline(); ok || b.mem.refs != 0 {
		t.Fatal("replies still pending")
	}
	if c := b.qp.Counters(); c.DroppedBusy != 0 || c.DuplicateRequest != 2 {
		t.Fatalf("counters %+v", c)
	}
}

// TestReplyQueueBound: READs beyond max_dest_rd_atomic while replies are
// queued are dropped, as if lost.
func TestReplyQueueBound(t *testing.T) {
	o := defaultOpts()
	o.mtu = 256
	o.rdAtomic = 1
	a, b := newPair(t, o)
	l := newLink(t, a, b)
	key := b.mem.register(pd, make([]byte, 300*256), 0, ibv.AccessRemoteRead)
	read := func(p uint32) []byte {
		return req(wire.RCRDMAReadRequest, base.Add(p), true, nil, func(h *wire.Headers) {
			h.RETH = wire.RETHFields{RKey: key, DMALength: 300 * 256}
		})
	}
	l.inject(a, b, read(0))
	l.inject(a, b, read(300)) // the second queue entry
	if got := l.inject(a, b, read(600)); len(got) != 0 || b.qp.Counters().DroppedBusy != 1 {
		t.Fatalf("third READ: %d packets, counters %+v", len(got), b.qp.Counters())
	}
	if s := b.qp.Snapshot(); s.ExpectedPSN != base.Add(600) {
		t.Fatalf("the dropped READ advanced the responder: %v", s.ExpectedPSN)
	}
}

// TestLargeReadWithLoss runs a READ of many bursts end to end, losing a
// response of the second burst.
func TestLargeReadWithLoss(t *testing.T) {
	o := defaultOpts()
	o.mtu = 256
	o.timeout = 8
	a, b := newPair(t, o)
	l := newLink(t, a, b)
	n := 300*256 + 1
	src := pattern(n, 9)
	key := b.mem.register(pd, src, 0, ibv.AccessRemoteRead)
	dst := make([]byte, n)
	dropped := false
	l.drop = func(from *endpoint, p *wire.Packet) bool {
		if from == b && p.BTH.PSN() == base.Add(70) && !dropped {
			dropped = true
			return true
		}
		return false
	}
	l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRRDMARead, Flags: ibv.SendSignaled, SGL: []SGE{{0, uint32(n), a.mem.register(pd, dst, 0, ibv.AccessLocalWrite)}}, RKey: key})
	l.run(time.Second)
	wantBytes(t, "read", dst, src)
	wantCompletions(t, a.scq.take(), Completion{WRID: 1, Opcode: ibv.WCRDMARead, ByteLen: uint32(n), QPN: qpnA})
	checkIdle(t, a, b)
}

// TestCoalesceAck checks which ACKs an output's next ACK replaces: the
// QP's own plain ACK that ends the output, never a NAK or RNR NAK, an
// ACK a NAK follows, nor an ACK of a later PSN.
func TestCoalesceAck(t *testing.T) {
	_, b := newPair(t, defaultOpts())
	var out Output
	psns := func() []psn.PSN {
		var ps []psn.PSN
		for _, p := range out.Packets() {
			ps = append(ps, wire.BTH(p.Bytes).PSN())
		}
		return ps
	}
	ack := wire.SyndromeAckUnlimited
	b.qp.emitAck(ack, 1, &out)
	b.qp.emitAck(ack, 2, &out) // replaces 1
	b.qp.emitAck(wire.NakSyndrome(wire.NAKPSNSequenceError), 3, &out)
	b.qp.emitAck(ack, 4, &out) // after a NAK: kept
	b.qp.emitAck(wire.RNRNakSyndrome(1), 5, &out)
	b.qp.emitAck(ack, 6, &out)
	b.qp.emitAck(ack, 7, &out) // replaces 6
	b.qp.emitAck(ack, 7, &out) // replaces 7
	b.qp.emitAck(ack, 3, &out) // an older PSN: kept after 7
	if got, want := psns(), []psn.PSN{2, 3, 4, 5, 7, 3}; !slices.Equal(got, want) {
		t.Errorf("PSNs of the output %v, want %v", got, want)
	}
	if c := b.qp.Counters(); c.AckDeferred != 3 || c.SentPackets != 6 {
		t.Errorf("AckDeferred %d, SentPackets %d; want 3, 6", c.AckDeferred, c.SentPackets)
	}
}
