package transport

import (
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// TestWindowRule pins the adaptive window's rule (window.go): a go-back-N
// retry halves it, never below the floor of 128 or above the maximum; every
// windowGrowth acknowledged PSNs add one, up to the maximum; a maximum at
// or below the floor is a fixed window.
func TestWindowRule(t *testing.T) {
	type step struct {
		retry bool   // a go-back-N retry; else acked PSNs are acknowledged
		acked uint32 // PSNs newly acknowledged
		want  uint32 // effective window afterwards
	}
	g := uint32(windowGrowth)
	tests := []struct {
		name  string
		max   int
		steps []step
	}{
		{"default", DefaultMaxUnackedPSNs, []step{
			{acked: 1000, want: 256}, // never above the maximum
			{retry: true, want: 128},
			{retry: true, want: 128}, // never below the floor
			{acked: g - 1, want: 128},
			{acked: 1, want: 129},
			{acked: 3*g + g/2, want: 132},
			{acked: g / 2, want: 133}, // the remainder carries over
			{acked: 1000 * g, want: 256},
			{retry: true, want: 128},
		}},
		{"retry drops the credit", DefaultMaxUnackedPSNs, []step{
			{retry: true, want: 128},
			{acked: g - 1, want: 128},
			{retry: true, want: 128},
			{acked: 1, want: 128},
			{acked: g - 1, want: 129},
		}},
		{"large maximum halves", 1024, []step{
			{retry: true, want: 512},
			{retry: true, want: 256},
			{acked: 2 * g, want: 258},
			{retry: true, want: 129},
			{retry: true, want: 128},
			{acked: 1 << 20, want: 1024},
		}},
		{"just above the floor", 129, []step{
			{retry: true, want: 128},
			{acked: g, want: 129},
			{acked: 10 * g, want: 129},
		}},
		{"maximum at the floor is fixed", windowFloor, []step{
			{retry: true, want: 128},
			{acked: 1000 * g, want: 128},
		}},
		{"maximum below the floor is fixed", 3, []step{
			{retry: true, want: 3},
			{acked: 1000 * g, want: 3},
			{retry: true, want: 3},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			qp := NewQP(Config{})
			must(t, qp.SetMaxUnackedPSNs(tt.max))
			if got := qp.req.win; got != uint32(tt.max) {
				t.Fatalf("initial window %d, want the maximum %d", got, tt.max)
			}
			qp.comp.psn = psn.PSN(psn.Mask - 5) // wraps
			for i, s := range tt.steps {
				if s.retry {
					qp.shrinkWindow()
				} else {
					from := qp.comp.psn
					qp.comp.psn = from.Add(s.acked)
					qp.growWindow(from)
				}
				if qp.req.win != s.want {
					t.Fatalf("step %d %+v: window %d", i, s, qp.req.win)
				}
			}
		})
	}
}

// TestWindowAckInterval: a narrowed window asks for ACKs in proportion
// more often; at the maximum the interval is SetAckEvery's.
func TestWindowAckInterval(t *testing.T) {
	tests := []struct {
		max, win, every int
		want            uint32
	}{
		{256, 256, 64, 64},
		{256, 200, 64, 50},
		{256, 128, 64, 32},
		{256, 128, 1, 1}, // never 0
		{1024, 128, 64, 8},
		{1 << 22, 128, 1 << 30, 1 << 15}, // no overflow
		{3, 3, 64, 64},                   // a fixed window
	}
	for _, tt := range tests {
		qp := NewQP(Config{})
		must(t, qp.SetMaxUnackedPSNs(tt.max))
		must(t, qp.SetAckEvery(tt.every))
		qp.req.win = uint32(tt.win)
		if got := qp.ackInterval(); got != tt.want {
			t.Errorf("max %d window %d every %d: interval %d, want %d", tt.max, tt.win, tt.every, got, tt.want)
		}
	}
}

// TestDefaultWindowFollowsMTU: unless SetMaxUnackedPSNs set it, the
// window holds DefaultWindowBytes at the path MTU, never fewer than
// DefaultMaxUnackedPSNs PSNs nor more than MaxDefaultWindow; a window set
// stays whatever the MTU.
func TestDefaultWindowFollowsMTU(t *testing.T) {
	qp := NewQP(Config{})
	for _, tt := range []struct{ mtu, window int }{{4096, 256}, {2048, 512}, {1024, 512}, {256, 512}, {4096, 256}} {
		must(t, qp.SetPathMTU(tt.mtu))
		if qp.window != uint32(tt.window) || qp.req.win != uint32(tt.window) {
			t.Errorf("MTU %d: window %d (effective %d), want %d", tt.mtu, qp.window, qp.req.win, tt.window)
		}
	}
	must(t, qp.SetMaxUnackedPSNs(300))
	must(t, qp.SetPathMTU(256))
	if qp.window != 300 {
		t.Errorf("window set to 300, then MTU 256: window %d", qp.window)
	}
	// The same MTU again (a later modify naming it) leaves a narrowed
	// window alone.
	qp = NewQP(Config{})
	must(t, qp.SetPathMTU(1024))
	qp.shrinkWindow()
	w := qp.req.win
	must(t, qp.SetPathMTU(1024))
	if qp.req.win != w {
		t.Errorf("MTU 1024 again: effective window %d, want %d", qp.req.win, w)
	}
}

// TestWindowSetMaxRestarts: SetMaxUnackedPSNs sets the maximum and opens
// the window to it, also after a retry narrowed it; RESET does the same.
func TestWindowSetMaxRestarts(t *testing.T) {
	qp := NewQP(Config{})
	if want := uint32(defaultWindow(DefaultPathMTU)); qp.req.win != want {
		t.Fatalf("new QP: window %d, want %d", qp.req.win, want)
	}
	qp.shrinkWindow()
	must(t, qp.SetMaxUnackedPSNs(512))
	if qp.req.win != 512 {
		t.Fatalf("after SetMaxUnackedPSNs(512): window %d", qp.req.win)
	}
	qp.shrinkWindow()
	qp.SetState(ibv.QPStateReset)
	if qp.req.win != 512 {
		t.Fatalf("after RESET: window %d", qp.req.win)
	}
}

// TestWindowAdapts: on a real exchange, a lost packet of a long WRITE
// draws a sequence NAK; the retransmission that follows stays within the
// floor of 128 PSNs instead of the 256 the first burst used, and the
// acknowledgements of the rest of the transfer open the window again.
func TestWindowAdapts(t *testing.T) {
	o := defaultOpts()
	o.mtu = 256
	a, b := newPair(t, o)
	must(t, a.qp.SetMaxUnackedPSNs(DefaultMaxUnackedPSNs))
	l := newLink(t, a, b)
	dropped := false
	l.drop = func(from *endpoint, p *wire.Packet) bool {
		if from == a && p.BTH.PSN() == base.Add(3) && !dropped {
			dropped = true
			return true
		}
		return false
	}
	// Enough PSNs after the loss to grow back to the maximum.
	packets := DefaultMaxUnackedPSNs + windowGrowth*(DefaultMaxUnackedPSNs-windowFloor) + 100
	n := packets * 256
	src := pattern(n, 7)
	dst := make([]byte, n)
	rkey := b.mem.register(pd, dst, 0, ibv.AccessRemoteWrite)
	l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled, SGL: []SGE{{0, uint32(n), a.mem.register(pd, src, 0, 0)}}, RKey: rkey})
	if got := a.out.Len(); got != DefaultMaxUnackedPSNs {
		t.Fatalf("first burst of %d packets", got)
	}
	// One step: the burst reaches b, its sequence NAKs (one per packet
	// asking for an ACK) reach a, which goes back to base+3 once, with
	// the narrowed window.
	l.step()
	if c := a.qp.Counters(); c.RcvdSeqErr == 0 || c.CompleterRetry != 1 {
		t.Fatalf("counters after the loss %+v", c)
	}
	if a.qp.req.win != windowFloor {
		t.Fatalf("window %d after the retry, want %d", a.qp.req.win, windowFloor)
	}
	hi := base
	run, longest := 0, 0 // packets without AckReq
	for _, p := range a.out.Packets() {
		pkt := l.parse(a, p.Bytes)
		if q := pkt.BTH.PSN(); hi.LessThan(q) {
			hi = q
		}
		if pkt.BTH.AckReq() {
			run = 0
		} else {
			run++
			longest = max(longest, run)
		}
	}
	// Half the window, half the ACK interval.
	if want := DefaultAckEvery/2 - 1; longest != want {
		t.Errorf("up to %d packets in a row without AckReq, want %d", longest, want)
	}
	// The NAK implicitly acknowledged base..base+2.
	if want := base.Add(3 + windowFloor - 1); hi != want {
		t.Errorf("retransmission reaches %v, want %v (base+3+floor-1)", hi, want)
	}
	l.run(time.Second)
	wantBytes(t, "target", dst, src)
	wantCompletions(t, a.scq.take(), Completion{WRID: 1, Opcode: ibv.WCRDMAWrite, ByteLen: uint32(n), QPN: qpnA})
	if a.qp.req.win != DefaultMaxUnackedPSNs {
		t.Errorf("window %d after the transfer, want %d again", a.qp.req.win, DefaultMaxUnackedPSNs)
	}
	checkIdle(t, a, b)
}

