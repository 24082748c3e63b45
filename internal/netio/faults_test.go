//go:build goroce_faults

package netio

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/wire"
)

// The fault tap's tests send numbered packets (the PSN is the index, the
// payload a pattern derived from it) from addrA to a Conn on addrB that
// injects faults, and check what the Handler received against the tap's
// counters.

// psnLog is a Handler that records the PSN of every packet it gets and
// checks that the payload is intact.
type psnLog struct {
	mu      sync.Mutex
	psns    []uint32
	damaged int
}

func (l *psnLog) HandlePacket(p *wire.Packet, _ netip.AddrPort, _ *RecvInfo) {
	n := uint32(p.BTH.PSN())
	ok := true
	for i, b := range p.Payload {
		if b != byte(int(n)+i) {
			ok = false
		}
	}
	l.mu.Lock()
	l.psns = append(l.psns, n)
	if !ok {
		l.damaged++
	}
	l.mu.Unlock()
}

func (l *psnLog) snapshot() ([]uint32, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.psns), l.damaged
}

// settled reports whether every datagram sent so far has been read and
// accounted for: handed over, or dropped by the tap or by the checks.
// RxPackets is read first: the receive loop adds it last (see Counters),
// so the other counts of the datagrams it includes are in. The fault
// counters are read after the others, which they never trail.
func settled(c *Conn, sent uint64) bool {
	ctr := c.Counters()
	rx := ctr.RxPackets.Load()
	done := ctr.Delivered.Load() + ctr.ICRCErrors.Load() + ctr.Malformed.Load()
	want := sent - ctr.FaultDropped.Load() + ctr.FaultDuplicated.Load()
	return rx == sent && done == want
}

// faultCounts is a snapshot of the tap's counters.
type faultCounts struct{ dropped, duplicated, corrupted, delayed uint64 }

func faultCountsOf(c *Conn) faultCounts {
	ctr := c.Counters()
	return faultCounts{ctr.FaultDropped.Load(), ctr.FaultDuplicated.Load(), ctr.FaultCorrupted.Load(), ctr.FaultDelayed.Load()}
}

// runFaults sends n packets of 16 payload bytes through a Conn with faults
// f, in bursts of 32, each sent once the previous one is accounted for (so
// that neither the socket buffer nor the tap's pool overflows), and returns
// the receiving Conn and the log.
func runFaults(t *testing.T, f Faults, n int) (*Conn, *psnLog) {
	t.Helper()
	a, b := openPair(t, addrA, addrB, Config{Faults: &f})
	var log psnLog
	serve(t, b, &log)
	s := acquire(t, a, MinSourcePort+9)
	pkts := make([][]byte, n)
	for i := range pkts {
		pkts[i] = buildTestPacket(t, wire.RCSendOnly, 1, 16, uint32(i))
	}
	const burst = 32
	for i := 0; i < n; i += burst {
		for _, p := range pkts[i:min(i+burst, n)] {
			if err := s.Send(b.LocalAddr(), p); err != nil {
				t.Fatal(err)
			}
		}
		sent := uint64(min(i+burst, n))
		testkit.WaitFor(t, "the burst to be accounted for", func() bool { return settled(b, sent) })
	}
	return b, &log
}

// near reports whether k occurrences in n trials fit probability p within
// six standard deviations (plus one, for tiny p).
func near(k uint64, n int, p float64) bool {
	mean := float64(n) * p
	return math.Abs(float64(k)-mean) <= 6*math.Sqrt(mean*(1-p))+1
}

// inversions counts the pairs of neighbours out of order.
func inversions(psns []uint32) int {
	k := 0
	for i := 1; i < len(psns); i++ {
		if psns[i] < psns[i-1] {
			k++
		}
	}
	return k
}

