package verbs_test

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/seal"
	"github.com/goroce/goroce/internal/wire"
	"github.com/goroce/goroce/verbs"
)

// The attacks of attack_test.go against a sealed connection: the raw peer
// holds the connection's keys, the attacker does not, but can send from
// the peer's address and pinned port, and capture and replay what the
// peer sent.

// sealedTarget is a hostile target whose QP seals its packets, with the
// peer's side of the keys.
type sealedTarget struct {
	*hostileTarget
	peerSeal *seal.Sealer // what the peer sends with
	peerOpen *seal.Opener // what the peer opens the target's packets with
}

func newSealedTarget(t *testing.T) *sealedTarget {
	t.Helper()
	h := newHostileTarget(t, verbs.DefaultUDPPort)
	rdmatest.Modify(t, h.qp, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateReset}, Mask: verbs.QPAttrState})
	rdmatest.Poll(t, h.cq)
	if err := h.qp.SetPacketKeys(&testKeys); err != nil {
		t.Fatal(err)
	}
	h.connect(t, recvSlots)
	return &sealedTarget{hostileTarget: h, peerSeal: seal.NewSealer(&testKeys.Recv), peerOpen: seal.NewOpener(&testKeys.Send)}
}

// sealed returns p sealed by the peer.
func (h *sealedTarget) sealed(p hostilePkt) []byte { return h.peerSeal.Append(nil, p.build(), nil, 0) }

// write returns a WRITE Only of 8 bytes of b at the start of rw, at PSN
// offset d from the expected one.
func (h *sealedTarget) write(b byte, d uint32) hostilePkt {
	w := h.request(wire.RCRDMAWriteOnly, 8)
	w.payload = bytes.Repeat([]byte{b}, 8)
	w.psn = w.psn.Add(d)
	return w
}

