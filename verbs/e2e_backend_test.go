package verbs_test

// End-to-end tests of what the hardware backend does its own way (post
// lists longer than its per-queue C arrays, CQ.Wait parking on a
// completion channel, posting and polling without allocation). They run on
// either backend: goroce devices here, rxe0 in test/hw/run.sh.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
)

// TestE2EBackendLongPostList posts 150 WRITEs as one list, more than the
// hardware backend chains in one ibv_post_send (64), and checks each
// landed and completed once, in order.
func TestE2EBackendLongPostList(t *testing.T) {
	const n = 150
	opts := rdmatest.EndOptions{Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
	a, b := rdmatest.Pair(t, opts, opts)
	wrs := make([]verbs.SendWR, n)
	for i := range wrs {
		a.Buf[i] = byte(i + 1)
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(i, 1)},
			RDMA:   verbs.RDMAParams{RemoteAddr: b.MR.IOVA() + 1024 + uint64(i), RKey: b.MR.RKey()}}
	}
	posted, err := a.QP.PostSendList(wrs)
	if err != nil || posted != n {
		t.Fatalf("PostSendList: %d of %d posted, %v", posted, n, err)
	}
	for i, wc := range rdmatest.WaitN(t, a.CQ, n) {
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) || wc.Opcode != verbs.WCRDMAWrite {
			t.Fatalf("completion %d: wr_id %d %v %v", i, wc.WRID, wc.Opcode, wc.Status)
		}
	}
	for i := range n {
		if got := b.Buf[1024+i]; got != byte(i+1) {
			t.Fatalf("byte %d is %#x, want %#x", i, got, byte(i+1))
		}
	}
}

// TestE2EBackendWaitParks has a goroutine park in CQ.Wait on an empty CQ
// until a SEND arrives, and another Wait end with its context.
func TestE2EBackendWaitParks(t *testing.T) {
	a, b := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	_, err := b.CQ.Wait(ctx, make([]verbs.WorkCompletion, 1))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on an empty CQ: %v, want the context's deadline", err)
	}
	rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: 7, SGList: []verbs.SGE{b.MR.SGE(0, 64)}})
	got := make(chan error, 1)
	go func() {
		wc := make([]verbs.WorkCompletion, 1)
		n, err := b.CQ.Wait(context.Background(), wc)
		switch {
		case err != nil:
			got <- err
		case n != 1 || wc[0].WRID != 7 || wc[0].Status != verbs.WCSuccess || wc[0].ByteLen != 5:
			got <- errors.New("wrong completion: " + wc[0].Status.String())
		default:
			got <- nil
		}
	}()
	copy(a.Buf, "hello")
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 5)}})
	rdmatest.WaitOne(t, a.CQ)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait did not return the receive completion")
	}
	if string(b.Buf[:5]) != "hello" {
		t.Fatalf("received %q", b.Buf[:5])
	}
}

// TestE2EBackendNoAlloc sends messages of two SGEs into receives and polls
// both completions on a hardware device, counting allocations: the work
// requests go through per-queue C arrays, the completions through a
// per-CQ one. (The software device's own tests of this are
// TestPostDoesNotAllocate and TestCQPollDoesNotAllocate.)
func TestE2EBackendNoAlloc(t *testing.T) {
	if rdmatest.Hardware() == "" {
		t.Skip("the hardware backend's allocation test: test/hw/run.sh runs it on rxe0")
	}
	a, b := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	send := &verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 8), a.MR.SGE(64, 8)}}
	recv := &verbs.RecvWR{SGList: []verbs.SGE{b.MR.SGE(0, 64)}}
	wc := make([]verbs.WorkCompletion, 4)
	var failed error
	pollOne := func(cq *verbs.CQ) {
		for failed == nil {
			n, err := cq.Poll(wc)
			failed = err
			if n > 0 && wc[0].Status != verbs.WCSuccess {
				failed = errors.New(wc[0].Status.String())
			}
			if n > 0 {
				return
			}
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := b.QP.PostRecv(recv); err != nil {
			failed = err
			return
		}
		if err := a.QP.PostSend(send); err != nil {
			failed = err
			return
		}
		pollOne(a.CQ)
		pollOne(b.CQ)
	})
	if failed != nil {
		t.Fatal(failed)
	}
	if allocs != 0 {
		t.Fatalf("%.1f allocations per post and poll, want 0", allocs)
	}
}

