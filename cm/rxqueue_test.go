package cm

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

// TestRxQueueBurst: a burst of rxQueueMax MADs, more than the agent takes
// under one hold of the lock, waits whole and comes out in order; the next
// is dropped; a drained queue gives its memory back and keeps working.
func TestRxQueueBurst(t *testing.T) {
	q := newRxQueue()
	from := netip.MustParseAddrPort("127.0.0.1:4791")
	var b [8]byte
	push := func(i int) bool {
		b[0], b[1] = byte(i>>8), byte(i)
		return q.push(from, b[:])
	}
	// Interleave: a few in, one out, so the front is reused.
	taken := 0
	var m rxMAD
	pushed := 0
	for ; pushed < rxQueueMax; pushed++ {
		if !push(pushed) {
			t.Fatalf("push %d refused with %d waiting", pushed, q.len())
		}
		if pushed%4 == 3 {
			if !q.pop(&m) || int(m.mad[0])<<8|int(m.mad[1]) != taken&0xffff {
				t.Fatalf("pop %d: got %d", taken, int(m.mad[0])<<8|int(m.mad[1]))
			}
			taken++
		}
	}
	for push(pushed) {
		pushed++
	}
	if q.len() != rxQueueMax {
		t.Fatalf("refused at %d waiting, want %d", q.len(), rxQueueMax)
	}
	for q.pop(&m) {
		if got := int(m.mad[0])<<8 | int(m.mad[1]); got != taken&0xffff {
			t.Fatalf("pop %d: got %d", taken, got)
		}
		taken++
	}
	if taken != pushed {
		t.Fatalf("took %d of %d", taken, pushed)
	}
	if cap(q.items) != rxQueueIdle {
		t.Fatalf("a drained queue keeps %d slots", cap(q.items))
	}
	if !push(7) || !q.pop(&m) || m.mad[1] != 7 || m.from != from {
		t.Fatalf("after draining: %v", m.from)
	}
}

// TestRxQueueDoesNotAllocateWhenWarm: pushing and popping within the
// queue's idle capacity allocates nothing.
func TestRxQueueDoesNotAllocateWhenWarm(t *testing.T) {
	q := newRxQueue()
	from := netip.MustParseAddrPort("127.0.0.1:4791")
	b := make([]byte, 256)
	var m rxMAD
	if n := testing.AllocsPerRun(1000, func() {
		for range rxQueueIdle / 2 {
			q.push(from, b)
		}
		for q.pop(&m) {
		}
	}); n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
}

// TestAgentTakesABurstWhileBusy: MADs that arrive while the agent cannot
// run (here: the CM's lock is held, as an application's call holds it)
// wait, up to rxQueueMax of them, and are all handled once it runs again;
// the 256 of the old fixed queue would have dropped most.
func TestAgentTakesABurstWhileBusy(t *testing.T) {
	checkLeaks(t)
	b := newHost(t, 2)
	l, err := Listen(b.at(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ab := agentOf(t, b.dev)
	from := netip.AddrPortFrom(testkit.Addr(9), 4791)
	junk := make([]byte, 256) // a MAD of no class the CM knows: malformed
	before := func() uint64 { lock(); defer unlock(); return ab.mgr.Counters().Malformed }()
	lock()
	for range rxQueueMax - 1 { // the agent may hold one, taken before it waited for the lock
		ab.ReceiveMAD(from, b.dev.Addr(), junk)
	}
	unlock()
	testkit.WaitFor(t, "the burst handled", func() bool {
		lock()
		defer unlock()
		return ab.mgr.Counters().Malformed-before == rxQueueMax-1
	})
	if n := ab.rxDropped.Load(); n != 0 {
		t.Fatalf("%d MADs dropped", n)
	}
}
