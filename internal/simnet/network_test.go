package simnet

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

var (
	addrA = netip.MustParseAddrPort("127.0.0.1:4791")
	addrB = netip.MustParseAddrPort("127.0.0.2:4791")
	addrC = netip.MustParseAddrPort("[::1]:4791")
)

// delivery is one datagram as a receive function saw it.
type delivery struct {
	at       time.Duration // since epoch
	from, to netip.AddrPort
	data     string
}

func (d delivery) String() string {
	return fmt.Sprintf("%v %v->%v %x", d.at, d.from, d.to, d.data)
}

// collect returns a receive function that appends to *log.
func collect(n *Network, log *[]delivery) func(from, to netip.AddrPort, b []byte) {
	return func(from, to netip.AddrPort, b []byte) {
		*log = append(*log, delivery{n.clock.now, from, to, string(b)})
	}
}

// drain delivers everything in flight, jumping from arrival to arrival.
func drain(n *Network, fn func(from, to netip.AddrPort, b []byte)) {
	for {
		next, ok := n.NextEvent()
		if !ok {
			return
		}
		n.Deliver(next, fn)
	}
}

// seqDatagram returns a datagram of size bytes (at least 8) starting with
// the big-endian number i.
func seqDatagram(i uint64, size int) []byte {
	b := make([]byte, max(size, 8))
	binary.BigEndian.PutUint64(b, i)
	for j := 8; j < len(b); j++ {
		b[j] = byte(i*31 + uint64(j))
	}
	return b
}

func seqOf(s string) uint64 { return binary.BigEndian.Uint64([]byte(s)) }

// checkConservation checks that every datagram and copy is accounted for.
func checkConservation(t *testing.T, s Stats) {
	t.Helper()
	in := s.Sent + s.Duplicated
	out := s.Delivered + s.Lost + s.DroppedMTU + s.DroppedPartition + s.DroppedQueue + s.InFlight
	if in != out {
		t.Fatalf("stats do not balance: sent %d + duplicated %d != %d in %+v", s.Sent, s.Duplicated, out, s)
	}
}

// everything is a link that uses every impairment.
var everything = LinkConfig{
	Delay:        100 * time.Microsecond,
	Jitter:       50 * time.Microsecond,
	Loss:         0.1,
	Duplicate:    0.05,
	Corrupt:      0.05,
	Reorder:      0.05,
	ReorderDelay: 300 * time.Microsecond,
	MTU:          1200,
	Bandwidth:    100e6,
	QueueLimit:   64,
	MarkMin:      100,
	MarkMax:      600,
	MarkProb:     0.5,
}

// scenario sends a fixed mix of traffic between three addresses under
// everything, with a partition in the middle, and returns every tap event
// and every delivery as text.
func scenario(seed int64) []string {
	n := New(seed)
	n.SetDefaultLink(everything)
	n.SetLink(addrB, addrC, LinkConfig{Delay: time.Millisecond, Loss: 0.5})
	n.SetLink(addrC, addrA, LinkConfig{Delay: time.Millisecond, Jitter: time.Microsecond, QueueLimit: 4})
	var log []string
	n.SetTap(func(at time.Time, from, to netip.AddrPort, b []byte, fate Fate) {
		log = append(log, fmt.Sprintf("tap %v %v->%v %v %x", at.Sub(Epoch()), from, to, fate, b))
	})
	recv := func(from, to netip.AddrPort, b []byte) {
		log = append(log, fmt.Sprintf("recv %v %v->%v %x", n.clock.now, from, to, b))
	}
	addrs := []netip.AddrPort{addrA, addrB, addrC}
	for i := range 3000 {
		from, to := addrs[i%3], addrs[(i/3+1+i)%3]
		if from == to {
			to = addrs[(i+1)%3]
		}
		n.Send(from, to, seqDatagram(uint64(i), 8+(i*37)%1300))
		if i == 1000 {
			n.Partition(addrA, addrB)
		}
		if i == 1500 {
			n.Heal(addrA, addrB)
		}
		n.Deliver(n.clock.Now().Add(time.Duration(i%7)*time.Microsecond), recv)
	}
	drain(n, recv)
	log = append(log, fmt.Sprintf("stats %+v", n.Stats()))
	return log
}

func TestDeterminism(t *testing.T) {
	first := scenario(42)
	second := scenario(42)
	if !reflect.DeepEqual(first, second) {
		for i := range min(len(first), len(second)) {
			if first[i] != second[i] {
				t.Fatalf("same seed, runs differ at line %d:\n%s\n%s", i, first[i], second[i])
			}
		}
		t.Fatalf("same seed, runs differ in length: %d and %d lines", len(first), len(second))
	}
	if other := scenario(43); reflect.DeepEqual(first, other) {
		t.Fatal("seeds 42 and 43 produced identical runs")
	}
	// The scenario must exercise what it claims to, or the comparison
	// proves little.
	var fates = map[string]bool{}
	for _, line := range first {
		if f, ok := strings.CutPrefix(line, "tap "); ok {
			for _, name := range strings.Split(strings.Fields(f)[2], "|") {
				fates[name] = true
			}
		}
	}
	for _, name := range fateNames {
		if !fates[name] {
			t.Errorf("scenario never produced fate %q", name)
		}
	}
}

