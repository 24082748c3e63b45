package transport

import (
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/simnet"
	"github.com/goroce/goroce/internal/wire"
)

// ccTestConfig is the default configuration with a known line rate, so
// that the rate curve does not depend on the meter.
func ccTestConfig(line float64) CCConfig {
	c := DefaultCCConfig()
	c.RPMaxRate = line
	return c
}

func ccEndpoint(t *testing.T, c CCConfig) *endpoint {
	t.Helper()
	a, _ := newPair(t, defaultOpts())
	a.qp.SetCongestionControl(c)
	return a
}

// TestDCQCNRateCurve checks the reaction point against the paper's
// equations, step by step on a simulated clock, with mlx5's firmware
// defaults (a 1 µs α period, a 32767-byte counter, threshold 1), which
// reach every stage within a few events.
func TestDCQCNRateCurve(t *testing.T) {
	const line = 1e9
	c := ccTestConfig(line)
	c.RPAlphaPeriod, c.RPG = time.Microsecond, 1024-1019
	c.RPByteReset, c.RPThreshold = 32767, 1
	c.RPAIRate = 5e6 / 8
	a := ccEndpoint(t, c)
	qp := a.qp
	t0 := time.Unix(1000, 0)
	if _, limited := qp.RateLimit(); limited {
		t.Fatal("limited before any CNP")
	}

	// First CNP: rc = line·(1 − α/2) with α = 1023/1024, bounded by
	// rpg_min_dec_fac (50 %): 1 − 1023/2048 > 0.5.
	qp.handleCNP(t0)
	rc, limited := qp.RateLimit()
	alpha := 1023.0 / 1024
	want := line * (1 - alpha/2)
	if !limited || !near(rc, want) {
		t.Fatalf("after the first CNP: rate %v limited %v, want %v", rc, limited, want)
	}
	if qp.cc.rp.rt != line {
		t.Fatalf("target %v, want the line rate", qp.cc.rp.rt)
	}

	// A second CNP within rate_reduce_monitor_period (4 µs) does not
	// decrease again, but counts for α.
	qp.handleCNP(t0.Add(2 * time.Microsecond))
	if rc2, _ := qp.RateLimit(); rc2 != rc {
		t.Fatalf("second CNP within the monitor period changed the rate: %v → %v", rc, rc2)
	}
	if got := qp.Counters().RateDecreases; got != 1 {
		t.Fatalf("RateDecreases %d, want 1", got)
	}

	// 50 µs later (less than the 100 µs over which the rate used is
	// measured): periods [0, 1 µs) and [2 µs, 3 µs) had a CNP (up), the
	// 48 others none (down); the third CNP decreases with that α.
	t1 := t0.Add(50 * time.Microsecond)
	g := float64(c.RPG) / 1024
	alpha = ((1-g)*alpha + g) * (1 - g)
	alpha = ((1-g)*alpha + g) * math.Pow(1-g, 47)
	qp.handleCNP(t1)
	rt := rc
	rc = rc * max(1-alpha/2, 0.5)
	if got, _ := qp.RateLimit(); !near(got, rc) || !near(qp.cc.rp.rt, rt) {
		t.Fatalf("third CNP: rate %v target %v, want %v %v (α %v)", got, qp.cc.rp.rt, rc, rt, alpha)
	}

	// Increase events: the timer every rpg_time_reset (300 µs). With
	// rpg_threshold 1 the first timer event is an additive increase
	// (stage 1 is not below 1), then hyper increase only once the byte
	// counter has also passed the threshold.
	qp.paced(t1.Add(c.RPTimeReset))
	rt += c.RPAIRate
	rc = (rt + rc) / 2
	if got, _ := qp.RateLimit(); !near(got, rc) {
		t.Fatalf("after one timer event: rate %v, want %v", got, rc)
	}
	// Byte counter: 2 events, both stages reach 1, then 2 > 1 for the
	// timer: additive, additive.
	for range 2 {
		qp.spend(uint32(c.RPByteReset) - rpOverhead)
	}
	for range 2 {
		rt += c.RPAIRate
		rc = (rt + rc) / 2
	}
	if got, _ := qp.RateLimit(); !near(got, rc) {
		t.Fatalf("after two byte events: rate %v, want %v", got, rc)
	}
	// Timer stage 2, byte stage 2: both above the threshold: hyper
	// increase by (min stage − threshold) × rpg_hai_rate.
	qp.paced(t1.Add(2 * c.RPTimeReset))
	rt += 1 * c.RPHAIRate
	rc = (rt + rc) / 2
	if got, _ := qp.RateLimit(); !near(got, rc) {
		t.Fatalf("after hyper increase: rate %v, want %v", got, rc)
	}

	// Without CNPs the rate climbs back to the line rate and the limit
	// is lifted, by the timer alone.
	qp.paced(t1.Add(time.Second))
	if _, limited := qp.RateLimit(); limited {
		t.Fatal("still limited a second after the last CNP")
	}
	if got := qp.Counters().RateLifted; got != 1 {
		t.Fatalf("RateLifted %d, want 1", got)
	}
}

