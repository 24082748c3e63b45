package verbs

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/internal/transport"
)

// AsyncEventType is the type of an asynchronous event (enum
// ibv_event_type), with the libibverbs values.
type AsyncEventType int

// Asynchronous event types. Those goroce raises are marked; the others
// exist for programs written against libibverbs and are never delivered
// (goroce has no alternate paths, no subnet manager, and one port that is
// always active).
const (
	EventCQErr            AsyncEventType = iota // IBV_EVENT_CQ_ERR: a CQ overran (raised)
	EventQPFatal                                // IBV_EVENT_QP_FATAL: a QP could not report a completion (raised)
	EventQPReqErr                               // IBV_EVENT_QP_REQ_ERR: the responder refused an invalid request (raised)
	EventQPAccessErr                            // IBV_EVENT_QP_ACCESS_ERR: the responder refused a remote access (raised)
	EventCommEst                                // IBV_EVENT_COMM_EST: a connected QP in RTR received its first packet (raised)
	EventSQDrained                              // IBV_EVENT_SQ_DRAINED: a QP moved to SQD with en_sqd_async_notify has drained (raised)
	EventPathMig                                // IBV_EVENT_PATH_MIG
	EventPathMigErr                             // IBV_EVENT_PATH_MIG_ERR
	EventDeviceFatal                            // IBV_EVENT_DEVICE_FATAL
	EventPortActive                             // IBV_EVENT_PORT_ACTIVE
	EventPortErr                                // IBV_EVENT_PORT_ERR
	EventLIDChange                              // IBV_EVENT_LID_CHANGE
	EventPKeyChange                             // IBV_EVENT_PKEY_CHANGE
	EventSMChange                               // IBV_EVENT_SM_CHANGE
	EventSRQErr                                 // IBV_EVENT_SRQ_ERR
	EventSRQLimitReached                        // IBV_EVENT_SRQ_LIMIT_REACHED: an armed SRQ fell below its limit (raised)
	EventQPLastWQEReached                       // IBV_EVENT_QP_LAST_WQE_REACHED: a QP with an SRQ entered ERR (raised)
	EventClientReregister                       // IBV_EVENT_CLIENT_REREGISTER
	EventGIDChange                              // IBV_EVENT_GID_CHANGE
	EventWQFatal                                // IBV_EVENT_WQ_FATAL
)

var asyncEventNames = [...]string{
	EventCQErr:            "CQ_ERR",
	EventQPFatal:          "QP_FATAL",
	EventQPReqErr:         "QP_REQ_ERR",
	EventQPAccessErr:      "QP_ACCESS_ERR",
	EventCommEst:          "COMM_EST",
	EventSQDrained:        "SQ_DRAINED",
	EventPathMig:          "PATH_MIG",
	EventPathMigErr:       "PATH_MIG_ERR",
	EventDeviceFatal:      "DEVICE_FATAL",
	EventPortActive:       "PORT_ACTIVE",
	EventPortErr:          "PORT_ERR",
	EventLIDChange:        "LID_CHANGE",
	EventPKeyChange:       "PKEY_CHANGE",
	EventSMChange:         "SM_CHANGE",
	EventSRQErr:           "SRQ_ERR",
	EventSRQLimitReached:  "SRQ_LIMIT_REACHED",
	EventQPLastWQEReached: "QP_LAST_WQE_REACHED",
	EventClientReregister: "CLIENT_REREGISTER",
	EventGIDChange:        "GID_CHANGE",
	EventWQFatal:          "WQ_FATAL",
}

// String returns the IBV_EVENT_ name without its prefix, e.g. "CQ_ERR", as
// ibv_event_type_str does.
func (t AsyncEventType) String() string {
	if t >= 0 && int(t) < len(asyncEventNames) {
		return asyncEventNames[t]
	}
	return "EVENT(" + strconv.Itoa(int(t)) + ")"
}

// AsyncEvent is an asynchronous event (struct ibv_async_event): Type and
// the object it concerns, in the field that matches the type (the element
// union of libibverbs). The object may have been destroyed since the event
// was raised; its methods then return ErrClosed. Unlike libibverbs, events
// need no acknowledgement: destroying an object never waits for its events.
// String describes the event in one line, with what to change for the
// error events.
type AsyncEvent struct {
	Type AsyncEventType
	QP   *QP  // EventQPFatal, EventQPReqErr, EventQPAccessErr, EventQPLastWQEReached, EventCommEst
	CQ   *CQ  // EventCQErr
	SRQ  *SRQ // EventSRQLimitReached
	// PortNum is the port of a port event; never set, since goroce raises
	// none.
	PortNum int
	// Refusal, for EventQPReqErr and EventQPAccessErr, is the check of
	// the QP's responder that refused a request from the peer, and the
	// request: its operation, rkey, address and length.
	Refusal Refusal
}