// TestWindowAllocs: a retry that narrows the window and the
// acknowledgements that widen it again allocate nothing. Each work request
// is a 64-packet WRITE whose second packet is lost once: a sequence NAK
// halves the window (to the floor) and the 63 PSNs acknowledged after it
// widen it again.
func TestWindowAllocs(t *testing.T) {
	l := newLoop(t, 1024)
	must(t, l.a.qp.SetMaxUnackedPSNs(DefaultMaxUnackedPSNs))
	n := 64 << 10
	lkey := l.a.mem.register(pd, make([]byte, n), 0, 0)
	rkey := l.b.mem.register(pd, make([]byte, n), 0, ibv.AccessRemoteWrite)
	w := SendWQE{Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled, SGL: []SGE{{0, uint32(n), lkey}}, RKey: rkey}
	iter := func() {
		if err := l.a.qp.PostSend(&w, l.now, &l.a.out); err != nil {
			t.Fatal(err)
		}
		// Lose the second packet: rotate it past the end, so that each
		// buffer stays owned by one entry.
		pkts := l.a.out.Packets()
		lost := pkts[1]
		copy(pkts[1:], pkts[2:])
		pkts[len(pkts)-1] = lost
		l.a.out.n--
		l.deliver(t)
		// The NAK acknowledges the first packet before the retry, the
		// other 63 come after it.
		if got := l.a.qp.req.win; got != windowFloor+uint32(n/1024-1)/windowGrowth {
			t.Fatalf("window %d", got)
		}
	}
	for range 10 {
		iter()
	}
	if allocs := testing.AllocsPerRun(100, iter); allocs != 0 {
		t.Errorf("%v allocations per work request", allocs)
	}
	if c := l.a.qp.Counters(); c.CompleterRetry != 111 || l.scq.n != 111 || l.scq.errors != 0 {
		t.Fatalf("%d retries, %d completions, %d errors", c.CompleterRetry, l.scq.n, l.scq.errors)
	}
}

