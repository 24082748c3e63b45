package verbs_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

// These tests use only the public API: CompletionSink with the solicited
// bit, MR.ReregWith and QP.PostRecvList, the hooks goroce-nic builds on.

// sinkEnd is one side of an RC connection for these tests.
type sinkEnd struct {
	dev *verbs.Device
	pd  *verbs.PD
	buf []byte
	mr  *verbs.MR
	cq  *verbs.CQ
	qp  *verbs.QP
}

func openSinkEnd(t *testing.T, addr string) *sinkEnd {
	t.Helper()
	dev, err := verbs.Open(verbs.DeviceConfig{Addr: netip.MustParseAddr(addr)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	e := &sinkEnd{dev: dev, buf: make([]byte, 8192)}
	if e.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = e.pd.RegMR(e.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = dev.CreateCQ(8, nil, 0); err != nil {
		t.Fatal(err)
	}
	e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *sinkEnd) connect(t *testing.T, peer *sinkEnd) {
	t.Helper()
	gid, _ := peer.dev.QueryGID(1, 1)
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: verbs.AccessRemoteWrite},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
		{verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPNum: peer.qp.QPN(), RQPSN: 0x10,
			MaxDestRdAtomic: 1, MinRNRTimer: 12,
			AHAttr: verbs.AddressVector{DGID: gid, SGIDIndex: 1, HopLimit: 1, IsGlobal: true, PortNum: 1}},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN |
				verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
		{verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: 0x10, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt |
				verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := e.qp.Modify(&s.attr, s.mask); err != nil {
			t.Fatal(err)
		}
	}
}

func connectedPair(t *testing.T, a, b string) (*sinkEnd, *sinkEnd) {
	x, y := openSinkEnd(t, a), openSinkEnd(t, b)
	x.connect(t, y)
	y.connect(t, x)
	return x, y
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

// await returns the first n completions delivered, failing after 10 s.
func (s *boundedSink) await(t *testing.T, n int) []verbs.WorkCompletion {
	t.Helper()
	deadline := time.After(10 * time.Second)
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
	snd, rcv := connectedPair(t, "127.0.1.31", "127.0.1.32")
	sink := newBoundedSink(2)
	if err := rcv.cq.SetSink(sink); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := rcv.qp.PostRecv(&verbs.RecvWR{WRID: uint64(10 + i), SGList: []verbs.SGE{rcv.mr.SGE(i*64, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, flags := range []verbs.SendFlags{verbs.SendSolicited, 0} {
		if err := snd.qp.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: flags | verbs.SendSignaled,
			SGList: []verbs.SGE{snd.mr.SGE(0, 16)}}); err != nil {
			t.Fatal(err)
		}
	}
	got := sink.await(t, 2)
	if got[0].WRID != 10 || !got[0].Solicited || got[1].WRID != 11 || got[1].Solicited {
		t.Fatalf("delivered %+v, want WR 10 solicited then WR 11 not", got)
	}
	if n, _ := rcv.cq.Poll(make([]verbs.WorkCompletion, 4)); n != 0 {
		t.Fatalf("Poll found %d completions the sink took", n)
	}

	// A third message finds the sink full: the CQ overruns as with a full
	// ring.
	if err := snd.qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SGList: []verbs.SGE{snd.mr.SGE(0, 16)}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		ev, err := rcv.dev.GetAsyncEvent(ctx)
		if err != nil {
			t.Fatalf("no CQ_ERR after the sink refused a completion: %v", err)
		}
		if ev.Type == verbs.EventCQErr && ev.CQ == rcv.cq {
			break
		}
	}
	if err := rcv.cq.SetSink(nil); err != nil {
		t.Fatal(err)
	}
}

func TestReregWithIOVAKeepsKeysAndMovesMemory(t *testing.T) {
	writer, owner := connectedPair(t, "127.0.1.33", "127.0.1.34")
	wsink := newBoundedSink(16)
	if err := writer.cq.SetSink(wsink); err != nil {
		t.Fatal(err)
	}
	lkey, rkey := owner.mr.LKey(), owner.mr.RKey()
	moved := make([]byte, 4096)
	const iova = 0x7f0000001000
	err := owner.mr.ReregWith(verbs.ReregAttr{Flags: verbs.ReregChangeTranslation, Buf: moved, IOVA: iova, KeepKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	if owner.mr.LKey() != lkey || owner.mr.RKey() != rkey || owner.mr.IOVA() != iova || owner.mr.Len() != len(moved) {
		t.Fatalf("after ReregWith: keys %#x/%#x iova %#x len %d, want %#x/%#x %#x %d",
			owner.mr.LKey(), owner.mr.RKey(), owner.mr.IOVA(), owner.mr.Len(), lkey, rkey, uint64(iova), len(moved))
	}
	copy(writer.buf, "moved")
	if err := writer.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{writer.mr.SGE(0, 5)}, RDMA: verbs.RDMAParams{RemoteAddr: iova + 100, RKey: rkey}}); err != nil {
		t.Fatal(err)
	}
	if wc := wsink.await(t, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE through the kept rkey: %v", wc.Status)
	}
	if string(moved[100:105]) != "moved" {
		t.Fatalf("the new memory holds %q at offset 100", moved[100:105])
	}

	// Without KeepKeys the key changes and the old rkey is refused.
	if err := owner.mr.ReregWith(verbs.ReregAttr{Flags: verbs.ReregChangeAccess, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}); err != nil {
		t.Fatal(err)
	}
	if owner.mr.RKey() == rkey {
		t.Fatalf("rkey %#x kept without KeepKeys", rkey)
	}
	if err := writer.qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{writer.mr.SGE(0, 5)}, RDMA: verbs.RDMAParams{RemoteAddr: iova, RKey: rkey}}); err != nil {
		t.Fatal(err)
	}
	if wc := wsink.await(t, 2)[1]; wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("WRITE through the stale rkey: %v, want %v", wc.Status, verbs.WCRemAccessErr)
	}
}

func TestPostRecvListStopsAtTheBadRequest(t *testing.T) {
	snd, rcv := connectedPair(t, "127.0.1.35", "127.0.1.36")
	three := []verbs.SGE{rcv.mr.SGE(0, 8), rcv.mr.SGE(8, 8), rcv.mr.SGE(16, 8)}
	wrs := []verbs.RecvWR{
		{WRID: 1, SGList: []verbs.SGE{rcv.mr.SGE(0, 64)}},
		{WRID: 2, SGList: []verbs.SGE{rcv.mr.SGE(64, 64)}},
		{WRID: 3, SGList: three}, // more SGEs than max_recv_sge
		{WRID: 4, SGList: []verbs.SGE{rcv.mr.SGE(128, 64)}},
	}
	n, err := rcv.qp.PostRecvList(wrs)
	if n != 2 || !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("PostRecvList = %d, %v; want 2, ErrInvalidArgument", n, err)
	}
	for i := range 2 {
		if err := snd.qp.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{snd.mr.SGE(0, 32)}}); err != nil {
			t.Fatal(err)
		}
	}
	wc := make([]verbs.WorkCompletion, 8)
	var recvs []uint64
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for len(recvs) < 2 {
		k, err := rcv.cq.Wait(ctx, wc)
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
	if k, _ := rcv.cq.Poll(wc); k != 0 {
		t.Fatalf("%d more completions", k)
	}
	// An empty list posts nothing.
	if n, err := rcv.qp.PostRecvList(nil); n != 0 || err != nil {
		t.Fatalf("PostRecvList(nil) = %d, %v", n, err)
	}
}

