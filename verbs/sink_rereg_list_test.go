package verbs_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// These tests use only the public API: CompletionSink with the solicited
// bit, MR.ReregWith and QP.PostRecvList, the hooks goroce-nic builds on.

// sinkPair opens two ends with small queues (16 WRs of 2 SGEs, 8 CQ
// entries, 8 KiB registered for local and remote writes) and connects
// their RC QPs.
func sinkPair(t *testing.T) (*rdmatest.End, *rdmatest.End) {
	t.Helper()
	o := rdmatest.EndOptions{Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2},
		CQE: 8, BufSize: 8192, MRAccess: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}
	return rdmatest.Pair(t, o, o)
}

// boundedSink keeps up to room completions and refuses the rest.
type boundedSink struct {
	mu   sync.Mutex
	room int
	got  []verbs.WorkCompletion
	more chan struct{}
}

func newBoundedSink(room int) *boundedSink {
	return &boundedSink{room: room, more: make(chan struct{}, 64)}
}

func (s *boundedSink) DeliverCompletion(wc verbs.WorkCompletion) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.got) == s.room {
		return false
	}
	s.got = append(s.got, wc)
	select {
	case s.more <- struct{}{}:
	default:
	}
	return true
}

// await returns the first n completions delivered, failing after
// testkit.Timeout.
func (s *boundedSink) await(t *testing.T, n int) []verbs.WorkCompletion {
	t.Helper()
	deadline := time.After(testkit.Timeout)
	for {
		s.mu.Lock()
		if len(s.got) >= n {
			out := append([]verbs.WorkCompletion(nil), s.got[:n]...)
			s.mu.Unlock()
			return out
		}
		s.mu.Unlock()
		select {
		case <-s.more:
		case <-deadline:
			t.Fatalf("%d completions delivered, want %d", len(s.got), n)
		}
	}
}

func TestCompletionSinkTakesCompletionsWithSolicitedBit(t *testing.T) {
	snd, rcv := sinkPair(t)
	sink := newBoundedSink(2)
	if err := rcv.CQ.SetSink(sink); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := rcv.QP.PostRecv(&verbs.RecvWR{WRID: uint64(10 + i), SGList: []verbs.SGE{rcv.MR.SGE(i*64, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, flags := range []verbs.SendFlags{verbs.SendSolicited, 0} {
		if err := snd.QP.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: flags | verbs.SendSignaled,
			SGList: []verbs.SGE{snd.MR.SGE(0, 16)}}); err != nil {
			t.Fatal(err)
		}
	}
	got := sink.await(t, 2)
	if got[0].WRID != 10 || !got[0].Solicited || got[1].WRID != 11 || got[1].Solicited {
		t.Fatalf("delivered %+v, want WR 10 solicited then WR 11 not", got)
	}
	if n, _ := rcv.CQ.Poll(make([]verbs.WorkCompletion, 4)); n != 0 {
		t.Fatalf("Poll found %d completions the sink took", n)
	}

	// A third message finds the sink full: the CQ overruns as with a full
	// ring.
	if err := snd.QP.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SGList: []verbs.SGE{snd.MR.SGE(0, 16)}}); err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t)
	for {
		ev, err := rcv.Dev.GetAsyncEvent(ctx)
		if err != nil {
			t.Fatalf("no CQ_ERR after the sink refused a completion: %v", err)
		}
		if ev.Type == verbs.EventCQErr && ev.CQ == rcv.CQ {
			break
		}
	}
	if err := rcv.CQ.SetSink(nil); err != nil {
		t.Fatal(err)
	}
}

func TestReregWithIOVAKeepsKeysAndMovesMemory(t *testing.T) {
	writer, owner := sinkPair(t)
	wsink := newBoundedSink(16)
	if err := writer.CQ.SetSink(wsink); err != nil {
		t.Fatal(err)
	}
	lkey, rkey := owner.MR.LKey(), owner.MR.RKey()
	moved := make([]byte, 4096)
	const iova = 0x7f0000001000
	err := owner.MR.ReregWith(verbs.ReregAttr{Flags: verbs.ReregChangeTranslation, Buf: moved, IOVA: iova, KeepKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	if owner.MR.LKey() != lkey || owner.MR.RKey() != rkey || owner.MR.IOVA() != iova || owner.MR.Len() != len(moved) {
		t.Fatalf("after ReregWith: keys %#x/%#x iova %#x len %d, want %#x/%#x %#x %d",
			owner.MR.LKey(), owner.MR.RKey(), owner.MR.IOVA(), owner.MR.Len(), lkey, rkey, uint64(iova), len(moved))
	}
	copy(writer.Buf, "moved")
	if err := writer.QP.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{writer.MR.SGE(0, 5)}, RDMA: verbs.RDMAParams{RemoteAddr: iova + 100, RKey: rkey}}); err != nil {
		t.Fatal(err)
	}
	if wc := wsink.await(t, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE through the kept rkey: %v", wc.Status)
	}
	if string(moved[100:105]) != "moved" {
		t.Fatalf("the new memory holds %q at offset 100", moved[100:105])
	}

	// Without KeepKeys the key changes and the old rkey is refused.
	if err := owner.MR.ReregWith(verbs.ReregAttr{Flags: verbs.ReregChangeAccess, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}); err != nil {
		t.Fatal(err)
	}
	if owner.MR.RKey() == rkey {
		t.Fatalf("rkey %#x kept without KeepKeys", rkey)
	}
	if err := writer.QP.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{writer.MR.SGE(0, 5)}, RDMA: verbs.RDMAParams{RemoteAddr: iova, RKey: rkey}}); err != nil {
		t.Fatal(err)
	}
	if wc := wsink.await(t, 2)[1]; wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("WRITE through the stale rkey: %v, want %v", wc.Status, verbs.WCRemAccessErr)
	}
}