// TestDefaultWindowSmallPackets: at MTU 4096 the default window holds 256
// full packets, and small ones (at most smallPacket bytes) up to
// MaxDefaultWindow; a large packet after small ones still waits for its own
// window; a narrowed window narrows both; a window set with
// SetMaxUnackedPSNs counts every packet alike.
func TestDefaultWindowSmallPackets(t *testing.T) {
	type post struct{ n, size int }
	tests := []struct {
		name   string
		set    int // SetMaxUnackedPSNs, 0 for the default
		shrink bool
		posts  []post
		want   int // packets sent before any ACK
	}{
		{"small", 0, false, []post{{600, 64}}, MaxDefaultWindow},
		{"at the bound", 0, false, []post{{600, smallPacket}}, MaxDefaultWindow},
		{"large", 0, false, []post{{600, smallPacket + 1}}, 256},
		{"full", 0, false, []post{{300, 4096}}, 256},
		{"large after small", 0, false, []post{{200, 64}, {100, 4096}, {300, 64}}, 256},
		{"small after large", 0, false, []post{{100, 4096}, {500, 64}}, MaxDefaultWindow},
		{"narrowed", 0, true, []post{{600, 64}}, MaxDefaultWindow / 2},
		{"set", 256, false, []post{{600, 64}}, 256},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := defaultOpts()
			o.mtu = 4096
			o.maxSendWR = 1024
			o.sqSigAll = true
			a, b := newPair(t, o)
			if tt.set != 0 {
				must(t, a.qp.SetMaxUnackedPSNs(tt.set))
			}
			if tt.shrink {
				a.qp.shrinkWindow()
			}
			l := newLink(t, a, b)
			rkey := b.mem.register(pd, make([]byte, 4096), 0, ibv.AccessRemoteWrite)
			lkey := a.mem.register(pd, make([]byte, 4096), 0, 0)
			id := uint64(0)
			for _, p := range tt.posts {
				for range p.n {
					id++
					l.post(a, SendWQE{WRID: id, Opcode: ibv.WRRDMAWrite, SGL: []SGE{{0, uint32(p.size), lkey}}, RKey: rkey})
				}
			}
			if got := a.out.Len(); got != tt.want {
				t.Fatalf("%d packets in flight, want %d", got, tt.want)
			}
			l.run(time.Second)
			if got := len(a.scq.take()); got != int(id) {
				t.Errorf("%d completions, want %d", got, id)
			}
			checkIdle(t, a, b)
		})
	}
}
