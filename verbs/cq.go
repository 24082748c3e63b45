package verbs

import (
	"runtime"
	"sync"
)

// CQ is a completion queue (struct ibv_cq): a bounded ring of work
// completions filled by the device and drained by Poll, or by Wait, which
// blocks until a completion arrives and is the simplest way to wait (a
// completion channel is libibverbs' way). WorkCompletion.Err turns a
// failed completion into an error.
//
// A CQ never grows by itself: size it for the work requests that can
// complete between two polls. When the device produces a completion and
// the ring is full, the CQ overruns, which the IBA treats as a CQ error
// (IBTA 10.10.2.3, 11.6.3.1):
//
//   - the CQ enters an error state for good and the device raises one
//     EventCQErr for it;
//   - the completion that did not fit is lost, and so is every later one:
//     from then on the CQ accepts no completion (Counters.CQOverruns counts
//     them all);
//   - each QP whose completion was refused moves to ERR and raises
//     EventQPFatal (a Local Work Queue Catastrophic Error): its work requests
//     not completed by then will never complete, since their flush
//     completions are refused too. A QP that completes nothing into the CQ
//     after the overrun is not affected;
//   - the completions the CQ accepted before the overrun stay, and Poll
//     returns them as usual.
//
// So "every work request completes exactly once" holds on every QP that
// raised no EventQPFatal; on those that did, what the CQ holds is a prefix
// of their completions and the rest is lost. Recovery is to destroy the
// failed QPs and the CQ (or move the QPs to RESET and give them a new CQ
// by recreating them).
type CQ struct {
	dev        *Device
	id         uint32 // names it in String (strings.go)
	ch         *CompChannel
	compVector int

	mu       sync.Mutex
	closed   bool
	ring     []WorkCompletion
	head     int // oldest completion
	count    int // completions in the ring
	arm      cqArm
	overruns uint64             // completions dropped because the ring was full
	overrun  bool               // the CQ overran: it is in error and accepts nothing
	users    int                // QPs sending or receiving into this CQ
	wait     cqWait             // goroutines blocked in Wait (wait.go)
	sink     CompletionSink     // takes completions in place of ring (cq_sink.go)
	notifier CompletionNotifier // sink's, if it implements it
	// eventDue: a receive batch's completion satisfied the arm and the
	// event waits for the batch's end; notifyQueued: the CQ is in that
	// batch's list (push, notifyDue).
	eventDue, notifyQueued bool
	claims                 []*cqClaim // PostSendWait calls waiting for their completion (postwait.go)
	claimSeq               uint64

	// Completion-channel state, guarded by ch.mu.
	evPending   int  // events queued on the channel for this CQ
	evQueued    bool // linked in the channel's FIFO
	evNext      *CQ
	evDelivered uint64 // events returned by GetEvent
	evAcked     uint64 // events acknowledged with AckEvents

	hw hwCQ // the hardware backend's; nil on a goroce device
}

// cqArm is the notification request of a CQ (ibv_req_notify_cq).
type cqArm uint8

const (
	armNone      cqArm = iota
	armSolicited       // next solicited or unsuccessful completion
	armNext            // next completion
)

// CreateCQ creates a completion queue for at least cqe completions
// (ibv_create_cq). ch, if not nil, receives the CQ's completion events (see
// ReqNotify); compVector must be below NumCompVectors.
func (d *Device) CreateCQ(cqe int, ch *CompChannel, compVector int) (*CQ, error) {
	const op = "CreateCQ"
	if d.hw != nil {
		return d.hw.createCQ(d, cqe, ch)
	}
	if cqe < 1 || cqe > d.attr.MaxCQE {
		return nil, errorf(op, "cqe", ErrInvalidArgument, "%d outside 1..%d", cqe, d.attr.MaxCQE)
	}
	if compVector < 0 || compVector >= d.numCompVectors {
		return nil, errorf(op, "comp_vector", ErrInvalidArgument, "%d outside 0..%d", compVector, d.numCompVectors-1)
	}
	if ch != nil {
		if ch.dev != d {
			return nil, newError(op, "channel", ErrInvalidArgument, "belongs to another device")
		}
		if err := ch.attach(op); err != nil {
			return nil, err
		}
	}
	if err := d.res.cq.acquire(op); err != nil {
		if ch != nil {
			ch.detach()
		}
		return nil, err
	}
	cq := &CQ{dev: d, id: cqIDs.Add(1), ch: ch, compVector: compVector, ring: make([]WorkCompletion, cqe)}
	if err := d.register(op, func() { d.cqs[cq] = struct{}{} }); err != nil {
		d.res.cq.release()
		if ch != nil {
			ch.detach()
		}
		return nil, err
	}
	return cq, nil
}

