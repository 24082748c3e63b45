package verbs_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netio"
	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// heldFlusher holds the doorbell's flusher in its first batch until
// release is called; entered is closed once it holds.
type heldFlusher struct {
	once     sync.Once
	entered  chan struct{}
	released chan struct{}
	release  func()
	batches  atomic.Int32 // batches the flusher began to send
}

// hold is the doorbell's hold hook.
func (h *heldFlusher) hold() {
	h.batches.Add(1)
	h.once.Do(func() {
		close(h.entered)
		<-h.released
	})
}

// corkedPair connects two RC QPs whose client's doorbell corks every post
// (its clock stands still, and the last send took an hour) and
// holds its flusher in the first batch; waiting is the drain's hook.
func corkedPair(t *testing.T, waiting func(h *heldFlusher) func()) (client, server *rdmatest.End, h *heldFlusher) {
	server, client = rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{SQSigAll: true})
	h = &heldFlusher{entered: make(chan struct{}), released: make(chan struct{})}
	h.release = sync.OnceFunc(func() { close(h.released) })
	var w func()
	if waiting != nil {
		w = waiting(h)
	}
	verbs.DoorbellHooks(client.Dev, func() int64 { return 0 }, h.hold, w)
	verbs.DoorbellCost(client.Dev, int64(time.Hour))
	t.Cleanup(h.release) // never leave the flusher blocked
	return client, server, h
}

// write64 posts a 64-byte WRITE of the client's buffer at off to the
// server's.
func write64(t *testing.T, client, server *rdmatest.End, id uint64, off int) {
	t.Helper()
	rdmatest.PostSend(t, client.QP, verbs.SendWR{
		WRID: id, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{client.MR.SGE(off, 64)},
		RDMA: verbs.RDMAParams{RemoteAddr: server.MR.IOVA() + uint64(off), RKey: server.MR.RKey()},
	})
}

func waitEntered(t *testing.T, h *heldFlusher) {
	t.Helper()
	select {
	case <-h.entered:
	case <-time.After(testkit.Timeout):
		t.Fatal("the first post was not corked: the flusher never ran")
	}
}

// TestDoorbellCorksWhileSending posts WRITEs one at a time from one
// goroutine while the flusher is sending the first: none leaves inline,
// and all sixteen leave in one system call once the first is sent.
func TestDoorbellCorksWhileSending(t *testing.T) {
	client, server, h := corkedPair(t, nil)
	fill(client.Buf[:17*64], 3)
	before := client.Dev.Counters()
	write64(t, client, server, 0, 0)
	waitEntered(t, h)
	for i := 1; i <= 16; i++ {
		write64(t, client, server, uint64(i), i*64)
	}
	if n := verbs.Corked(client.QP); n != 17 {
		t.Errorf("%d transmissions corked, want 17", n)
	}
	if c := client.Dev.Counters(); c.SentPkts != before.SentPkts {
		t.Errorf("%d packets left while the flusher was held: a post sent inline", c.SentPkts-before.SentPkts)
	}
	h.release()
	for _, wc := range rdmatest.WaitN(t, client.CQ, 17) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
	}
	// On loopback the peer can take the packets and answer before the
	// flusher's sendmmsg returns and it counts them.
	testkit.WaitFor(t, "the flusher to return", func() bool { return verbs.Corked(client.QP) == 0 })
	after := client.Dev.Counters()
	if after.RetryTimeouts == before.RetryTimeouts {
		// One system call for the first, one for the sixteen corked
		// behind it; where netio sends each packet with a call of its
		// own (the portable path), seventeen.
		want := uint64(17)
		if netio.BatchesSends {
			want = 2
		}
		if calls, pkts := after.TxCalls-before.TxCalls, after.SentPkts-before.SentPkts; calls != want || pkts != 17 {
			t.Errorf("17 WRITEs left in %d packets and %d system calls, want 17 in %d", pkts, calls, want)
		}
	}
	if got := h.batches.Load(); got != 2 {
		t.Errorf("the flusher sent %d batches, want 2", got)
	}
	for i := range 17 * 64 {
		if server.Buf[i] != client.Buf[i] {
			t.Fatalf("byte %d: server %d, client %d", i, server.Buf[i], client.Buf[i])
		}
	}
}