// TestRates checks that each random impairment happens at close to its
// configured rate. The seed is fixed, so the test cannot flake; the bounds
// are wide (more than five standard deviations) so that it would pass for
// any honest generator.
func TestRates(t *testing.T) {
	const count = 20000
	tests := []struct {
		name    string
		cfg     LinkConfig
		counter func(Stats) uint64
		p       float64
	}{
		{"no loss", LinkConfig{}, func(s Stats) uint64 { return s.Lost }, 0},
		{"loss 1%", LinkConfig{Loss: 0.01}, func(s Stats) uint64 { return s.Lost }, 0.01},
		{"loss 10%", LinkConfig{Loss: 0.1}, func(s Stats) uint64 { return s.Lost }, 0.1},
		{"loss 30%", LinkConfig{Loss: 0.3}, func(s Stats) uint64 { return s.Lost }, 0.3},
		{"loss 50%", LinkConfig{Loss: 0.5}, func(s Stats) uint64 { return s.Lost }, 0.5},
		{"loss 100%", LinkConfig{Loss: 1}, func(s Stats) uint64 { return s.Lost }, 1},
		{"duplicate 20%", LinkConfig{Duplicate: 0.2}, func(s Stats) uint64 { return s.Duplicated }, 0.2},
		{"corrupt 5%", LinkConfig{Corrupt: 0.05}, func(s Stats) uint64 { return s.Corrupted }, 0.05},
		{"delivered at loss 25%", LinkConfig{Loss: 0.25}, func(s Stats) uint64 { return s.Delivered }, 0.75},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := New(7)
			n.SetDefaultLink(tt.cfg)
			b := make([]byte, 64)
			for range count {
				n.Send(addrA, addrB, b)
			}
			drain(n, func(netip.AddrPort, netip.AddrPort, []byte) {})
			s := n.Stats()
			checkConservation(t, s)
			got := float64(tt.counter(s)) / count
			bound := 5*math.Sqrt(tt.p*(1-tt.p)/count) + 1e-9
			if math.Abs(got-tt.p) > bound {
				t.Fatalf("rate %.4f, want %.4f ± %.4f", got, tt.p, bound)
			}
		})
	}
}

// TestOrderPreservedWithoutJitter checks FIFO delivery on links without
// jitter or reordering, whatever else they do, including bursts sent at the
// same instant.
func TestOrderPreservedWithoutJitter(t *testing.T) {
	tests := []struct {
		name string
		cfg  LinkConfig
	}{
		{"perfect", LinkConfig{}},
		{"delay", LinkConfig{Delay: time.Millisecond}},
		{"delay and bandwidth", LinkConfig{Delay: time.Millisecond, Bandwidth: 1e6}},
		{"loss", LinkConfig{Delay: time.Millisecond, Loss: 0.3}},
		{"duplicates", LinkConfig{Delay: time.Millisecond, Duplicate: 0.3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := New(3)
			n.SetDefaultLink(tt.cfg)
			var log []delivery
			for i := range 1000 {
				n.Send(addrA, addrB, seqDatagram(uint64(i), 100+i%500))
				if i%10 == 9 {
					n.Clock().Advance(time.Duration(i%3) * 100 * time.Microsecond)
				}
			}
			drain(n, collect(n, &log))
			if len(log) < 500 {
				t.Fatalf("only %d deliveries", len(log))
			}
			for i := 1; i < len(log); i++ {
				if seqOf(log[i].data) < seqOf(log[i-1].data) {
					t.Fatalf("delivery %d: datagram %d after %d", i, seqOf(log[i].data), seqOf(log[i-1].data))
				}
			}
		})
	}
}

// inversions counts pairs of consecutive deliveries out of send order.
func inversions(log []delivery) int {
	k := 0
	for i := 1; i < len(log); i++ {
		if seqOf(log[i].data) < seqOf(log[i-1].data) {
			k++
		}
	}
	return k
}