func TestPostRecvListStopsAtTheBadRequest(t *testing.T) {
	snd, rcv := sinkPair(t)
	three := []verbs.SGE{rcv.MR.SGE(0, 8), rcv.MR.SGE(8, 8), rcv.MR.SGE(16, 8)}
	wrs := []verbs.RecvWR{
		{WRID: 1, SGList: []verbs.SGE{rcv.MR.SGE(0, 64)}},
		{WRID: 2, SGList: []verbs.SGE{rcv.MR.SGE(64, 64)}},
		{WRID: 3, SGList: three}, // more SGEs than max_recv_sge
		{WRID: 4, SGList: []verbs.SGE{rcv.MR.SGE(128, 64)}},
	}
	n, err := rcv.QP.PostRecvList(wrs)
	if n != 2 || !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("PostRecvList = %d, %v; want 2, ErrInvalidArgument", n, err)
	}
	for i := range 2 {
		if err := snd.QP.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{snd.MR.SGE(0, 32)}}); err != nil {
			t.Fatal(err)
		}
	}
	wc := make([]verbs.WorkCompletion, 8)
	var recvs []uint64
	ctx := testkit.Context(t)
	for len(recvs) < 2 {
		k, err := rcv.CQ.Wait(ctx, wc)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range wc[:k] {
			if c.Status != verbs.WCSuccess {
				t.Fatalf("receive %d: %v", c.WRID, c.Status)
			}
			recvs = append(recvs, c.WRID)
		}
	}
	if recvs[0] != 1 || recvs[1] != 2 {
		t.Fatalf("receives completed %v, want [1 2]", recvs)
	}
	// The list posted nothing after the bad request.
	if k, _ := rcv.CQ.Poll(wc); k != 0 {
		t.Fatalf("%d more completions", k)
	}
	// An empty list posts nothing.
	if n, err := rcv.QP.PostRecvList(nil); n != 0 || err != nil {
		t.Fatalf("PostRecvList(nil) = %d, %v", n, err)
	}
}

// feederFunc is a verbs.RecvFeeder.
type feederFunc func()

func (f feederFunc) FeedRecv() { f() }

// openUDFeederEnd opens a device on testkit.Addr(host) with a UD QP in
// RTS whose RecvFeeder is feed (may be nil).
func openUDFeederEnd(t *testing.T, host int, feed func(*rdmatest.End)) *rdmatest.End {
	t.Helper()
	e := &rdmatest.End{Dev: rdmatest.OpenDevice(t, verbs.DeviceConfig{Addr: testkit.Addr(host)}), Buf: make([]byte, 8192)}
	e.PD = rdmatest.PD(t, e.Dev)
	e.MR = rdmatest.MR(t, e.PD, e.Buf, verbs.AccessLocalWrite)
	e.CQ = rdmatest.CQ(t, e.Dev, 8)
	init := verbs.QPInitAttr{QPType: verbs.QPTypeUD, SendCQ: e.CQ, RecvCQ: e.CQ,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	// The receive goroutine may call the feeder as soon as the QP exists
	// (a stray datagram for its number); until e.QP is set, and visibly
	// so to that goroutine, it does nothing.
	var ready atomic.Bool
	if feed != nil {
		init.RecvFeeder = feederFunc(func() {
			if ready.Load() {
				feed(e)
			}
		})
	}
	e.QP = rdmatest.QP(t, e.PD, init)
	ready.Store(true)
	rdmatest.LinkQP(t, e.QP, rdmatest.DefaultLink(), 0, rdmatest.Peer{})
	return e
}

// A datagram finds no receive posted on the QP, but its RecvFeeder posts
// one before the QP handles it: the datagram is received, not dropped.
func TestRecvFeederPostsBeforeTheMessageIsHandled(t *testing.T) {
	var mu sync.Mutex
	queued := []uint64{77}
	rcv := openUDFeederEnd(t, 1, func(e *rdmatest.End) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range queued {
			if err := e.QP.PostRecv(&verbs.RecvWR{WRID: id, SGList: []verbs.SGE{e.MR.SGE(0, 40+64)}}); err != nil {
				t.Error(err)
			}
		}
		queued = nil
	})
	snd := openUDFeederEnd(t, 2, nil)
	gid, _ := rcv.Dev.QueryGID(1, 1)
	ah, err := snd.PD.CreateAH(verbs.AddressVector{DGID: gid, SGIDIndex: 1, HopLimit: 64, IsGlobal: true, PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	copy(snd.Buf, "fed")
	if err := snd.QP.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{snd.MR.SGE(0, 3)},
		UD: verbs.UDParams{AH: ah, RemoteQPN: rcv.QP.QPN(), RemoteQKey: 0x11111111}}); err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t)
	wc := make([]verbs.WorkCompletion, 1)
	if _, err := rcv.CQ.Wait(ctx, wc); err != nil {
		t.Fatalf("the datagram was not received: %v", err)
	}
	if wc[0].WRID != 77 || wc[0].Status != verbs.WCSuccess || string(rcv.Buf[40:43]) != "fed" {
		t.Fatalf("completion %+v, payload %q", wc[0], rcv.Buf[40:43])
	}
}
