package transport

import (
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/wire"
)

// TestRefusalRecorded checks that the responder records which check refused
// a request, and the request, and forgets it on reset.
func TestRefusalRecorded(t *testing.T) {
	rights := ibv.AccessRemoteWrite | ibv.AccessRemoteRead | ibv.AccessRemoteAtomic
	tests := []struct {
		name   string
		op     ibv.WROpcode
		pd     uint32
		access ibv.AccessFlags // the region's
		qpAcc  ibv.AccessFlags // the responder QP's; 0 keeps the default
		badKey bool
		off    uint64
		n      int
		want   RefusalReason
		need   ibv.AccessFlags
	}{
		{"bad rkey", ibv.WRRDMAWrite, pd, rights, 0, true, 0, 8, RefusedKey, ibv.AccessRemoteWrite},
		{"wrong PD", ibv.WRRDMARead, 2, rights, 0, false, 0, 8, RefusedPD, ibv.AccessRemoteRead},
		{"beyond", ibv.WRRDMARead, pd, rights, 0, false, 0, 65, RefusedBounds, ibv.AccessRemoteRead},
		{"no right", ibv.WRRDMAWrite, pd, ibv.AccessRemoteRead, 0, false, 0, 8, RefusedMemoryAccess, ibv.AccessRemoteWrite},
		{"misaligned", ibv.WRAtomicFetchAndAdd, pd, rights, 0, false, 4, 8, RefusedMisaligned, ibv.AccessRemoteAtomic},
		{"QP lacks READ", ibv.WRRDMARead, pd, rights, ibv.AccessRemoteWrite, false, 0, 8, RefusedQPAccess, ibv.AccessRemoteRead},
		{"QP lacks atomics", ibv.WRAtomicCmpAndSwp, pd, rights, ibv.AccessRemoteRead, false, 0, 8, RefusedQPAccess, ibv.AccessRemoteAtomic},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newPair(t, defaultOpts())
			if tc.qpAcc != 0 {
				b.qp.SetAccessFlags(tc.qpAcc)
			}
			l := newLink(t, a, b)
			rkey := b.mem.register(tc.pd, make([]byte, 64), 0x1000, tc.access)
			if tc.badKey {
				rkey += 0x100
			}
			lkey := a.mem.register(pd, make([]byte, tc.n), 0, ibv.AccessLocalWrite)
			l.post(a, SendWQE{WRID: 5, Opcode: tc.op, Flags: ibv.SendSignaled, SGL: []SGE{{0, uint32(tc.n), lkey}},
				RemoteAddr: 0x1000 + tc.off, RKey: rkey})
			l.run(time.Second)
			r := b.qp.Refusal()
			wantOp, _ := RequestOp(r.Opcode)
			if r.Reason != tc.want || wantOp != tc.op || r.RKey != rkey || r.VA != 0x1000+tc.off ||
				r.Length != uint32(tc.n) || r.Need != tc.need || r.QPAccess != b.qp.access {
				t.Fatalf("refusal %+v (op %v), want %v of %v at %#x rkey %#x, %d bytes, needing %v",
					r, wantOp, tc.want, tc.op, 0x1000+tc.off, rkey, tc.n, tc.need)
			}
			if a.qp.Refusal().Reason != RefusedNone {
				t.Errorf("the requester recorded a refusal: %+v", a.qp.Refusal())
			}
			b.qp.SetState(ibv.QPStateReset)
			if b.qp.Refusal() != (Refusal{}) {
				t.Errorf("reset kept %+v", b.qp.Refusal())
			}
		})
	}
}

// TestRefusalFirstKept: only the refusal that moved the QP to ERR is kept.
func TestRefusalFirstKept(t *testing.T) {
	o := defaultOpts()
	o.mtu = 256
	a, b := newPair(t, o)
	l := newLink(t, a, b)
	l.inject(a, b, req(wire.RCSendMiddle, base, false, make([]byte, 256), nil))
	first := b.qp.Refusal()
	if first.Reason != RefusedOpcodeSequence || first.Opcode != wire.RCSendMiddle || first.PSN != base {
		t.Fatalf("refusal %+v", first)
	}
	l.inject(a, b, req(wire.RCSendMiddle, base.Add(1), false, make([]byte, 256), nil))
	if b.qp.Refusal() != first {
		t.Fatalf("a later packet replaced the refusal: %+v", b.qp.Refusal())
	}
}

// TestRequestOp maps every request opcode of the table to a work request
// opcode, and nothing else.
func TestRequestOp(t *testing.T) {
	want := map[wire.Opcode]ibv.WROpcode{
		wire.RCSendOnly:                   ibv.WRSend,
		wire.RCSendLastWithImmediate:      ibv.WRSendWithImm,
		wire.RCSendOnlyWithInvalidate:     ibv.WRSendWithInv,
		wire.RCRDMAWriteFirst:             ibv.WRRDMAWrite,
		wire.RCRDMAWriteOnlyWithImmediate: ibv.WRRDMAWriteWithImm,
		wire.RCRDMAReadRequest:            ibv.WRRDMARead,
		wire.RCCompareSwap:                ibv.WRAtomicCmpAndSwp,
		wire.RCFetchAdd:                   ibv.WRAtomicFetchAndAdd,
		wire.RCFlush:                      ibv.WRFlush,
		wire.RCAtomicWrite:                ibv.WRAtomicWrite,
		wire.UCSendOnly:                   ibv.WRSend,
		wire.UDSendOnlyWithImmediate:      ibv.WRSendWithImm,
		wire.RCRDMAReadResponseOnly:       0,
		wire.RCAcknowledge:                0,
		wire.RCAtomicAcknowledge:          0,
		wire.Opcode(0xff):                 0,
	}
	for o, w := range want {
		got, ok := RequestOp(o)
		if ok != o.Info().IsRequest() || got != w {
			t.Errorf("RequestOp(%v) = %v, %v; want %v", o, got, ok, w)
		}
	}
	for o := range 256 {
		if _, ok := RequestOp(wire.Opcode(o)); ok != wire.Opcode(o).Info().IsRequest() {
			t.Errorf("RequestOp(%v) ok = %v", wire.Opcode(o), ok)
		}
	}
	if RefusedQPAccess.String() != "QP access flags" || RefusalReason(200).String() != "unknown" {
		t.Error("RefusalReason names")
	}
}