// TestDoorbellLonePostInline checks the rule that keeps a lone message's
// latency: a post that comes longer after the device's last send than
// that send took leaves before PostSend returns, without the flusher; one
// that comes sooner is corked.
func TestDoorbellLonePostInline(t *testing.T) {
	server, client := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{SQSigAll: true})
	var now atomic.Int64
	var batches atomic.Int32
	verbs.DoorbellHooks(client.Dev, now.Load, func() { batches.Add(1) }, nil)
	verbs.DoorbellCost(client.Dev, 1000)
	now.Store(5000) // 5 µs after the last send, which took 1
	before := client.Dev.Counters()
	write64(t, client, server, 1, 0)
	if c := client.Dev.Counters(); c.SentPkts != before.SentPkts+1 || verbs.Corked(client.QP) != 0 {
		t.Errorf("a lone post: %d packets sent by PostSend's return, %d corked; want 1, 0", c.SentPkts-before.SentPkts, verbs.Corked(client.QP))
	}
	rdmatest.WaitN(t, client.CQ, 1)
	if batches.Load() != 0 {
		t.Errorf("the flusher sent a lone post")
	}
	// The clock stood still during that send: cost 0. Back to back
	// now means within 1 µs of its end.
	verbs.DoorbellCost(client.Dev, 1000)
	now.Store(5500)
	write64(t, client, server, 2, 64)
	rdmatest.WaitN(t, client.CQ, 1)
	if batches.Load() != 1 {
		t.Errorf("a post 0.5 µs after a send of 1 µs: the flusher sent %d batches, want 1", batches.Load())
	}
}

// TestDoorbellTeardownSendsCorked checks step 6: a move to ERR, and
// Destroy, return only after the QP's corked packets have left (so never
// after the source port was released under them).
func TestDoorbellTeardownSendsCorked(t *testing.T) {
	for _, tc := range []struct {
		name     string
		teardown func(*verbs.QP) error
	}{
		{"ERR", func(qp *verbs.QP) error {
			return qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)
		}},
		{"Destroy", (*verbs.QP).Destroy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The drain releases the flusher when it starts waiting.
			client, server, h := corkedPair(t, func(h *heldFlusher) func() { return h.release })
			before := client.Dev.Counters()
			write64(t, client, server, 0, 0)
			waitEntered(t, h)
			for i := 1; i <= 3; i++ {
				write64(t, client, server, uint64(i), i*64)
			}
			if err := tc.teardown(client.QP); err != nil {
				t.Fatal(err)
			}
			if sent := client.Dev.Counters().SentPkts - before.SentPkts; sent != 4 {
				t.Errorf("%d of 4 corked packets sent when the teardown returned", sent)
			}
			if n := verbs.Corked(client.QP); n != 0 {
				t.Errorf("%d transmissions corked after the teardown", n)
			}
		})
	}
}

