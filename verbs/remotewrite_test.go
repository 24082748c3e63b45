package verbs

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRemoteWriteWait: RemoteWrites counts every WRITE packet, atomic and
// ATOMIC_WRITE stored into a region (not READs, not SENDs), and a goroutine
// parked in WaitRemoteWrite wakes when the first store lands, seeing the
// stored bytes.
func TestRemoteWriteWait(t *testing.T) {
	a, b := newPair(t, endOpts{}, endOpts{})
	const n = 3000 // three packets at MTU 1024
	for i := range n {
		a.buf[i] = byte(i*7 + 1)
	}
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := b.mr.WaitRemoteWrite(ctx, 0)
		switch {
		case err != nil:
			got <- err
		case c == 0:
			got <- errors.New("woke with the count unchanged")
		case b.buf[0] != a.buf[0]:
			got <- errors.New("the first packet's bytes are not visible after the wake-up")
		default:
			got <- nil
		}
	}()
	time.Sleep(10 * time.Millisecond) // let it park
	mustPostSend(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(0, n)},
		RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}})
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, a.cq); wc.Status != WCSuccess {
		t.Fatalf("write completion %+v", wc)
	}
	if c := b.mr.RemoteWrites(); c != 3 {
		t.Errorf("RemoteWrites after a 3-packet WRITE = %d, want 3", c)
	}
	// A READ of b and a SEND into b store nothing remotely; an atomic does.
	mustPostSend(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMARead, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(4096, 64)},
		RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}})
	mustPostRecv(t, b.qp, RecvWR{WRID: 3, SGList: []SGE{b.mr.SGE(8192, 64)}})
	mustPostSend(t, a.qp, SendWR{WRID: 4, Opcode: WRSend, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(0, 64)}})
	mustPostSend(t, a.qp, SendWR{WRID: 5, Opcode: WRAtomicFetchAndAdd, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(5000, 8)},
		Atomic: AtomicParams{RemoteAddr: b.mr.IOVA() + 6000, RKey: b.mr.RKey(), CompareAdd: 1}})
	waitN(t, a.cq, 3)
	waitWC(t, b.cq)
	if c := b.mr.RemoteWrites(); c != 4 {
		t.Errorf("RemoteWrites after READ, SEND and an atomic = %d, want 4", c)
	}
	if c := a.mr.RemoteWrites(); c != 0 {
		t.Errorf("the requester's region counted %d remote writes (READ data and atomic results are local stores)", c)
	}
	// A wait whose context ends returns its error and the count it knew.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if c, err := b.mr.WaitRemoteWrite(ctx, 4); c != 4 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitRemoteWrite without a store = %d, %v; want 4, deadline exceeded", c, err)
	}
	// A count already past seen returns at once.
	if c, err := b.mr.WaitRemoteWrite(context.Background(), 1); c != 4 || err != nil {
		t.Errorf("WaitRemoteWrite(1) = %d, %v; want 4, nil", c, err)
	}
}

// TestRemoteWriteWaiters: every goroutine waiting on a region wakes for
// one store (each woken waiter wakes the next).
func TestRemoteWriteWaiters(t *testing.T) {
	a, b := newPair(t, endOpts{}, endOpts{})
	const waiters = 4
	done := make(chan error, waiters)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range waiters {
		go func() {
			_, err := b.mr.WaitRemoteWrite(ctx, 0)
			done <- err
		}()
	}
	time.Sleep(10 * time.Millisecond) // let them park
	mustPostSend(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(0, 8)},
		RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}})
	for i := range waiters {
		if err := <-done; err != nil {
			t.Fatalf("waiter %d: %v", i, err)
		}
	}
}
