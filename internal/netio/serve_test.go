package netio

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/wire"
)

// batchCounter counts packets and batches; endedAfter is the number of
// packets handled when EndBatch last ran.
type batchCounter struct {
	packets, batches, endedAfter atomic.Int64
}

func (h *batchCounter) HandlePacket(*wire.Packet, netip.AddrPort, *RecvInfo) { h.packets.Add(1) }

func (h *batchCounter) EndBatch() {
	h.batches.Add(1)
	h.endedAfter.Store(h.packets.Load())
}

// TestServeDrainsFullBatches queues more datagrams than several batches
// hold before Serve starts (over loopback, a datagram is queued at the
// receiver before the sending call returns), so that no readiness event
// comes after Serve's first read: Serve must read batch after batch while
// they come back full, not wait for readability in between, which would
// never come.
func TestServeDrainsFullBatches(t *testing.T) {
	for _, tc := range []struct {
		name  string
		batch int
		n     int
	}{
		{"exact multiple", 4, 40},
		{"partial last", 4, 41},
		{"single", 1, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := openPair(t, addrA, addrB, Config{BatchSize: tc.batch})
			s := acquire(t, a, MinSourcePort+6)
			for i := range tc.n {
				if err := s.Send(b.LocalAddr(), buildTestPacket(t, wire.RCSendOnly, 1, 4, uint32(i))); err != nil {
					t.Fatal(err)
				}
			}
			h := &batchCounter{}
			serve(t, b, h)
			// The batch of the last datagram ends after its HandlePacket:
			// wait for that EndBatch, not only for the datagram.
			testkit.WaitFor(t, "the batch of the last datagram to end", func() bool { return h.endedAfter.Load() == int64(tc.n) })
			if got, min := h.batches.Load(), int64((tc.n+tc.batch-1)/tc.batch); got < min {
				t.Errorf("%d batches for %d datagrams of batch size %d, want at least %d", got, tc.n, tc.batch, min)
			}
		})
	}
}

// TestCloseFromHandler closes the Conn from inside a Handler, which runs
// within the receive socket's read: Close must not wait for that read, the
// Conn's ReplySender must refuse to send from then on, Serve must return
// nil, and the port must be free once it has.
func TestCloseFromHandler(t *testing.T) {
	a, b := openPair(t, addrA, addrB, Config{})
	reply := b.ReplySender()
	closed := make(chan error, 1)
	sendErr := make(chan error, 1)
	h := HandlerFunc(func(p *wire.Packet, from netip.AddrPort, _ *RecvInfo) {
		closed <- b.Close()
		sendErr <- reply.Send(from, buildTestPacket(t, wire.RCAcknowledge, 1, 0, 0))
	})
	done := make(chan error, 1)
	go func() { done <- b.Serve(context.Background(), h) }()
	s := acquire(t, a, MinSourcePort+7)
	if err := s.Send(b.LocalAddr(), buildTestPacket(t, wire.RCSendOnly, 1, 4, 0)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve returned %v after Close, want nil", err)
		}
	case <-time.After(testkit.Timeout):
		t.Fatal("Serve still running after Close from its Handler")
	}
	if err := <-closed; err != nil {
		t.Errorf("Close from Handler = %v", err)
	}
	if err := <-sendErr; !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReplySender.Send after Close = %v, want net.ErrClosed", err)
	}
	uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(b.LocalAddr()))
	if err != nil {
		t.Fatalf("port still bound after Serve returned: %v", err)
	}
	uc.Close()
}

// runCounter records the longest run of packets delivered between two
// EndBatch calls; it sends the figures on done at the first EndBatch after
// the last packet.
type runCounter struct {
	packets, run, longest, ends int
	want                        int
	done                        chan runFigures
}

type runFigures struct{ longest, ends int }

func (h *runCounter) HandlePacket(*wire.Packet, netip.AddrPort, *RecvInfo) {
	h.packets++
	h.run++
	h.longest = max(h.longest, h.run)
}

func (h *runCounter) EndBatch() {
	h.ends++
	h.run = 0
	if h.packets == h.want {
		h.want = -1
		h.done <- runFigures{h.longest, h.ends}
	}
}

