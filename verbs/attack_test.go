package verbs_test

import (
	"testing"

	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/wire"
	"github.com/goroce/goroce/verbs"
)

// The attack tests play an attacker who can send packets with the address
// of a QP's peer (off the path, spoofing it; or on the path, seeing the
// traffic) against the hostile target (hostile_test.go): what it sends
// must not reach memory, complete work or make the device send the real
// peer anything (issue 21). They are deterministic: each waits for the
// device to have read what was sent.

// sendAll sends the packets from p and waits until the device has read
// them all (counted as delivered, malformed or with a bad ICRC).
func (h *hostileTarget) sendAll(t *testing.T, p *rawPeer, pkts ...[]byte) verbs.Counters {
	t.Helper()
	d0 := h.dev.Counters()
	seen := func(c verbs.Counters) uint64 {
		return c.RcvdPkts + c.Malformed + c.ICRCErrors + c.DroppedAuthFail + c.DroppedReplay
	}
	for _, pkt := range pkts {
		p.send(t, h.dst, pkt, false)
	}
	var d1 verbs.Counters
	testkit.WaitFor(t, "the device read the datagrams", func() bool {
		d1 = h.dev.Counters()
		return seen(d1)-seen(d0) >= uint64(len(pkts))
	})
	return verbs.SubCounters(d1, d0)
}

// TestAttackSpoofedSourcePort: once the peer's first packet pinned the
// connection's source port, requests from the peer's address and another
// port (in sequence or not, with the right rkey) are dropped and counted:
// nothing is written, and no NAK goes to the real peer.
func TestAttackSpoofedSourcePort(t *testing.T) {
	h := newHostileTarget(t, verbs.DefaultUDPPort)
	h.fence(t) // the real peer's first packet pins its port
	spoof := newRawPeer(t, h.peer.addr.Addr(), 0)
	if spoof.addr.Port() == h.peer.addr.Port() {
		t.Fatal("the spoofing socket got the peer's port")
	}

	epsn := h.snapshot().ExpectedPSN
	q0 := h.qp.Counters()
	const n = 1000
	var pkts [][]byte
	for i := range n {
		w := h.request(wire.RCRDMAWriteOnly, 8)
		w.payload = []byte{0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE}
		if i%2 == 1 {
			w.psn = epsn.Add(uint32(1 + i)) // out of sequence: a NAK if taken
		}
		pkts = append(pkts, w.build())
	}
	d := h.sendAll(t, spoof, pkts...)
	if d.DroppedWrongPort != n {
		t.Errorf("dropped_wrong_port %d for %d spoofed packets; device counters: %+v", d.DroppedWrongPort, n, d)
	}
	// (The QP may still see a late copy of the fence's READ, which the
	// fence sends until answered: a duplicate, answered again.)
	q := verbs.SubCounters(h.qp.Counters(), q0)
	if q.OutOfSeqRequest != 0 || q.SentSeqErr != 0 || h.snapshot().ExpectedPSN != epsn {
		t.Errorf("spoofed packets reached the QP: %+v, ePSN %#x", q, uint32(h.snapshot().ExpectedPSN))
	}
	for _, p := range h.fence(t) {
		if p.AETH != nil && p.AETH.Syndrome().Kind() != wire.AETHAck {
			t.Errorf("the real peer got a NAK: %v %v", p.BTH.Opcode(), p.AETH.Syndrome())
		}
	}
	if got := spoof.drain(t); len(got) != 0 {
		t.Errorf("the spoofer got %d answers", len(got))
	}
	h.checkMemory(t)
	for i, b := range h.arena[rwOff : rwOff+rwLen] {
		if b == 0xEE && h.initial[rwOff+i] != 0xEE {
			t.Fatalf("a spoofed WRITE reached the region at %d", i)
		}
	}
}

// TestAttackPinnedPortReconnect: the first packet after RTR pins its source
// port; a new connection (RESET to RTR) forgets it and pins anew. No fence
// here: its resent copies could arrive after the reset and pin first.
func TestAttackPinnedPortReconnect(t *testing.T) {
	h := newHostileTarget(t, verbs.DefaultUDPPort)
	spoof := newRawPeer(t, h.peer.addr.Addr(), 0)
	send := func(from *rawPeer) uint64 {
		rd := h.request(wire.RCRDMAReadRequest, 0)
		return h.sendAll(t, from, rd.build()).DroppedWrongPort
	}
	if send(h.peer) != 0 || send(spoof) != 1 {
		t.Error("the first sender's port was not pinned")
	}
	h.reset(t, 0)
	if send(spoof) != 0 {
		t.Error("after reconnection the first packet was dropped")
	}
	if send(h.peer) != 1 {
		t.Error("after reconnection to the other port, the old port was taken")
	}
}

// TestAttackSpoofedSourcePortAllowed: with DeviceConfig.AnySourcePort the
// peer's address is all that is checked.
func TestAttackSpoofedSourcePortAllowed(t *testing.T) {
	h := newHostileTargetConfig(t, verbs.DeviceConfig{Addr: testkit.Addr(1), AnySourcePort: true})
	h.fence(t)
	other := newRawPeer(t, h.peer.addr.Addr(), 0)
	rd := h.request(wire.RCRDMAReadRequest, 0)
	if d := h.sendAll(t, other, rd.build()); d.DroppedWrongPort != 0 || d.DroppedWrongSource != 0 {
		t.Errorf("AnySourcePort: a packet from another port was dropped: %+v", d)
	}
}

