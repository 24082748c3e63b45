package ibcm

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/mad"
)

// attacker makes REQs that are never completed, from many addresses.
type attacker struct {
	w       *world
	victim  *node
	sources []netip.Addr
	n       uint32
	last    []byte
	fresh   bool // only fresh REQs
}

func newAttacker(w *world, victim *node, sources int) *attacker {
	at := &attacker{w: w, victim: victim}
	for i := range sources {
		at.sources = append(at.sources, netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}))
	}
	return at
}

// fire sends the victim one MAD: mostly fresh half-finished REQs, with
// duplicates and malformed MADs mixed in.
func (at *attacker) fire() {
	at.n++
	src := at.sources[at.w.rng.IntN(len(at.sources))]
	var b []byte
	switch {
	case at.fresh:
		b = at.req(src)
	case at.n%7 == 0: // garbage
		b = make([]byte, at.w.rng.IntN(300))
		for i := range b {
			b[i] = byte(at.w.rng.Uint32())
		}
	case at.n%5 == 0 && at.last != nil: // a duplicate of an earlier REQ
		b = at.last
	case at.n%11 == 0: // a truncated REQ
		b = at.last[:100]
	default:
		b = at.req(src)
	}
	v := at.victim
	v.m.HandleMAD(src, b, at.w.now, &v.out)
	at.w.flush(v)
}

// req returns a fresh REQ from src.
func (at *attacker) req(src netip.Addr) []byte {
	v4 := src.As4()
	guid := uint64(0xbad0000000000000) | uint64(v4[2])<<8 | uint64(v4[3])
	req := &mad.REQ{LocalCommID: at.n, ServiceID: mad.RDMAServiceID(mad.PortSpaceTCP, 7174), LocalCAGUID: guid,
		LocalQPN: at.n & 0xFFFFFF, StartingPSN: at.n, PathMTU: 3, LocalCMResponseTimeout: 18,
		RemoteCMResponseTimeout: 18, MaxCMRetries: 15, Primary: mad.Path{HopLimit: 64, LocalACKTimeout: 17}}
	b, _ := mad.AppendCM(nil, uint64(at.n), req)
	at.last = b
	return b
}

// TestFloodKeepsAccepting: a listener that accepts everything is flooded
// from 500 addresses with fresh REQs that never complete, duplicates and
// garbage, 10,000 MADs a second for 3 s, while real peers connect. The
// real connections are made, and the listener never holds more than its
// limits.
func TestFloodKeepsAccepting(t *testing.T) {
	w := newWorld(t, 9)
	lim := Limits{HalfOpen: 64, HalfOpenPerSource: 4, Records: 256}
	b := w.addNode("10.99.0.3", 3, func(c *Config) { c.Limits = lim })
	var clients []*node
	for i := range 6 {
		clients = append(clients, w.addNode(fmt.Sprintf("10.99.0.%d", 10+i), uint64(10+i), nil))
	}
	at := newAttacker(w, b, 500)
	ids := map[*node]ID{}
	tick := 100 * time.Microsecond
	steps := 30000
	if testing.Short() {
		steps = 10000
	}
	for step := range steps {
		at.fire()
		if step%5000 == 2500 {
			c := clients[step/5000]
			ids[c] = c.connect(b, nil)
		}
		w.run(tick)
		if b.m.HalfOpen() > lim.HalfOpen || b.m.Len() > lim.Records {
			t.Fatalf("step %d: %d half-open, %d records", step, b.m.HalfOpen(), b.m.Len())
		}
		for a, k := range b.m.perSource {
			if k > lim.HalfOpenPerSource {
				t.Fatalf("step %d: %d half-open from %v", step, k, a)
			}
		}
	}
	w.run(10 * time.Millisecond)
	for c, id := range ids {
		if s, _ := c.m.State(id); s != StateEstablished {
			t.Errorf("%v: state %v during the flood; events %v", c.addr, s, c.events)
		}
	}
	cs := b.m.Counters()
	if cs.Malformed == 0 || cs.Duplicates == 0 || cs.Evicted == 0 {
		t.Errorf("counters %+v", cs)
	}
	mustCheck(t, b)
	t.Logf("%d connections made; listener: %d records, %d half-open; %d evicted, %d limited, %d malformed, %d duplicates",
		len(ids), b.m.Len(), b.m.HalfOpen(), cs.Evicted, cs.Limited, cs.Malformed, cs.Duplicates)
}

// TestOneSourceCannotFill: a single address sending fresh REQs holds at
// most HalfOpenPerSource of them; everyone else connects.
func TestOneSourceCannotFill(t *testing.T) {
	w := newWorld(t, 1)
	b := w.addNode("10.99.0.3", 3, func(c *Config) { c.Limits = Limits{HalfOpen: 16, HalfOpenPerSource: 2} })
	a := w.addNode("10.99.0.2", 2, nil)
	at := newAttacker(w, b, 1)
	at.fresh = true
	for range 1000 {
		at.fire()
	}
	if b.m.HalfOpen() != 2 || b.m.Counters().Limited < 990 || b.m.Counters().Evicted != 0 {
		t.Fatalf("%d half-open, counters %+v", b.m.HalfOpen(), b.m.Counters())
	}
	id := a.connect(b, nil)
	w.run(10 * time.Millisecond)
	if s, _ := a.m.State(id); s != StateEstablished {
		t.Fatalf("state %v", s)
	}
}

// TestAbandonedRequests: requests the driver never answers are dropped
// after AcceptTimeout, with EventAbandoned and no MAD.
func TestAbandonedRequests(t *testing.T) {
	w := newWorld(t, 1)
	b := w.addNode("10.99.0.3", 3, func(c *Config) { c.Limits.AcceptTimeout = 5 * time.Second })
	b.accept = false
	at := newAttacker(w, b, 10)
	at.fresh = true
	for range 20 {
		at.fire()
	}
	held := b.m.Len()
	sent := len(w.sent)
	w.run(6 * time.Second)
	if held == 0 || b.m.Len() != 0 || b.count(EventAbandoned) != held || len(w.sent) != sent {
		t.Fatalf("held %d, left %d, abandoned %d, %d MADs sent", held, b.m.Len(), b.count(EventAbandoned), len(w.sent)-sent)
	}
}

// TestRecordsLimit: at the Records limit the oldest timewait record makes
// room; with none, Connect fails.
func TestRecordsLimit(t *testing.T) {
	w := newWorld(t, 1)
	a := w.addNode("10.99.0.2", 2, func(c *Config) { c.Limits.Records = 3 })
	b := w.addNode("10.99.0.3", 3, nil)
	for range 3 {
		ida, _ := established(t, w, a, b)
		if err := a.m.Disconnect(ida, nil, w.now, &a.out); err != nil {
			t.Fatal(err)
		}
		w.flush(a)
		w.run(5 * time.Millisecond)
	}
	if a.m.Len() != 3 {
		t.Fatalf("%d records", a.m.Len())
	}
	established(t, w, a, b) // evicts a timewait record
	if a.m.Len() != 3 || a.count(EventTimewaitExit) != 0 {
		t.Fatalf("%d records", a.m.Len())
	}
	w.run(time.Second)
	established(t, w, a, b)
	established(t, w, a, b)
	if a.m.Len() != 3 {
		t.Fatalf("%d records", a.m.Len())
	}
	if _, err := a.m.Connect(a.params(b, 77, nil), w.now, &a.out); err != ErrTooMany {
		t.Fatalf("Connect beyond the limit: %v", err)
	}
	mustCheck(t, a)
}
