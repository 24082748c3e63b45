package cm

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

// TestConnectMovesData: after Dial and Accept, the active side writes into
// and reads from memory the passive side advertised in its private data, on
// devices whose UDP port is not 4791, so the exchanged port must reach the
// address vectors for a single packet to arrive.
func TestConnectMovesData(t *testing.T) {
	checkLeaks(t)
	open := func(addr string, port uint16) *host {
		dev, err := verbs.Open(verbs.DeviceConfig{Addr: netip.MustParseAddr(addr), Port: port})
		if err != nil {
			t.Fatalf("verbs.Open(%s:%d): %v", addr, port, err)
		}
		t.Cleanup(func() { _ = dev.Close() })
		pd, err := dev.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := dev.CreateCQ(64, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		return &host{dev: dev, pd: pd, cq: cq}
	}
	ha, hb := open("127.0.2.1", 24901), open("127.0.2.2", 24902)
	qa, qb := ha.qp(t, verbs.QPTypeRC), hb.qp(t, verbs.QPTypeRC)
	target := make([]byte, 4096)
	tmr, err := hb.pd.RegMR(target, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 8192)
	smr, err := ha.pd.RegMR(src, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	l := listen(t, ListenConfig{})
	private := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(nil, tmr.RKey()), tmr.IOVA())
	res := acceptOne(ctx, l, acceptWith(ctx, qb, &Params{PrivateData: private}))
	ca, err := Dial(ctx, l.Addr().String(), qa, nil)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	r := <-res
	if r.err != nil {
		t.Fatalf("Accept: %v", r.err)
	}
	defer r.conn.Close()
	defer ca.Close()
	pd := ca.Remote().PrivateData
	rkey, va := binary.BigEndian.Uint32(pd), binary.BigEndian.Uint64(pd[4:])
	if ca.Remote().UDPPort != 24902 {
		t.Errorf("remote UDP port %d", ca.Remote().UDPPort)
	}

	for i := range 4096 {
		src[i] = byte(i*31 + 3)
	}
	post := func(wr verbs.SendWR) verbs.WorkCompletion {
		t.Helper()
		if err := qa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		wc := make([]verbs.WorkCompletion, 1)
		deadline := time.Now().Add(testTimeout)
		for time.Now().Before(deadline) {
			if n, _ := ha.cq.Poll(wc); n == 1 {
				return wc[0]
			}
			time.Sleep(100 * time.Microsecond)
		}
		t.Fatal("no completion")
		return verbs.WorkCompletion{}
	}
	wc := post(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{smr.SGE(0, 4096)}, RDMA: verbs.RDMAParams{RemoteAddr: va, RKey: rkey}})
	if wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE: %+v", wc)
	}
	wc = post(verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{smr.SGE(4096, 4096)}, RDMA: verbs.RDMAParams{RemoteAddr: va, RKey: rkey}})
	if wc.Status != verbs.WCSuccess {
		t.Fatalf("READ: %+v", wc)
	}
	if !bytes.Equal(src[4096:], src[:4096]) {
		t.Fatal("the bytes read back differ from those written")
	}
}
