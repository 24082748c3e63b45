package cm

import (
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/gsi"
	"github.com/goroce/goroce/internal/ibcm"
	"github.com/goroce/goroce/internal/mad"
	"github.com/goroce/goroce/verbs"
)

// An agent is the IB CM of one device: an ibcm.Manager driven by one
// goroutine from the device's QP 1 and the Manager's deadline, and the
// IDs whose connections it holds.
//
// Inbound flow:
//
//  1. The device's receive goroutine hands each MAD for QP 1 to
//     ReceiveMAD, which copies it into rx without blocking (a full queue
//     drops it; the peer retransmits) and returns.
//  2. run takes it under state.mu and calls Manager.HandleMAD; a new
//     request first meets listening, which picks the rdma_cm listener.
//  3. process sends the Manager's MADs from QP 1, then turns its events
//     into rdma_cm events on the IDs (events.go), which may move QPs and
//     call the Manager again (a REP is answered with an RTU once the QP is
//     in RTS).
//  4. Timers: run sleeps until the Manager's deadline, or until kick says
//     an application's call changed it.
type agent struct {
	port gsi.Port
	dev  *verbs.Device

	// Guarded by state.mu.
	mgr   *ibcm.Manager
	out   ibcm.Output
	ids   map[ibcm.ID]*ID  // the IDs of the Manager's connections
	byQPN map[uint32]*ID   // passive IDs waiting for the RTU, by QPN (EventCommEst)
	users map[*ID]struct{} // every ID on the device, for device removal
	// match is the listener listening chose for the request HandleMAD is
	// processing, and the request's rdma_cm header.
	match    *ID
	matchHdr mad.CMAHeader
	removed  bool

	rx      *rxQueue
	cur     rxMAD // the MAD receive handles; the agent's goroutine's
	commEst chan uint32
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}

	rxDropped  atomic.Uint64 // MADs dropped on a full rx queue
	sendErrors atomic.Uint64 // MADs QP 1 could not send
}