// TestE2EBackendSRQLimitEvent arms an SRQ's limit and consumes receives
// below it: GetAsyncEvent (on hardware, the device's event descriptor in
// Go's poller) reports the SRQ, once; a later GetAsyncEvent ends with its
// context, and one blocked when the device closes returns ErrClosed.
func TestE2EBackendSRQLimitEvent(t *testing.T) {
	a, b := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{SRQ: &verbs.SRQInitAttr{MaxWR: 8, MaxSGE: 1}})
	for i := range 4 {
		if err := b.SRQ.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{b.MR.SGE(i*64, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.SRQ.Modify(&verbs.SRQAttr{SRQLimit: 3}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(0, 16)}})
	}
	rdmatest.WaitN(t, a.CQ, 2)
	rdmatest.WaitN(t, b.CQ, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	ev, err := b.Dev.GetAsyncEvent(ctx)
	cancel()
	if err != nil || ev.Type != verbs.EventSRQLimitReached || ev.SRQ != b.SRQ {
		t.Fatalf("GetAsyncEvent: %v, %v; want SRQ_LIMIT_REACHED of %v", ev, err, b.SRQ)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
	_, err = b.Dev.GetAsyncEvent(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetAsyncEvent with no event: %v, want the context's deadline", err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := a.Dev.GetAsyncEvent(context.Background())
		got <- err
	}()
	if err := a.Dev.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, verbs.ErrClosed) {
			t.Fatalf("GetAsyncEvent across Close: %v, want ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not wake GetAsyncEvent")
	}
}

// TestE2EBackendReceiveQueues: a software device reports its receive
// sockets, a hardware one none (the NIC receives), and neither panics.
func TestE2EBackendReceiveQueues(t *testing.T) {
	a, _ := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	n := a.Dev.ReceiveQueues()
	if rdmatest.Hardware() != "" {
		if n != 0 {
			t.Fatalf("a hardware device reports %d receive queues, want 0", n)
		}
		return
	}
	if n < 1 {
		t.Fatalf("a software device reports %d receive queues, want at least 1", n)
	}
}

// TestE2EBackendFlushAtomicWrite: on a hardware device FLUSH and
// ATOMIC_WRITE are refused at post with ErrNotSupported naming the opcode
// (see hwMissingOp: Debian bookworm's libibverbs and the rxe VM's kernel
// lack them), and the QP carries on: a WRITE posted next completes. On
// goroce devices TestFlush and TestAtomicWrite run them.
func TestE2EBackendFlushAtomicWrite(t *testing.T) {
	if rdmatest.Hardware() == "" {
		t.Skip("goroce devices execute FLUSH and ATOMIC_WRITE: TestFlush, TestAtomicWrite")
	}
	a, b := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	for _, wr := range []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRFlush, SendFlags: verbs.SendSignaled,
			Flush: verbs.FlushParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey(), Length: 64, Type: verbs.FlushGlobal, Level: verbs.FlushRange}},
		{WRID: 2, Opcode: verbs.WRAtomicWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 8)},
			RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}},
	} {
		err := a.QP.PostSend(&wr)
		rdmatest.WantError(t, err, verbs.ErrNotSupported, "opcode")
		if !strings.Contains(err.Error(), "Linux 6.2") {
			t.Errorf("%v: %v does not say why", wr.Opcode, err)
		}
	}
	fill(a.Buf[:64], 3)
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 64)}, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA() + 128, RKey: b.MR.RKey()}})
	if wc := rdmatest.WaitOne(t, a.CQ); wc.WRID != 3 || wc.Status != verbs.WCSuccess {
		t.Fatalf("the WRITE after the refused posts: %+v", wc)
	}
	checkBytes(t, "the WRITE after the refused posts", b.Buf[128:192], a.Buf[:64])
	rdmatest.ExpectEmpty(t, a.CQ)
}
