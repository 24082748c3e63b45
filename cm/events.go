package cm

import (
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/ibcm"
	"github.com/goroce/goroce/internal/mad"
	"github.com/goroce/goroce/verbs"
)

// handle turns an event of the Manager into what rdma_cm reports (the
// kernel's cma_ib_handler, cma_ib_req_handler and cma_sidr_rep_handler,
// with librdmacm's handling of the QP on top). The caller holds state.mu.
func (a *agent) handle(ev *ibcm.Event, _ time.Time) {
	switch ev.Type {
	case ibcm.EventConnectRequest:
		a.onConnectRequest(ev)
		return
	case ibcm.EventSIDRRequest:
		a.onSIDRRequest(ev)
		return
	}
	id := a.ids[ev.ID]
	if id == nil {
		return // destroyed meanwhile
	}
	if id.requestEvent != nil {
		// A request the application has not taken: if the Manager gave
		// up on it, so does its listener; its other events are not
		// reported (the kernel's ucma ignores them too).
		if _, live := a.mgr.State(ev.ID); !live || ev.Type == ibcm.EventRejected || ev.Type == ibcm.EventAbandoned {
			a.forget(id)
			a.dropRequest(id)
		}
		return
	}
	switch ev.Type {
	case ibcm.EventReply:
		a.onReply(id, ev)
	case ibcm.EventEstablished:
		if !id.active { // the active side reported it with the REP
			if id.qp != nil && a.byQPN[id.qp.QPN()] == id {
				delete(a.byQPN, id.qp.QPN())
			}
			id.post(&Event{Type: EventEstablished})
		}
	case ibcm.EventRejected:
		a.onRejected(id, ev)
	case ibcm.EventTimeout:
		a.onTimeout(id, ev)
	case ibcm.EventAbandoned:
		// Not accepted within the Manager's accept timeout, or evicted
		// by a flood of half-open requests.
		a.forget(id)
		id.post(&Event{Type: EventConnectError, Err: errnoErr(syscall.ETIMEDOUT, ErrTimeout,
			"cm: request from %v: not accepted in time: %v", id.dst, ErrTimeout)})
	case ibcm.EventDisconnectRequest, ibcm.EventDisconnected:
		if id.st == idConnect {
			id.st = idDisconnect
			if !id.connErr {
				id.post(&Event{Type: EventDisconnected})
			}
		}
	case ibcm.EventStale:
		// The peer reused the QPN of this connection: it has lost it.
		// The Manager sent a DREQ; EventDisconnected follows.
		_ = id.qpToErr()
	case ibcm.EventTimewaitExit:
		a.forget(id)
		if id.st == idDisconnect {
			id.post(&Event{Type: EventTimewaitExit})
		}
	case ibcm.EventSIDRReply:
		a.onSIDRReply(id, ev.SIDRREP)
	}
}

// onRejected reports a REJ (cma_ib_handler's REJ_RECEIVED: the QP to ERR,
// the reason as the status). The caller holds state.mu.
func (a *agent) onRejected(id *ID, ev *ibcm.Event) {
	if _, live := a.mgr.State(id.cmID); !live {
		a.forget(id)
	}
	if id.qp != nil && a.byQPN[id.qp.QPN()] == id {
		delete(a.byQPN, id.qp.QPN())
	}
	_ = id.qpToErr()
	if id.connErr {
		return // librdmacm drops the REJ of a connection it failed itself
	}
	rej := &RejectError{Reason: RejectReason(ev.Reason), PrivateData: ev.PrivateData, ARI: ev.ARI}
	id.post(&Event{Type: EventRejected, Status: int(ev.Reason), Conn: ConnParam{PrivateData: ev.PrivateData}, Err: rej})
}

// onTimeout reports a request MAD that went unanswered: the REQ or REP
// (UNREACHABLE, -ETIMEDOUT; the QP to ERR), the SIDR_REQ (UNREACHABLE),
// the DREQ (DISCONNECTED, -ETIMEDOUT). The caller holds state.mu.
func (a *agent) onTimeout(id *ID, ev *ibcm.Event) {
	err := errnoErr(syscall.ETIMEDOUT, ErrTimeout, "cm: %v: no answer to the %v: %v", id.dst, ev.Unanswered, ErrTimeout)
	switch ev.Unanswered {
	case mad.AttrDREQ:
		if id.st == idConnect {
			id.st = idDisconnect
			id.post(&Event{Type: EventDisconnected, Err: err})
		}
		return
	case mad.AttrREQ, mad.AttrREP:
		if id.qp != nil && a.byQPN[id.qp.QPN()] == id {
			delete(a.byQPN, id.qp.QPN())
		}
		_ = id.qpToErr()
	}
	a.forget(id)
	if id.qpType == verbs.QPTypeUD || !id.connErr {
		id.post(&Event{Type: EventUnreachable, Err: err})
	}
}