func newAgent(p gsi.Port) *agent {
	dev, _ := p.Device().(*verbs.Device)
	a := &agent{
		port:    p,
		dev:     dev,
		ids:     make(map[ibcm.ID]*ID),
		byQPN:   make(map[uint32]*ID),
		users:   make(map[*ID]struct{}),
		rx:      newRxQueue(),
		commEst: make(chan uint32, 64),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	ackDelay := uint8(ibcm.DefaultAckDelay)
	if dev != nil {
		ackDelay = uint8(dev.Query().LocalCAAckDelay)
	}
	a.mgr = ibcm.New(ibcm.Config{
		CAGUID:   p.NodeGUID(),
		AckDelay: ackDelay,
		// The kernel forms TIDs from its MAD agent's number and starts
		// comm IDs from a random operand; random values keep a restarted
		// process from reusing the comm IDs and TIDs peers remember.
		TIDHigh:       rand.Uint32()&0x7FFFFFFF | 1,
		IDSeed:        rand.Uint32(),
		Listening:     a.listening,
		Disconnecting: a.disconnecting,
	})
	return a
}

// start attaches the agent to QP 1 and starts its goroutine.
func (a *agent) start() {
	a.port.SetReceiver(a)
	go a.run()
}

// rxFilter, when set (by tests only), drops the MADs it returns true
// for, as a lossy network would.
var rxFilter atomic.Pointer[func(from netip.AddrPort, mad []byte) bool]

// ReceiveMAD queues a MAD from the device's receive path (gsi.Receiver).
func (a *agent) ReceiveMAD(from netip.AddrPort, _ netip.Addr, b []byte) {
	if f := rxFilter.Load(); f != nil && (*f)(from, b) {
		return
	}
	if !a.rx.push(from, b) {
		a.rxDropped.Add(1)
	}
}

// CommEstablished queues a QP's first packet in RTR (gsi.Receiver). A lost
// notice costs nothing: the REP's retransmission brings the RTU again.
func (a *agent) CommEstablished(qpn uint32) {
	select {
	case a.commEst <- qpn:
	default:
	}
}

// kick wakes the goroutine to re-read the Manager's deadline.
func (a *agent) kick() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// run is the agent's goroutine.
func (a *agent) run() {
	defer close(a.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		lock()
		if a.removed {
			unlock()
			return
		}
		now := time.Now()
		a.mgr.OnTimer(now, &a.out)
		a.process(now)
		deadline, ok := a.mgr.Deadline()
		unlock()
		if ok {
			timer.Reset(time.Until(deadline))
		} else {
			timer.Stop()
		}
		select {
		case <-a.stop:
			return
		case <-a.rx.ready:
			a.receive()
		case qpn := <-a.commEst:
			a.communicationEstablished(qpn)
		case <-timer.C:
		case <-a.wake:
		}
	}
}

// rxBatch is how many MADs receive handles under one hold of the lock
// before it lets the timers and the applications' calls have it.
const rxBatch = 256

// receive handles what waits in rx, rxBatch MADs at a time under one lock.
func (a *agent) receive() {
	lock()
	defer unlock()
	if a.removed {
		return
	}
	now := time.Now()
	m := &a.cur
	for i := 0; i < rxBatch; i++ {
		if !a.rx.pop(m) {
			return
		}
		a.mgr.HandleMAD(m.from.Addr(), m.mad[:], now, &a.out)
		a.process(now)
		a.match = nil
	}
	if a.rx.len() > 0 {
		select { // come back after the timers
		case a.rx.ready <- struct{}{}:
		default:
		}
	}
}

// communicationEstablished tells the Manager that a passive connection's
// QP received data before the RTU: the RTU was lost, the peer is
// connected (ib_cm_notify with IB_EVENT_COMM_EST).
func (a *agent) communicationEstablished(qpn uint32) {
	lock()
	defer unlock()
	id := a.byQPN[qpn]
	if id == nil || a.removed {
		return
	}
	_ = a.mgr.Established(id.cmID, &a.out)
	a.process(time.Now())
}

// process sends the Manager's MADs and handles its events, until the
// Output stays empty. The caller holds state.mu.
func (a *agent) process(now time.Time) {
	for len(a.out.Sends()) > 0 || len(a.out.Events()) > 0 {
		for i := range a.out.Sends() {
			a.transmit(&a.out.Sends()[i])
		}
		events := append([]ibcm.Event(nil), a.out.Events()...)
		a.out.Reset()
		for i := range events {
			a.handle(&events[i], now)
		}
	}
}

// transmit sends a MAD from QP 1 to QP 1 of its destination. A MAD that
// cannot be sent is lost, as on a wire: the Manager's retransmission
// covers it.
func (a *agent) transmit(s *ibcm.Send) {
	to := netip.AddrPortFrom(s.To, peerUDPPort(s.To))
	if err := a.port.Send(to, s.MAD[:]); err != nil {
		a.sendErrors.Add(1)
	}
}

// flushOut transmits what an application's call made the Manager send and
// handles the events it reported. The caller holds state.mu.
func (a *agent) flushOut(out *ibcm.Output, now time.Time) {
	for i := range out.Sends() {
		a.transmit(&out.Sends()[i])
	}
	events := append([]ibcm.Event(nil), out.Events()...)
	out.Reset()
	for i := range events {
		a.handle(&events[i], now)
	}
	a.process(now)
	a.kick()
}

// attach records id as a user of the device. The caller holds state.mu.
func (a *agent) attach(id *ID) {
	id.agent = a
	a.users[id] = struct{}{}
}

// detach forgets id's connection and use of the device. The caller holds
// state.mu.
func (a *agent) detach(id *ID) {
	a.forget(id)
	delete(a.users, id)
}

// forget drops the Manager's record of id from the maps (the record
// itself may stay, in timewait).
func (a *agent) forget(id *ID) {
	if id.cmID != 0 {
		delete(a.ids, id.cmID)
		id.cmID = 0
	}
	if id.qp != nil && a.byQPN[id.qp.QPN()] == id {
		delete(a.byQPN, id.qp.QPN())
	}
}

// removeLocked takes the agent off a device being closed: each connection
// is ended as the kernel's CM ends a destroyed ID's (REJ, DREQ, DREP),
// while QP 1 can still send, and each ID on the device is told
// EventDeviceRemoval. The caller holds state.mu.
func (a *agent) removeLocked() {
	now := time.Now()
	var out ibcm.Output
	for cmID, id := range a.ids {
		_ = a.mgr.Destroy(cmID, id.disconnectData(), now, &out)
	}
	for i := range out.Sends() {
		a.transmit(&out.Sends()[i])
	}
	a.removed = true
	for id := range a.users {
		a.forget(id)
		id.removed = true
		if !id.destroyed && !id.isChildInQueue() {
			id.post(&Event{Type: EventDeviceRemoval, Err: ErrDeviceRemoved})
		}
	}
	a.port.SetReceiver(nil)
}

// counters returns the Manager's counters.
func (a *agent) counters() ibcm.Counters {
	lock()
	defer unlock()
	return a.mgr.Counters()
}

// stopAndWait ends the goroutine.
func (a *agent) stopAndWait() {
	close(a.stop)
	<-a.done
}
