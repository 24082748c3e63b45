package ibcm

import (
	"testing"
	"time"

	"github.com/goroce/goroce/internal/mad"
)

// TestLossyHandshakes connects and disconnects over a network that drops
// 30 % of the MADs, duplicates 20 % and reorders within 3 ms, for many
// seeds. Whatever is lost, the two sides agree: both established or
// neither, one connection request per REQ, and nothing left after
// timewait.
func TestLossyHandshakes(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 40
	}
	outcomes := map[bool]int{}
	for seed := range uint64(seeds) {
		w, a, b := pair(t, seed)
		w.drop = func(*packet) bool { return w.rng.Float64() < 0.3 }
		w.dup, w.jitter = 0.2, 3*time.Millisecond
		id := a.connect(b, nil)
		w.run(200 * time.Second)
		mustCheck(t, a, b)

		if n := b.count(EventConnectRequest); n > 1 {
			t.Fatalf("seed %d: %d connect requests for one REQ", seed, n)
		}
		sa, okA := a.m.State(id)
		var idb ID
		if ev, ok := b.last(EventConnectRequest); ok {
			idb = ev.ID
		}
		sb, okB := b.m.State(idb)
		upA, upB := okA && sa == StateEstablished, okB && sb == StateEstablished
		if upA != upB {
			t.Fatalf("seed %d: active %v (%v), passive %v (%v)\nactive events %v\npassive events %v",
				seed, sa, okA, sb, okB, a.eventsOf(id), b.eventsOf(idb))
		}
		if !upA && (okA || okB) {
			t.Fatalf("seed %d: failed connection left records %v/%v", seed, sa, sb)
		}
		outcomes[upA]++
		if upA {
			closer, cid := a, id
			if seed%2 == 1 {
				closer, cid = b, idb
			}
			if err := closer.m.Disconnect(cid, nil, w.now, &closer.out); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			w.flush(closer)
			w.run(300 * time.Second)
		}
		if a.m.Len() != 0 || b.m.Len() != 0 {
			t.Fatalf("seed %d: records left %d %d\nactive events %v\npassive events %v",
				seed, a.m.Len(), b.m.Len(), a.eventsOf(id), b.eventsOf(idb))
		}
		mustCheck(t, a, b)
	}
	if outcomes[true] < seeds*9/10 {
		t.Errorf("only %d of %d connections made it through 30%% loss", outcomes[true], seeds)
	}
	t.Logf("established %d, failed %d", outcomes[true], outcomes[false])
}

// TestNoLeak runs many connections through every ending (established and
// disconnected from either side, rejected, refused for lack of a
// listener, timed out) and checks that every record is freed after
// timewait.
func TestNoLeak(t *testing.T) {
	w, a, b := pair(t, 3)
	peakA, peakB := 0, 0
	// The connections whose MADs are all lost: their REQs time out.
	lost := map[uint64]bool{}
	w.drop = func(p *packet) bool {
		h, _ := mad.ParseHeader(p.mad[:])
		return lost[h.TID]
	}
	for i := range 300 {
		switch i % 5 {
		case 0, 1: // established, then closed by one side
			ida, idb := established(t, w, a, b)
			closer, id := a, ida
			if i%5 == 1 {
				closer, id = b, idb
			}
			if err := closer.m.Disconnect(id, nil, w.now, &closer.out); err != nil {
				t.Fatal(err)
			}
			w.flush(closer)
		case 2: // refused by the application
			b.accept = false
			a.connect(b, nil)
			w.run(5 * time.Millisecond)
			ev, _ := b.last(EventConnectRequest)
			if err := b.m.Reject(ev.ID, 28, nil, nil, w.now, &b.out); err != nil {
				t.Fatal(err)
			}
			w.flush(b)
			b.accept = true
		case 3: // no listener
			b.listen = false
			a.connect(b, nil)
			w.run(5 * time.Millisecond)
			b.listen = true
		case 4: // the REQ is lost for good
			a.qpn++
			id, err := a.m.Connect(a.params(b, a.qpn, nil), w.now, &a.out)
			if err != nil {
				t.Fatal(err)
			}
			lost[a.m.tid(a.m.conns[id])] = true
			w.flush(a)
		}
		w.run(20 * time.Millisecond)
		peakA, peakB = max(peakA, a.m.Len()), max(peakB, b.m.Len())
	}
	w.run(5 * time.Minute)
	for _, n := range []*node{a, b} {
		m := n.m
		if m.Len() != 0 || len(m.timers) != 0 || len(m.byRemoteID) != 0 || len(m.byRemoteQPN) != 0 ||
			len(m.bySIDR) != 0 || len(m.perSource) != 0 || m.halfOpen != 0 || m.hoHead != nil || m.twHead != nil {
			t.Errorf("%v: left %d records, %d timers, %d/%d/%d index entries", n.addr, m.Len(), len(m.timers),
				len(m.byRemoteID), len(m.byRemoteQPN), len(m.bySIDR))
		}
	}
	mustCheck(t, a, b)
	t.Logf("peak records: active %d, passive %d", peakA, peakB)
}
