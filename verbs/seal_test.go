package verbs_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/pcap"
	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/wire"
	"github.com/goroce/goroce/verbs"
)

// testKeys are the keys of a sealed connection from a's side.
var testKeys = verbs.PacketKeys{Send: [32]byte{1, 2, 3}, Recv: [32]byte{4, 5, 6}}

// mirror returns the keys of the other side.
func mirror(k verbs.PacketKeys) *verbs.PacketKeys {
	return &verbs.PacketKeys{Send: k.Recv, Recv: k.Send}
}

// sealedPair connects two RC ends whose packets are sealed.
func sealedPair(t *testing.T) (a, b *rdmatest.End) {
	t.Helper()
	a, b = newEnd(t, 1, rdmatest.EndOptions{}), newEnd(t, 2, rdmatest.EndOptions{})
	if err := a.QP.SetPacketKeys(&testKeys); err != nil {
		t.Fatal(err)
	}
	if err := b.QP.SetPacketKeys(mirror(testKeys)); err != nil {
		t.Fatal(err)
	}
	rdmatest.Connect(t, a, b, rdmatest.DefaultLink(), rdmatest.DefaultLink())
	return a, b
}

// TestSealedTraffic: WRITE, READ, SEND and both atomics over a sealed
// connection move the right bytes, and a capture of the wire shows the
// BTH in the clear but neither the payloads nor the extension headers.
func TestSealedTraffic(t *testing.T) {
	a, b := sealedPair(t)
	if !a.QP.Sealed() || !b.QP.Sealed() {
		t.Fatal("QPs not sealed")
	}
	var capture bytes.Buffer
	if err := verbs.SetCapture(a.Dev, &capture); err != nil {
		t.Fatal(err)
	}
	secret := bytes.Repeat([]byte("TOP-SECRET-DATA."), 512) // 8 KiB: several packets
	copy(a.Buf, secret)
	copy(b.Buf[16384:], bytes.Repeat([]byte("READ-ME-SECRETLY"), 256))
	binary.LittleEndian.PutUint64(b.Buf[32768:], 40)
	rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: 9, SGList: []verbs.SGE{b.MR.SGE(40000, 4096)}})
	remote := func(off uint64) verbs.RDMAParams {
		return verbs.RDMAParams{RemoteAddr: b.MR.IOVA() + off, RKey: b.MR.RKey()}
	}
	wrs := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.MR.SGE(0, len(secret))}, RDMA: remote(0)},
		{WRID: 2, Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{a.MR.SGE(16384, 4096)}, RDMA: remote(16384)},
		{WRID: 3, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.MR.SGE(0, 3000)}},
		{WRID: 4, Opcode: verbs.WRAtomicFetchAndAdd, SGList: []verbs.SGE{a.MR.SGE(24576, 8)},
			Atomic: verbs.AtomicParams{RemoteAddr: b.MR.IOVA() + 32768, CompareAdd: 2, RKey: b.MR.RKey()}},
		{WRID: 5, Opcode: verbs.WRAtomicCmpAndSwp, SGList: []verbs.SGE{a.MR.SGE(24584, 8)},
			Atomic: verbs.AtomicParams{RemoteAddr: b.MR.IOVA() + 32768, CompareAdd: 42, Swap: 7, RKey: b.MR.RKey()}},
	}
	for _, wr := range wrs {
		wr.SendFlags = verbs.SendSignaled
		rdmatest.PostSend(t, a.QP, wr)
	}
	for _, wc := range rdmatest.WaitN(t, a.CQ, len(wrs)) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("WR %d: %v", wc.WRID, wc.Status)
		}
	}
	if wc := rdmatest.WaitOne(t, b.CQ); wc.Status != verbs.WCSuccess || wc.ByteLen != 3000 {
		t.Fatalf("receive %+v", wc)
	}
	if err := verbs.SetCapture(a.Dev, nil); err != nil {
		t.Fatal(err)
	}
	switch {
	case !bytes.Equal(b.Buf[:len(secret)], secret):
		t.Error("WRITE: wrong bytes")
	case !bytes.Equal(a.Buf[16384:16384+4096], b.Buf[16384:16384+4096]):
		t.Error("READ: wrong bytes")
	case !bytes.Equal(b.Buf[40000:43000], secret[:3000]):
		t.Error("SEND: wrong bytes")
	case binary.LittleEndian.Uint64(a.Buf[24576:]) != 40 || binary.LittleEndian.Uint64(a.Buf[24584:]) != 42 ||
		binary.LittleEndian.Uint64(b.Buf[32768:]) != 7:
		t.Errorf("atomics: fetched %d, %d; memory %d", binary.LittleEndian.Uint64(a.Buf[24576:]),
			binary.LittleEndian.Uint64(a.Buf[24584:]), binary.LittleEndian.Uint64(b.Buf[32768:]))
	}

	r, err := pcap.NewReader(&capture)
	if err != nil {
		t.Fatal(err)
	}
	ops := map[wire.Opcode]int{}
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		if bytes.Contains(rec.Data, []byte("SECRET")) || bytes.Contains(rec.Data, []byte("SECRETLY")) {
			t.Fatal("a payload is in clear on the wire")
		}
		var rkey [4]byte
		binary.BigEndian.PutUint32(rkey[:], b.MR.RKey())
		if bytes.Contains(rec.Data, rkey[:]) {
			t.Error("an rkey is in clear on the wire")
		}
		tr := rec.Data[wire.IPv4MinHeaderLen+wire.UDPHeaderLen:]
		bth := wire.BTH(tr)
		if bth.DestQP() != wire.QPN(b.QP.QPN()) && bth.DestQP() != wire.QPN(a.QP.QPN()) {
			t.Fatalf("BTH not in the clear: QPN %#x", uint32(bth.DestQP()))
		}
		ops[bth.Opcode()]++
	}
	for _, op := range []wire.Opcode{wire.RCRDMAWriteFirst, wire.RCRDMAReadRequest, wire.RCRDMAReadResponseFirst,
		wire.RCSendFirst, wire.RCFetchAdd, wire.RCCompareSwap, wire.RCAtomicAcknowledge, wire.RCAcknowledge} {
		if ops[op] == 0 {
			t.Errorf("no %v captured: %v", op, ops)
		}
	}
	if c := a.Dev.Counters(); c.DroppedAuthFail != 0 || c.DroppedReplay != 0 {
		t.Errorf("drops on a clean connection: %+v", c)
	}
}