// TestDCQCNFloor checks rpg_min_rate and rpg_min_dec_fac.
func TestDCQCNFloor(t *testing.T) {
	c := ccTestConfig(1e9)
	c.RPTimeReset, c.RPByteReset = 0, 0 // no increase
	a := ccEndpoint(t, c)
	now := time.Unix(1000, 0)
	prev := 1e9
	for range 100 {
		a.qp.handleCNP(now)
		rc, _ := a.qp.RateLimit()
		if rc < prev*0.5-1 || rc > prev {
			t.Fatalf("one decrease went from %v to %v", prev, rc)
		}
		prev = rc
		now = now.Add(10 * time.Microsecond)
	}
	if prev != c.RPMinRate {
		t.Fatalf("rate after 100 CNPs %v, want rpg_min_rate %v", prev, c.RPMinRate)
	}
}

// TestCNPIgnoredWithoutECN: with ECN off a CNP is counted and changes
// nothing; so does a CNP for another QP.
func TestCNPIgnoredWithoutECN(t *testing.T) {
	a := ccEndpoint(t, CCConfig{})
	a.qp.handleCNP(time.Unix(1, 0))
	if _, limited := a.qp.RateLimit(); limited {
		t.Fatal("limited with ECN off")
	}
	c := a.qp.Counters()
	if c.CNPReceived != 1 || c.CNPHandled != 0 {
		t.Fatalf("counters %+v", c)
	}
}