// Device returns the CQ's device.
func (cq *CQ) Device() *Device { return cq.dev }

// Channel returns the CQ's completion channel, or nil.
func (cq *CQ) Channel() *CompChannel { return cq.ch }

// Size returns the number of completions the CQ holds (ibv_cq.cqe), at
// least the number requested.
func (cq *CQ) Size() int {
	if cq.hw != nil {
		return cq.hw.size()
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return len(cq.ring)
}

// Poll moves up to len(wc) completions, oldest first, into wc and returns
// how many (ibv_poll_cq). It does not allocate and does not block; 0 means
// the CQ is empty. On a device opened with DeviceConfig.BusyPoll, a Poll
// that finds fewer than len(wc) completions (or none, for an empty wc)
// first receives what the device's socket holds.
func (cq *CQ) Poll(wc []WorkCompletion) (int, error) {
	if cq.hw != nil {
		return hwPoll(cq, wc)
	}
	if cq.dev.busyPoll {
		cq.mu.Lock()
		short := cq.count < max(len(wc), 1)
		cq.mu.Unlock()
		if short {
			if cq.dev.eng.poll() {
				// The device's receive goroutine is reading:
				// let it run if it waits for a processor.
				runtime.Gosched()
			}
		}
	}
	raceSync()
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return 0, closedError("PollCQ", "cq")
	}
	n := min(len(wc), cq.count)
	size := len(cq.ring)
	for i := range n {
		wc[i] = cq.ring[(cq.head+i)%size]
	}
	cq.head = (cq.head + n) % size
	cq.count -= n
	return n, nil
}

// push appends a completion produced by the device. solicited reports a
// receive completion of a message with the Solicited Event bit. It returns
// true if the CQ refused it: the ring was full, or was full once before
// (the CQ is in error, see CQ). The first overrun raises EventCQErr. push
// never allocates.
//
// batch is the receive queue whose batch produced the completion, nil
// for one made elsewhere (a post, Modify, a timer). The notifications
// of a batch's completions (the completion channel's event, a sink's
// NotifyCompletions) wait until the batch has sent its replies
// (notifyAfterBatch): a NIC sends the ACK of a message before the CPU
// hears of its completion, so an application woken by the event cannot
// answer before that ACK leaves. perftest's ib_send_lat -e, which waits
// for its send and its receive completions on one channel, takes the
// peer's next message arriving before the ACK of its own for an event
// without a completion. Pollers see the completion at once, as before.
func (cq *CQ) push(batch *rxQueue, wc WorkCompletion, solicited bool) (overflow bool) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return true
	}
	wc.Solicited = solicited
	// A PostSendWait's completion goes to it, needing no room in the ring.
	if len(cq.claims) > 0 && cq.claimedLocked(&wc) {
		return false
	}
	size := len(cq.ring)
	if cq.overrun || (cq.sink == nil && cq.count == size) || (cq.sink != nil && !cq.sink.DeliverCompletion(wc)) {
		cq.overruns++
		if !cq.overrun {
			cq.overrun = true
			cq.dev.events().post(AsyncEvent{Type: EventCQErr, CQ: cq})
		}
		return true
	}
	if cq.sink == nil {
		cq.ring[(cq.head+cq.count)%size] = wc
		cq.count++
		cq.wakeWaiterLocked()
	}
	// A solicited-only request is also satisfied by an unsuccessful
	// completion (the IBA's Request Completion Notification rule), so a
	// consumer sleeping on solicited events learns of errors.
	event := cq.arm == armNext || cq.arm == armSolicited && (solicited || wc.Status != WCSuccess)
	if event {
		cq.arm = armNone
	}
	event = event && cq.ch != nil
	switch {
	case !event && cq.notifier == nil:
	case batch != nil:
		cq.eventDue = cq.eventDue || event
		if !cq.notifyQueued {
			cq.notifyQueued = true
			batch.notify = append(batch.notify, cq)
		}
	default:
		cq.notifyLocked(event)
	}
	return false
}

// notifyLocked raises the CQ's completion event if event, and lets its
// sink raise its own. The caller holds mu.
func (cq *CQ) notifyLocked(event bool) {
	if event {
		cq.ch.notify(cq)
	}
	if cq.notifier != nil {
		cq.notifier.NotifyCompletions()
	}
}

