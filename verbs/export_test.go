package verbs

import (
	"io"
	"net/netip"

	"github.com/goroce/goroce/internal/gsi"
	"github.com/goroce/goroce/internal/transport"
	"github.com/goroce/goroce/internal/wire"
)

// Peepholes for the black-box tests (package verbs_test): the few internal
// states and hooks they look at or drive where the public API cannot, each
// for the assertion named beside it. Tests of the internals themselves are
// in package verbs (*_internal_test.go).

// Push adds a completion as the device would (CQ, async and Wait tests:
// completions without traffic); it reports whether the CQ refused it.
func (cq *CQ) Push(wc WorkCompletion, solicited bool) (overflow bool) {
	return cq.push(nil, wc, solicited)
}

// OverrunCount is the number of completions a full CQ dropped.
func (cq *CQ) OverrunCount() uint64 { return cq.overrunCount() }

// ParkedWaiters is the number of goroutines parked in cq.Wait.
func ParkedWaiters(cq *CQ) int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.wait.waiters
}

// AsyncQueueLen is how many asynchronous events wait at most.
const AsyncQueueLen = asyncQueueLen

// SRQTake takes a receive work request from s as a QP's responder does;
// length is the sum of its SGEs' lengths.
func SRQTake(s *SRQ) (wr RecvWR, length uint32, ok bool) {
	w := transport.RecvWQE{SGL: make([]transport.SGE, 0, 8)}
	if !(*srqSource)(s).TakeRecv(&w) {
		return RecvWR{}, 0, false
	}
	wr.WRID = w.WRID
	for _, g := range w.SGL {
		wr.SGList = append(wr.SGList, SGE{Addr: g.Addr, Length: g.Length, LKey: g.LKey})
	}
	return wr, uint32(sgListLength(wr.SGList)), true
}

// SRQLimitEvents is the number of SRQ limit events s raised.
func SRQLimitEvents(s *SRQ) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limitEvents
}

// QPSnapshot is the transport's view of qp (queue depths, PSNs,
// outstanding READs and atomics).
func QPSnapshot(qp *QP) transport.Snapshot {
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	return qp.tq.Snapshot()
}

// EmptyQueues empties the transport's queues of a QP in RTS, as a move to
// RESET and back would, without a Modify (a test of allocations posts
// until the queue is full, again and again).
func EmptyQueues(qp *QP) {
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	qp.tq.SetState(QPStateReset)
	qp.tq.SetState(QPStateRTS)
}

// ForceState puts qp in state s, which no verb may reach directly (SQE),
// as the transport does on a send error.
func ForceState(qp *QP, s QPState) {
	qp.mu.Lock()
	qp.xmu.Lock()
	qp.state.Store(int32(s))
	if qp.tq != nil {
		qp.tq.SetState(s)
	}
	qp.xmu.Unlock()
	qp.mu.Unlock()
}

// QPSourcePort is the UDP source port of qp's connection.
func QPSourcePort(qp *QP) uint16 {
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	return qp.sender.Port()
}

// GSIReceive hands p, from from, to a new QP 1 of a device at local with
// receiver r, as the receive path does, and returns what that QP 1
// counted and checkGSI's verdict on p (the MAD, or why not).
func GSIReceive(p *wire.Packet, from netip.AddrPort, local netip.Addr, r gsi.Receiver) (rcvd, dropped uint64, mad []byte, err error) {
	g := &gsiPort{dev: &Device{addr: local}}
	g.SetReceiver(r)
	g.receive(p, from, netip.Addr{})
	mad, err = checkGSI(p)
	return g.rcvd.Load(), g.dropped.Load(), mad, err
}

// QPHoldsOutput reports whether qp holds packet buffers (an idle QP gives
// them back to the device's pool).
func QPHoldsOutput(qp *QP) bool {
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	return qp.out != nil
}

// SetCapture writes every packet d sends or accepts to w as pcap (nil
// stops). The tap is the first receive queue's socket's: with several
// queues (DeviceConfig.ReceiveQueues) it misses what the others receive
// and the replies they send, which the tests that capture need not care
// about: a device's first QP takes the first queue.
func SetCapture(d *Device, w io.Writer) error { return d.eng.conn.SetCapture(w) }

// QPMemory is qp's memory as its responder reaches it (window tests),
// under the QP's xmu as the transport holds it (it guards the key memos).
func QPMemory(qp *QP) transport.Memory { return lockedMemory{qp} }

type lockedMemory struct{ qp *QP }

func (m lockedMemory) Remote(pd, rkey uint32, va uint64, length uint32, need AccessFlags) ([]byte, transport.Ref, error) {
	m.qp.xmu.Lock()
	defer m.qp.xmu.Unlock()
	return (*qpMemory)(m.qp).Remote(pd, rkey, va, length, need)
}

