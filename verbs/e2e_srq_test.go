package verbs_test

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// TestE2ESRQTraffic follows rdma-core's test_srq: two RC QPs of one device
// take their receives from one SRQ while two peers on other devices send to
// them at the same time. Every receive is consumed exactly once, by the QP
// the message arrived on, and the SRQ limit still fires once on the way.
func TestE2ESRQTraffic(t *testing.T) {
	const (
		perPeer = 40
		slot    = 256 // receive buffer per work request
		limit   = 10
	)
	total := 2 * perPeer
	dev := rdmatest.OpenDevice(t, verbs.DeviceConfig{Addr: testkit.Addr(2)})
	pd := rdmatest.PD(t, dev)
	cq := rdmatest.CQ(t, dev, 2*total)
	buf := make([]byte, total*slot)
	mr := rdmatest.MR(t, pd, buf, rdmatest.RCAccess)
	srq, err := pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: total, MaxSGE: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Receives come from two SGEs, as in test_srq.
	for i := range total {
		mustPostSRQ(t, srq, verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{mr.SGE(i*slot, 16), mr.SGE(i*slot+16, slot-16)}})
	}
	if err := srq.Modify(&verbs.SRQAttr{SRQLimit: limit}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}

	// Two responder QPs on dev, each connected to a peer of its own.
	peers := []*rdmatest.End{newEnd(t, 3, rdmatest.EndOptions{}), newEnd(t, 4, rdmatest.EndOptions{})}
	locals := make([]*rdmatest.End, len(peers))
	for i, p := range peers {
		qp, err := pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, SRQ: srq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		locals[i] = &rdmatest.End{Dev: dev, PD: pd, CQ: cq, QP: qp, Buf: buf, MR: mr}
		rdmatest.Connect(t, p, locals[i], rdmatest.DefaultLink(), rdmatest.DefaultLink())
	}

	// Each peer sends perPeer messages, one in flight at a time, each
	// carrying its peer index and sequence number; both run at once.
	var wg sync.WaitGroup
	errs := make(chan error, len(peers))
	for pi, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := range perPeer {
				n := 8 + (seq*37)%(slot-8)
				binary.BigEndian.PutUint32(p.Buf[0:], uint32(pi))
				binary.BigEndian.PutUint32(p.Buf[4:], uint32(seq))
				fill(p.Buf[8:n], byte(pi*100+seq))
				wr := verbs.SendWR{WRID: uint64(seq), Opcode: verbs.WRSendWithImm, SendFlags: verbs.SendSignaled, ImmData: uint32(n),
					SGList: []verbs.SGE{p.MR.SGE(0, n)}}
				if err := p.QP.PostSend(&wr); err != nil {
					errs <- err
					return
				}
				if wc := pollOne(p.CQ); wc.Status != verbs.WCSuccess || wc.WRID != uint64(seq) {
					errs <- fmt.Errorf("peer %d: send %d completed %+v", pi, seq, wc)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	wcs := rdmatest.WaitN(t, cq, total)
	seen := make([]bool, total)
	next := []int{0, 0} // messages arrive in order per connection
	for _, wc := range wcs {
		if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || wc.WCFlags&verbs.WCWithImm == 0 || wc.WRID >= uint64(total) {
			t.Fatalf("receive completion %+v", wc)
		}
		if seen[wc.WRID] {
			t.Fatalf("receive %d completed twice", wc.WRID)
		}
		seen[wc.WRID] = true
		msg := buf[int(wc.WRID)*slot:]
		pi, seq := int(binary.BigEndian.Uint32(msg)), int(binary.BigEndian.Uint32(msg[4:]))
		if pi > 1 || seq != next[pi] {
			t.Fatalf("receive %d holds message %d of peer %d, want message %d", wc.WRID, seq, pi, next[pi])
		}
		next[pi]++
		n := int(wc.ImmData)
		wc = rdmatest.ConnectedRecv(wc, peers[pi].QP.QPN())
		if wc.ByteLen != uint32(n) || wc.QPNum != locals[pi].QP.QPN() || wc.SrcQP != peers[pi].QP.QPN() {
			t.Fatalf("receive %+v for peer %d: want byte_len %d qp %d src_qp %d", wc, pi, n, locals[pi].QP.QPN(), peers[pi].QP.QPN())
		}
		want := make([]byte, n-8)
		fill(want, byte(pi*100+seq))
		checkBytes(t, fmt.Sprintf("peer %d message %d", pi, seq), msg[8:n], want)
	}
	rdmatest.ExpectEmpty(t, cq)
	if rdmatest.Hardware() != "" {
		// The rest counts limit events with goroce's own counter
		// (SRQLimitEvents); TestE2EBackendSRQLimitEvent takes the
		// hardware's from GetAsyncEvent.
		return
	}

	// The limit fired exactly once (fewer than 10 left) and disarmed.
	attr, err := srq.Query()
	if err != nil {
		t.Fatal(err)
	}
	events := verbs.SRQLimitEvents(srq)
	if attr.SRQLimit != 0 || events != 1 {
		t.Fatalf("SRQ limit %d with %d events, want disarmed after one event", attr.SRQLimit, events)
	}

	// The SRQ is empty now: a further SEND waits (RNR) until a receive is
	// posted, then lands in it; re-armed, the limit fires again.
	if err := srq.Modify(&verbs.SRQAttr{SRQLimit: 1}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	p := peers[1]
	rdmatest.PostSend(t, p.QP, verbs.SendWR{WRID: 99, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{p.MR.SGE(0, 8)}})
	mustPostSRQ(t, srq, verbs.RecvWR{WRID: 500, SGList: []verbs.SGE{mr.SGE(0, slot)}})
	if wc := rdmatest.WaitOne(t, cq); wc.WRID != 500 || wc.Status != verbs.WCSuccess || wc.QPNum != locals[1].QP.QPN() {
		t.Fatalf("late receive %+v", wc)
	}
	if wc := rdmatest.WaitOne(t, p.CQ); wc.WRID != 99 || wc.Status != verbs.WCSuccess {
		t.Fatalf("late send %+v", wc)
	}
	events = verbs.SRQLimitEvents(srq)
	if events != 2 {
		t.Fatalf("%d SRQ limit events, want 2", events)
	}
}

func mustPostSRQ(t testing.TB, srq *verbs.SRQ, wr verbs.RecvWR) {
	t.Helper()
	if err := srq.PostRecv(&wr); err != nil {
		t.Fatalf("SRQ.PostRecv(wr_id %d): %v", wr.WRID, err)
	}
}

// pollOne polls cq until a completion arrives, without a testing.T, for
// goroutines other than the test's. It gives up after 10 s with a
// completion of status WCGeneralErr.
func pollOne(cq *verbs.CQ) verbs.WorkCompletion {
	var wc [1]verbs.WorkCompletion
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n, err := cq.Poll(wc[:])
		if err != nil {
			break
		}
		if n == 1 {
			return wc[0]
		}
		time.Sleep(50 * time.Microsecond)
	}
	return verbs.WorkCompletion{Status: verbs.WCGeneralErr}
}
