package ibcm

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/mad"
)

// fuzzTemplates are the MADs of a scripted exchange between two nodes
// made exactly as the fuzz target makes them, so that replayed and
// mutated copies name real comm IDs, QPNs and TIDs.
var fuzzTemplates = sync.OnceValue(func() [][mad.MADSize]byte {
	w, a, b := fuzzWorld(nil)
	b.accept = false
	a.connect(b, []byte("x"))
	w.run(2 * time.Second) // REQ, its retransmission, the MRA
	if ev, ok := b.last(EventConnectRequest); ok {
		b.acceptNow(ev.ID, nil)
		w.flush(b)
	}
	w.run(10 * time.Millisecond) // REP, RTU
	ida := a.connect(b, nil)
	w.run(10 * time.Millisecond)
	_ = a.m.Disconnect(ida, nil, w.now, &a.out) // DREQ, DREP
	w.flush(a)
	b.listen = false
	a.connect(b, nil) // REJ
	if _, err := a.m.SIDRRequest(SIDRParams{Peer: b.addr, ServiceID: 5}, w.now, &a.out); err == nil {
		w.flush(a) // SIDR_REQ, SIDR_REP
	}
	w.run(time.Second)
	var ts [][mad.MADSize]byte
	for _, p := range w.sent {
		ts = append(ts, p.mad)
	}
	lap, _ := mad.AppendCM(nil, 1, &mad.LAP{})
	apr, _ := mad.AppendCM(nil, 1, &mad.APR{})
	return append(ts, [mad.MADSize]byte(lap), [mad.MADSize]byte(apr))
})

// fuzzWorld is two nodes with small limits.
func fuzzWorld(t testing.TB) (*world, *node, *node) {
	w := newWorld(t, 1)
	lim := func(c *Config) { c.Limits = Limits{HalfOpen: 8, HalfOpenPerSource: 4, Records: 32} }
	a := w.addNode("10.99.0.2", 0x505400fffe990002, lim)
	b := w.addNode("10.99.0.3", 0x505400fffe990003, lim)
	return w, a, b
}

// FuzzManager drives two Managers with operations read from the input:
// recorded MADs replayed and mutated, arbitrary bytes, time passing,
// connects, and every driver call on the IDs the events named. The
// Managers must never panic, their records must stay consistent (check)
// and within Limits, whatever arrives.
func FuzzManager(f *testing.F) {
	f.Add([]byte{3, 2, 10, 0, 0, 2, 0, 1, 2, 200})
	f.Add([]byte{3, 0, 1, 0, 0, 0, 1, 5, 7, 4, 2, 1, 2, 50, 4, 3, 0, 2, 255})
	f.Add([]byte{5, 2, 1, 0, 9, 0, 9, 4, 6, 0, 2, 100, 1, 20, 1, 7, 0, 0, 0, 16})
	f.Fuzz(func(t *testing.T, ops []byte) {
		templates := fuzzTemplates()
		w, a, b := fuzzWorld(t)
		w.t = quietTB{t}
		a.t, b.t = w.t, w.t
		nodes := []*node{a, b}
		arg := func(i int) byte {
			if i < len(ops) {
				return ops[i]
			}
			return 0
		}
		for i := 0; i < len(ops) && i < 4000; i += 4 {
			n := nodes[arg(i+1)&1]
			switch ops[i] % 7 {
			case 0: // a recorded MAD, one byte changed
				tm := templates[int(arg(i+2))%len(templates)]
				if k := arg(i + 3); k != 0 {
					tm[int(k)%mad.MADSize] ^= arg(i + 1)
				}
				n.m.HandleMAD(other(nodes, n).addr, tm[:], w.now, &n.out)
			case 1: // arbitrary bytes from the input
				end := min(len(ops), i+4+int(arg(i+2)))
				n.m.HandleMAD(netip.AddrFrom4([4]byte{10, 1, 0, arg(i + 3)}), ops[min(i+4, end):end], w.now, &n.out)
			case 2: // time passes
				w.run(time.Duration(arg(i+2)) * time.Duration(arg(i+3)+1) * time.Millisecond)
			case 3:
				if n.m.Len() < 30 {
					_, _ = n.m.Connect(n.params(other(nodes, n), uint32(arg(i+2))<<8|uint32(arg(i+3)), nil), w.now, &n.out)
				}
			case 4:
				driverCall(n, w, arg(i+2), arg(i+3))
			case 5:
				_, _ = n.m.SIDRRequest(SIDRParams{Peer: other(nodes, n).addr, ServiceID: mad.ServiceID(arg(i + 2))}, w.now, &n.out)
			case 6: // the driver's habits change
				n.accept, n.ready, n.answerDREQ, n.listen = arg(i+2)&1 != 0, arg(i+2)&2 != 0, arg(i+2)&4 != 0, arg(i+2)&8 != 0
			}
			w.flush(n)
			for _, x := range nodes {
				if err := x.m.check(); err != nil {
					t.Fatalf("op %d: %v: %v", i/4, x.addr, err)
				}
				l := x.m.cfg.Limits
				if x.m.Len() > l.Records || x.m.HalfOpen() > l.HalfOpen {
					t.Fatalf("op %d: %v: %d records, %d half-open", i/4, x.addr, x.m.Len(), x.m.HalfOpen())
				}
			}
		}
	})
}

func other(nodes []*node, n *node) *node {
	if nodes[0] == n {
		return nodes[1]
	}
	return nodes[0]
}

// driverCall makes one of the driver's calls on an ID an event named.
func driverCall(n *node, w *world, which, pick byte) {
	if len(n.events) == 0 {
		return
	}
	id := n.events[int(pick)%len(n.events)].ID
	switch which % 8 {
	case 0:
		_, _ = n.m.Accept(id, AcceptParams{QPN: uint32(pick), StartingPSN: 1}, w.now, &n.out)
	case 1:
		_ = n.m.Ready(id, nil, &n.out)
	case 2:
		_ = n.m.Reject(id, mad.RejectConsumer, nil, []byte{pick}, w.now, &n.out)
	case 3:
		_ = n.m.Disconnect(id, nil, w.now, &n.out)
	case 4:
		_ = n.m.Destroy(id, nil, w.now, &n.out)
	case 5:
		_ = n.m.Established(id, &n.out)
	case 6:
		_ = n.m.SIDRReply(id, SIDRReplyParams{QPN: uint32(pick)}, &n.out)
	case 7:
		_, _ = n.m.Accept(id, AcceptParams{PrivateData: make([]byte, 197)}, w.now, &n.out) // refused
	}
}

// quietTB turns the driver's complaints (a call refused in a state the
// fuzzer reached) into nothing: only the invariants fail a fuzz run.
type quietTB struct{ testing.TB }

func (quietTB) Errorf(string, ...any) {}
func (quietTB) Fatalf(string, ...any) {}