// TestNotificationPoint checks the CNPs MarkCE sends: the format NICs
// use, to the peer QP, at most one per np_min_time_between_cnps.
func TestNotificationPoint(t *testing.T) {
	a, b := newPair(t, defaultOpts())
	b.qp.SetCongestionControl(DefaultCCConfig())
	l := newLink(t, a, b)
	now := time.Unix(1000, 0)
	for i := range 10 {
		b.qp.MarkCE(now.Add(time.Duration(i)*10*time.Microsecond), &b.out)
	}
	// At 0, 50 µs (the interval is 50 µs): two CNPs.
	if got := b.out.Len(); got != 2 {
		t.Fatalf("%d CNPs for CE marks over 90 µs, want 2", got)
	}
	for _, op := range b.out.Packets() {
		p := l.parse(b, op.Bytes)
		if p.BTH.Opcode() != wire.CNP || !p.BTH.BECN() || uint32(p.BTH.DestQP()) != qpnA ||
			p.BTH.PKey() != wire.DefaultPKey || len(p.Payload) != wire.CNPReservedLen {
			t.Fatalf("CNP %+v payload % x", p.BTH.Fields(), p.Payload)
		}
	}
	c := b.qp.Counters()
	if c.ECNMarked != 10 || c.CNPSent != 2 {
		t.Fatalf("ECNMarked %d CNPSent %d, want 10 and 2", c.ECNMarked, c.CNPSent)
	}
	// The CNPs reach a, which has ECN off: nothing changes there.
	a.qp.SetCongestionControl(DefaultCCConfig())
	l.step()
	if _, limited := a.qp.RateLimit(); !limited || a.qp.Counters().CNPHandled != 2 {
		t.Fatalf("a after two CNPs: limited %v, counters %+v", limited, a.qp.Counters())
	}

	// With ECN off the notification point counts and stays silent.
	b.qp.SetCongestionControl(CCConfig{})
	b.qp.MarkCE(now.Add(time.Second), &b.out)
	if b.out.Len() != 0 {
		t.Fatal("CNP sent with ECN off")
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

// TestPacingRate checks that a limited QP sends at its rate: WRITEs as
// fast as the window allows, over a link without delay, for a simulated
// second.
func TestPacingRate(t *testing.T) {
	const rate = 20e6 // bytes per second
	c := DefaultCCConfig()
	c.RPMaxRate = 1e9
	c.RPTimeReset, c.RPByteReset = 0, 0 // hold the rate
	a, b := newPair(t, defaultOpts())
	a.qp.SetCongestionControl(c)
	l := newLink(t, a, b)
	a.qp.handleCNP(l.now)
	a.qp.cc.rp.rc = rate
	buf := make([]byte, 1<<20)
	lkey := a.mem.register(pd, buf, 0x1000, ibv.AccessLocalWrite)
	rkey := b.mem.register(pd, make([]byte, 1<<20), 0x2000, ibv.AccessRemoteWrite)
	start := l.now
	startPSN := a.qp.comp.psn
	for range 20 {
		l.post(a, SendWQE{Opcode: ibv.WRRDMAWrite, SGL: []SGE{{Addr: 0x1000, Length: 1 << 20, LKey: lkey}},
			RemoteAddr: 0x2000, RKey: rkey, Flags: ibv.SendSignaled})
		l.run(time.Second)
		a.scq.take()
	}
	elapsed := l.now.Sub(start).Seconds()
	sent := float64(a.qp.comp.psn.Sub(startPSN)) * (1024 + rpOverhead)
	got := sent / elapsed
	if got < rate*0.95 || got > rate*1.05 {
		t.Fatalf("paced at %.3g B/s over %.3gs, want %.3g", got, elapsed, rate)
	}
}

// The bottleneck simulation: flows from QPs a[i] on one host to b[i] on
// another share one simnet link (internal/simnet) of rate bytes per
// second with a one-way delay each way; its queue marks CE as the paper's
// switches do (RED on the instantaneous queue: never below Kmin = 5 KB,
// with a probability rising to Pmax = 1 % at Kmax = 200 KB, always above
// it), when mark is set, and tail-drops past about 4 MB. ACKs and CNPs
// come back without queueing.
type bottleneck struct {
	t     *testing.T
	flows []*ccFlow
	byQPN map[uint32]*endpoint
	net   *simnet.Network
	rate  float64
	pkt   wire.Packet
}

// The two hosts of the bottleneck.
var (
	bnHostA = netip.AddrPortFrom(netip.AddrFrom4(addrA), wire.RoCEv2Port)
	bnHostB = netip.AddrPortFrom(netip.AddrFrom4(addrB), wire.RoCEv2Port)
)

type ccFlow struct {
	a, b   *endpoint
	lkey   uint32
	rkey   uint32
	posted int
	psn0   psn.PSN // oldest unacknowledged PSN at the warm-up's end
}

func newBottleneck(t *testing.T, n int, c CCConfig, rate float64, mark bool) *bottleneck {
	const delay = 10 * time.Microsecond
	bn := &bottleneck{t: t, rate: rate, net: simnet.New(1), byQPN: map[uint32]*endpoint{}}
	link := simnet.LinkConfig{Delay: delay, Bandwidth: int64(rate), QueueLimit: (4 << 20) / 4096}
	if mark {
		link.MarkMin, link.MarkMax, link.MarkProb = 5e3, 200e3, 0.01
	}
	bn.net.SetLink(bnHostA, bnHostB, link)
	bn.net.SetLink(bnHostB, bnHostA, simnet.LinkConfig{Delay: delay})
	for i := range n {
		o := defaultOpts()
		o.psnA, o.psnB, o.mtu = 0, 0, 4096
		a := newEndpoint("a", qpnA+uint32(i)*2, o, nil)
		b := newEndpoint("b", qpnB+uint32(i)*2, o, nil)
		a.connect(t, o, b.qp.QPN(), 0, 0)
		b.connect(t, o, a.qp.QPN(), 0, 0)
		a.qp.SetCongestionControl(c)
		b.qp.SetCongestionControl(c)
		f := &ccFlow{a: a, b: b}
		f.lkey = a.mem.register(pd, make([]byte, 64<<10), 0x1000, ibv.AccessLocalWrite)
		f.rkey = b.mem.register(pd, make([]byte, 64<<10), 0x2000, ibv.AccessRemoteWrite)
		bn.flows = append(bn.flows, f)
		bn.byQPN[a.qp.QPN()], bn.byQPN[b.qp.QPN()] = a, b
	}
	return bn
}

// stats returns what the bottleneck's queue did: the most bytes queued
// since the warm-up, the packets marked CE and those dropped.
func (bn *bottleneck) stats() (maxQueue float64, marked, dropped uint64) {
	s := bn.net.LinkStats(bnHostA, bnHostB)
	return float64(s.MaxBacklog), s.MarkedCE, s.DroppedQueue
}

// flush moves what the QPs sent onto the network.
func (bn *bottleneck) flush() {
	for _, f := range bn.flows {
		for _, p := range f.a.out.Packets() {
			bn.net.Send(bnHostA, bnHostB, frame(nil, p.Bytes, addrA, addrB))
		}
		f.a.out.Reset()
		for _, p := range f.b.out.Packets() {
			bn.net.Send(bnHostB, bnHostA, frame(nil, p.Bytes, addrB, addrA))
		}
		f.b.out.Reset()
	}
}

// top keeps four 64 KiB WRITEs queued on every flow.
func (bn *bottleneck) top(now time.Time) {
	for _, f := range bn.flows {
		f.posted -= len(f.a.scq.take())
		for f.posted < 4 {
			w := SendWQE{Opcode: ibv.WRRDMAWrite, SGL: []SGE{{Addr: 0x1000, Length: 64 << 10, LKey: f.lkey}},
				RemoteAddr: 0x2000, RKey: f.rkey, Flags: ibv.SendSignaled}
			if err := f.a.qp.PostSend(&w, now, &f.a.out); err != nil {
				bn.t.Fatal(err)
			}
			f.posted++
		}
	}
}

// run simulates for d, the last part after warm measured, and returns
// each flow's acknowledged bytes per second over that part.
func (bn *bottleneck) run(d, warm time.Duration) []float64 {
	clk := bn.net.Clock()
	end, warmAt := clk.Now().Add(d), clk.Now().Add(warm)
	warmed := false
	for clk.Now().Before(end) {
		bn.top(clk.Now())
		bn.flush()
		if !warmed && !clk.Now().Before(warmAt) {
			warmed = true
			for _, f := range bn.flows {
				f.psn0 = f.a.qp.comp.psn
			}
			bn.net.ResetMaxBacklog()
		}
		next, ok := bn.net.NextEvent()
		for _, f := range bn.flows {
			for _, e := range []*endpoint{f.a, f.b} {
				if dl, armed := e.qp.Deadline(); armed && (!ok || dl.Before(next)) {
					next, ok = dl, true
				}
			}
		}
		if !ok {
			bn.t.Fatal("nothing pending")
		}
		bn.net.DeliverECN(maxTime(next, clk.Now()), func(_, _ netip.AddrPort, b []byte, ce bool) {
			if err := bn.pkt.Parse(b, 0); err != nil {
				bn.t.Fatal(err)
			}
			to := bn.byQPN[uint32(bn.pkt.BTH.DestQP())]
			if ce {
				to.qp.MarkCE(clk.Now(), &to.out)
			}
			to.qp.HandlePacket(&bn.pkt, clk.Now(), &to.out)
		})
		for _, f := range bn.flows {
			f.a.qp.OnTimer(clk.Now(), &f.a.out)
			f.b.qp.OnTimer(clk.Now(), &f.b.out)
		}
	}
	rates := make([]float64, len(bn.flows))
	for i, f := range bn.flows {
		n := f.a.qp.comp.psn.Sub(f.psn0)
		rates[i] = float64(n) * 4096 / (d - warm).Seconds()
	}
	return rates
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func jain(x []float64) float64 {
	var s, s2 float64
	for _, v := range x {
		s += v
		s2 += v * v
	}
	return s * s / (float64(len(x)) * s2)
}

func sum(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v
	}
	return s
}

// TestDCQCNBottleneck: four flows through a marking queue converge to
// fair shares of the bottleneck, with the queue bounded and the link
// busy.
func TestDCQCNBottleneck(t *testing.T) {
	const rate = 1.25e9 // 10 Gb/s
	bn := newBottleneck(t, 4, DefaultCCConfig(), rate, true)
	rates := bn.run(200*time.Millisecond, 100*time.Millisecond)
	j := jain(rates)
	maxQueue, marked, dropped := bn.stats()
	t.Logf("rates %.3g, Jain %.3f, max queue %.0f B, marked %d, dropped %d", rates, j, maxQueue, marked, dropped)
	if j < 0.95 {
		t.Errorf("Jain's index %.3f < 0.95", j)
	}
	if u := sum(rates) / rate; u < 0.8 {
		t.Errorf("utilisation %.2f < 0.8", u)
	}
	// Near Kmax (200 KB), where marking is certain; without
	// congestion control the windows fill it (TestNoCCBottleneck).
	if maxQueue > 400e3 {
		t.Errorf("queue reached %.0f bytes", maxQueue)
	}
	if marked == 0 {
		t.Error("the queue marked nothing")
	}
	for _, f := range bn.flows {
		if f.b.qp.Counters().CNPSent == 0 || f.a.qp.Counters().CNPHandled == 0 {
			t.Errorf("flow without CNPs: %+v", f.a.qp.Counters())
		}
	}
}

// TestNoCCBottleneck is the control: without congestion control the
// queue fills to the window of every flow.
func TestNoCCBottleneck(t *testing.T) {
	bn := newBottleneck(t, 4, CCConfig{}, 1.25e9, true)
	rates := bn.run(50*time.Millisecond, 25*time.Millisecond)
	maxQueue, _, _ := bn.stats()
	t.Logf("rates %.3g, Jain %.3f, max queue %.0f B", rates, jain(rates), maxQueue)
	if maxQueue < 1e6 {
		t.Errorf("queue only %.0f bytes without congestion control", maxQueue)
	}
}

// TestRTTBottleneck: without ECN marks, the RTT window shares the
// bottleneck and keeps its queue near the target delay.
func TestRTTBottleneck(t *testing.T) {
	const rate = 100e6
	c := CCConfig{RTT: true, RTTTarget: 500 * time.Microsecond, RTTAI: 1, RTTBeta: 0.8, RTTMaxMDF: 0.5}
	bn := newBottleneck(t, 4, c, rate, false)
	rates := bn.run(300*time.Millisecond, 100*time.Millisecond)
	j := jain(rates)
	maxQueue, _, dropped := bn.stats()
	t.Logf("rates %.3g, Jain %.3f, max queue %.0f B, dropped %d", rates, j, maxQueue, dropped)
	if j < 0.95 {
		t.Errorf("Jain's index %.3f < 0.95", j)
	}
	if u := sum(rates) / rate; u < 0.8 {
		t.Errorf("utilisation %.2f < 0.8", u)
	}
	// The target's worth of queue is 20 KB; allow for the window's
	// overshoot of a round trip.
	if maxQueue > 100<<10 {
		t.Errorf("queue reached %.0f bytes", maxQueue)
	}
}

// TestPacingWaitForgotten: a rate-limited QP waiting for tokens asks for
// a call when they are there; once something else holds the requester (a
// full window here, ERR below), that wait is over: a deadline left in the past would
// be due again at every call.
func TestPacingWaitForgotten(t *testing.T) {
	for _, flush := range []bool{false, true} {
		c := DefaultCCConfig()
		c.RPMaxRate = 1e9
		a, b := newPair(t, defaultOpts())
		a.qp.SetCongestionControl(c)
		now := time.Unix(1000, 0)
		a.qp.handleCNP(now)
		a.qp.cc.rp.rc = 1e6 // 1 MB/s; the bucket holds two packets
		a.qp.cc.rp.tokens = a.qp.bucketDepth()
		lkey := a.mem.register(pd, make([]byte, 4096), 0x1000, ibv.AccessLocalWrite)
		rkey := b.mem.register(pd, make([]byte, 4096), 0x2000, ibv.AccessRemoteWrite)
		for range 3 {
			w := SendWQE{Opcode: ibv.WRRDMAWrite, SGL: []SGE{{Addr: 0x1000, Length: 1024, LKey: lkey}},
				RemoteAddr: 0x2000, RKey: rkey, Flags: ibv.SendSignaled}
			must(t, a.qp.PostSend(&w, now, &a.out))
		}
		if n := a.out.Len(); n != 2 {
			t.Fatalf("%d packets sent, want the bucket's 2", n)
		}
		d, ok := a.qp.Deadline()
		if !ok || !d.After(now) || !a.qp.cc.rp.waiting {
			t.Fatalf("no token wait: deadline %v %v", d, ok)
		}
		if flush {
			a.qp.Flush()
			if d, ok := a.qp.Deadline(); ok {
				t.Fatalf("flushed QP: deadline %v", d)
			}
			continue
		}
		// The RTT window shrinks below what is in flight (a round trip
		// above target): the window, not the rate, holds the third.
		a.qp.cc.cfg.RTT = true
		a.qp.cc.win = rttWindow{started: true, cwnd: 1}
		now = d
		a.qp.OnTimer(now, &a.out)
		if d, ok := a.qp.Deadline(); !ok || !d.After(now) {
			t.Fatalf("window full after the wait: deadline %v %v, now %v", d, ok, now)
		}
	}
}
