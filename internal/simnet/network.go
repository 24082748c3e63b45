package simnet

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"time"
)

// pcgStream is the second PCG seed word. It is fixed so that the user-facing
// seed is a single int64, and arbitrary (the 64-bit golden ratio) so that
// seed 0 does not start from an all-zero state.
const pcgStream = 0x9e3779b97f4a7c15

// Tap observes every copy of every datagram and what became of it. It is
// called at the virtual instant the fate was decided: at Send for datagrams
// dropped by partition, MTU, queue or loss; at arrival for copies delivered,
// or dropped by a partition that started while they were in flight. For a
// delivered copy it is called just before the receive function, with the
// same bytes (corrupted ones included). The datagram slice is only valid
// during the call.
type Tap func(at time.Time, from, to netip.AddrPort, datagram []byte, fate Fate)

// Network is a simulated datagram network between endpoints identified by
// [netip.AddrPort]: the identity a goroce device has on a real network (an
// IP address and a UDP port), so a harness can address simulated devices the
// way it addresses real ones, and a tap can write the traffic to a pcap file
// with real IP and UDP headers.
//
// Each ordered pair of addresses is one direction of a link, configured by
// [Network.SetDefaultLink] or, for that direction only, [Network.SetLink];
// see [LinkConfig] for what a link does to a datagram. All randomness comes
// from one PCG generator seeded by [New], consumed only by Send, so the same
// seed and the same sequence of calls produce the same deliveries, byte for
// byte and nanosecond for nanosecond.
//
// A Network is not safe for concurrent use: a deterministic simulation is
// driven by one goroutine. Its methods may be called from inside the receive
// function of Deliver, from a Tap and from timers of its Clock.
type Network struct {
	clock Clock
	rng   *rand.Rand
	def   LinkConfig
	links map[linkKey]*link
	// partitions maps an unordered address pair (see pairKey) to the end of
	// its partition, math.MaxInt64 for one without end.
	partitions map[linkKey]time.Duration
	queue      eventQueue
	seq        uint64 // send order: the tie-breaker between equal arrival times
	pool       bufPool
	stats      Stats
	tap        Tap
}

// linkKey names one direction of a link.
type linkKey struct{ from, to netip.AddrPort }

// link is the state of one direction of a link.
type link struct {
	key       linkKey
	cfg       LinkConfig
	override  bool          // cfg is set; otherwise the network default applies
	busyUntil time.Duration // when the transmitter is free again (Bandwidth)
	stats     Stats
}

// New returns an empty network whose links are perfect until configured, and
// whose clock reads [Epoch]. seed selects the sequence of random decisions.
func New(seed int64) *Network {
	return &Network{
		rng:        rand.New(rand.NewPCG(uint64(seed), pcgStream)),
		links:      make(map[linkKey]*link),
		partitions: make(map[linkKey]time.Duration),
	}
}

// Clock returns the network's virtual clock. Send stamps datagrams with its
// current time; Deliver moves it forward.
func (n *Network) Clock() *Clock { return &n.clock }

// SetDefaultLink sets the configuration of every link direction that has no
// configuration of its own. It applies to datagrams sent from now on. It
// panics if cfg is invalid (see [LinkConfig.Validate]).
func (n *Network) SetDefaultLink(cfg LinkConfig) {
	cfg.mustValidate()
	n.def = cfg
}

// SetLink sets the configuration of the direction from → to only, overriding
// the default. Call it twice, swapping the addresses, for both directions.
// It applies to datagrams sent from now on. It panics if cfg is invalid (see
// [LinkConfig.Validate]).
func (n *Network) SetLink(from, to netip.AddrPort, cfg LinkConfig) {
	cfg.mustValidate()
	l := n.link(from, to)
	l.cfg = cfg
	l.override = true
}

// ClearLink makes the direction from → to follow the default configuration
// again.
func (n *Network) ClearLink(from, to netip.AddrPort) {
	if l, ok := n.links[linkKey{from, to}]; ok {
		l.cfg = LinkConfig{}
		l.override = false
	}
}

// Link returns the configuration in effect for the direction from → to.
func (n *Network) Link(from, to netip.AddrPort) LinkConfig {
	return *n.config(n.links[linkKey{from, to}])
}

// SetTap installs a function that sees every datagram and its fate; nil
// removes it.
func (n *Network) SetTap(tap Tap) { n.tap = tap }

// Stats returns the totals over all links.
func (n *Network) Stats() Stats { return n.stats }

// LinkStats returns the counters of the direction from → to.
func (n *Network) LinkStats(from, to netip.AddrPort) Stats {
	if l, ok := n.links[linkKey{from, to}]; ok {
		return l.stats
	}
	return Stats{}
}

