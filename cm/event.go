package cm

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/goroce/goroce/verbs"
)

// EventType is the type of a connection manager event, with the values of
// librdmacm's enum rdma_cm_event_type.
type EventType int

// Event types. The multicast, address change and address info events
// exist for code ported from C and are never reported: goroce has no
// multicast, and a device's address never changes.
const (
	EventAddrResolved    EventType = iota // RDMA_CM_EVENT_ADDR_RESOLVED: ResolveAddr chose the device
	EventAddrError                        // RDMA_CM_EVENT_ADDR_ERROR: no route or no device (Status -ENETUNREACH, -ENODEV)
	EventRouteResolved                    // RDMA_CM_EVENT_ROUTE_RESOLVED: ResolveRoute set the path
	EventRouteError                       // RDMA_CM_EVENT_ROUTE_ERROR
	EventConnectRequest                   // RDMA_CM_EVENT_CONNECT_REQUEST: on a listener; Event.ID is the new ID
	EventConnectResponse                  // RDMA_CM_EVENT_CONNECT_RESPONSE: the REP, for an ID without a QP
	EventConnectError                     // RDMA_CM_EVENT_CONNECT_ERROR: the local QP could not be set up
	EventUnreachable                      // RDMA_CM_EVENT_UNREACHABLE: no answer (Status -ETIMEDOUT), or a refused SIDR (its status)
	EventRejected                         // RDMA_CM_EVENT_REJECTED: Status is the REJ's reason
	EventEstablished                      // RDMA_CM_EVENT_ESTABLISHED
	EventDisconnected                     // RDMA_CM_EVENT_DISCONNECTED: a DREQ or DREP (Status -ETIMEDOUT: our DREQ went unanswered)
	EventDeviceRemoval                    // RDMA_CM_EVENT_DEVICE_REMOVAL: the device was closed; destroy the ID
	EventMulticastJoin                    // RDMA_CM_EVENT_MULTICAST_JOIN (never reported)
	EventMulticastError                   // RDMA_CM_EVENT_MULTICAST_ERROR (never reported)
	EventAddrChange                       // RDMA_CM_EVENT_ADDR_CHANGE (never reported)
	EventTimewaitExit                     // RDMA_CM_EVENT_TIMEWAIT_EXIT: the QP may be reused
)

var eventNames = [...]string{"ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR", "CONNECT_REQUEST",
	"CONNECT_RESPONSE", "CONNECT_ERROR", "UNREACHABLE", "REJECTED", "ESTABLISHED", "DISCONNECTED",
	"DEVICE_REMOVAL", "MULTICAST_JOIN", "MULTICAST_ERROR", "ADDR_CHANGE", "TIMEWAIT_EXIT"}

// String returns the name without its RDMA_CM_EVENT_ prefix, as
// rdma_event_str does with it.
func (t EventType) String() string {
	if t >= 0 && int(t) < len(eventNames) {
		return eventNames[t]
	}
	return "EVENT(" + strconv.Itoa(int(t)) + ")"
}

// Event is a connection manager event (struct rdma_cm_event). Acknowledge
// each event returned by GetEvent with Ack once done with it: ID.Destroy
// waits for that, as rdma_destroy_id does.
type Event struct {
	Type EventType
	// ID is the ID the event is for: for EventConnectRequest, the new ID
	// of the request, whose Context is the listener's.
	ID *ID
	// Listen is the listening ID of an EventConnectRequest.
	Listen *ID
	// Status is librdmacm's status: 0, a negative errno (-ETIMEDOUT,
	// -ENETUNREACH, -ENODEV, ...), the REJ's reason for EventRejected,
	// the SIDR status for EventUnreachable after a UD resolution.
	Status int
	// Err is the same as a Go error (nil when Status is 0), matching
	// this package's sentinels and, for errno statuses, the
	// syscall.Errno.
	Err error
	// Conn holds what the peer sent for a connected ID (the REQ's for
	// EventConnectRequest, the REP's for EventConnectResponse and the
	// active side's EventEstablished, the REJ's private data for
	// EventRejected), from this side's point of view: ResponderResources
	// is what the peer's InitiatorDepth asks this side to serve.
	Conn ConnParam
	// UD holds what a UD exchange delivered: the SIDR_REQ's private data
	// (EventConnectRequest), the answer's QPN, Q_Key, address and
	// private data (EventEstablished).
	UD UDParam

	acked bool // guarded by state.mu
}

// Ack acknowledges the event (rdma_ack_cm_event). A second Ack is an
// error.
func (e *Event) Ack() error {
	state.mu.Lock()
	defer state.mu.Unlock()
	if e.acked {
		return fmt.Errorf("cm: ack %v: already acknowledged: %w", e.Type, verbs.ErrInvalidState)
	}
	e.acked = true
	if owner := e.owner(); owner != nil {
		owner.unacked--
		if owner.unacked == 0 && owner.ackWait != nil {
			close(owner.ackWait)
			owner.ackWait = nil
		}
	}
	return nil
}

// owner returns the ID an event is reported on: the listener for a
// connection request (as librdmacm counts it), else its ID.
func (e *Event) owner() *ID {
	if e.Type == EventConnectRequest && e.Listen != nil {
		return e.Listen
	}
	return e.ID
}

