package netio

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/wire"
)

// batchCounter counts packets and batches and signals each batch end.
type batchCounter struct {
	packets, batches atomic.Int64
	ended            chan struct{}
}

func (h *batchCounter) HandlePacket(*wire.Packet, netip.AddrPort, RecvInfo) { h.packets.Add(1) }

func (h *batchCounter) EndBatch() {
	h.batches.Add(1)
	select {
	case h.ended <- struct{}{}:
	default:
	}
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
			h := &batchCounter{ended: make(chan struct{}, 1)}
			serve(t, b, h)
			waitFor(t, "every datagram", func() bool { return h.packets.Load() == int64(tc.n) })
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
	h := HandlerFunc(func(p *wire.Packet, from netip.AddrPort, _ RecvInfo) {
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
	case <-time.After(waitTimeout):
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

func (h *runCounter) HandlePacket(*wire.Packet, netip.AddrPort, RecvInfo) {
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
		case <-time.After(waitTimeout):
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