func TestReordering(t *testing.T) {
	tests := []struct {
		name string
		cfg  LinkConfig
	}{
		{"jitter", LinkConfig{Delay: time.Millisecond, Jitter: time.Millisecond}},
		{"reorder", LinkConfig{Delay: time.Millisecond, Reorder: 0.1, ReorderDelay: time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := New(5)
			n.SetDefaultLink(tt.cfg)
			var log []delivery
			const count = 1000
			// Timers send one datagram every 10µs while drain delivers,
			// so that the clock never runs past an arrival.
			for i := range count {
				n.Clock().AfterFunc(time.Duration(i)*10*time.Microsecond, func() {
					n.Send(addrA, addrB, seqDatagram(uint64(i), 8))
				})
			}
			drain(n, collect(n, &log))
			if len(log) != count {
				t.Fatalf("%d deliveries, want %d", len(log), count)
			}
			if k := inversions(log); k < count/50 {
				t.Fatalf("only %d reorderings in %d datagrams", k, count)
			}
			// Every datagram still arrives within its delay bounds.
			for _, d := range log {
				sent := time.Duration(seqOf(d.data)) * 10 * time.Microsecond
				lat := d.at - sent
				hi := tt.cfg.Delay + tt.cfg.Jitter + tt.cfg.ReorderDelay
				if lat < tt.cfg.Delay || lat > hi {
					t.Fatalf("datagram %d took %v, want within [%v, %v]", seqOf(d.data), lat, tt.cfg.Delay, hi)
				}
			}
		})
	}
}

func TestDuplicates(t *testing.T) {
	n := New(11)
	n.SetDefaultLink(LinkConfig{Delay: time.Millisecond, Jitter: time.Millisecond, Duplicate: 1})
	var dupFlags int
	n.SetTap(func(_ time.Time, _, _ netip.AddrPort, _ []byte, fate Fate) {
		if fate&FateDuplicate != 0 {
			dupFlags++
		}
	})
	var log []delivery
	const count = 200
	for i := range count {
		n.Send(addrA, addrB, seqDatagram(uint64(i), 40))
	}
	drain(n, collect(n, &log))

	times := map[uint64][]time.Duration{}
	for _, d := range log {
		times[seqOf(d.data)] = append(times[seqOf(d.data)], d.at)
	}
	differ := 0
	for i := range uint64(count) {
		ts := times[i]
		if len(ts) != 2 {
			t.Fatalf("datagram %d delivered %d times, want 2", i, len(ts))
		}
		if ts[0] != ts[1] {
			differ++
		}
	}
	if differ < count/2 {
		t.Fatalf("only %d of %d duplicates had their own delay", differ, count)
	}
	s := n.Stats()
	checkConservation(t, s)
	if s.Duplicated != count || s.Delivered != 2*count || dupFlags != count {
		t.Fatalf("duplicated %d, delivered %d, tapped duplicates %d; want %d, %d, %d",
			s.Duplicated, s.Delivered, dupFlags, count, 2*count, count)
	}
}

// TestCorruptionFlipsOneBit checks that a corrupted copy differs from what
// was sent in exactly one bit, that every bit position can be hit, and that
// the sender's bytes are untouched.
func TestCorruptionFlipsOneBit(t *testing.T) {
	n := New(13)
	n.SetDefaultLink(LinkConfig{Corrupt: 1})
	var sent [][]byte
	var got [][]byte
	recv := func(_, _ netip.AddrPort, b []byte) { got = append(got, bytes.Clone(b)) }
	var positions [8 * 3]int
	for i := range 2000 {
		size := i % 4 // zero-length datagrams cannot be corrupted
		b := bytes.Repeat([]byte{byte(i)}, size)
		orig := bytes.Clone(b)
		sent = append(sent, orig)
		n.Send(addrA, addrB, b)
		if !bytes.Equal(b, orig) {
			t.Fatal("Send modified the sender's buffer")
		}
		n.Deliver(n.Clock().Now(), recv)
	}
	if len(got) != len(sent) {
		t.Fatalf("%d deliveries, want %d", len(got), len(sent))
	}
	corrupted := 0
	for i := range sent {
		flipped := 0
		for j := range sent[i] {
			x := sent[i][j] ^ got[i][j]
			flipped += bits.OnesCount8(x)
			if x != 0 {
				positions[j*8+bits.TrailingZeros8(x)]++
			}
		}
		want := 1
		if len(sent[i]) == 0 {
			want = 0
		} else {
			corrupted++
		}
		if flipped != want {
			t.Fatalf("datagram %d: %d bits flipped, want %d (sent %x, got %x)", i, flipped, want, sent[i], got[i])
		}
	}
	for p, k := range positions {
		if k == 0 {
			t.Errorf("bit %d of a 3-byte datagram was never flipped", p)
		}
	}
	if s := n.Stats(); s.Corrupted != uint64(corrupted) {
		t.Fatalf("Stats.Corrupted = %d, want %d", s.Corrupted, corrupted)
	}
}