// TestAttackForgedAcks: the target QP is a requester with a WRITE
// outstanding. ACKs and NAKs from the peer's address and another port
// change nothing; a sequence NAK repeated by the real peer while the
// requester is already going back from its PSN starts no second go-back-N;
// the real peer's ACK completes the WRITE.
func TestAttackForgedAcks(t *testing.T) {
	h := newHostileTarget(t, verbs.DefaultUDPPort)
	rd := h.request(wire.RCRDMAReadRequest, 0)
	h.sendAll(t, h.peer, rd.build()) // pins the peer's port (no fence: its copies would arrive later)
	spoof := newRawPeer(t, h.peer.addr.Addr(), 0)
	sq := h.snapshot().NextPSN
	rdmatest.PostSend(t, h.qp, verbs.SendWR{WRID: 7, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{h.rw.SGE(0, 64)}, RDMA: verbs.RDMAParams{RemoteAddr: 0x1000, RKey: 0x1234}})
	testkit.WaitFor(t, "the WRITE on the wire", func() bool {
		for _, p := range h.peer.drain(t) {
			if p.BTH.Opcode() == wire.RCRDMAWriteOnly {
				return true
			}
		}
		return false
	})
	ack := func(syn wire.AETHSyndrome, p psn.PSN) []byte {
		hdr := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCAcknowledge, PKey: verbs.DefaultPKey,
			DestQP: wire.QPN(h.qp.QPN()), PSN: p}, AETH: wire.AETHFields{Syndrome: syn}}
		return wire.AppendHeaders(nil, &hdr)
	}
	q0 := h.qp.Counters()
	forged := [][]byte{
		ack(wire.SyndromeAckUnlimited, sq),
		ack(wire.NakSyndrome(wire.NAKPSNSequenceError), sq),
		ack(wire.NakSyndrome(wire.NAKRemoteAccessError), sq),
		ack(wire.RNRNakSyndrome(1), sq),
	}
	if d := h.sendAll(t, spoof, forged...); d.DroppedWrongPort != uint64(len(forged)) {
		t.Errorf("dropped_wrong_port %d for %d forged replies", d.DroppedWrongPort, len(forged))
	}
	if q := verbs.SubCounters(h.qp.Counters(), q0); q.RcvdPkts != 0 || q.CompleterRetryErr != 0 {
		t.Errorf("forged replies reached the QP: %+v", q)
	}
	rdmatest.ExpectEmpty(t, h.cq)
	if h.qp.State() != verbs.QPStateRTS {
		t.Fatalf("QP in %v after forged replies", h.qp.State())
	}

	// The real peer NAKs the WRITE's PSN twice: one go-back-N.
	nak := ack(wire.NakSyndrome(wire.NAKPSNSequenceError), sq)
	h.sendAll(t, h.peer, nak, nak)
	q := verbs.SubCounters(h.qp.Counters(), q0)
	if q.RcvdSeqErr != 2 || q.CompleterRetryErr != 1 {
		t.Errorf("two sequence NAKs for one PSN: rcvd_seq_err %d, completer_retry_err %d (want 2, 1)", q.RcvdSeqErr, q.CompleterRetryErr)
	}
	h.sendAll(t, h.peer, ack(wire.SyndromeAckUnlimited, sq))
	if wc := rdmatest.WaitOne(t, h.cq); wc.WRID != 7 || wc.Status != verbs.WCSuccess {
		t.Errorf("completion %+v", wc)
	}
}

// TestAttackForgedCNP: a CNP from the peer's address and another port, or
// from a third address, changes nothing (the QP's rate stays unlimited);
// the real peer's CNP is handled.
func TestAttackForgedCNP(t *testing.T) {
	h := newHostileTarget(t, verbs.DefaultUDPPort)
	h.fence(t) // the real peer's first packet pins its port
	cnp := wire.AppendHeaders(nil, &wire.Headers{BTH: wire.BTHFields{
		Opcode: wire.CNP, PKey: wire.DefaultPKey, BECN: true, DestQP: wire.QPN(h.qp.QPN())}})
	cnp = append(cnp, make([]byte, wire.CNPReservedLen)...)
	spoof := newRawPeer(t, h.peer.addr.Addr(), 0)
	if d := h.sendAll(t, spoof, cnp); d.DroppedWrongPort != 1 {
		t.Errorf("a CNP from the peer's address and another port: %+v", d)
	}
	if d := h.sendAll(t, h.other, cnp); d.DroppedWrongSource != 1 {
		t.Errorf("a CNP from a third address: %+v", d)
	}
	if q := h.qp.Counters(); q.RPCNPHandled != 0 || q.RPCNPIgnored != 0 || q.RPRateDecreases != 0 {
		t.Fatalf("forged CNPs reached the QP: %+v", q)
	}
	h.sendAll(t, h.peer, cnp)
	if q := h.qp.Counters(); q.RPCNPHandled != 1 || q.RPRateDecreases != 1 {
		t.Errorf("the peer's CNP: handled %d, rate decreases %d; want 1 and 1", q.RPCNPHandled, q.RPRateDecreases)
	}
}