func TestFaultTap(t *testing.T) {
	const n = 1000
	tests := []struct {
		name  string
		f     Faults
		check func(t *testing.T, c *Conn, fc faultCounts, psns []uint32)
	}{
		{"none", Faults{Seed: 1}, func(t *testing.T, c *Conn, fc faultCounts, psns []uint32) {
			if fc != (faultCounts{}) {
				t.Errorf("faults applied: %+v", fc)
			}
			if len(psns) != n || inversions(psns) != 0 {
				t.Errorf("got %d packets with %d inversions, want %d in order", len(psns), inversions(psns), n)
			}
		}},
		{"drop", Faults{Seed: 2, Drop: 0.1}, func(t *testing.T, c *Conn, fc faultCounts, psns []uint32) {
			if !near(fc.dropped, n, 0.1) {
				t.Errorf("dropped %d of %d at 10%%", fc.dropped, n)
			}
			if uint64(len(psns)) != n-fc.dropped || inversions(psns) != 0 || hasDuplicates(psns) {
				t.Errorf("got %d packets (%d inversions), want %d distinct in order", len(psns), inversions(psns), n-fc.dropped)
			}
		}},
		{"duplicate", Faults{Seed: 3, Duplicate: 0.2}, func(t *testing.T, c *Conn, fc faultCounts, psns []uint32) {
			if !near(fc.duplicated, n, 0.2) {
				t.Errorf("duplicated %d of %d at 20%%", fc.duplicated, n)
			}
			if uint64(len(psns)) != n+fc.duplicated || !slices.IsSorted(psns) {
				t.Errorf("got %d packets, want %d, each copy right after its original", len(psns), n+fc.duplicated)
			}
			if d := len(psns) - len(slices.Compact(slices.Clone(psns))); uint64(d) != fc.duplicated {
				t.Errorf("%d packets delivered twice, counted %d", d, fc.duplicated)
			}
		}},
		{"corrupt", Faults{Seed: 4, Corrupt: 0.1}, func(t *testing.T, c *Conn, fc faultCounts, psns []uint32) {
			if !near(fc.corrupted, n, 0.1) || fc.corrupted == 0 {
				t.Errorf("corrupted %d of %d at 10%%", fc.corrupted, n)
			}
			ctr := c.Counters()
			if caught := ctr.ICRCErrors.Load() + ctr.Malformed.Load(); caught != fc.corrupted {
				t.Errorf("ICRCErrors+Malformed = %d, want the %d corrupted packets", caught, fc.corrupted)
			}
			if ctr.ICRCErrors.Load() == 0 {
				t.Error("no corrupted packet was caught by the ICRC")
			}
			if uint64(len(psns)) != n-fc.corrupted {
				t.Errorf("got %d packets, want %d", len(psns), n-fc.corrupted)
			}
		}},
		{"reorder", Faults{Seed: 5, Reorder: 0.2}, func(t *testing.T, c *Conn, fc faultCounts, psns []uint32) {
			if !near(fc.delayed, n, 0.2) {
				t.Errorf("held back %d of %d at 20%%", fc.delayed, n)
			}
			if len(psns) != n || hasDuplicates(psns) {
				t.Errorf("got %d packets, want %d distinct", len(psns), n)
			}
			if inversions(psns) == 0 {
				t.Error("nothing was reordered")
			}
		}},
		{"delay", Faults{Seed: 6, Delay: 100 * time.Microsecond, Jitter: 400 * time.Microsecond}, func(t *testing.T, c *Conn, fc faultCounts, psns []uint32) {
			if fc.delayed != n {
				t.Errorf("delayed %d of %d", fc.delayed, n)
			}
			if len(psns) != n || hasDuplicates(psns) || inversions(psns) == 0 {
				t.Errorf("got %d packets with %d inversions, want %d distinct, jitter reordering some", len(psns), inversions(psns), n)
			}
		}},
		{"all", Faults{Seed: 7, Drop: 0.05, Duplicate: 0.05, Corrupt: 0.05, Reorder: 0.05, Jitter: 50 * time.Microsecond}, func(t *testing.T, c *Conn, fc faultCounts, psns []uint32) {
			ctr := c.Counters()
			if caught := ctr.ICRCErrors.Load() + ctr.Malformed.Load(); caught != fc.corrupted || fc.corrupted == 0 {
				t.Errorf("ICRCErrors+Malformed = %d, corrupted %d", caught, fc.corrupted)
			}
			if want := n - fc.dropped + fc.duplicated - fc.corrupted; uint64(len(psns)) != want {
				t.Errorf("got %d packets, want %d", len(psns), want)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, log := runFaults(t, tt.f, n)
			psns, damaged := log.snapshot()
			if damaged != 0 {
				t.Errorf("%d packets were handed over with a damaged payload", damaged)
			}
			tt.check(t, c, faultCountsOf(c), psns)
		})
	}
}

func hasDuplicates(psns []uint32) bool {
	s := slices.Clone(psns)
	slices.Sort(s)
	return len(slices.Compact(s)) != len(psns)
}

// TestFaultTapDeterministic checks that a seed fixes the faults: two runs
// over the same packets apply the same number of each.
func TestFaultTapDeterministic(t *testing.T) {
	f := Faults{Seed: 42, Drop: 0.1, Duplicate: 0.1, Corrupt: 0.1, Reorder: 0.1, Jitter: 20 * time.Microsecond}
	var runs [2]faultCounts
	for i := range runs {
		t.Run("", func(t *testing.T) {
			c, _ := runFaults(t, f, 300)
			runs[i] = faultCountsOf(c)
		})
	}
	if runs[0] != runs[1] {
		t.Errorf("same seed, different faults: %+v and %+v", runs[0], runs[1])
	}
	f.Seed++
	if c, _ := runFaults(t, f, 300); faultCountsOf(c) == runs[0] {
		t.Errorf("another seed applied the same faults %+v", runs[0])
	}
}

func TestFaultsValidate(t *testing.T) {
	tests := []struct {
		name string
		f    Faults
	}{
		{"negative drop", Faults{Drop: -0.1}},
		{"duplicate above 1", Faults{Duplicate: 1.5}},
		{"NaN corrupt", Faults{Corrupt: math.NaN()}},
		{"reorder above 1", Faults{Reorder: 2}},
		{"negative delay", Faults{Delay: -time.Millisecond}},
		{"long jitter", Faults{Jitter: MaxFaultDelay + 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c, err := Open(Config{Addr: addrA, Port: 24799, Faults: &tt.f}); err == nil {
				c.Close()
				t.Errorf("Open accepted Faults %+v", tt.f)
			}
		})
	}
	if !FaultInjectionBuilt {
		t.Error("FaultInjectionBuilt is false under the goroce_faults tag")
	}
}

// TestFaultTapServeContext checks that Serve still returns for its context
// while the tap holds datagrams (its read deadline must not mask the
// cancellation), and that a later Serve delivers them.
func TestFaultTapServeContext(t *testing.T) {
	a, b := openPair(t, addrA, addrB, Config{Faults: &Faults{Delay: 20 * time.Millisecond}})
	got := make(collector, 4)
	s := acquire(t, a, MinSourcePort+10)
	pkt := buildTestPacket(t, wire.RCSendOnly, 1, 4, 7)
	for round := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.Serve(ctx, got) }()
		if round == 0 {
			if err := s.Send(b.LocalAddr(), pkt); err != nil {
				t.Fatal(err)
			}
			testkit.WaitFor(t, "the packet to be held", func() bool { return b.Counters().FaultDelayed.Load() == 1 })
			if n := b.Counters().FaultReleased.Load(); n != 0 {
				t.Errorf("FaultReleased %d while the packet is held, want 0", n)
			}
		} else {
			r := got.next(t)
			if !bytes.Equal(r.raw[:len(pkt)], pkt) {
				t.Errorf("held packet delivered as %x, want %x", r.raw, pkt)
			}
			// Counted once the handler returned, which got.next
			// does not wait for.
			testkit.WaitFor(t, "the release to be counted", func() bool { return b.Counters().FaultReleased.Load() == 1 })
		}
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Serve returned %v, want context.Canceled", err)
			}
		case <-time.After(testkit.Timeout):
			t.Fatal("Serve still running after cancel")
		}
	}
}

