package verbs_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/seal"
	"github.com/goroce/goroce/internal/wire"
	"github.com/goroce/goroce/verbs"
)

// ucPeerPSN is the first PSN the raw peer of TestSealedUC sends.
const ucPeerPSN = 0x4242

// TestSealedUC: a UC QP seals what it sends and takes only what its peer
// sealed, as an RC QP does. A UC responder starts a new message at the PSN
// of any FIRST or ONLY packet ahead of the one it expects, so on a plain
// UC connection whoever can send from the peer's address and port writes
// memory with one packet; sealed, such a packet is dropped and counted
// (dropped_auth_fail), and a replay too (dropped_replay). The peer is a
// raw socket holding the peer's keys (as in attack_seal_test.go).
func TestSealedUC(t *testing.T) {
	for _, sealed := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "sealed"}[sealed], func(t *testing.T) { sealedUC(t, sealed) })
	}
}

func sealedUC(t *testing.T, sealed bool) {
	dev := rdmatest.OpenDevice(t, verbs.DeviceConfig{Addr: testkit.Addr(1)})
	peer := newRawPeer(t, testkit.Addr(2), verbs.DefaultUDPPort)
	dst := netip.AddrPortFrom(dev.Addr(), dev.UDPPort())
	pd := rdmatest.PD(t, dev)
	cq := rdmatest.CQ(t, dev, 16)
	buf := make([]byte, 4096)
	mr := rdmatest.MR(t, pd, buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	qp, err := pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeUC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = qp.Destroy() })
	var peerSeal *seal.Sealer
	var peerOpen *seal.Opener
	if sealed {
		if err := qp.SetPacketKeys(&testKeys); err != nil {
			t.Fatal(err)
		}
		peerSeal, peerOpen = seal.NewSealer(&testKeys.Recv), seal.NewOpener(&testKeys.Send)
	}
	const peerQPN = 0x77
	rdmatest.LinkQP(t, qp, rdmatest.Link{MTU: verbs.MTU1024, Access: verbs.AccessRemoteWrite}, 0x100,
		rdmatest.Peer{GID: verbs.GIDFromAddr(peer.addr.Addr()), QPN: peerQPN, PSN: ucPeerPSN})

	// What the peer sends: WRITE Only packets of 8 bytes of b at PSN p,
	// sealed under key when the QP is sealed.
	build := func(b byte, p uint32, key *[32]byte) []byte {
		h := wire.Headers{
			BTH:  wire.BTHFields{Opcode: wire.UCRDMAWriteOnly, PKey: verbs.DefaultPKey, DestQP: wire.QPN(qp.QPN()), PSN: psn.PSN(p)},
			RETH: wire.RETHFields{VA: mr.IOVA(), RKey: mr.RKey(), DMALength: 8},
		}
		pkt := append(wire.AppendHeaders(nil, &h), bytes.Repeat([]byte{b}, 8)...)
		switch {
		case !sealed:
		case key == &testKeys.Recv:
			pkt = peerSeal.Append(nil, pkt, nil, 0)
		default:
			// Past the counters the peer used, or the window
			// would drop it as a replay before authenticating.
			f := seal.NewSealer(key)
			for range 10 {
				f.Append(nil, pkt, nil, 0)
			}
			pkt = f.Append(nil, pkt, nil, 0)
		}
		return pkt
	}
	write := func(b byte, p uint32) []byte { return build(b, p, &testKeys.Recv) }
	// send sends pkts and waits until the device has read them.
	send := func(pkts ...[]byte) verbs.Counters {
		t.Helper()
		seen := func(c verbs.Counters) uint64 {
			return c.RcvdPkts + c.Malformed + c.ICRCErrors + c.DroppedAuthFail + c.DroppedReplay + c.DroppedPkts
		}
		d0 := dev.Counters()
		for _, p := range pkts {
			peer.send(t, dst, p, false)
		}
		var d1 verbs.Counters
		testkit.WaitFor(t, "the device read the datagrams", func() bool {
			d1 = dev.Counters()
			return seen(d1)-seen(d0) >= uint64(len(pkts))
		})
		return verbs.SubCounters(d1, d0)
	}
	rw := buf[:8]
	first := write(0xAA, ucPeerPSN)
	send(first)
	if !bytes.Equal(rw, bytes.Repeat([]byte{0xAA}, 8)) {
		t.Fatalf("the WRITE did not land: % x", rw)
	}
	send(write(0xBB, ucPeerPSN+1))
	// A replay: behind the expected PSN, plain UC ignores it too (until
	// the PSN has moved 2^23 on); sealed, the window drops it first.
	d := send(first)
	if !bytes.Equal(rw, bytes.Repeat([]byte{0xBB}, 8)) {
		t.Errorf("a replayed WRITE changed UC memory: % x", rw)
	}
	if sealed && (d.DroppedReplay != 1 || d.RcvdPkts != 0) {
		t.Errorf("replay: dropped_replay %d, delivered %d", d.DroppedReplay, d.RcvdPkts)
	}
	// A forgery ahead of the expected PSN, by whoever does not hold the
	// keys: a UC responder starts a new message at the PSN of any FIRST
	// or ONLY, so plain UC takes it; sealed UC drops and counts it.
	d = send(build(0xEE, ucPeerPSN+100, &[32]byte{9}))
	switch {
	case !sealed && !bytes.Equal(rw, bytes.Repeat([]byte{0xEE}, 8)):
		t.Fatalf("a forged WRITE Only did not rewrite plain UC memory (% x): the test proves nothing", rw)
	case sealed && !bytes.Equal(rw, bytes.Repeat([]byte{0xBB}, 8)):
		t.Errorf("a forged WRITE changed sealed UC memory: % x", rw)
	case sealed && (d.DroppedAuthFail != 1 || d.RcvdPkts != 0):
		t.Errorf("forgery: dropped_auth_fail %d, delivered %d", d.DroppedAuthFail, d.RcvdPkts)
	}
	if sealed {
		// The genuine peer's next message still lands.
		send(write(0xCC, ucPeerPSN+2))
		if !bytes.Equal(rw, bytes.Repeat([]byte{0xCC}, 8)) {
			t.Errorf("the peer's WRITE after the attacks did not land: % x", rw)
		}
	}

	// What the QP sends: sealed, the payload and RETH hidden, and it
	// opens under the peer's key.
	copy(buf[64:], "UC-SECRET-PAYLOAD")
	rdmatest.PostSend(t, qp, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{mr.SGE(64, 17)}, RDMA: verbs.RDMAParams{RemoteAddr: 0x1000, RKey: 0xABCDEF}})
	if wc := rdmatest.WaitOne(t, cq); wc.Status != verbs.WCSuccess {
		t.Fatalf("UC WRITE: %v", wc.Status)
	}
	var got [][]byte
	testkit.WaitFor(t, "the QP's WRITE at the peer", func() bool {
		got = append(got, peer.drainRaw(t)...)
		return len(got) > 0
	})
	pkt := got[0]
	if !sealed {
		if !bytes.Contains(pkt, []byte("UC-SECRET-PAYLOAD")) {
			t.Fatal("the plain WRITE does not carry its payload: the test proves nothing")
		}
		return
	}
	if bytes.Contains(pkt, []byte("UC-SECRET")) || bytes.Contains(pkt, []byte{0x00, 0xAB, 0xCD, 0xEF}) {
		t.Fatal("payload or rkey in clear")
	}
	plain, err := peerOpen.Open(pkt)
	if err != nil {
		t.Fatalf("the peer cannot open the UC WRITE: %v", err)
	}
	var p wire.Packet
	if err := p.Parse(plain, 0); err != nil {
		t.Fatal(err)
	}
	if p.BTH.Opcode() != wire.UCRDMAWriteOnly || string(p.Payload) != "UC-SECRET-PAYLOAD" || p.RETH.RKey() != 0xABCDEF {
		t.Fatalf("opened %v %q", p.BTH.Opcode(), p.Payload)
	}
}