// TestDoorbellQPsShareIt has two QPs of one device post WRITEs back to
// back from two goroutines, every post corked: each QP's packets arrive in
// order (no request ahead of or behind its PSN at the responder), every
// WRITE completes and lands, and the device needs fewer system calls than
// packets.
func TestDoorbellQPsShareIt(t *testing.T) {
	server, client := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{SQSigAll: true})
	// A second connection between the same devices, own CQ each.
	c2, s2 := *client, *server
	c2.CQ, s2.CQ = rdmatest.CQ(t, client.Dev, 512), rdmatest.CQ(t, server.Dev, 512)
	init := verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: c2.CQ, RecvCQ: c2.CQ, Cap: rdmatest.DefaultCap, SQSigAll: true}
	c2.QP = rdmatest.QP(t, client.PD, init)
	init.SendCQ, init.RecvCQ = s2.CQ, s2.CQ
	s2.QP = rdmatest.QP(t, server.PD, init)
	rdmatest.Connect(t, &s2, &c2, rdmatest.DefaultLink(), rdmatest.DefaultLink())
	verbs.DoorbellHooks(client.Dev, func() int64 { return 0 }, nil, nil)
	fill(client.Buf, 9)
	before := client.Dev.Counters()
	const n = 200 // per QP
	var wg sync.WaitGroup
	for q, e := range []*rdmatest.End{client, &c2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wcs := make([]verbs.WorkCompletion, 16)
			posted, done := 0, 0
			for done < n {
				for ; posted < n && posted-done < rdmatest.DefaultCap.MaxSendWR; posted++ {
					verbs.DoorbellCost(client.Dev, int64(time.Hour)) // cork them all
					off := (q*n + posted) * 64
					wr := verbs.SendWR{WRID: uint64(posted), Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{e.MR.SGE(off, 64)},
						RDMA: verbs.RDMAParams{RemoteAddr: server.MR.IOVA() + uint64(off), RKey: server.MR.RKey()}}
					if err := e.QP.PostSend(&wr); err != nil {
						t.Error(err)
						return
					}
				}
				k, err := e.CQ.Poll(wcs)
				if err != nil {
					t.Error(err)
					return
				}
				if k == 0 {
					// Leave the processors to the device's
					// goroutines, as rdmatest.WaitN does.
					time.Sleep(50 * time.Microsecond)
				}
				for _, wc := range wcs[:k] {
					if wc.Status != verbs.WCSuccess || wc.WRID != uint64(done) {
						t.Errorf("QP %d: completion %+v, want WR %d successful", q, wc, done)
						return
					}
					done++
				}
			}
		}()
	}
	wg.Wait()
	testkit.WaitFor(t, "the flusher to return", func() bool { return verbs.Corked(client.QP)+verbs.Corked(c2.QP) == 0 })
	after, srv := client.Dev.Counters(), server.Dev.Counters()
	// A retransmission (the machine held a goroutine off its processor
	// for longer than the 1 s timeout) resends requests the responder
	// took: duplicates then say nothing about the order.
	if srv.OutOfSeqRequest != 0 || (srv.DuplicateRequest != 0 && after.RetryTimeouts == before.RetryTimeouts) {
		t.Errorf("the responder saw %d requests ahead of their PSN and %d behind (%d retransmission timeouts)",
			srv.OutOfSeqRequest, srv.DuplicateRequest, after.RetryTimeouts-before.RetryTimeouts)
	}
	if calls, pkts := after.TxCalls-before.TxCalls, after.SentPkts-before.SentPkts; netio.BatchesSends && calls >= pkts {
		t.Errorf("%d packets in %d system calls", pkts, calls)
	}
	for i := range 2 * n * 64 {
		if server.Buf[i] != client.Buf[i] {
			t.Fatalf("byte %d: server %d, client %d", i, server.Buf[i], client.Buf[i])
		}
	}
}

// TestDoorbellErrorSendsCorkedFirst checks the transport's own move to
// ERR (a NAK): the WRITEs corked behind the refused one leave before their
// flush completions hand the buffers back to the application.
func TestDoorbellErrorSendsCorkedFirst(t *testing.T) {
	server, client := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{SQSigAll: true})
	var batches atomic.Int32
	first, second := make(chan struct{}), make(chan struct{})
	releaseFirst, releaseSecond := sync.OnceFunc(func() { close(first) }), sync.OnceFunc(func() { close(second) })
	t.Cleanup(releaseFirst)
	t.Cleanup(releaseSecond)
	entered := make(chan struct{})
	verbs.DoorbellHooks(client.Dev, func() int64 { return 0 }, func() {
		switch batches.Add(1) {
		case 1: // the refused WRITE, held until the others are corked
			close(entered)
			<-first
		case 2: // the others, held until the drain waits for them
			<-second
		}
	}, releaseSecond)
	verbs.DoorbellCost(client.Dev, int64(time.Hour))
	before := client.Dev.Counters()
	rdmatest.PostSend(t, client.QP, verbs.SendWR{WRID: 0, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{client.MR.SGE(0, 64)},
		RDMA: verbs.RDMAParams{RemoteAddr: server.MR.IOVA(), RKey: server.MR.RKey() ^ 0x100}})
	select {
	case <-entered:
	case <-time.After(testkit.Timeout):
		t.Fatal("the first post was not corked")
	}
	for i := 1; i <= 3; i++ {
		write64(t, client, server, uint64(i), i*64)
	}
	releaseFirst()
	wcs := rdmatest.WaitN(t, client.CQ, 4)
	if sent := client.Dev.Counters().SentPkts - before.SentPkts; sent != 4 {
		t.Errorf("%d of 4 packets sent when the flush completions arrived", sent)
	}
	if wcs[0].Status != verbs.WCRemAccessErr {
		t.Errorf("refused WRITE: %v, want %v", wcs[0].Status, verbs.WCRemAccessErr)
	}
	for _, wc := range wcs[1:] {
		if wc.Status != verbs.WCWRFlushErr {
			t.Errorf("WRITE %d: %v, want %v", wc.WRID, wc.Status, verbs.WCWRFlushErr)
		}
	}
}