// ResetMaxBacklog forgets the largest backlog seen (Stats.MaxBacklog) on
// every link and the network, so that a test can measure the queue after
// a warm-up.
func (n *Network) ResetMaxBacklog() {
	n.stats.MaxBacklog = 0
	for _, l := range n.links {
		l.stats.MaxBacklog = 0
	}
}

// InFlight returns the number of copies scheduled and not yet delivered or
// dropped; zero means the network is idle.
func (n *Network) InFlight() int { return len(n.queue) }

// NextDelivery returns the arrival time of the earliest datagram in flight,
// and false if none is. A copy that will be dropped on arrival by a partition
// still counts: Deliver at that time disposes of it.
func (n *Network) NextDelivery() (time.Time, bool) {
	if len(n.queue) == 0 {
		return time.Time{}, false
	}
	return epoch.Add(n.queue[0].at), true
}

// NextEvent returns the earliest of the next delivery and the next timer of
// the network's clock, and false if there is neither. A harness loop takes
// the minimum of this and its endpoints' own deadlines as the next instant
// to advance to.
func (n *Network) NextEvent() (time.Time, bool) {
	at, ok := n.queue.next()
	if tm, armed := n.clock.nextTimer(); armed && (!ok || tm < at) {
		at, ok = tm, true
	}
	if !ok {
		return time.Time{}, false
	}
	return epoch.Add(at), true
}

// link returns the state of the direction from → to, creating it on first
// use. Creation allocates; a simulation touches a bounded set of links, so
// the steady state does not.
func (n *Network) link(from, to netip.AddrPort) *link {
	k := linkKey{from, to}
	l, ok := n.links[k]
	if !ok {
		l = &link{key: k}
		n.links[k] = l
	}
	return l
}

// config returns the configuration in effect for l, which may be nil.
func (n *Network) config(l *link) *LinkConfig {
	if l != nil && l.override {
		return &l.cfg
	}
	return &n.def
}

// Send hands a datagram from one address to another to the network at the
// clock's current time. The network copies the bytes, so the caller may
// reuse datagram as soon as Send returns. Whatever happens to the datagram
// is decided here, except a partition that starts while it is in flight.
func (n *Network) Send(from, to netip.AddrPort, datagram []byte) {
	l := n.link(from, to)
	cfg := n.config(l)
	now := n.clock.now
	size := uint64(len(datagram))

	l.stats.Sent++
	l.stats.SentBytes += size
	n.stats.Sent++
	n.stats.SentBytes += size

	switch {
	case n.partitioned(from, to, now):
		n.drop(l, now, datagram, FateDroppedPartition)
		return
	case cfg.MTU > 0 && len(datagram) > cfg.MTU:
		n.drop(l, now, datagram, FateDroppedMTU)
		return
	case cfg.QueueLimit > 0 && l.stats.InFlight >= uint64(cfg.QueueLimit):
		n.drop(l, now, datagram, FateDroppedQueue)
		return
	}

	// A lost datagram still occupied the transmitter: it was lost on the
	// wire, after serialization.
	departure := now
	var mark Fate
	if tx := cfg.transmissionTime(len(datagram)); tx > 0 {
		backlog := cfg.backlog(l.busyUntil - now)
		l.stats.MaxBacklog = max(l.stats.MaxBacklog, backlog)
		n.stats.MaxBacklog = max(n.stats.MaxBacklog, backlog)
		if cfg.marks(n.rng, backlog) {
			mark = FateMarkedCE
			l.stats.MarkedCE++
			n.stats.MarkedCE++
		}
		departure = addSat(max(now, l.busyUntil), tx)
		l.busyUntil = departure
	}

	if chance(n.rng, cfg.Loss) {
		n.drop(l, now, datagram, FateLost|mark)
		return
	}
	n.schedule(l, cfg, departure, datagram, mark)
	if chance(n.rng, cfg.Duplicate) {
		l.stats.Duplicated++
		n.stats.Duplicated++
		n.schedule(l, cfg, departure, datagram, FateDuplicate|mark)
	}
}

// schedule puts one copy of datagram in flight on l, corrupting and delaying
// it as cfg says.
func (n *Network) schedule(l *link, cfg *LinkConfig, departure time.Duration, datagram []byte, fate Fate) {
	buf := n.pool.get(len(datagram))
	copy(buf, datagram)
	if len(buf) > 0 && chance(n.rng, cfg.Corrupt) {
		bit := n.rng.IntN(len(buf) * 8)
		buf[bit/8] ^= 1 << (bit % 8)
		fate |= FateCorrupted
		l.stats.Corrupted++
		n.stats.Corrupted++
	}
	delay := cfg.Delay
	if cfg.Jitter > 0 {
		// Uint64N of Jitter+1 cannot overflow, whatever the Jitter.
		delay = addSat(delay, time.Duration(n.rng.Uint64N(uint64(cfg.Jitter)+1)))
	}
	if chance(n.rng, cfg.Reorder) {
		delay = addSat(delay, 1+time.Duration(n.rng.Int64N(int64(cfg.ReorderDelay))))
	}
	n.queue.push(event{
		at:   addSat(departure, delay),
		seq:  n.seq,
		buf:  buf,
		link: l,
		fate: fate,
	})
	n.seq++
	l.stats.InFlight++
	n.stats.InFlight++
}