// asyncQueueLen bounds the events a device holds for GetAsyncEvent. A
// program that never reads them loses the newest ones beyond this
// (AsyncEventsDropped counts them); the data path never blocks or
// allocates to raise one.
const asyncQueueLen = 256

// asyncQueue is a device's queue of asynchronous events (the async_fd of
// struct ibv_context): a fixed ring, so raising an event takes a short lock
// and no allocation.
type asyncQueue struct {
	mu      sync.Mutex
	ring    [asyncQueueLen]AsyncEvent
	head, n int
	closed  bool
	wake    chan struct{} // capacity 1: an event was queued
	done    chan struct{} // closed by close
	dropped atomic.Uint64
}

func newAsyncQueue() *asyncQueue {
	return &asyncQueue{wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// post queues ev, or counts it dropped if the queue is full or closed. It
// never blocks: it is called on the receive path, under QP and CQ locks.
func (q *asyncQueue) post(ev AsyncEvent) {
	q.mu.Lock()
	if q.closed || q.n == len(q.ring) {
		q.mu.Unlock()
		q.dropped.Add(1)
		return
	}
	q.ring[(q.head+q.n)%len(q.ring)] = ev
	q.n++
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// get returns the oldest event, waiting for one until ctx ends or the queue
// is closed.
func (q *asyncQueue) get(ctx context.Context) (AsyncEvent, error) {
	for {
		q.mu.Lock()
		if q.n > 0 {
			ev := q.ring[q.head]
			q.ring[q.head] = AsyncEvent{} // drop the references
			q.head = (q.head + 1) % len(q.ring)
			q.n--
			more := q.n > 0
			q.mu.Unlock()
			if more {
				// Another waiter may have missed the wake-up this
				// call consumed.
				select {
				case q.wake <- struct{}{}:
				default:
				}
			}
			return ev, nil
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return AsyncEvent{}, closedError("GetAsyncEvent", "device")
		}
		select {
		case <-ctx.Done():
			return AsyncEvent{}, ctx.Err()
		case <-q.done:
		case <-q.wake:
		}
	}
}

// close makes waiting and later get calls return ErrClosed; queued events
// are discarded.
func (q *asyncQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.closed = true
	q.ring = [asyncQueueLen]AsyncEvent{}
	q.n = 0
	close(q.done)
}

// GetAsyncEvent returns the device's oldest asynchronous event
// (ibv_get_async_event), waiting until one is raised, ctx ends (ctx.Err())
// or the device is closed (ErrClosed). Events are delivered in the order
// they were raised, each to one caller. See the package documentation for
// the events goroce raises.
func (d *Device) GetAsyncEvent(ctx context.Context) (AsyncEvent, error) {
	if d.hw != nil {
		return d.hw.asyncEvent(d, ctx)
	}
	return d.events().get(ctx)
}

// AsyncEventsDropped returns how many asynchronous events were discarded
// because the device's queue already held the most it keeps (256) unread.
func (d *Device) AsyncEventsDropped() uint64 {
	if d.hw != nil {
		return 0
	}
	return d.events().dropped.Load()
}

// events returns the device's event queue, which lives in its engine: the
// engine is where events originate, and stopping it ends GetAsyncEvent.
func (d *Device) events() *asyncQueue { return d.eng.async }

// raiseQPEventsLocked raises the events of a QP that has just entered ERR:
// byTransport when the transport moved it there (an error it detected),
// not by Modify. A responder error no receive completion reports is an
// affiliated asynchronous error (QP_REQ_ERR or QP_ACCESS_ERR), a completion
// its CQ refused is QP_FATAL; and a QP attached to an SRQ reports
// QP_LAST_WQE_REACHED, as rxe does when it flushes such a QP: it will
// consume no further receive of the SRQ, and the one it held has completed,
// so the application may destroy it. The caller holds xmu.
func (qp *QP) raiseQPEventsLocked(byTransport bool) {
	q := qp.dev.events()
	if byTransport && qp.tq != nil {
		switch qp.tq.ErrorCause() {
		case transport.CauseInvalidRequest:
			q.post(AsyncEvent{Type: EventQPReqErr, QP: qp, Refusal: refusalOf(qp.tq.Refusal())})
		case transport.CauseAccess:
			q.post(AsyncEvent{Type: EventQPAccessErr, QP: qp, Refusal: refusalOf(qp.tq.Refusal())})
		case transport.CauseCQOverflow:
			q.post(AsyncEvent{Type: EventQPFatal, QP: qp})
		}
	}
	if qp.srq != nil {
		q.post(AsyncEvent{Type: EventQPLastWQEReached, QP: qp})
	}
}