// TestFaultTapNoAlloc checks that the tap does not allocate per packet in
// steady state: dropping, duplicating, corrupting, holding and releasing
// use buffers allocated by Open.
func TestFaultTapNoAlloc(t *testing.T) {
	f := Faults{Seed: 9, Drop: 0.2, Duplicate: 0.2, Corrupt: 0.2, Reorder: 0.2, Jitter: 20 * time.Microsecond}
	a, b := openPair(t, addrA, addrB, Config{Faults: &f})
	var count countingHandler
	serve(t, b, &count)
	s := acquire(t, a, MinSourcePort+11)
	pkt := buildTestPacket(t, wire.RCRDMAWriteMiddle, 1, 1024, 0)
	dst := b.LocalAddr()
	var sent uint64
	if allocs := testing.AllocsPerRun(300, func() {
		if err := s.Send(dst, pkt); err != nil {
			t.Fatal(err)
		}
		sent++
		for !settled(b, sent) {
			// Sleep rather than yield: AllocsPerRun runs on one P,
			// where a yielding loop would leave the network poller
			// to sysmon.
			time.Sleep(10 * time.Microsecond)
		}
	}); allocs != 0 {
		t.Errorf("receiving through the fault tap allocates %v times per packet", allocs)
	}
	if fc := faultCountsOf(b); fc.dropped == 0 || fc.duplicated == 0 || fc.corrupted == 0 || fc.delayed == 0 {
		t.Errorf("not every fault was exercised: %+v", fc)
	}
}

