package transport

import (
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/wire"
)

// TestStrings checks the texts of the transport's own errors; the enums'
// names are internal/ibv's.
func TestStrings(t *testing.T) {
	tests := []struct{ got, want string }{
		{ErrOutOfBounds.Error(), "transport: access outside the memory region"},
		{AccessError(0).Error(), "transport: memory access fault"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestNakCodes maps every NAK code to the requester's status.
func TestNakCodes(t *testing.T) {
	tests := []struct {
		code wire.NAKCode
		want ibv.WCStatus
	}{
		{wire.NAKInvalidRequest, ibv.WCRemInvReqErr},
		{wire.NAKRemoteAccessError, ibv.WCRemAccessErr},
		{wire.NAKRemoteOperationalError, ibv.WCRemOpErr},
		{wire.NAKInvalidRDRequest, ibv.WCRemOpErr},
		{0x1F, ibv.WCRemOpErr},
	}
	for _, tc := range tests {
		a, b := newPair(t, defaultOpts())
		l := newLink(t, a, b)
		l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRSend})
		l.post(a, SendWQE{WRID: 2, Opcode: ibv.WRSend})
		a.out.Reset()
		h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCAcknowledge, PKey: 0xFFFF, DestQP: qpnA, PSN: base.Add(1)},
			AETH: wire.AETHFields{Syndrome: wire.NakSyndrome(tc.code)}}
		l.inject(b, a, wire.AppendHeaders(nil, &h))
		// The NAK implicitly acknowledged WR 1, which completes silently.
		wantCompletions(t, a.scq.take(), Completion{WRID: 2, Status: tc.want, Opcode: ibv.WCSend, QPN: qpnA})
	}
}

// TestForeignPackets: packets of another transport, QP or partition, and
// packets in a state that does not take them, are dropped and counted.
func TestForeignPackets(t *testing.T) {
	a, b := newPair(t, defaultOpts())
	l := newLink(t, a, b)
	ok := req(wire.RCSendOnly, base, true, nil, nil)
	tests := []func([]byte){
		func(p []byte) { wire.BTH(p).SetDestQP(0x99) },
		func(p []byte) { wire.BTH(p).SetPKey(0x1234) },
		func(p []byte) { wire.BTH(p).SetOpcode(wire.UCSendOnly) },
	}
	for i, mangle := range tests {
		p := append([]byte(nil), ok...)
		mangle(p)
		if got := l.inject(a, b, p); len(got) != 0 || b.qp.Counters().DroppedPackets != uint64(i+1) {
			t.Errorf("case %d: answered %v, counters %+v", i, got, b.qp.Counters())
		}
	}
	// A limited-membership P_Key (0x7FFF) matches the default.
	p := append([]byte(nil), ok...)
	wire.BTH(p).SetPKey(0x7FFF)
	eq(t, "limited P_Key", l.inject(a, b, p), "RC ACKNOWLEDGE@0 RNR NAK timer=12 (640µs)")
	b.qp.SetState(ibv.QPStateInit)
	if got := l.inject(a, b, ok); len(got) != 0 {
		t.Errorf("INIT answered %v", got)
	}
}

// TestWindowAttribute: SetMaxUnackedPSNs bounds the PSNs in flight.
func TestWindowAttribute(t *testing.T) {
	a, b := newPair(t, defaultOpts())
	must(t, a.qp.SetMaxUnackedPSNs(3))
	l := newLink(t, a, b)
	rkey := b.mem.register(pd, make([]byte, 64), 0, ibv.AccessRemoteWrite)
	for i := range 5 {
		l.post(a, SendWQE{WRID: uint64(i), Opcode: ibv.WRRDMAWrite, RKey: rkey})
	}
	if got := a.out.Len(); got != 3 {
		t.Fatalf("%d packets in flight, want 3", got)
	}
	l.run(time.Second)
	checkIdle(t, a, b)
}

// TestGatherFailsMidMessage: memory deregistered while a long WRITE waits
// for the window fails it with LOC_PROT_ERR, never sending garbage.
func TestGatherFailsMidMessage(t *testing.T) {
	o := defaultOpts()
	o.mtu = 256
	a, b := newPair(t, o)
	must(t, a.qp.SetMaxUnackedPSNs(DefaultMaxUnackedPSNs))
	l := newLink(t, a, b)
	n := (DefaultMaxUnackedPSNs + 72) * 256 // longer than the window
	rkey := b.mem.register(pd, make([]byte, n), 0, ibv.AccessRemoteWrite)
	lkey := a.mem.register(pd, make([]byte, n), 0, 0)
	l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRRDMAWrite, SGL: []SGE{{0, uint32(n), lkey}}, RKey: rkey})
	l.post(a, SendWQE{WRID: 2, Opcode: ibv.WRSend})
	if a.out.Len() != DefaultMaxUnackedPSNs {
		t.Fatalf("%d packets", a.out.Len())
	}
	a.mem.deregister(lkey)
	l.run(time.Second)
	wantCompletions(t, a.scq.take(),
		Completion{WRID: 1, Status: ibv.WCLocProtErr, Opcode: ibv.WCRDMAWrite, QPN: qpnA},
		Completion{WRID: 2, Status: ibv.WCWRFlushErr, Opcode: ibv.WCSend, QPN: qpnA})
	if got := countOps(l.log, "a", "WRITE"); got != DefaultMaxUnackedPSNs {
		t.Errorf("%d WRITE packets sent", got)
	}
	if a.mem.refs != 0 {
		t.Error("Refs leaked")
	}
}

// TestNoResponderResources: with max_dest_rd_atomic never set (0), a READ
// or atomic is an invalid request.
func TestNoResponderResources(t *testing.T) {
	for _, op := range []wire.Opcode{wire.RCRDMAReadRequest, wire.RCFetchAdd} {
		a := newEndpoint("a", qpnA, defaultOpts(), nil)
		b := newEndpoint("b", qpnB, defaultOpts(), nil)
		b.qp.SetDestQPN(qpnA)
		b.qp.SetRQPSN(base)
		b.qp.SetAccessFlags(ibv.AccessRemoteRead | ibv.AccessRemoteAtomic)
		b.qp.SetState(ibv.QPStateRTR)
		l := newLink(t, a, b)
		eq(t, op.String(), l.inject(a, b, req(op, base, true, nil, nil)), "RC ACKNOWLEDGE@0 NAK invalid request")
	}
}
