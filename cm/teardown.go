package cm

import (
	"errors"
	"fmt"
	"time"

	"github.com/goroce/goroce/internal/ibcm"
	"github.com/goroce/goroce/verbs"
)

// Disconnect ends the ID's connection (rdma_disconnect): it moves the QP
// to ERR, which flushes its work requests, and sends a DREQ (or, after
// the peer's, the DREP). EventDisconnected follows (at once after the
// peer's DREQ, which reported it already), then EventTimewaitExit. Like
// librdmacm's, it succeeds on a connection not established yet, sending
// nothing.
func (id *ID) Disconnect() error {
	lock()
	defer unlock()
	if err := id.onDevice("disconnect"); err != nil {
		return err
	}
	if id.hw != nil {
		return id.hwDisconnect()
	}
	if id.cmID == 0 || id.qpType == verbs.QPTypeUD {
		return id.errState("disconnect")
	}
	if err := id.qpToErr(); err != nil {
		return fmt.Errorf("cm: disconnect: %w", err)
	}
	a := id.agent
	now := time.Now()
	var out ibcm.Output
	if err := a.mgr.Disconnect(id.cmID, id.disconnectData(), now, &out); err != nil && !errors.Is(err, ibcm.ErrState) {
		return fmt.Errorf("cm: disconnect: %w", managerErr(err))
	}
	a.flushOut(&out, now)
	return nil
}

// Notify passes a QP's asynchronous event to the CM (rdma_notify). Only
// verbs.EventCommEst means something to it: a passive connection whose RTU
// was lost is established by its QP's first packet. goroce tells the CM of
// that itself; Notify is there for code ported from C.
func (id *ID) Notify(ev verbs.AsyncEventType) error {
	lock()
	defer unlock()
	if err := id.onDevice("notify"); err != nil {
		return err
	}
	if ev != verbs.EventCommEst {
		return fmt.Errorf("cm: notify %v: %w", ev, verbs.ErrInvalidArgument)
	}
	if id.hw != nil {
		if err := id.hwNotify(ev); err != nil {
			return fmt.Errorf("cm: notify: %w", hwStateErr(err))
		}
		return nil
	}
	if id.cmID == 0 {
		return id.errState("notify")
	}
	var out ibcm.Output
	if err := id.agent.mgr.Established(id.cmID, &out); err != nil && !errors.Is(err, ibcm.ErrState) {
		return fmt.Errorf("cm: notify: %w", managerErr(err))
	}
	id.agent.flushOut(&out, time.Now())
	return nil
}

// Destroy destroys the ID (rdma_destroy_id). A connection still being set
// up is refused (REJ), an established one gets a DREQ, a received DREQ
// its DREP, as the kernel's CM does for a destroyed ID; a listener stops
// listening, and the requests it has not handed out are refused. Queued
// events of the ID are dropped. Destroy then waits until every event
// GetEvent returned for the ID has been acknowledged. The ID's QP is left
// as it is (destroy a QP from CreateQP with DestroyQP first).
func (id *ID) Destroy() error {
	lock()
	if id.destroyed {
		unlock()
		return fmt.Errorf("cm: destroy: ID %w", ErrClosed)
	}
	id.destroyLocked()
	if id.unacked == 0 {
		unlock()
		return nil
	}
	wait := make(chan struct{})
	id.ackWait = wait
	unlock()
	<-wait
	return nil
}

// destroyLocked destroys the ID without waiting for acknowledgements.
// The caller holds state.mu.
func (id *ID) destroyLocked() {
	id.destroyed = true
	id.st = idDestroying
	if id.hw != nil {
		id.hwDestroy()
	}
	if a := id.agent; a != nil {
		if id.cmID != 0 && !a.removed {
			now := time.Now()
			var out ibcm.Output
			// Tagged while the keys are there: a secured peer
			// takes no other DREQ.
			_ = a.mgr.Destroy(id.cmID, id.disconnectData(), now, &out)
			a.forget(id)
			a.flushOut(&out, now)
		}
		a.detach(id)
	}
	// Requests the application has not taken die with their listener;
	// the ID's own queued events go.
	for _, ev := range id.ch.unpost(func(ev *Event) bool { return ev.owner() == id }) {
		if ev.Type == EventConnectRequest && ev.ID != id {
			ev.ID.requestEvent = nil
			id.pendingRequests--
			ev.ID.destroyLocked()
		}
	}
	if id.requestEvent != nil { // a request whose event is still queued
		if l := id.parent; l != nil {
			l.pendingRequests--
		}
		ev := id.requestEvent
		id.requestEvent = nil
		id.ch.unpost(func(e *Event) bool { return e == ev })
	}
	id.releasePort()
	id.ch.ids--
	state.ids--
}