// answers opens what the target sent the peer.
func (h *sealedTarget) answers(t *testing.T) []*wire.Packet {
	t.Helper()
	var out []*wire.Packet
	for _, b := range h.peer.drainRaw(t) {
		plain, err := h.peerOpen.Open(b)
		if err != nil {
			t.Fatalf("the target sent a packet the peer cannot open: %v", err)
		}
		p := new(wire.Packet)
		if err := p.Parse(plain, 0); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// TestAttackSealedReplay: a captured sealed WRITE sent again, after a
// later WRITE overwrote its bytes, is dropped and counted (dropped_replay)
// and writes nothing; the QP never sees it.
func TestAttackSealedReplay(t *testing.T) {
	h := newSealedTarget(t)
	first := h.sealed(h.write(0xAA, 0))
	second := h.sealed(h.write(0xBB, 1))
	rw := h.arena[rwOff : rwOff+8]
	h.sendAll(t, h.peer, first)
	if !bytes.Equal(rw, bytes.Repeat([]byte{0xAA}, 8)) {
		t.Fatalf("the sealed WRITE did not land: % x", rw)
	}
	h.sendAll(t, h.peer, second)
	epsn, q0 := h.snapshot().ExpectedPSN, h.qp.Counters()
	for _, from := range []*rawPeer{h.peer, h.other} {
		// From another address too: the window refuses them before
		// the address check would.
		d := h.sendAll(t, from, first, second)
		if d.DroppedReplay != 2 || d.RcvdPkts != 0 {
			t.Errorf("replays from %v: dropped_replay %d, delivered %d", from.addr, d.DroppedReplay, d.RcvdPkts)
		}
	}
	if !bytes.Equal(rw, bytes.Repeat([]byte{0xBB}, 8)) {
		t.Errorf("a replayed WRITE changed memory: % x", rw)
	}
	if q := verbs.SubCounters(h.qp.Counters(), q0); q.RcvdPkts != 0 || q.DuplicateRequest != 0 || h.snapshot().ExpectedPSN != epsn {
		t.Errorf("replays reached the QP: %+v", q)
	}
	acks := 0
	for _, p := range h.answers(t) {
		if p.BTH.Opcode() == wire.RCAcknowledge {
			acks++
		}
	}
	if acks != 2 {
		t.Errorf("%d ACKs for two WRITEs and four replays, want 2", acks)
	}
}

// TestAttackSealedBitFlip: a sealed WRITE with one ciphertext bit flipped
// and the ICRC recomputed (what an on-path attacker can do) is dropped and
// counted (dropped_auth_fail) and writes nothing, not even in part; the
// unaltered packet is then taken: the forgery did not use up its counter.
// (Flipping a bit of the destination QP sends the packet elsewhere: not
// tried here.)
func TestAttackSealedBitFlip(t *testing.T) {
	h := newSealedTarget(t)
	good := h.sealed(h.write(0xCC, 0))
	rw := h.arena[rwOff : rwOff+8]
	before := bytes.Clone(rw)
	for _, at := range []int{0, 3, 10, wire.BTHLen + 2, wire.BTHLen + seal.CounterLen + 3, len(good) - 20, len(good) - 1} {
		bad := bytes.Clone(good)
		bad[at] ^= 0x10
		d := h.sendAll(t, h.peer, bad) // rawPeer.send computes the ICRC of the altered bytes
		if d.DroppedAuthFail != 1 || d.RcvdPkts != 0 || d.ICRCErrors != 0 {
			t.Errorf("flip at %d: dropped_auth_fail %d, delivered %d, icrc_err %d", at, d.DroppedAuthFail, d.RcvdPkts, d.ICRCErrors)
		}
		if !bytes.Equal(rw, before) {
			t.Fatalf("flip at %d: memory changed to % x", at, rw)
		}
	}
	if got := h.answers(t); len(got) != 0 {
		t.Errorf("the target answered forgeries: %d packets", len(got))
	}
	h.sendAll(t, h.peer, good)
	if !bytes.Equal(rw, bytes.Repeat([]byte{0xCC}, 8)) {
		t.Errorf("the genuine WRITE after the forgeries did not land: % x", rw)
	}
}

// TestAttackSealedForgedAck: the target has a WRITE outstanding. ACKs
// forged from the peer's address and RoCE port (which a plain connection
// takes ACKs from), plain or in a sealed packet's shape, complete
// nothing and are counted; the peer's sealed ACK completes the WRITE.
func TestAttackSealedForgedAck(t *testing.T) {
	h := newSealedTarget(t)
	sq := h.snapshot().NextPSN
	rdmatest.PostSend(t, h.qp, verbs.SendWR{WRID: 7, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{h.rw.SGE(0, 64)}, RDMA: verbs.RDMAParams{RemoteAddr: 0x1000, RKey: 0x1234}})
	testkit.WaitFor(t, "the WRITE on the wire", func() bool {
		for _, p := range h.answers(t) {
			if p.BTH.Opcode() == wire.RCRDMAWriteOnly {
				return true
			}
		}
		return false
	})
	ack := func() []byte {
		hdr := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCAcknowledge, PKey: verbs.DefaultPKey,
			DestQP: wire.QPN(h.qp.QPN()), PSN: sq}, AETH: wire.AETHFields{Syndrome: wire.SyndromeAckUnlimited}}
		return wire.AppendHeaders(nil, &hdr)
	}
	shaped := append(ack()[:wire.BTHLen], make([]byte, seal.CounterLen+wire.AETHLen+seal.TagLen)...)
	wrongKey := seal.NewSealer(&[32]byte{0x66}).Append(nil, ack(), nil, 0)
	q0 := h.qp.Counters()
	if d := h.sendAll(t, h.peer, ack(), shaped, wrongKey); d.DroppedAuthFail != 3 {
		t.Errorf("dropped_auth_fail %d for 3 forged ACKs", d.DroppedAuthFail)
	}
	if q := verbs.SubCounters(h.qp.Counters(), q0); q.RcvdPkts != 0 {
		t.Errorf("forged ACKs reached the QP: %+v", q)
	}
	rdmatest.ExpectEmpty(t, h.cq)
	h.sendAll(t, h.peer, h.peerSeal.Append(nil, ack(), nil, 0))
	if wc := rdmatest.WaitOne(t, h.cq); wc.WRID != 7 || wc.Status != verbs.WCSuccess {
		t.Errorf("completion %+v", wc)
	}
}