// TestSenderBufferReuse checks that the network copies datagrams: the sender
// overwrites its buffer right after Send.
func TestSenderBufferReuse(t *testing.T) {
	n := New(1)
	n.SetDefaultLink(LinkConfig{Delay: time.Millisecond, Duplicate: 0.5})
	buf := make([]byte, 16)
	for i := range 100 {
		binary.BigEndian.PutUint64(buf, uint64(i))
		n.Send(addrA, addrB, buf)
		clear(buf)
	}
	var log []delivery
	drain(n, collect(n, &log))
	seen := map[uint64]bool{}
	for _, d := range log {
		want := make([]byte, 16)
		binary.BigEndian.PutUint64(want, seqOf(d.data))
		if d.data != string(want) {
			t.Fatalf("delivered %x, want %x", d.data, want)
		}
		seen[seqOf(d.data)] = true
	}
	if len(seen) != 100 {
		t.Fatalf("%d distinct datagrams delivered, want 100", len(seen))
	}
}

func TestPartition(t *testing.T) {
	n := New(1)
	n.SetDefaultLink(LinkConfig{Delay: time.Millisecond})
	clk := n.Clock()
	var log []delivery
	recv := collect(n, &log)
	var tapped []Fate
	n.SetTap(func(_ time.Time, _, _ netip.AddrPort, _ []byte, f Fate) { tapped = append(tapped, f) })

	n.Send(addrA, addrB, []byte("in flight"))
	clk.Advance(500 * time.Microsecond)
	n.Partition(addrA, addrB)
	if !n.Partitioned(addrB, addrA) {
		t.Fatal("Partitioned(b, a) = false after Partition(a, b)")
	}
	n.Send(addrA, addrB, []byte("a to b"))
	n.Send(addrB, addrA, []byte("b to a"))
	n.Send(addrA, addrC, []byte("a to c"))
	n.Send(addrC, addrB, []byte("c to b"))
	drain(n, recv)
	want := []delivery{
		{1500 * time.Microsecond, addrA, addrC, "a to c"},
		{1500 * time.Microsecond, addrC, addrB, "c to b"},
	}
	if !reflect.DeepEqual(log, want) {
		t.Fatalf("during partition delivered %v, want %v", log, want)
	}
	if got := n.LinkStats(addrA, addrB).DroppedPartition; got != 2 {
		t.Fatalf("a->b dropped by partition: %d, want 2 (one in flight, one sent)", got)
	}
	if got := n.LinkStats(addrB, addrA).DroppedPartition; got != 1 {
		t.Fatalf("b->a dropped by partition: %d, want 1", got)
	}
	wantFates := []Fate{FateDroppedPartition, FateDroppedPartition, FateDroppedPartition, FateDelivered, FateDelivered}
	if !reflect.DeepEqual(tapped, wantFates) {
		t.Fatalf("tap saw %v, want %v", tapped, wantFates)
	}

	// A datagram sent before the partition that arrives after the heal
	// gets through.
	log = nil
	n.Heal(addrB, addrA)
	n.Send(addrA, addrB, []byte("healed"))
	n.Partition(addrA, addrB)
	clk.Advance(500 * time.Microsecond)
	n.Heal(addrA, addrB)
	n.Send(addrB, addrA, []byte("back"))
	drain(n, recv)
	if len(log) != 2 || log[0].data != "healed" || log[1].data != "back" {
		t.Fatalf("after heal delivered %v", log)
	}
	checkConservation(t, n.Stats())
}

func TestPartitionUntil(t *testing.T) {
	n := New(1)
	clk := n.Clock()
	var log []delivery
	recv := collect(n, &log)
	n.PartitionUntil(addrA, addrB, Epoch().Add(10*time.Millisecond))
	for i := range 20 {
		n.Send(addrA, addrB, seqDatagram(uint64(i), 8))
		n.Deliver(clk.Now(), recv)
		clk.Advance(time.Millisecond)
	}
	if len(log) != 10 || seqOf(log[0].data) != 10 || log[0].at != 10*time.Millisecond {
		t.Fatalf("delivered %v, want datagrams 10 to 19 from 10ms on", log)
	}
	if n.Partitioned(addrA, addrB) {
		t.Fatal("still partitioned after the deadline")
	}
	if got := n.Stats().DroppedPartition; got != 10 {
		t.Fatalf("dropped by partition: %d, want 10", got)
	}
}

func TestMTU(t *testing.T) {
	tests := []struct {
		mtu, size int
		dropped   bool
	}{
		{0, 65535, false},
		{1024, 0, false},
		{1024, 1023, false},
		{1024, 1024, false},
		{1024, 1025, true},
		{1024, 9000, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("mtu %d size %d", tt.mtu, tt.size), func(t *testing.T) {
			n := New(1)
			n.SetLink(addrA, addrB, LinkConfig{MTU: tt.mtu})
			var tapped Fate
			n.SetTap(func(_ time.Time, _, _ netip.AddrPort, _ []byte, f Fate) { tapped = f })
			delivered := 0
			n.Send(addrA, addrB, make([]byte, tt.size))
			n.Deliver(n.Clock().Now(), func(netip.AddrPort, netip.AddrPort, []byte) { delivered++ })
			s := n.Stats()
			if tt.dropped != (s.DroppedMTU == 1) || tt.dropped != (delivered == 0) {
				t.Fatalf("dropped by MTU %d, delivered %d; want dropped %v", s.DroppedMTU, delivered, tt.dropped)
			}
			if tt.dropped && tapped != FateDroppedMTU {
				t.Fatalf("tap saw %v, want %v", tapped, FateDroppedMTU)
			}
			// The reverse direction follows the default: no MTU.
			n.Send(addrB, addrA, make([]byte, tt.size))
			if n.LinkStats(addrB, addrA).DroppedMTU != 0 {
				t.Fatal("MTU of a->b applied to b->a")
			}
		})
	}
}

