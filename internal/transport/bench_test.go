package transport

import (
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/wire"
)

// countCQ counts completions without keeping them.
type countCQ struct{ n, errors int }

func (q *countCQ) Push(c *Completion) bool {
	q.n++
	if c.Status != ibv.WCSuccess {
		q.errors++
	}
	return true
}

// loop is an allocation-free loopback between two QPs: packets are copied
// into a reused buffer with a dummy ICRC and parsed into a reused Packet.
type loop struct {
	a, b     *endpoint
	scq, rcq countCQ
	buf      []byte
	pkt      wire.Packet
	now      time.Time
}

func newLoop(tb testing.TB, mtu int) *loop {
	o := defaultOpts()
	o.mtu = mtu
	a, b := newPair(tb, o)
	l := &loop{a: a, b: b, buf: make([]byte, 0, 8192), now: time.Unix(1, 0)}
	a.qp.scq, b.qp.rcq = &l.scq, &l.rcq
	return l
}

// deliver moves packets both ways until both outputs are empty.
func (l *loop) deliver(tb testing.TB) {
	for l.a.out.Len()+l.b.out.Len() > 0 {
		for _, dir := range [2][2]*endpoint{{l.a, l.b}, {l.b, l.a}} {
			from, to := dir[0], dir[1]
			for _, p := range from.out.Packets() {
				l.buf = append(append(l.buf[:0], p.Bytes...), 0, 0, 0, 0)
				if err := l.pkt.Parse(l.buf, to.qp.PathMTU()); err != nil {
					tb.Fatal(err)
				}
				to.qp.HandlePacket(&l.pkt, l.now, &to.out)
			}
			from.out.Reset()
		}
	}
}

func TestSteadyStateAllocs(t *testing.T) {
	for _, op := range []ibv.WROpcode{ibv.WRRDMAWrite, ibv.WRRDMARead, ibv.WRSend, ibv.WRAtomicFetchAndAdd} {
		t.Run(wcOpcode(op).String(), func(t *testing.T) {
			l := newLoop(t, 1024)
			n := 4096 + 100
			if isAtomic(op) {
				n = 8
			}
			local := make([]byte, n)
			remote := make([]byte, n)
			lkey := l.a.mem.register(pd, local, 0, ibv.AccessLocalWrite)
			rkey := l.b.mem.register(pd, remote, 0, ibv.AccessRemoteWrite|ibv.AccessRemoteRead|ibv.AccessRemoteAtomic|ibv.AccessLocalWrite)
			w := SendWQE{Opcode: op, Flags: ibv.SendSignaled, SGL: []SGE{{0, uint32(n), lkey}}, RKey: rkey, CompareAdd: 1}
			rw := RecvWQE{SGL: []SGE{{0, uint32(n), rkey}}}
			iter := func() {
				if isSend(op) {
					if err := l.b.qp.PostRecv(&rw); err != nil {
						t.Fatal(err)
					}
				}
				if err := l.a.qp.PostSend(&w, l.now, &l.a.out); err != nil {
					t.Fatal(err)
				}
				l.deliver(t)
			}
			for range 10 {
				iter()
			}
			if allocs := testing.AllocsPerRun(100, iter); allocs != 0 {
				t.Errorf("%v allocations per work request", allocs)
			}
			if l.scq.n != 111 || l.scq.errors != 0 {
				t.Fatalf("%d completions, %d errors", l.scq.n, l.scq.errors)
			}
		})
	}
}

// BenchmarkResponderWrite4K places a 4 KiB RDMA WRITE ONLY packet.
func BenchmarkResponderWrite4K(b *testing.B) {
	l := newLoop(b, 4096)
	dst := make([]byte, 4096)
	rkey := l.b.mem.register(pd, dst, 0, ibv.AccessRemoteWrite)
	raw := append(req(wire.RCRDMAWriteOnly, 0, false, make([]byte, 4096), func(h *wire.Headers) {
		h.RETH = wire.RETHFields{RKey: rkey, DMALength: 4096}
	}), 0, 0, 0, 0)
	var pkt wire.Packet
	if err := pkt.Parse(raw, 4096); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		pkt.BTH.SetPSN(l.b.qp.resp.epsn)
		l.b.qp.HandlePacket(&pkt, l.now, &l.b.out)
		l.b.out.Reset()
	}
	if l.b.qp.State() != ibv.QPStateRTS || l.b.qp.Counters().DuplicateRequest != 0 {
		b.Fatal("WRITEs were not accepted")
	}
}

// BenchmarkReadResponse generates the 16 responses of a 64 KiB READ at a
// 4096-byte MTU.
func BenchmarkReadResponse(b *testing.B) {
	l := newLoop(b, 4096)
	const n = 64 << 10
	src := make([]byte, n)
	rkey := l.b.mem.register(pd, src, 0, ibv.AccessRemoteRead)
	raw := append(req(wire.RCRDMAReadRequest, 0, true, nil, func(h *wire.Headers) {
		h.RETH = wire.RETHFields{RKey: rkey, DMALength: n}
	}), 0, 0, 0, 0)
	var pkt wire.Packet
	if err := pkt.Parse(raw, 4096); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(n)
	b.ReportAllocs()
	for b.Loop() {
		pkt.BTH.SetPSN(l.b.qp.resp.epsn)
		l.b.qp.HandlePacket(&pkt, l.now, &l.b.out)
		if l.b.out.Len() != 16 {
			b.Fatalf("%d responses", l.b.out.Len())
		}
		l.b.out.Reset()
	}
}
