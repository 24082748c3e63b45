package transport

import (
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// FLUSH and ATOMIC_WRITE (IBA 1.5, Annex A19; rxe since Linux 6.2).
//
// Both are single-packet requests answered, as rxe answers them, by an RDMA
// READ RESPONSE ONLY without payload at the request's PSN. The responder
// keeps a responder resource for each, like a READ or an atomic, so that a
// duplicate is answered again without being executed again; the requester
// counts them against max_rd_atomic and completes them only on that
// response.

// flushAccess returns the rights a FLUSH of placement type t needs, on the
// QP and on the memory region: FLUSH_GLOBAL for global visibility,
// FLUSH_PERSISTENT for persistence. Unknown placement bits need nothing,
// as in rxe.
func flushAccess(t uint8) ibv.AccessFlags {
	var a ibv.AccessFlags
	if t&wire.FlushGlobalVisibility != 0 {
		a |= ibv.AccessFlushGlobal
	}
	if t&wire.FlushPersistence != 0 {
		a |= ibv.AccessFlushPersistent
	}
	return a
}

// RKeyChecker is implemented by a Memory that can validate an rkey without
// a range, for a FLUSH of a whole memory region (selectivity level 1): the
// key must name a registration in pd granting need. A Memory without it
// has such FLUSHes checked as a zero-length access at the RETH's address.
type RKeyChecker interface {
	CheckRKey(pd uint32, rkey uint32, need ibv.AccessFlags) error
}

// execFlush performs a FLUSH. The responder copies every WRITE into the
// registered memory before it acknowledges it, with ordinary stores that
// the Go memory model orders before the response leaves, so the data of
// earlier requests is as visible (and as persistent) as the memory can
// make it by then: executing a FLUSH is checking its rights and range.
func (qp *QP) execFlush(p *wire.Packet, P psn.PSN, out *Output) {
	if len(qp.resp.res) == 0 {
		qp.classC(P, wire.NAKInvalidRequest, ibv.WCRemInvReqErr, qp.refused(RefusedNoResources, p, 0), out)
		return
	}
	va, rkey, l := p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALength()
	need := flushAccess(p.FETH.PlacementType())
	var err error
	switch {
	case qp.mem == nil:
		err = ErrInvalidKey
	case p.FETH.SelectivityLevel() != wire.FlushRange:
		// The whole region: va and length are not checked (rxe treats
		// every level but the range this way).
		if c, ok := qp.mem.(RKeyChecker); ok {
			err = c.CheckRKey(qp.pd, rkey, need)
		} else {
			err = qp.checkRemote(rkey, va, 0, need)
		}
	case l > 1<<31:
		qp.classC(P, wire.NAKInvalidRequest, ibv.WCRemInvReqErr, qp.refused(RefusedMessageLength, p, 0), out)
		return
	default:
		err = qp.checkRemote(rkey, va, l, need)
	}
	if err != nil {
		qp.classC(P, wire.NAKRemoteAccessError, ibv.WCRemAccessErr, qp.refusedAccess(err, p, need), out)
		return
	}
	r := qp.nextResource()
	*r = rdResource{kind: rdFlush, first: P, last: P, va: va, rkey: rkey, length: l}
	qp.resp.msn = qp.resp.msn.Next()
	qp.resp.epsn = P.Next()
	qp.queueEmptyResponse(P, out)
}

// execAtomicWrite performs an ATOMIC_WRITE: the 8 payload bytes replace the
// aligned 8 bytes at the RETH's address as one store with respect to the
// device's other atomics. rxe checks REMOTE_WRITE for it, on the QP and
// on the memory, and so does goroce; the RETH length must be 8.
func (qp *QP) execAtomicWrite(p *wire.Packet, P psn.PSN, out *Output) {
	switch {
	case len(qp.resp.res) == 0:
		qp.classC(P, wire.NAKInvalidRequest, ibv.WCRemInvReqErr, qp.refused(RefusedNoResources, p, 0), out)
		return
	case p.RETH.DMALength() != wire.AtomicWriteLen:
		qp.classC(P, wire.NAKInvalidRequest, ibv.WCRemInvReqErr, qp.refused(RefusedMessageLength, p, 0), out)
		return
	}
	va, rkey := p.RETH.VA(), p.RETH.RKey()
	b, ref, ok := qp.alignedTarget(p, P, rkey, va, ibv.AccessRemoteWrite, out)
	if !ok {
		return
	}
	mu := qp.locks.lockFor(b)
	mu.Lock()
	copy(b, p.Payload)
	mu.Unlock()
	ref.Release()

	r := qp.nextResource()
	*r = rdResource{kind: rdAtomicWrite, first: P, last: P, va: va, rkey: rkey, length: wire.AtomicWriteLen}
	qp.resp.msn = qp.resp.msn.Next()
	qp.resp.epsn = P.Next()
	qp.queueEmptyResponse(P, out)
}

// queueEmptyResponse queues the RDMA READ RESPONSE ONLY without payload
// that answers a FLUSH or an ATOMIC_WRITE: a READ reply of no bytes, sent
// in PSN order behind the responses queued before it.
func (qp *QP) queueEmptyResponse(P psn.PSN, out *Output) {
	qp.queueReply(reply{first: true, psn: P}, out)
}

// duplicateEmptyResponse answers a duplicate FLUSH or ATOMIC_WRITE from the
// responder resources, without executing it again; one the resources no
// longer hold is dropped (class D), as rxe does.
func (qp *QP) duplicateEmptyResponse(P psn.PSN, kind rdKind, out *Output) {
	if r := qp.findResource(P, kind); r != nil && r.first == P {
		qp.queueEmptyResponse(P, out)
	}
}

// emptyReadResponse completes the FLUSH or ATOMIC_WRITE at the head of the
// send queue with its response, a zero-length RDMA READ RESPONSE ONLY
// (rxe's completer treats it so). Anything else is a bad response.
func (qp *QP) emptyReadResponse(p *wire.Packet, P psn.PSN, now time.Time) {
	if P != qp.comp.psn {
		qp.counters.StaleResponses++
		return
	}
	if p.BTH.Opcode() != wire.RCRDMAReadResponseOnly || len(p.Payload) != 0 ||
		p.AETH.Syndrome().Kind() != wire.AETHAck {
		qp.fatal(ibv.WCBadRespErr)
		return
	}
	qp.comp.psn = P.Next()
	qp.completeHead(ibv.WCSuccess)
	qp.progress(now, P)
	qp.retireFailed()
}