// TestFaultTapSeesSegments sends packets as GSO super-packets to a Conn that
// receives them coalesced (UDP_GRO) and checks that the tap applies its
// faults per packet, not per datagram: with Drop 0.5 about half of the
// packets are dropped, scattered within the datagrams.
func TestFaultTapSeesSegments(t *testing.T) {
	a, b := openPair(t, addrA, addrB, Config{Faults: &Faults{Seed: 7, Drop: 0.5}})
	if !a.gso || !b.gro {
		t.Skip("the kernel lacks UDP_SEGMENT or UDP_GRO")
	}
	var log psnLog
	serve(t, b, &log)
	s := acquire(t, a, MinSourcePort+10)
	const n, run = 640, 32
	for i := 0; i < n; i += run {
		msgs := make([]Message, run)
		for k := range msgs {
			msgs[k] = Message{Dst: b.LocalAddr(), Packet: buildTestPacket(t, wire.RCSendOnly, 1, 16, uint32(i+k))}
		}
		if sent, err := s.SendBatch(msgs); sent != run || err != nil {
			t.Fatalf("SendBatch = %d, %v", sent, err)
		}
		testkit.WaitFor(t, "the run to be accounted for", func() bool { return settled(b, uint64(i+run)) })
	}
	psns, damaged := log.snapshot()
	ctr := b.Counters()
	if ctr.RxGRO.Load() == 0 || a.Counters().TxGSO.Load() == 0 {
		t.Fatalf("no offload: %d GSO sends, %d GRO receives", a.Counters().TxGSO.Load(), ctr.RxGRO.Load())
	}
	dropped := ctr.FaultDropped.Load()
	if !near(dropped, n, 0.5) || uint64(len(psns))+dropped != n || damaged != 0 {
		t.Errorf("%d of %d packets dropped, %d delivered, %d damaged", dropped, n, len(psns), damaged)
	}
	if !slices.IsSorted(psns) {
		t.Errorf("packets reordered: %v", psns)
	}
	// A tap that saw whole datagrams would drop whole runs.
	var perRun [n / run]int
	for _, p := range psns {
		perRun[p/run]++
	}
	partial := 0
	for _, k := range perRun {
		if k > 0 && k < run {
			partial++
		}
	}
	if partial == 0 {
		t.Errorf("every run delivered whole or not at all: %v", perRun)
	}
}

// TestFaultTapMarksCE: MarkCE marks ECN-capable packets CE, with its
// probability, and leaves Not-ECT packets alone, as a queue does.
func TestFaultTapMarksCE(t *testing.T) {
	if !batchedReceive {
		t.Skip("the portable path does not read the ECN field")
	}
	for _, ect := range []bool{true, false} {
		const n = 200
		a, b := openPair(t, addrA, addrB, Config{ECT: ect, Faults: &Faults{Seed: 3, MarkCE: 0.5}})
		got := make(collector, n)
		serve(t, b, got)
		s := acquire(t, a, MinSourcePort+11)
		ce := 0
		for i := range n {
			if err := s.Send(b.LocalAddr(), buildTestPacket(t, wire.RCSendOnly, 1, 16, uint32(i))); err != nil {
				t.Fatal(err)
			}
			switch r := got.next(t); {
			case r.info.ECN == ECNCE:
				ce++
			case ect && r.info.ECN != ECNECT0, !ect && r.info.ECN != ECNNotECT:
				t.Fatalf("ECN %v (ECT %v)", r.info.ECN, ect)
			}
		}
		marked := b.Counters().FaultMarkedCE.Load()
		if uint64(ce) != marked {
			t.Errorf("ECT %v: %d CE delivered, %d counted", ect, ce, marked)
		}
		if ect && !near(marked, n, 0.5) || !ect && marked != 0 {
			t.Errorf("ECT %v: %d of %d marked CE at probability 0.5", ect, marked, n)
		}
	}
}