// notifyDue raises what a receive batch's completions owe the CQ's
// consumers (push), once the batch has sent its replies.
func (cq *CQ) notifyDue() {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	cq.notifyQueued = false
	event := cq.eventDue
	cq.eventDue = false
	if !cq.closed {
		cq.notifyLocked(event)
	}
}

// overrunCount returns how many completions were dropped on a full ring.
func (cq *CQ) overrunCount() uint64 {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.overruns
}

// ReqNotify arms the CQ (ibv_req_notify_cq): the next completion added to
// it, or with solicitedOnly the next solicited or unsuccessful one, makes the
// CQ's completion channel report one event, and disarms the CQ. Completions
// already in the CQ do not count, so the usual pattern is: arm, then poll
// until empty, then wait for the event. Arming for every completion
// overrides a solicited-only request. Without a channel the request has no
// visible effect.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if cq.hw != nil {
		return cq.hw.reqNotify(solicitedOnly)
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return closedError("ReqNotifyCQ", "cq")
	}
	switch {
	case !solicitedOnly:
		cq.arm = armNext
	case cq.arm == armNone:
		cq.arm = armSolicited
	}
	return nil
}

// AckEvents acknowledges n events returned by GetEvent for this CQ
// (ibv_ack_cq_events). Every event must be acknowledged before Destroy;
// acknowledging more events than were returned has no effect beyond
// acknowledging them all.
func (cq *CQ) AckEvents(n int) {
	if cq.ch == nil || n <= 0 {
		return
	}
	cq.ch.mu.Lock()
	defer cq.ch.mu.Unlock()
	cq.evAcked = min(cq.evAcked+uint64(n), cq.evDelivered)
}

// Resize changes the CQ's capacity to cqe completions (ibv_resize_cq),
// keeping the completions it holds. It fails with ErrInvalidArgument if cqe
// is outside 1..MaxCQE or below the number of completions queued.
func (cq *CQ) Resize(cqe int) error {
	const op = "ResizeCQ"
	if cqe < 1 || cqe > cq.dev.attr.MaxCQE {
		return errorf(op, "cqe", ErrInvalidArgument, "%d outside 1..%d", cqe, cq.dev.attr.MaxCQE)
	}
	if cq.hw != nil {
		return cq.hw.resize(cqe)
	}
	ring := make([]WorkCompletion, cqe)
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return closedError(op, "cq")
	}
	if cqe < cq.count {
		return errorf(op, "cqe", ErrInvalidArgument, "%d is below the %d completions queued", cqe, cq.count)
	}
	for i := range cq.count {
		ring[i] = cq.ring[(cq.head+i)%len(cq.ring)]
	}
	cq.ring, cq.head = ring, 0
	return nil
}

// Destroy destroys the CQ (ibv_destroy_cq). It fails with ErrBusy while QPs
// use the CQ, and while events returned by GetEvent are not acknowledged:
// libibverbs blocks in that case instead, which in Go would turn a missing
// AckEvents into a silent hang. Events still queued on the channel are
// discarded.
func (cq *CQ) Destroy() error {
	if cq.hw != nil {
		return cq.hw.destroy(cq)
	}
	return cq.destroy(false)
}

// destroy destroys the CQ; force (Device.Close) skips the busy checks.
func (cq *CQ) destroy(force bool) error {
	const op = "DestroyCQ"
	cq.mu.Lock()
	if cq.closed {
		cq.mu.Unlock()
		return closedError(op, "cq")
	}
	if !force && cq.users > 0 {
		n := cq.users
		cq.mu.Unlock()
		return errorf(op, "cq", ErrBusy, "%d QP queues attached", n)
	}
	if ch := cq.ch; ch != nil {
		ch.mu.Lock()
		if !force && cq.evAcked != cq.evDelivered {
			n := cq.evDelivered - cq.evAcked
			ch.mu.Unlock()
			cq.mu.Unlock()
			return errorf(op, "cq", ErrBusy, "%d completion events not acknowledged", n)
		}
		ch.dequeueLocked(cq)
		ch.cqs--
		ch.mu.Unlock()
	}
	cq.closed = true
	cq.ring, cq.count = nil, 0
	cq.wakeWaiterLocked()
	cq.mu.Unlock()
	cq.dev.unregister(func() { delete(cq.dev.cqs, cq) })
	cq.dev.res.cq.release()
	return nil
}

// attach records a QP queue completing into the CQ.
func (cq *CQ) attach(op, field string) error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return closedError(op, field)
	}
	cq.users++
	return nil
}

// detach drops a QP queue recorded by attach.
func (cq *CQ) detach() {
	cq.mu.Lock()
	cq.users--
	cq.mu.Unlock()
}