// TestTimeOrdering sends on links of different delays and checks that
// deliveries come in arrival order, each at its exact arrival time, that
// NextDelivery predicts them and that Deliver(now) delivers only what is due.
func TestTimeOrdering(t *testing.T) {
	n := New(1)
	n.SetLink(addrA, addrB, LinkConfig{Delay: 3 * time.Millisecond})
	n.SetLink(addrB, addrA, LinkConfig{Delay: time.Millisecond})
	n.SetLink(addrA, addrC, LinkConfig{Delay: 2 * time.Millisecond})
	n.Send(addrA, addrB, []byte("ab0"))  // arrives 3ms
	n.Send(addrB, addrA, []byte("ba0"))  // arrives 1ms
	n.Send(addrA, addrC, []byte("ac0"))  // arrives 2ms
	n.Send(addrB, addrA, []byte("ba0'")) // arrives 1ms, after ba0
	n.Clock().Advance(time.Millisecond)
	n.Send(addrB, addrA, []byte("ba1")) // arrives 2ms, after ac0

	var log []delivery
	recv := collect(n, &log)
	want := []delivery{
		{time.Millisecond, addrB, addrA, "ba0"},
		{time.Millisecond, addrB, addrA, "ba0'"},
		{2 * time.Millisecond, addrA, addrC, "ac0"},
		{2 * time.Millisecond, addrB, addrA, "ba1"},
		{3 * time.Millisecond, addrA, addrB, "ab0"},
	}
	if next, ok := n.NextDelivery(); !ok || next.Sub(Epoch()) != time.Millisecond {
		t.Fatalf("NextDelivery = %v, %v; want 1ms", next.Sub(Epoch()), ok)
	}
	if k := n.Deliver(Epoch().Add(2*time.Millisecond-1), recv); k != 2 || !reflect.DeepEqual(log, want[:2]) {
		t.Fatalf("Deliver(2ms-1ns) delivered %d: %v, want %v", k, log, want[:2])
	}
	if got := n.Clock().Since(Epoch()); got != 2*time.Millisecond-1 {
		t.Fatalf("clock at %v after Deliver(2ms-1ns)", got)
	}
	if next, ok := n.NextDelivery(); !ok || next.Sub(Epoch()) != 2*time.Millisecond {
		t.Fatalf("NextDelivery = %v, %v; want 2ms", next.Sub(Epoch()), ok)
	}
	drain(n, recv)
	if !reflect.DeepEqual(log, want) {
		t.Fatalf("delivered %v, want %v", log, want)
	}
	if _, ok := n.NextDelivery(); ok || n.InFlight() != 0 {
		t.Fatalf("NextDelivery ok = %v, InFlight = %d after draining", ok, n.InFlight())
	}
}

// TestDeliverInterleavesTimersAndReplies checks that Deliver advances the
// clock through the arrivals, fires the clock's timers in between (before
// arrivals at the same instant), stamps replies with the arrival time and
// delivers those due by now in the same call.
func TestDeliverInterleavesTimersAndReplies(t *testing.T) {
	n := New(1)
	n.SetDefaultLink(LinkConfig{Delay: time.Millisecond})
	n.SetLink(addrC, addrA, LinkConfig{}) // instantaneous
	clk := n.Clock()
	var events []string
	note := func(s string) { events = append(events, fmt.Sprintf("%v %s", clk.Since(Epoch()), s)) }
	n.Send(addrA, addrB, []byte("ping"))
	clk.AfterFunc(time.Millisecond, func() {
		note("timer")
		n.Send(addrC, addrA, []byte("from timer"))
	})
	n.Deliver(Epoch().Add(5*time.Millisecond), func(from, to netip.AddrPort, b []byte) {
		note(string(b))
		if string(b) == "ping" {
			n.Send(to, from, []byte("pong"))
		}
	})
	want := []string{"1ms timer", "1ms ping", "1ms from timer", "2ms pong"}
	if !reflect.DeepEqual(events, want) {
		t.Fatalf("events %q, want %q", events, want)
	}
	if got := clk.Since(Epoch()); got != 5*time.Millisecond {
		t.Fatalf("clock at %v after Deliver(5ms)", got)
	}
}