// feederFunc is a verbs.RecvFeeder.
type feederFunc func()

func (f feederFunc) FeedRecv() { f() }

// openUDFeederEnd opens a device with a UD QP in RTS whose RecvFeeder is
// feed (may be nil).
func openUDFeederEnd(t *testing.T, addr string, feed func(*sinkEnd)) *sinkEnd {
	t.Helper()
	dev, err := verbs.Open(verbs.DeviceConfig{Addr: netip.MustParseAddr(addr)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	e := &sinkEnd{dev: dev, buf: make([]byte, 8192)}
	if e.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = e.pd.RegMR(e.buf, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = dev.CreateCQ(8, nil, 0); err != nil {
		t.Fatal(err)
	}
	init := verbs.QPInitAttr{QPType: verbs.QPTypeUD, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	// The receive goroutine may call the feeder as soon as the QP exists
	// (a stray datagram for its number); until e.qp is set, and visibly
	// so to that goroutine, it does nothing.
	var ready atomic.Bool
	if feed != nil {
		init.RecvFeeder = feederFunc(func() {
			if ready.Load() {
				feed(e)
			}
		})
	}
	if e.qp, err = e.pd.CreateQP(init); err != nil {
		t.Fatal(err)
	}
	ready.Store(true)
	for _, s := range []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QKey: 0x11111111},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey},
		{verbs.QPAttr{QPState: verbs.QPStateRTR}, verbs.QPAttrState},
		{verbs.QPAttr{QPState: verbs.QPStateRTS}, verbs.QPAttrState | verbs.QPAttrSQPSN},
	} {
		if err := e.qp.Modify(&s.attr, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// A datagram finds no receive posted on the QP, but its RecvFeeder posts
// one before the QP handles it: the datagram is received, not dropped.
func TestRecvFeederPostsBeforeTheMessageIsHandled(t *testing.T) {
	var mu sync.Mutex
	queued := []uint64{77}
	rcv := openUDFeederEnd(t, "127.0.1.37", func(e *sinkEnd) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range queued {
			if err := e.qp.PostRecv(&verbs.RecvWR{WRID: id, SGList: []verbs.SGE{e.mr.SGE(0, 40+64)}}); err != nil {
				t.Error(err)
			}
		}
		queued = nil
	})
	snd := openUDFeederEnd(t, "127.0.1.38", nil)
	gid, _ := rcv.dev.QueryGID(1, 1)
	ah, err := snd.pd.CreateAH(verbs.AddressVector{DGID: gid, SGIDIndex: 1, HopLimit: 64, IsGlobal: true, PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	copy(snd.buf, "fed")
	if err := snd.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{snd.mr.SGE(0, 3)},
		UD: verbs.UDParams{AH: ah, RemoteQPN: rcv.qp.QPN(), RemoteQKey: 0x11111111}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]verbs.WorkCompletion, 1)
	if _, err := rcv.cq.Wait(ctx, wc); err != nil {
		t.Fatalf("the datagram was not received: %v", err)
	}
	if wc[0].WRID != 77 || wc[0].Status != verbs.WCSuccess || string(rcv.buf[40:43]) != "fed" {
		t.Fatalf("completion %+v, payload %q", wc[0], rcv.buf[40:43])
	}
}
