package verbs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// TestRemoteWriteWait: RemoteWrites counts every WRITE packet, atomic and
// ATOMIC_WRITE stored into a region (not READs, not SENDs), and a goroutine
// parked in WaitRemoteWrite wakes when the first store lands, seeing the
// stored bytes.
func TestRemoteWriteWait(t *testing.T) {
	a, b := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	const n = 3000 // three packets at MTU 1024
	for i := range n {
		a.Buf[i] = byte(i*7 + 1)
	}
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := b.MR.WaitRemoteWrite(ctx, 0)
		switch {
		case err != nil:
			got <- err
		case c == 0:
			got <- errors.New("woke with the count unchanged")
		case b.Buf[0] != a.Buf[0]:
			got <- errors.New("the first packet's bytes are not visible after the wake-up")
		default:
			got <- nil
		}
	}()
	testkit.WaitFor(t, "the waiter parked", func() bool { return verbs.RemoteWriteWaiters(b.MR) == 1 })
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, n)},
		RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}})
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("write completion %+v", wc)
	}
	if c := b.MR.RemoteWrites(); c != 3 {
		t.Errorf("RemoteWrites after a 3-packet WRITE = %d, want 3", c)
	}
	// A READ of b and a SEND into b store nothing remotely; an atomic does.
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(4096, 64)},
		RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}})
	rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: 3, SGList: []verbs.SGE{b.MR.SGE(8192, 64)}})
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 64)}})
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 5, Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(5000, 8)},
		Atomic: verbs.AtomicParams{RemoteAddr: b.MR.IOVA() + 6000, RKey: b.MR.RKey(), CompareAdd: 1}})
	rdmatest.WaitN(t, a.CQ, 3)
	rdmatest.WaitOne(t, b.CQ)
	if c := b.MR.RemoteWrites(); c != 4 {
		t.Errorf("RemoteWrites after READ, SEND and an atomic = %d, want 4", c)
	}
	if c := a.MR.RemoteWrites(); c != 0 {
		t.Errorf("the requester's region counted %d remote writes (READ data and atomic results are local stores)", c)
	}
	// A wait whose context ends returns its error and the count it knew.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if c, err := b.MR.WaitRemoteWrite(ctx, 4); c != 4 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitRemoteWrite without a store = %d, %v; want 4, deadline exceeded", c, err)
	}
	// A count already past seen returns at once.
	if c, err := b.MR.WaitRemoteWrite(context.Background(), 1); c != 4 || err != nil {
		t.Errorf("WaitRemoteWrite(1) = %d, %v; want 4, nil", c, err)
	}
}

// TestRemoteWriteWaiters: every goroutine waiting on a region wakes for
// one store (each woken waiter wakes the next).
func TestRemoteWriteWaiters(t *testing.T) {
	a, b := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	const waiters = 4
	done := make(chan error, waiters)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range waiters {
		go func() {
			_, err := b.MR.WaitRemoteWrite(ctx, 0)
			done <- err
		}()
	}
	testkit.WaitFor(t, "the waiters parked", func() bool { return verbs.RemoteWriteWaiters(b.MR) == waiters })
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 8)},
		RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}})
	for i := range waiters {
		if err := <-done; err != nil {
			t.Fatalf("waiter %d: %v", i, err)
		}
	}
}