func (m lockedMemory) Local(pd, lkey uint32, addr uint64, length uint32, need AccessFlags) ([]byte, transport.Ref, error) {
	m.qp.xmu.Lock()
	defer m.qp.xmu.Unlock()
	return (*qpMemory)(m.qp).Local(pd, lkey, addr, length, need)
}

// WatchWithdrawal returns a function that reports whether the region mw
// is bound to now has started to be withdrawn (Dealloc, invalidation).
func WatchWithdrawal(mw *MW) (withdrawn func() bool) {
	r := mw.binding.Load()
	return func() bool { return r.refs.Load()&regionDead != 0 }
}

// LookupMR and LookupQP are the receive path's lookups by key and QP
// number.
func (d *Device) LookupMR(key uint32) *MR { return d.lookupMR(key) }
func (d *Device) LookupQP(qpn uint32) *QP { return d.lookupQP(qpn) }

// SetNextQPN makes n the next QP number tried.
func (d *Device) SetNextQPN(n uint32) {
	d.qpnMu.Lock()
	defer d.qpnMu.Unlock()
	d.qpnCounter = d.qpnPerm.decrypt(n)
	d.qpnQueue = n % uint32(len(d.eng.rxqs)) // n's receive queue is next
}

// The QP number range, the largest MaxMR and MaxQP, and the defaults of
// Open.
const (
	QPNMin   = qpnMin
	QPNMax   = qpnMax
	CapMaxMR = capMaxMR
	CapMaxQP = capMaxQP
)

var (
	DefaultActiveMTU  = defaultActiveMTU
	DefaultDeviceAttr = defaultDeviceAttr
)

// BatchPoint names a point at the end of a receive batch.
type BatchPoint = batchPoint

const (
	BatchStart = batchStart // before any QP's output is sent
	BatchFlush = batchFlush // QPs' own packets sent, replies not flushed
)

// SetEndBatchHook makes every device's receive path call h at both
// points of the end of each batch (nil removes it).
func SetEndBatchHook(h func(*Device, BatchPoint)) {
	if h == nil {
		endBatchHook.Store(nil)
		return
	}
	endBatchHook.Store(&h)
}

// DefaultPKey is the P_Key of every goroce QP.
const DefaultPKey = defaultPKey

// SubCounters returns a - b, counter by counter.
func SubCounters(a, b Counters) Counters {
	var c Counters
	for _, f := range counterFields {
		*f.ptr(&c) = *f.ptr(&a) - *f.ptr(&b)
	}
	return c
}

// TimerAsleep reports whether d's timer goroutine is asleep and how many
// QP deadlines it holds (TestTimerWakesForEarlierDeadline: it is asleep on
// a later deadline before the earlier one is filed).
func TimerAsleep(d *Device) (asleep bool, deadlines int) {
	d.eng.tmu.Lock()
	defer d.eng.tmu.Unlock()
	return d.eng.sleeping, len(d.eng.timers)
}

// RemoteWriteWaiters is how many goroutines wait in mr.WaitRemoteWrite
// (TestRemoteWrite*: the waiters are parked before the store).
func RemoteWriteWaiters(mr *MR) int {
	if ww := mr.writes.waiters.Load(); ww != nil {
		return int(ww.waiting.Load())
	}
	return 0
}

// DoorbellHooks drive the doorbell of d's device (doorbell.go) for its
// tests: clock, if not nil, replaces its clock; hold is called by the
// flusher before it sends a batch, waiting by a drain before it waits.
// Set before traffic, not while it flows.
func DoorbellHooks(d *Device, clock func() int64, hold, waiting func()) {
	db := d.eng.doorbell
	db.mu.Lock()
	defer db.mu.Unlock()
	if clock != nil {
		db.clock = clock
	}
	db.hold, db.waiting = hold, waiting
}

// DoorbellCost sets the duration of the last inline send, which decides
// whether a post comes back to back.
func DoorbellCost(d *Device, ns int64) { d.eng.doorbell.cost.Store(ns) }

// Corked is how many of qp's transmissions wait in the doorbell.
func Corked(qp *QP) int { return int(qp.corked.Load()) }

// ReceiveQueueDelivered returns how many packets each receive queue of d
// delivered (DeviceConfig.ReceiveQueues), in queue order.
func ReceiveQueueDelivered(d *Device) []uint64 {
	n := make([]uint64, len(d.eng.rxqs))
	for i, q := range d.eng.rxqs {
		n[i] = q.conn.Counters().Delivered.Load()
	}
	return n
}

// ReceiveQueueOffHome returns how many packets the receive queues of d
// handled for QPs whose home is another queue.
func ReceiveQueueOffHome(d *Device) uint64 {
	var n uint64
	for _, q := range d.eng.rxqs {
		n += q.offHome.Load()
	}
	return n
}
