package transport

import (
	"bytes"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// region is a registration of testMemory.
type region struct {
	pd     uint32
	va     uint64
	buf    []byte
	access ibv.AccessFlags
}

// testMemory is a Memory over a map of regions, with lkey == rkey. It
// counts outstanding Refs so that tests can check every one is released.
type testMemory struct {
	regions map[uint32]*region
	next    uint32
	refs    int
	// invalidated records the rkeys SEND_WITH_INVALIDATE invalidated.
	invalidated []uint32
}

func newTestMemory() *testMemory {
	return &testMemory{regions: make(map[uint32]*region), next: 1}
}

// register registers buf at va and returns its key (index<<8 | 0x5A).
func (m *testMemory) register(pd uint32, buf []byte, va uint64, access ibv.AccessFlags) uint32 {
	key := m.next<<8 | 0x5A
	m.next++
	m.regions[key] = &region{pd: pd, va: va, buf: buf, access: access}
	return key
}

func (m *testMemory) deregister(key uint32) { delete(m.regions, key) }

func (m *testMemory) lookup(pd, key uint32, va uint64, length uint32, need ibv.AccessFlags) ([]byte, error) {
	r := m.regions[key]
	switch {
	case r == nil:
		return nil, ErrInvalidKey
	case r.pd != pd:
		return nil, ErrWrongPD
	case need&^r.access != 0:
		return nil, ErrAccessDenied
	case va < r.va || va-r.va > uint64(len(r.buf)) || uint64(length) > uint64(len(r.buf))-(va-r.va):
		return nil, ErrOutOfBounds
	}
	off := va - r.va
	return r.buf[off : off+uint64(length)], nil
}

func (m *testMemory) Remote(pd, rkey uint32, va uint64, length uint32, need ibv.AccessFlags) ([]byte, Ref, error) {
	b, err := m.lookup(pd, rkey, va, length, need)
	if err != nil {
		return nil, nil, err
	}
	m.refs++
	return b, m, nil
}

func (m *testMemory) Local(pd, lkey uint32, addr uint64, length uint32, need ibv.AccessFlags) ([]byte, Ref, error) {
	return m.Remote(pd, lkey, addr, length, need)
}

func (m *testMemory) Release() { m.refs-- }

func (m *testMemory) InvalidateRKey(pd, rkey uint32) error {
	r := m.regions[rkey]
	if r == nil || r.pd != pd {
		return ErrInvalidKey
	}
	delete(m.regions, rkey)
	m.invalidated = append(m.invalidated, rkey)
	return nil
}

// testCQ collects completions; limit > 0 makes it refuse beyond that many.
type testCQ struct {
	c     []Completion
	limit int
}

func (q *testCQ) Push(c *Completion) bool {
	if q.limit > 0 && len(q.c) >= q.limit {
		return false
	}
	q.c = append(q.c, *c)
	return true
}

// take returns and clears the collected completions.
func (q *testCQ) take() []Completion {
	c := q.c
	q.c = nil
	return c
}

// endpoint is a QP with its memory, CQs and output.
type endpoint struct {
	qp       *QP
	mem      *testMemory
	scq, rcq *testCQ
	out      Output
	name     string
}

// pairOpts configures newPair.
type pairOpts struct {
	mtu       int
	srq       bool // the responder (b) uses an SRQ
	sqSigAll  bool
	timeout   uint8
	retryCnt  uint8
	rnrRetry  uint8
	minRNR    uint8
	maxSendWR int
	locks     *AtomicLocks
	rdAtomic  int
	access    ibv.AccessFlags
	psnA      psn.PSN // a's SQ PSN (b's RQ PSN)
	psnB      psn.PSN
	sr        bool // both QPs agreed to selective repeat
}

func defaultOpts() pairOpts {
	return pairOpts{
		mtu: 1024, timeout: 14, retryCnt: 7, rnrRetry: 7, minRNR: 12,
		maxSendWR: 64, rdAtomic: 16,
		access: ibv.AccessRemoteWrite | ibv.AccessRemoteRead | ibv.AccessRemoteAtomic,
		psnA:   0xFFFFF0, // wraps during the tests
		psnB:   5000,
	}
}

const (
	qpnA = 0x000011
	qpnB = 0x000022
	pd   = 1
)

func newEndpoint(name string, qpn uint32, o pairOpts, srq *SRQ) *endpoint {
	e := &endpoint{mem: newTestMemory(), scq: new(testCQ), rcq: new(testCQ), name: name}
	e.qp = NewQP(Config{
		QPN: qpn, PD: pd, MaxSendWR: o.maxSendWR, MaxRecvWR: 64, MaxSGE: 4, MaxInline: 256,
		Memory: e.mem, SendCQ: e.scq, RecvCQ: e.rcq, SRQ: srq, SQSigAll: o.sqSigAll,
		AtomicLocks: o.locks,
	})
	return e
}

func (e *endpoint) connect(t testing.TB, o pairOpts, dest uint32, sq, rq psn.PSN) {
	t.Helper()
	qp := e.qp
	qp.SetState(ibv.QPStateInit)
	must(t, qp.SetPathMTU(o.mtu))
	qp.SetDestQPN(dest)
	qp.SetSQPSN(sq)
	qp.SetRQPSN(rq)
	must(t, qp.SetTimeout(o.timeout))
	must(t, qp.SetRetryCnt(o.retryCnt))
	must(t, qp.SetRNRRetry(o.rnrRetry))
	must(t, qp.SetMinRNRTimer(o.minRNR))
	must(t, qp.SetMaxRdAtomic(o.rdAtomic))
	must(t, qp.SetMaxDestRdAtomic(o.rdAtomic))
	qp.SetAccessFlags(o.access)
	qp.SetSelectiveRepeat(o.sr)
	qp.SetDest(e.name)
	qp.SetState(ibv.QPStateRTR)
	qp.SetState(ibv.QPStateRTS)
}

// newPair returns two connected QPs: a (QPN 0x11) and b (QPN 0x22).
func newPair(t testing.TB, o pairOpts) (a, b *endpoint) {
	t.Helper()
	a = newEndpoint("a", qpnA, o, nil)
	var srq *SRQ
	if o.srq {
		srq = NewSRQ(64, 4)
	}
	b = newEndpoint("b", qpnB, o, srq)
	a.connect(t, o, qpnB, o.psnA, o.psnB)
	b.connect(t, o, qpnA, o.psnB, o.psnA)
	return a, b
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var (
	addrA = [4]byte{127, 0, 0, 1}
	addrB = [4]byte{127, 0, 0, 2}
)

// frame appends the ICRC the I/O layer would, computed from fake IPv4
// addresses, so that the packet can go through wire.Packet.Parse.
func frame(dst []byte, pkt []byte, src, dstAddr [4]byte) []byte {
	var p wire.Packet
	hl := wire.BTHLen
	// Split headers and payload with a parse of the packet plus a dummy
	// ICRC; the builders' output is always parseable.
	tmp := append(append(dst[:0], pkt...), 0, 0, 0, 0)
	if err := p.Parse(tmp, 0); err == nil {
		hl = len(p.HeaderBytes())
		crc := wire.ICRCv4(src, dstAddr, 0, 0xC000, wire.RoCEv2Port, pkt[:hl], p.Payload)
		return wire.AppendICRC(tmp[:len(pkt)], crc)
	}
	return tmp
}

// checkICRC recomputes the ICRC of a parsed packet.
func checkICRC(p *wire.Packet, src, dst [4]byte) bool {
	return wire.ICRCv4(src, dst, 0, 0xC000, wire.RoCEv2Port, p.HeaderBytes(), p.Payload) == p.StoredICRC()
}

// link delivers packets between two endpoints in tests that script losses
// themselves.
type link struct {
	t    testing.TB
	a, b *endpoint
	now  time.Time
	buf  []byte
	pkt  wire.Packet
	// whole assembles a zero-copy packet (OutPacket.Payload).
	whole []byte
	// drop, if set, decides per packet whether it is lost.
	drop func(from *endpoint, p *wire.Packet) bool
	// log records every delivered packet's opcode and PSN.
	log []string
}

func newLink(t testing.TB, a, b *endpoint) *link {
	return &link{t: t, a: a, b: b, now: time.Unix(1_000_000, 0)}
}

// parse frames and parses one outgoing packet.
func (l *link) parse(from *endpoint, b []byte) *wire.Packet {
	src, dst := addrA, addrB
	if from == l.b {
		src, dst = addrB, addrA
	}
	l.buf = frame(l.buf, b, src, dst)
	if err := l.pkt.Parse(l.buf, from.qp.PathMTU()); err != nil {
		l.t.Fatalf("%s sent an unparseable packet: %v (% x)", from.name, err, b)
	}
	if !checkICRC(&l.pkt, src, dst) {
		l.t.Fatalf("ICRC mismatch")
	}
	return &l.pkt
}

// step moves every pending packet once in each direction; it reports
// whether anything moved.
func (l *link) step() bool {
	moved := false
	for _, e := range []*endpoint{l.a, l.b} {
		peer := l.b
		if e == l.b {
			peer = l.a
		}
		if e.out.Len() == 0 {
			continue
		}
		// Copy out: delivering appends to peer.out, not e.out, but e's
		// buffers must stay valid while we walk them.
		pkts := e.out.Packets()
		for i := range pkts {
			raw := pkts[i].Bytes
			if pkts[i].Payload != nil {
				l.whole = pkts[i].AppendTo(l.whole[:0])
				raw = l.whole
			}
			p := l.parse(e, raw)
			if l.drop != nil && l.drop(e, p) {
				continue
			}
			l.log = append(l.log, e.name+">"+p.BTH.Opcode().String()+"@"+p.BTH.PSN().String())
			peer.qp.HandlePacket(p, l.now, &peer.out)
		}
		e.out.Reset()
		moved = true
	}
	return moved
}

// run delivers until quiet, firing timers when nothing moves, for at most
// limit of virtual time.
func (l *link) run(limit time.Duration) {
	end := l.now.Add(limit)
	for i := 0; i < 1_000_000; i++ {
		if l.step() {
			continue
		}
		next, ok := time.Time{}, false
		for _, e := range []*endpoint{l.a, l.b} {
			if d, armed := e.qp.Deadline(); armed && (!ok || d.Before(next)) {
				next, ok = d, true
			}
		}
		if !ok || next.After(end) {
			return
		}
		if next.After(l.now) {
			l.now = next
		}
		for _, e := range []*endpoint{l.a, l.b} {
			e.qp.OnTimer(l.now, &e.out)
		}
	}
	l.t.Fatal("link did not settle")
}

// post posts w on e.
func (l *link) post(e *endpoint, w SendWQE) {
	l.t.Helper()
	if err := e.qp.PostSend(&w, l.now, &e.out); err != nil {
		l.t.Fatalf("PostSend: %v", err)
	}
}

func (l *link) recv(e *endpoint, wrid uint64, sgl ...SGE) {
	l.t.Helper()
	if err := e.qp.PostRecv(&RecvWQE{WRID: wrid, SGL: sgl}); err != nil {
		l.t.Fatalf("PostRecv: %v", err)
	}
}

// pattern returns n bytes of a recognisable pattern.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>8)
	}
	return b
}

func wantCompletions(t testing.TB, got []Completion, want ...Completion) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d completions %+v, want %d %+v", len(got), got, len(want), want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("completion %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

func wantBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: differ at byte %d of %d/%d", what, i, len(got), len(want))
	}
}

// itoa formats v, for test names.
func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return string(b[i:])
}