// TestEndBatchEvery queues one batch's worth of datagrams before Serve
// starts, so that its first read returns all of them: EndBatch must still
// run after every EndBatchEvery packets, not only after the last one
// (which would hold the acknowledgements of the first packets back until
// the whole batch was handled), and a negative EndBatchEvery must leave
// the batch whole.
func TestEndBatchEvery(t *testing.T) {
	if !batchedReceive {
		t.Skip("the portable receive path reads one datagram per batch")
	}
	const n = 48
	for _, tc := range []struct {
		every, maxRun, minEnds int
	}{
		{every: 10, maxRun: 10, minEnds: n / 10},
		{every: 1, maxRun: 1, minEnds: n},
		{every: -1, maxRun: n, minEnds: 1},
	} {
		a, b := openPair(t, addrA, addrB, Config{BatchSize: 64, EndBatchEvery: tc.every})
		s := acquire(t, a, MinSourcePort+8)
		for i := range n {
			if err := s.Send(b.LocalAddr(), buildTestPacket(t, wire.RCSendOnly, 1, 4, uint32(i))); err != nil {
				t.Fatal(err)
			}
		}
		h := &runCounter{done: make(chan runFigures, 1), want: n}
		serve(t, b, h)
		var got runFigures
		select {
		case got = <-h.done:
		case <-time.After(testkit.Timeout):
			t.Fatalf("every %d: not all %d packets delivered", tc.every, n)
		}
		if got.longest > tc.maxRun || got.ends < tc.minEnds {
			t.Errorf("EndBatchEvery %d: longest run %d (want <= %d), %d EndBatch calls (want >= %d)",
				tc.every, got.longest, tc.maxRun, got.ends, tc.minEnds)
		}
		if tc.every < 0 && got.longest != n {
			t.Errorf("EndBatchEvery %d: longest run %d, want the whole batch of %d", tc.every, got.longest, n)
		}
	}
}

// pollRecorder counts packets by PSN, and those delivered from within a
// call to Poll (seen in the call stack).
type pollRecorder struct {
	mu     sync.Mutex
	seen   map[uint32]int
	byPoll int
	ends   int
}

func (h *pollRecorder) HandlePacket(p *wire.Packet, _ netip.AddrPort, _ *RecvInfo) {
	var stack [8192]byte
	inPoll := bytes.Contains(stack[:runtime.Stack(stack[:], false)], []byte("netio.(*Conn).Poll("))
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen[uint32(p.BTH.PSN())]++
	if inPoll {
		h.byPoll++
	}
}

func (h *pollRecorder) EndBatch() {
	h.mu.Lock()
	h.ends++
	h.mu.Unlock()
}

// TestPollDeliversOnCaller sends packets to a Conn whose Serve runs and
// calls Poll right after each send, racing Serve's wake-up: every packet
// must be delivered exactly once, by one or the other, and Poll must
// deliver some of them itself, ending its batches. With one processor,
// Serve's goroutine cannot run between a send and the Poll after it
// unless the scheduler preempts the test, so Poll gets most of them.
// Without Serve and after Close, Poll delivers nothing.
func TestPollDeliversOnCaller(t *testing.T) {
	if !batchedReceive {
		t.Skip("the portable receive path has no Poll")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	a, b := openPair(t, addrA, addrB, Config{})
	if n, busy := b.Poll(); n != 0 || busy {
		t.Fatalf("Poll without Serve = %d, %v; want 0, false", n, busy)
	}
	h := &pollRecorder{seen: make(map[uint32]int)}
	serve(t, b, h)
	testkit.WaitFor(t, "Serve to start", func() bool {
		b.rxMu.Lock()
		defer b.rxMu.Unlock()
		return b.serveRx != nil
	})
	s := acquire(t, a, MinSourcePort+9)
	const n = 2000
	polled := 0
	for i := range n {
		if err := s.Send(b.LocalAddr(), buildTestPacket(t, wire.RCSendOnly, 1, 4, uint32(i))); err != nil {
			t.Fatal(err)
		}
		got, _ := b.Poll()
		polled += got
	}
	testkit.WaitFor(t, "every packet", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.seen) == n
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	for psn, k := range h.seen {
		if k != 1 {
			t.Errorf("PSN %d delivered %d times", psn, k)
		}
	}
	if polled == 0 || h.byPoll != polled {
		t.Errorf("Poll reported %d packets, the handler saw %d delivered within Poll; want the same, more than 0", polled, h.byPoll)
	}
	if h.ends == 0 {
		t.Error("no EndBatch")
	}
	// Each Poll added its batch's counts before returning.
	if p := b.Counters().Polled.Load(); p != uint64(polled) {
		t.Errorf("Polled = %d, Poll returned %d packets", p, polled)
	}
	t.Logf("%d of %d packets delivered by Poll", polled, n)
	b.Close()
	if n, busy := b.Poll(); n != 0 || busy {
		t.Errorf("Poll after Close = %d, %v; want 0, false", n, busy)
	}
}