func TestBandwidth(t *testing.T) {
	n := New(1)
	n.SetDefaultLink(LinkConfig{Delay: 10 * time.Millisecond, Bandwidth: 1e6}) // 1 MB/s: 1 µs a byte
	for i := range 10 {
		n.Send(addrA, addrB, seqDatagram(uint64(i), 1000))
	}
	n.Send(addrB, addrA, seqDatagram(99, 1000)) // the other direction has its own transmitter
	var log []delivery
	drain(n, collect(n, &log))
	for i, d := range log {
		var want time.Duration
		if d.from == addrB {
			want = 10*time.Millisecond + time.Millisecond
		} else {
			want = 10*time.Millisecond + time.Duration(seqOf(d.data)+1)*time.Millisecond
		}
		if d.at != want {
			t.Fatalf("delivery %d (%v) at %v, want %v", i, d, d.at, want)
		}
	}
	if len(log) != 11 {
		t.Fatalf("%d deliveries, want 11", len(log))
	}
	// After the queue empties the link is free again: no leftover backlog.
	n.Send(addrA, addrB, seqDatagram(0, 1000))
	log = nil
	start := n.Clock().Since(Epoch())
	drain(n, collect(n, &log))
	if got := log[0].at - start; got != 11*time.Millisecond {
		t.Fatalf("idle link took %v, want 11ms", got)
	}
}

func TestTransmissionTime(t *testing.T) {
	tests := []struct {
		bandwidth int64
		size      int
		want      time.Duration
	}{
		{0, 1000, 0},
		{1e6, 0, 0},
		{1e6, 1000, time.Millisecond},
		{3, 1, 333333334}, // rounded up
		{125e6, 1500, 12 * time.Microsecond},
		{1e12, 1, 1}, // at least a nanosecond
		{math.MaxInt64, 1 << 40, 120},
		{1, math.MaxInt64, math.MaxInt64}, // saturates
	}
	for _, tt := range tests {
		if got := (LinkConfig{Bandwidth: tt.bandwidth}).transmissionTime(tt.size); got != tt.want {
			t.Errorf("%d bytes at %d B/s: %v, want %v", tt.size, tt.bandwidth, got, tt.want)
		}
	}
}

func TestQueueLimit(t *testing.T) {
	n := New(1)
	n.SetDefaultLink(LinkConfig{Delay: time.Millisecond, QueueLimit: 5})
	var tapped []Fate
	n.SetTap(func(_ time.Time, _, _ netip.AddrPort, _ []byte, f Fate) {
		if f.Dropped() {
			tapped = append(tapped, f)
		}
	})
	for i := range 8 {
		n.Send(addrA, addrB, seqDatagram(uint64(i), 8))
	}
	n.Send(addrB, addrA, []byte("other direction")) // its own queue
	if s := n.LinkStats(addrA, addrB); s.DroppedQueue != 3 || s.InFlight != 5 {
		t.Fatalf("a->b dropped %d, in flight %d; want 3, 5", s.DroppedQueue, s.InFlight)
	}
	if !reflect.DeepEqual(tapped, []Fate{FateDroppedQueue, FateDroppedQueue, FateDroppedQueue}) {
		t.Fatalf("tap saw drops %v", tapped)
	}
	var log []delivery
	drain(n, collect(n, &log))
	if len(log) != 6 || seqOf(log[4].data) != 4 {
		t.Fatalf("delivered %v, want datagrams 0-4 and the other direction", log)
	}
	n.Send(addrA, addrB, seqDatagram(8, 8))
	if s := n.Stats(); s.DroppedQueue != 3 || s.InFlight != 1 {
		t.Fatalf("after draining, dropped %d, in flight %d; want 3, 1", s.DroppedQueue, s.InFlight)
	}
}

