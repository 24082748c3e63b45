package verbs

import (
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
)

// The String methods print what a reader of a log needs to tell objects
// apart and see their state, in one short line: type, number, state, PD,
// peer. PDs, CQs and SRQs have no number in libibverbs (only a kernel
// handle), so they get one here, counted per process.

var pdIDs, cqIDs, srqIDs atomic.Uint32

// String returns the device's name and address, e.g.
// "goroce0 at 127.0.0.1:4791".
func (d *Device) String() string {
	s := d.name + " at " + netip.AddrPortFrom(d.addr, d.udpPort).String()
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		s += " (closed)"
	}
	return s
}

// String returns the PD's number and device, e.g. "PD 1 on goroce0".
func (pd *PD) String() string {
	s := fmt.Sprintf("PD %d on %s", pd.id, pd.dev.name)
	pd.mu.Lock()
	closed := pd.closed
	pd.mu.Unlock()
	if closed {
		s += " (deallocated)"
	}
	return s
}

// String returns the region's key, range, rights and PD, e.g.
// "MR rkey 0x1a2b [0x7f3a2c000000, +4096) LOCAL_WRITE|REMOTE_READ, PD 1".
func (mr *MR) String() string {
	r := mr.reg.Load()
	s := fmt.Sprintf("MR rkey %#x [%#x, +%d) %v, PD %d", r.key, r.iova, len(r.buf), r.access, r.pd.id)
	mr.mu.Lock()
	dead := mr.dead
	mr.mu.Unlock()
	if dead {
		s += " (deregistered)"
	}
	return s
}

// String returns the window's type, rkey, binding and PD, e.g.
// "MW type2 rkey 0x800102 bound to [0x7f3a2c000000, +512) REMOTE_READ, PD 1".
func (mw *MW) String() string {
	s := fmt.Sprintf("MW %v rkey %#x", mw.typ, mw.rkey.Load())
	if b := mw.binding.Load(); b != nil {
		s += fmt.Sprintf(" bound to [%#x, +%d) %v", b.iova, len(b.buf), b.access)
	} else {
		s += " unbound"
	}
	s += fmt.Sprintf(", PD %d", mw.pd.id)
	mw.mu.Lock()
	dead := mw.dead
	mw.mu.Unlock()
	if dead {
		s += " (deallocated)"
	}
	return s
}

// String returns the CQ's number, device and fill, e.g.
// "CQ 2 on goroce0: 3 of 256 completions queued".
func (cq *CQ) String() string {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	s := fmt.Sprintf("CQ %d on %s", cq.id, cq.dev.name)
	switch {
	case cq.closed:
		return s + " (destroyed)"
	case cq.overrun:
		return s + fmt.Sprintf(": overrun, in error (%d completions lost)", cq.overruns)
	}
	return s + fmt.Sprintf(": %d of %d completions queued", cq.count, len(cq.ring))
}

// String returns the SRQ's number, PD and fill, e.g.
// "SRQ 1, PD 1: 12 of 128 receives posted".
func (s *SRQ) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	str := fmt.Sprintf("SRQ %d, PD %d", s.id, s.pd.id)
	if s.closed {
		return str + " (destroyed)"
	}
	str += fmt.Sprintf(": %d of %d receives posted", s.rq.ring.len(), s.rq.ring.cap())
	if s.limit > 0 {
		str += fmt.Sprintf(", limit %d armed", s.limit)
	}
	return str
}

// String returns where the address handle leads, e.g.
// "AH to 127.0.0.2:4791 (GID index 1), PD 1".
func (ah *AH) String() string {
	s := fmt.Sprintf("AH to %v (GID index %d), PD %d", ah.dst, ah.av.SGIDIndex, ah.pd.id)
	if ah.closed.Load() {
		s += " (destroyed)"
	}
	return s
}

// String returns the QP's number, type, state, PD, peer and access flags,
// e.g. "QP 0x12a RC RTS, PD 1, peer QP 0x3c1 at 127.0.0.2:4791, access
// REMOTE_WRITE|REMOTE_READ". A QP that its responder moved to ERR says
// which check refused the peer's request (see QP.Refusal).
func (qp *QP) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "QP %#x %v ", qp.qpn, qp.qpType)
	qp.mu.Lock()
	attr := qp.attr
	qp.mu.Unlock()
	qp.xmu.Lock()
	peer := qp.peer
	var why Refusal
	if qp.tq != nil {
		why = refusalOf(qp.tq.Refusal())
	}
	qp.xmu.Unlock()
	state := qp.State()
	if qp.closed.Load() {
		b.WriteString("destroyed")
	} else {
		b.WriteString(state.String())
	}
	if why.Reason != RefusedNone {
		fmt.Fprintf(&b, " (refused %v: %v check)", why.Op, why.Reason)
	}
	fmt.Fprintf(&b, ", PD %d", qp.pd.id)
	if peer.IsValid() {
		fmt.Fprintf(&b, ", peer QP %#x at %v", attr.DestQPNum, peer)
	}
	if qp.qpType != QPTypeUD && state != QPStateReset {
		fmt.Fprintf(&b, ", access %v", attr.QPAccessFlags&(AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic))
	}
	return b.String()
}

// String describes the event in one line: its type, the object it
// concerns and, for a QP's error, which check refused which request and
// what to change, e.g. "QP_REQ_ERR on QP 0x12a: rdma-read of 64 bytes at
// 0x7f3a2c000000 rkey 0x1a2b (PSN 0x5a2c31): refused by the QP access
// flags check: ...".
func (ev AsyncEvent) String() string {
	s := ev.Type.String()
	switch {
	case ev.QP != nil:
		s += fmt.Sprintf(" on QP %#x", ev.QP.qpn)
	case ev.CQ != nil:
		s += fmt.Sprintf(" on CQ %d", ev.CQ.id)
	case ev.SRQ != nil:
		s += fmt.Sprintf(" on SRQ %d", ev.SRQ.id)
	}
	switch ev.Type {
	case EventQPReqErr, EventQPAccessErr:
		if ev.Refusal.Reason != RefusedNone {
			s += ": " + ev.Refusal.String()
		}
	case EventQPFatal:
		s += ": a completion did not fit its CQ, which overran; the QP is in ERR (make CQs larger, or poll them sooner)"
	case EventCQErr:
		s += ": the CQ overran and accepts no more completions (make it larger, or poll it sooner)"
	case EventQPLastWQEReached:
		s += ": the QP is in ERR and takes no more receives from its SRQ"
	case EventSRQLimitReached:
		s += ": fewer receives posted than its armed limit"
	case EventSQDrained:
		s += ": the send queue drained"
	}
	return s
}