// drop accounts for a datagram dropped at Send and shows it to the tap.
func (n *Network) drop(l *link, now time.Duration, datagram []byte, fate Fate) {
	l.stats.countDrop(fate)
	n.stats.countDrop(fate)
	if n.tap != nil {
		n.tap(epoch.Add(now), l.key.from, l.key.to, datagram, fate)
	}
}

// Deliver hands every datagram due at or before now to fn, in order of
// arrival time, ties in the order they were sent (a duplicate right after
// its original). fn receives the copy's bytes, which are only valid during
// the call: the buffer is recycled for a later datagram.
//
// Deliver moves the clock forward to each datagram's arrival time before
// calling fn, so that anything fn sends in reply leaves at the instant the
// datagram arrived, and finally to now. Timers of the clock that fall due
// in between fire at their own instants, before datagrams arriving at the
// same instant (as if the harness had called AdvanceTo first). Datagrams
// sent by fn or by those timers that arrive by now are delivered in the same
// call; on a link without delay, endpoints that always answer never let it
// return. A datagram whose arrival time the clock has already passed (the
// harness advanced beyond it) is delivered late, at the clock's current time,
// since time never runs backwards. In the intended loop the clock already
// reads now and every datagram due is due exactly at now.
//
// Deliver returns the number of copies handed to fn.
func (n *Network) Deliver(now time.Time, fn func(from, to netip.AddrPort, datagram []byte)) int {
	return n.DeliverECN(now, func(from, to netip.AddrPort, datagram []byte, _ bool) { fn(from, to, datagram) })
}

// DeliverECN is Deliver for receivers that read the ECN field: ce reports
// whether the link's queue marked the copy Congestion Experienced
// (LinkConfig.MarkMax).
func (n *Network) DeliverECN(now time.Time, fn func(from, to netip.AddrPort, datagram []byte, ce bool)) int {
	limit := now.Sub(epoch)
	delivered := 0
	for {
		evAt, haveEv := n.queue.next()
		haveEv = haveEv && evAt <= limit
		tmAt, haveTm := n.clock.nextTimer()
		haveTm = haveTm && tmAt <= limit
		switch {
		case haveTm && (!haveEv || tmAt <= evAt):
			n.clock.fireNext(limit)
		case haveEv:
			n.clock.now = max(n.clock.now, evAt)
			if n.arrive(n.queue.pop(), fn) {
				delivered++
			}
		default:
			n.clock.now = max(n.clock.now, limit)
			return delivered
		}
	}
}

// arrive delivers or drops one copy at the clock's current time, recycles
// its buffer, and reports whether it was delivered.
func (n *Network) arrive(ev event, fn func(from, to netip.AddrPort, datagram []byte, ce bool)) bool {
	l := ev.link
	l.stats.InFlight--
	n.stats.InFlight--
	defer n.pool.put(ev.buf)
	if n.partitioned(l.key.from, l.key.to, n.clock.now) {
		l.stats.countDrop(FateDroppedPartition)
		n.stats.countDrop(FateDroppedPartition)
		if n.tap != nil {
			n.tap(n.clock.Now(), l.key.from, l.key.to, ev.buf, ev.fate|FateDroppedPartition)
		}
		return false
	}
	size := uint64(len(ev.buf))
	l.stats.Delivered++
	l.stats.DeliveredBytes += size
	n.stats.Delivered++
	n.stats.DeliveredBytes += size
	if n.tap != nil {
		n.tap(n.clock.Now(), l.key.from, l.key.to, ev.buf, ev.fate|FateDelivered)
	}
	fn(l.key.from, l.key.to, ev.buf, ev.fate&FateMarkedCE != 0)
	return true
}

// chance reports true with probability p, drawing from r only when the
// outcome is uncertain, so that a link without impairments consumes no
// randomness.
func chance(r *rand.Rand, p float64) bool {
	switch {
	case p <= 0:
		return false
	case p >= 1:
		return true
	}
	return r.Float64() < p
}

// addSat adds two non-negative durations, saturating instead of wrapping.
func addSat(a, b time.Duration) time.Duration {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