// TestStatsPerLink checks that per-link counters add up to the totals and
// that every counter balances under all impairments at once.
func TestStatsPerLink(t *testing.T) {
	n := New(9)
	n.SetDefaultLink(everything)
	addrs := []netip.AddrPort{addrA, addrB, addrC}
	n.Partition(addrA, addrC)
	for i := range 5000 {
		from, to := addrs[i%3], addrs[(i+1+i/3%2)%3]
		n.Send(from, to, seqDatagram(uint64(i), 8+i%1400))
		if i%100 == 0 {
			n.Deliver(n.Clock().Now().Add(50*time.Microsecond), func(netip.AddrPort, netip.AddrPort, []byte) {})
		}
	}
	total := n.Stats()
	checkConservation(t, total)
	if total.InFlight == 0 {
		t.Fatal("nothing in flight: the check of InFlight is vacuous")
	}
	var sum Stats
	for _, from := range addrs {
		for _, to := range addrs {
			s := n.LinkStats(from, to)
			checkConservation(t, s)
			sum.Sent += s.Sent
			sum.SentBytes += s.SentBytes
			sum.Delivered += s.Delivered
			sum.DeliveredBytes += s.DeliveredBytes
			sum.Lost += s.Lost
			sum.Duplicated += s.Duplicated
			sum.Corrupted += s.Corrupted
			sum.DroppedMTU += s.DroppedMTU
			sum.DroppedPartition += s.DroppedPartition
			sum.DroppedQueue += s.DroppedQueue
			sum.MarkedCE += s.MarkedCE
			sum.MaxBacklog = max(sum.MaxBacklog, s.MaxBacklog)
			sum.InFlight += s.InFlight
		}
	}
	if sum != total {
		t.Fatalf("per-link sums %+v\ndiffer from totals %+v", sum, total)
	}
	for name, v := range map[string]uint64{
		"Lost": total.Lost, "Duplicated": total.Duplicated, "Corrupted": total.Corrupted,
		"DroppedMTU": total.DroppedMTU, "DroppedPartition": total.DroppedPartition,
		"DroppedQueue": total.DroppedQueue,
	} {
		if v == 0 {
			t.Errorf("%s is zero: the scenario does not exercise it", name)
		}
	}
	if got := n.InFlight(); uint64(got) != total.InFlight {
		t.Fatalf("InFlight() = %d, Stats().InFlight = %d", got, total.InFlight)
	}
}

func TestLinkConfigOverride(t *testing.T) {
	n := New(1)
	def := LinkConfig{Delay: time.Millisecond}
	own := LinkConfig{Delay: 5 * time.Millisecond, Loss: 0.5}
	n.SetDefaultLink(def)
	n.SetLink(addrA, addrB, own)
	if got := n.Link(addrA, addrB); got != own {
		t.Fatalf("Link(a, b) = %+v, want %+v", got, own)
	}
	if got := n.Link(addrB, addrA); got != def {
		t.Fatalf("Link(b, a) = %+v, want the default %+v", got, def)
	}
	n.ClearLink(addrA, addrB)
	if got := n.Link(addrA, addrB); got != def {
		t.Fatalf("after ClearLink, Link(a, b) = %+v, want the default %+v", got, def)
	}
}

func TestLinkConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  LinkConfig
		ok   bool
	}{
		{"zero", LinkConfig{}, true},
		{"everything", everything, true},
		{"certain loss", LinkConfig{Loss: 1}, true},
		{"loss above one", LinkConfig{Loss: 1.5}, false},
		{"negative duplicate", LinkConfig{Duplicate: -0.1}, false},
		{"NaN corrupt", LinkConfig{Corrupt: math.NaN()}, false},
		{"negative delay", LinkConfig{Delay: -1}, false},
		{"negative jitter", LinkConfig{Jitter: -1}, false},
		{"negative MTU", LinkConfig{MTU: -1}, false},
		{"negative bandwidth", LinkConfig{Bandwidth: -1}, false},
		{"negative queue", LinkConfig{QueueLimit: -1}, false},
		{"reorder without delay", LinkConfig{Reorder: 0.1}, false},
		{"negative reorder delay", LinkConfig{ReorderDelay: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok %v", err, tt.ok)
			}
			panicked := func() (p bool) {
				defer func() { p = recover() != nil }()
				New(1).SetLink(addrA, addrB, tt.cfg)
				return false
			}()
			if panicked == tt.ok {
				t.Fatalf("SetLink panicked = %v, want %v", panicked, !tt.ok)
			}
		})
	}
}

func TestFateString(t *testing.T) {
	tests := []struct {
		fate Fate
		want string
	}{
		{0, "none"},
		{FateDelivered, "delivered"},
		{FateDelivered | FateDuplicate | FateCorrupted, "delivered|duplicate|corrupted"},
		{FateDroppedPartition | FateDuplicate, "dropped-partition|duplicate"},
		{FateLost, "lost"},
		{FateDroppedMTU, "dropped-mtu"},
		{FateDroppedQueue, "dropped-queue"},
		{FateDelivered | FateMarkedCE, "delivered|marked-ce"},
		{FateLost | FateMarkedCE, "lost|marked-ce"},
	}
	for _, tt := range tests {
		if got := tt.fate.String(); got != tt.want {
			t.Errorf("Fate(%#x).String() = %q, want %q", uint8(tt.fate), got, tt.want)
		}
	}
}

