package ibcm

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/mad"
)

// epoch is the simulated time every test starts at.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// node is one device: its Manager and a driver that reacts to events the
// way a plain rdma_cm application does, unless the test turns that off.
type node struct {
	t      testing.TB
	w      *world
	addr   netip.Addr
	m      *Manager
	out    Output
	events []Event

	listen     bool    // Listening has a listener for every service ID
	verdict    Verdict // what it then decides (Deliver by default)
	accept     bool    // Accept every connect request at once
	ready      bool    // Ready on every reply
	answerDREQ bool    // Disconnect on every disconnect request
	qpn        uint32
	attrs      map[ID]QPAttrs // the QP attributes each connection got
}

// packet is a MAD in flight.
type packet struct {
	from, to netip.Addr
	mad      [mad.MADSize]byte
	at       time.Time
	seq      int // send order, to keep delivery deterministic
}

// world is a deterministic network of nodes with a virtual clock: MADs
// take delay to arrive, unless drop loses them; dup delivers a copy too,
// jitter reorders.
type world struct {
	t      testing.TB
	now    time.Time
	nodes  []*node
	flight []packet
	seq    int
	delay  time.Duration
	jitter time.Duration
	rng    *rand.Rand
	drop   func(p *packet) bool
	dup    float64
	sent   []packet // every MAD sent, in order
}

func newWorld(t testing.TB, seed uint64) *world {
	return &world{t: t, now: epoch, delay: time.Millisecond, rng: rand.New(rand.NewPCG(seed, 7))}
}

func (w *world) addNode(addr string, guid uint64, mod func(*Config)) *node {
	n := &node{t: w.t, w: w, addr: netip.MustParseAddr(addr), listen: true, accept: true, ready: true,
		answerDREQ: true, qpn: 0x100 * uint32(len(w.nodes)+1), attrs: map[ID]QPAttrs{}}
	cfg := Config{CAGUID: guid, TIDHigh: uint32(len(w.nodes) + 1), IDSeed: uint32(guid) * 2654435761,
		Listening: func(mad.ServiceID, netip.Addr, []byte) Verdict {
			if n.listen {
				return n.verdict
			}
			return NoListener
		}}
	if mod != nil {
		mod(&cfg)
	}
	n.m = New(cfg)
	w.nodes = append(w.nodes, n)
	return n
}

func (w *world) node(a netip.Addr) *node {
	for _, n := range w.nodes {
		if n.addr == a {
			return n
		}
	}
	return nil
}

// flush moves n's output into the network and its events to its driver,
// until the driver has nothing more to do.
func (w *world) flush(n *node) {
	for len(n.out.Sends()) > 0 || len(n.out.Events()) > 0 {
		sends := slices.Clone(n.out.Sends())
		evs := slices.Clone(n.out.Events())
		n.out.Reset()
		for _, s := range sends {
			w.transmit(packet{from: n.addr, to: s.To, mad: s.MAD})
		}
		for _, e := range evs {
			n.events = append(n.events, e)
			n.react(e)
		}
	}
}

func (w *world) transmit(p packet) {
	p.at = w.now.Add(w.delay)
	w.seq++
	p.seq = w.seq
	w.sent = append(w.sent, p)
	if w.drop != nil && w.drop(&p) {
		return
	}
	if w.jitter > 0 {
		p.at = p.at.Add(time.Duration(w.rng.Int64N(int64(w.jitter))))
	}
	w.flight = append(w.flight, p)
	if w.dup > 0 && w.rng.Float64() < w.dup {
		q := p
		q.at = q.at.Add(time.Duration(w.rng.Int64N(int64(w.delay + w.jitter + 1))))
		w.flight = append(w.flight, q)
	}
}