// TestSealedMismatchedKeys: a peer sealing under another key gets nothing
// through: every packet is dropped and counted, no work completes, and
// the sender retries until RETRY_EXC_ERR.
func TestSealedMismatchedKeys(t *testing.T) {
	a, b := newEnd(t, 1, rdmatest.EndOptions{}), newEnd(t, 2, rdmatest.EndOptions{})
	if err := a.QP.SetPacketKeys(&testKeys); err != nil {
		t.Fatal(err)
	}
	if err := b.QP.SetPacketKeys(&verbs.PacketKeys{Send: [32]byte{9}, Recv: [32]byte{8}}); err != nil {
		t.Fatal(err)
	}
	la := rdmatest.DefaultLink()
	la.RetryCnt, la.Timeout = 1, 8 // about 1 ms: fail fast
	rdmatest.Connect(t, a, b, la, rdmatest.DefaultLink())
	copy(a.Buf, "not for b")
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 9)}, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}})
	if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCRetryExcErr {
		t.Fatalf("WRITE under mismatched keys: %v", wc.Status)
	}
	if bytes.Contains(b.Buf, []byte("not for b")) {
		t.Fatal("the WRITE reached b")
	}
	// The retry left a before a gave up, but b may not have read it yet
	// when a's completion is polled: wait for b's count, not a's clock.
	testkit.WaitFor(t, "b to drop the WRITE and its retry (dropped_auth_fail 2)", func() bool {
		return b.Dev.Counters().DroppedAuthFail >= 2
	})
}

// TestSetPacketKeysRules: keys only for RC and UC QPs in RESET or INIT; a
// move to RESET drops them.
func TestSetPacketKeysRules(t *testing.T) {
	a, b := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	if err := a.QP.SetPacketKeys(&testKeys); !errors.Is(err, verbs.ErrInvalidState) {
		t.Errorf("keys in RTS: %v", err)
	}
	rdmatest.Modify(t, b.QP, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateReset}, Mask: verbs.QPAttrState})
	if err := b.QP.SetPacketKeys(&testKeys); err != nil || !b.QP.Sealed() {
		t.Fatalf("keys in RESET: %v", err)
	}
	rdmatest.Modify(t, b.QP, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateReset}, Mask: verbs.QPAttrState})
	if b.QP.Sealed() {
		t.Error("keys kept across RESET")
	}
	u := newEnd(t, 3, rdmatest.EndOptions{Type: verbs.QPTypeUD})
	if err := u.QP.SetPacketKeys(&testKeys); !errors.Is(err, verbs.ErrNotSupported) {
		t.Errorf("keys on a UD QP: %v", err)
	}
}

// TestSealedWriteNoAlloc: a sealed WRITE round trip (sealing, opening,
// the ACK's) allocates nothing once warm.
func TestSealedWriteNoAlloc(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector allocates")
	}
	a, b := sealedPair(t)
	wr := &verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 4096)}, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}}
	wcs := make([]verbs.WorkCompletion, 1)
	round := func() {
		if err := a.QP.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, err := a.CQ.Poll(wcs)
			if err != nil || n == 1 && wcs[0].Status != verbs.WCSuccess {
				t.Fatalf("%v %+v", err, wcs)
			}
			if n == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("no completion within 10 s")
			}
			runtime.Gosched()
		}
	}
	for range 10 {
		round()
	}
	if n := testing.AllocsPerRun(100, round); n != 0 {
		t.Fatalf("%v allocations per sealed WRITE", n)
	}
}