// TestNoAllocationsInSteadyState checks that, once warmed up, sending and
// delivering allocate nothing, with every impairment and a tap in use.
func TestNoAllocationsInSteadyState(t *testing.T) {
	n := New(1)
	cfg := everything
	cfg.QueueLimit = 0 // keep the work per run constant
	n.SetDefaultLink(cfg)
	taps := 0
	n.SetTap(func(time.Time, netip.AddrPort, netip.AddrPort, []byte, Fate) { taps++ })
	small, large := make([]byte, 60), make([]byte, 1100)
	got := 0
	recv := func(_, _ netip.AddrPort, b []byte) { got += len(b) }
	step := func() {
		for range 4 {
			n.Send(addrA, addrB, large)
			n.Send(addrB, addrA, small)
		}
		n.Clock().Advance(100 * time.Microsecond)
		n.Deliver(n.Clock().Now(), recv)
	}
	for range 1000 { // warm up: links, queue, buffer pool
		step()
	}
	if allocs := testing.AllocsPerRun(1000, step); allocs != 0 {
		t.Fatalf("%v allocations per step, want 0", allocs)
	}
	if taps == 0 || got == 0 {
		t.Fatal("nothing was delivered or tapped")
	}
}

func BenchmarkSendDeliver(b *testing.B) {
	n := New(1)
	n.SetDefaultLink(LinkConfig{Delay: 10 * time.Microsecond, Jitter: time.Microsecond, Loss: 0.01})
	d := make([]byte, 1100)
	recv := func(netip.AddrPort, netip.AddrPort, []byte) {}
	b.SetBytes(int64(len(d)))
	b.ReportAllocs()
	for b.Loop() {
		n.Send(addrA, addrB, d)
		n.Clock().Advance(time.Microsecond)
		n.Deliver(n.Clock().Now(), recv)
	}
}

// TestECNMarking: a burst on a link with a bandwidth builds a backlog;
// datagrams that find it at or below MarkMin arrive unmarked, those that
// find more than MarkMax marked CE, and the counters and the tap agree.
func TestECNMarking(t *testing.T) {
	n := New(1)
	// 1000 bytes per µs: each 1000-byte datagram adds 1000 bytes of
	// backlog; the k-th of a burst finds (k-1)*1000 bytes waiting.
	n.SetLink(addrA, addrB, LinkConfig{Bandwidth: 1e9, MarkMin: 2000, MarkMax: 2000})
	var tapped []Fate
	n.SetTap(func(_ time.Time, _, _ netip.AddrPort, _ []byte, f Fate) { tapped = append(tapped, f) })
	for i := range 6 {
		n.Send(addrA, addrB, seqDatagram(uint64(i), 1000))
	}
	var ce []bool
	n.DeliverECN(n.Clock().Now().Add(time.Second), func(_, _ netip.AddrPort, _ []byte, marked bool) {
		ce = append(ce, marked)
	})
	want := []bool{false, false, false, true, true, true} // backlogs 0, 1000, 2000, 3000, 4000, 5000
	if !reflect.DeepEqual(ce, want) {
		t.Fatalf("CE marks %v, want %v", ce, want)
	}
	for i, f := range tapped {
		if got := f&FateMarkedCE != 0; got != want[i] {
			t.Errorf("tap fate %d = %v, want marked %v", i, f, want[i])
		}
	}
	s := n.LinkStats(addrA, addrB)
	if s.MarkedCE != 3 || s.MaxBacklog != 5000 || n.Stats().MaxBacklog != 5000 {
		t.Errorf("stats %+v: want MarkedCE 3, MaxBacklog 5000", s)
	}
	n.ResetMaxBacklog()
	if n.LinkStats(addrA, addrB).MaxBacklog != 0 || n.Stats().MaxBacklog != 0 {
		t.Error("ResetMaxBacklog left a maximum")
	}
	// Without a bandwidth there is no backlog, so nothing is marked.
	n.SetLink(addrB, addrA, LinkConfig{MarkMax: 1})
	for i := range 3 {
		n.Send(addrB, addrA, seqDatagram(uint64(i), 1000))
	}
	if s := n.LinkStats(addrB, addrA); s.MarkedCE != 0 {
		t.Errorf("marked %d datagrams on a link without a bandwidth", s.MarkedCE)
	}
}

// TestECNMarkingRED: between MarkMin and MarkMax the share marked follows
// the line to MarkProb.
func TestECNMarkingRED(t *testing.T) {
	c := LinkConfig{Bandwidth: 1, MarkMin: 1000, MarkMax: 3000, MarkProb: 0.4}
	n := New(7)
	const draws = 20000
	marked := 0
	for range draws {
		if c.marks(n.rng, 2000) { // halfway: probability 0.2
			marked++
		}
	}
	if got := float64(marked) / draws; got < 0.18 || got > 0.22 {
		t.Errorf("marked %.3f of packets halfway between the thresholds, want about 0.2", got)
	}
	if err := (LinkConfig{MarkMin: 5, MarkMax: 4}).Validate(); err == nil {
		t.Error("MarkMin above MarkMax validated")
	}
	if err := (LinkConfig{MarkMax: 4, MarkProb: 2}).Validate(); err == nil {
		t.Error("MarkProb 2 validated")
	}
}