// step advances to the next packet delivery or timer, at most until end,
// and runs it. It returns false when nothing is due before end.
func (w *world) step(end time.Time) bool {
	next, ok := time.Time{}, false
	for _, p := range w.flight {
		if !ok || p.at.Before(next) {
			next, ok = p.at, true
		}
	}
	for _, n := range w.nodes {
		if d, has := n.m.Deadline(); has && (!ok || d.Before(next)) {
			next, ok = d, true
		}
	}
	if !ok || next.After(end) {
		w.now = end
		return false
	}
	w.now = next
	// Deliver every packet due now, in send order.
	slices.SortStableFunc(w.flight, func(a, b packet) int { return a.at.Compare(b.at)*2 + cmpInt(a.seq, b.seq) })
	for len(w.flight) > 0 && !w.flight[0].at.After(w.now) {
		p := w.flight[0]
		w.flight = w.flight[1:]
		if n := w.node(p.to); n != nil {
			n.m.HandleMAD(p.from, p.mad[:], w.now, &n.out)
			w.flush(n)
		}
	}
	for _, n := range w.nodes {
		n.m.OnTimer(w.now, &n.out)
		w.flush(n)
	}
	return true
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// run steps until d has passed.
func (w *world) run(d time.Duration) {
	end := w.now.Add(d)
	for w.step(end) {
	}
}

// react is the driver's default behaviour.
func (n *node) react(e Event) {
	switch e.Type {
	case EventConnectRequest:
		if n.accept {
			n.acceptNow(e.ID, nil)
		}
	case EventReply:
		n.attrs[e.ID] = e.QP
		if n.ready {
			if err := n.m.Ready(e.ID, []byte("rtu"), &n.out); err != nil {
				n.t.Errorf("%v: Ready: %v", n.addr, err)
			}
		}
	case EventDisconnectRequest:
		if n.answerDREQ {
			if err := n.m.Disconnect(e.ID, []byte("drep"), n.w.now, &n.out); err != nil {
				n.t.Errorf("%v: Disconnect: %v", n.addr, err)
			}
		}
	}
}

func (n *node) acceptNow(id ID, pd []byte) {
	n.qpn++
	q, err := n.m.Accept(id, AcceptParams{QPN: n.qpn, StartingPSN: 0x500000 + n.qpn, ResponderResources: 4,
		InitiatorDepth: 2, RNRRetryCount: 7, PrivateData: pd}, n.w.now, &n.out)
	if err != nil {
		n.t.Errorf("%v: Accept: %v", n.addr, err)
		return
	}
	n.attrs[id] = q
}

// connect starts a connection from n to peer with n's next QPN.
func (n *node) connect(peer *node, pd []byte) ID {
	n.qpn++
	return n.connectQPN(peer, n.qpn, pd)
}

func (n *node) connectQPN(peer *node, qpn uint32, pd []byte) ID {
	id, err := n.m.Connect(n.params(peer, qpn, pd), n.w.now, &n.out)
	if err != nil {
		n.t.Fatalf("%v: Connect: %v", n.addr, err)
	}
	n.w.flush(n)
	return id
}

func (n *node) params(peer *node, qpn uint32, pd []byte) ConnectParams {
	return ConnectParams{Peer: peer.addr, ServiceID: mad.RDMAServiceID(mad.PortSpaceTCP, 7174), QPN: qpn,
		StartingPSN: 0x100000 + qpn, ResponderResources: 1, InitiatorDepth: 3, RetryCount: 7, RNRRetryCount: 6,
		PathMTU: 3, Path: mad.Path{LocalGID: mad.GIDFromAddr(n.addr), RemoteGID: mad.GIDFromAddr(peer.addr),
			FlowLabel: mad.RDMACMFlowLabel(0xd519, 7174), HopLimit: 64}, PrivateData: pd}
}

// eventsOf returns the types of n's events for id, in order.
func (n *node) eventsOf(id ID) []EventType {
	var ts []EventType
	for _, e := range n.events {
		if e.ID == id {
			ts = append(ts, e.Type)
		}
	}
	return ts
}

// last returns n's last event of type t.
func (n *node) last(t EventType) (Event, bool) {
	for i := len(n.events) - 1; i >= 0; i-- {
		if n.events[i].Type == t {
			return n.events[i], true
		}
	}
	return Event{}, false
}

func (n *node) count(t EventType) int {
	k := 0
	for _, e := range n.events {
		if e.Type == t {
			k++
		}
	}
	return k
}

// sentAttrs returns the attributes of the MADs w carried from a to b.
func (w *world) sentAttrs(from, to *node) []mad.AttrID {
	var as []mad.AttrID
	for _, p := range w.sent {
		if p.from == from.addr && p.to == to.addr {
			h, _ := mad.ParseHeader(p.mad[:])
			as = append(as, h.AttrID)
		}
	}
	return as
}

// check verifies the Manager's internal consistency: every index points at
// a live record that points back, the timer heap holds exactly the records
// with a timer, the half-open counts match.
func (m *Manager) check() error {
	for k, c := range m.byRemoteID {
		if m.conns[c.id] != c || !c.inRemoteID || (remoteKey{c.remoteID, c.remoteGUID}) != k {
			return fmt.Errorf("byRemoteID %v -> %d inconsistent", k, c.id)
		}
	}
	for k, c := range m.byRemoteQPN {
		if m.conns[c.id] != c || !c.inRemoteQPN || (remoteKey{c.remoteQPN, c.remoteGUID}) != k {
			return fmt.Errorf("byRemoteQPN %v -> %d inconsistent", k, c.id)
		}
	}
	for k, c := range m.bySIDR {
		if m.conns[c.id] != c || !c.inSIDR || c.sidr != k {
			return fmt.Errorf("bySIDR %v inconsistent", k)
		}
	}
	timed, half, perSource, tw := 0, 0, map[netip.Addr]int{}, 0
	for id, c := range m.conns {
		if c.id != id || id == 0 {
			return fmt.Errorf("record %d has ID %d", id, c.id)
		}
		if c.timer != timerNone {
			timed++
			if c.heapIdx < 0 || c.heapIdx >= len(m.timers) || m.timers[c.heapIdx] != c {
				return fmt.Errorf("%d: timer not in the heap", id)
			}
		} else if c.heapIdx >= 0 {
			return fmt.Errorf("%d: in the heap without a timer", id)
		}
		if c.halfOpen {
			half++
			perSource[c.peer]++
		}
		if c.state == StateTimewait {
			tw++
			if c.timer != timerTimewait {
				return fmt.Errorf("%d: timewait without its timer", id)
			}
		}
		if c.state == StateIdle {
			return fmt.Errorf("%d: idle record kept", id)
		}
	}
	if timed != len(m.timers) {
		return fmt.Errorf("%d timers in the heap, %d records with one", len(m.timers), timed)
	}
	if half != m.halfOpen || len(perSource) != len(m.perSource) {
		return fmt.Errorf("half-open %d counted %d; %d sources counted %d", half, m.halfOpen, len(perSource), len(m.perSource))
	}
	for a, k := range perSource {
		if m.perSource[a] != k {
			return fmt.Errorf("source %v: %d half-open, counted %d", a, k, m.perSource[a])
		}
	}
	n := 0
	for c := m.hoHead; c != nil; c = c.next {
		n++
	}
	k := 0
	for c := m.twHead; c != nil; c = c.twNext {
		k++
	}
	if n != half || k != tw {
		return fmt.Errorf("lists: %d half-open (want %d), %d timewait (want %d)", n, half, k, tw)
	}
	for i := 1; i < len(m.timers); i++ {
		if m.timers.Less(i, (i-1)/2) {
			return fmt.Errorf("timer heap out of order at %d", i)
		}
	}
	return nil
}

func mustCheck(t testing.TB, ns ...*node) {
	t.Helper()
	for _, n := range ns {
		if err := n.m.check(); err != nil {
			t.Fatalf("%v: %v", n.addr, err)
		}
	}
}