// EventChannel is a queue of events (struct rdma_event_channel). IDs
// created on it report their events to it; Migrate moves an ID to
// another.
type EventChannel struct {
	mu     sync.Mutex
	queue  []*Event
	wake   chan struct{} // capacity 1: an event was queued or the channel closed
	closed bool
	ids    int // live IDs on the channel; guarded by state.mu

	// handler, when set, takes the channel's events instead of GetEvent
	// (the net-like API's connections): dispatch calls it outside
	// state.mu, one event at a time in order.
	handler     func(*Event)
	dispatching bool // guarded by mu

	// hw is the librdmacm channel of the IDs on kernel devices, made on
	// first use (hw_id.go). Guarded by state.mu.
	hw *hwChannel
}

// NewEventChannel returns an event channel (rdma_create_event_channel).
func NewEventChannel() *EventChannel {
	return &EventChannel{wake: make(chan struct{}, 1)}
}

// GetEvent returns the next event (rdma_get_cm_event), waiting for one
// until ctx ends. Acknowledge it with Event.Ack.
func (ch *EventChannel) GetEvent(ctx context.Context) (*Event, error) {
	for {
		if ev, ok, err := ch.take(); ok || err != nil {
			return ev, err
		}
		select {
		case <-ch.wake:
		case <-ctx.Done():
			// An event queued meanwhile is still returned first.
			if ev, ok, err := ch.take(); ok || err != nil {
				return ev, err
			}
			return nil, fmt.Errorf("cm: get event: %w", ctx.Err())
		}
	}
}

// TryGetEvent returns the next event if one is queued.
func (ch *EventChannel) TryGetEvent() (*Event, bool) {
	ev, ok, _ := ch.take()
	return ev, ok
}

// take dequeues an event and counts it as reported to its ID.
func (ch *EventChannel) take() (*Event, bool, error) {
	state.mu.Lock()
	defer state.mu.Unlock()
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if len(ch.queue) == 0 {
		if ch.closed {
			return nil, false, fmt.Errorf("cm: get event: event channel %w", ErrClosed)
		}
		return nil, false, nil
	}
	ev := ch.queue[0]
	ch.queue[0] = nil
	ch.queue = ch.queue[1:]
	if len(ch.queue) > 0 {
		ch.signal()
	}
	reported(ev)
	return ev, true, nil
}

// reported counts ev as handed to the application: its ID (or listener)
// now waits for its Ack. The caller holds state.mu.
func reported(ev *Event) {
	if ev.Type == EventConnectRequest && ev.Listen != nil {
		ev.Listen.pendingRequests--
		ev.ID.requestEvent = nil
	}
	if owner := ev.owner(); owner != nil {
		owner.unacked++
	}
}

// signal wakes a GetEvent. The caller holds ch.mu.
func (ch *EventChannel) signal() {
	if ch.closed {
		return // wake is closed: every GetEvent returns at once
	}
	select {
	case ch.wake <- struct{}{}:
	default:
	}
}

// post queues ev. The caller holds state.mu; a handler channel's events
// are dispatched once it lets go (state.unlock).
func (ch *EventChannel) post(ev *Event) {
	ch.mu.Lock()
	ch.queue = append(ch.queue, ev)
	ch.signal()
	ch.mu.Unlock()
	if ch.handler != nil {
		state.toDispatch = append(state.toDispatch, ch)
	}
}

// unpost removes the queued events of id (and, for a listener, those of
// its requests), returning them. The caller holds state.mu.
func (ch *EventChannel) unpost(match func(*Event) bool) []*Event {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var removed []*Event
	kept := ch.queue[:0]
	for _, ev := range ch.queue {
		if match(ev) {
			removed = append(removed, ev)
		} else {
			kept = append(kept, ev)
		}
	}
	clear(ch.queue[len(kept):])
	ch.queue = kept
	return removed
}

// dispatch hands a handler channel's queued events to its handler, in
// order, one goroutine at a time. The caller does not hold state.mu.
func (ch *EventChannel) dispatch() {
	ch.mu.Lock()
	if ch.dispatching {
		ch.mu.Unlock()
		return // the goroutine dispatching takes the new events too
	}
	ch.dispatching = true
	ch.mu.Unlock()
	for {
		ev, ok, _ := ch.take()
		if !ok {
			ch.mu.Lock()
			ch.dispatching = false
			again := len(ch.queue) > 0
			if again {
				ch.dispatching = true
			}
			ch.mu.Unlock()
			if !again {
				return
			}
			continue
		}
		ch.handler(ev)
	}
}

// Close closes the channel (rdma_destroy_event_channel). Every ID on it
// must have been destroyed: with IDs left, Close fails with an error
// wrapping verbs.ErrBusy. A blocked GetEvent returns ErrClosed.
func (ch *EventChannel) Close() error {
	state.mu.Lock()
	if ch.ids > 0 {
		state.mu.Unlock()
		return fmt.Errorf("cm: close event channel: %d IDs still use it: %w", ch.ids, verbs.ErrBusy)
	}
	ch.mu.Lock()
	if ch.closed {
		ch.mu.Unlock()
		state.mu.Unlock()
		return fmt.Errorf("cm: close event channel: %w", ErrClosed)
	}
	ch.closed = true
	close(ch.wake)
	ch.mu.Unlock()
	hw := ch.hw
	ch.hw = nil
	state.mu.Unlock()
	if hw != nil {
		// Outside state.mu: the pump may be waiting for it.
		hw.close()
	}
	return nil
}
