package cm

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/goroce/goroce/internal/ibcm"
	"github.com/goroce/goroce/internal/mad"
	"github.com/goroce/goroce/verbs"
)

// The passive side: Listen → a REQ (or SIDR_REQ) → EventConnectRequest
// with a new ID → Accept (QP to RTS, REP) → RTU → EventEstablished; or
// Reject.

// DefaultBacklog is the listen backlog when Listen is given none, the
// kernel's rdma_ucm max_backlog.
const DefaultBacklog = 1024

// Listen makes a bound ID (an unbound one is first bound to a free port of
// IPv4's wildcard) listen for connection requests (rdma_listen): each
// arrives as an EventConnectRequest on the ID's channel, with a new ID.
// A listener bound to a device's address takes the requests for that
// address; one bound to a wildcard takes those of every device of the
// process, opened now or later. backlog bounds the requests not yet taken
// by GetEvent: beyond it new REQs are dropped unanswered (the peer
// retransmits them), as the kernel does; 0 or less selects
// DefaultBacklog.
func (id *ID) Listen(backlog int) error {
	lock()
	defer unlock()
	if err := id.onDevice("listen"); err != nil {
		return err
	}
	if id.st == idIdle {
		if err := id.bindLocked(netip.AddrPortFrom(netip.IPv4Unspecified(), 0)); err != nil {
			return err
		}
	}
	if id.st != idAddrBound {
		return id.errState("listen")
	}
	if id.opts.reuseAddr && id.bind != nil { // a kernel device's ID: the kernel checks
		if err := id.bind.check(id, false); err != nil {
			return err
		}
	}
	if backlog <= 0 || backlog > DefaultBacklog {
		backlog = DefaultBacklog
	}
	if id.hw != nil {
		if err := id.hwListen(backlog); err != nil {
			return fmt.Errorf("cm: listen on %v: %w", id.src, err)
		}
	}
	id.backlog = backlog
	id.st = idListen
	return nil
}

// listening is the Manager's Listening: it finds the listener of a new
// request as rdma_cm does, by the port of the service ID among the
// listeners of this device (or of every device), then by the rdma_cm
// header's destination address. The caller holds state.mu.
func (a *agent) listening(sid mad.ServiceID, _ netip.Addr, pd []byte) ibcm.Verdict {
	a.match = nil
	ps, port, ok := sid.RDMA()
	if !ok {
		return ibcm.NoListener
	}
	bl := state.binds[bindKey{PortSpace(ps), port}]
	if bl == nil {
		return ibcm.NoListener
	}
	here := false
	for _, o := range bl.owners {
		here = here || o.listensOn(a)
	}
	if !here {
		return ibcm.NoListener
	}
	// The kernel's CM found its listener; rdma_cm now fails a request
	// whose header it cannot take or whose address no listener has, and
	// the CM answers REJ "consumer defined".
	h, err := mad.ParseCMAHeader(pd)
	if err != nil {
		return ibcm.Refuse
	}
	for _, o := range bl.owners {
		if !o.listensOn(a) || !o.takesAddr(h.Dst) {
			continue
		}
		if o.pendingRequests >= o.backlog {
			return ibcm.Drop
		}
		a.match, a.matchHdr = o, h
		return ibcm.Deliver
	}
	return ibcm.Refuse
}

// listensOn reports whether listener o takes requests arriving at a's
// device. The caller holds state.mu.
func (o *ID) listensOn(a *agent) bool {
	if o.st != idListen || o.destroyed {
		return false
	}
	if o.agent != nil {
		return o.agent == a && !o.removed
	}
	return o.takesFamily(a.port.Addr())
}

// takesAddr reports whether listener o takes requests for dst.
func (o *ID) takesAddr(dst netip.Addr) bool {
	if o.src.Addr().IsUnspecified() {
		return o.takesFamily(dst)
	}
	return o.src.Addr() == dst
}

// takesFamily reports whether a wildcard listener takes addresses of a's
// family: an IPv4 one IPv4 only, an IPv6 one both unless AFONLY.
func (o *ID) takesFamily(a netip.Addr) bool {
	if o.src.Addr().Is4() {
		return a.Is4()
	}
	return !o.opts.afOnly || !a.Is4()
}

// onConnectRequest makes the ID of a request the Manager delivered and
// reports it to the listener listening chose (cma_ib_req_handler). The
// caller holds state.mu.
func (a *agent) onConnectRequest(ev *ibcm.Event) {
	l := a.match
	if l == nil || l.st != idListen || l.qpType == verbs.QPTypeUD {
		// A REQ for a UD listener: rdma_cm fails it, REJ "consumer
		// defined".
		_ = a.mgr.Reject(ev.ID, mad.RejectConsumer, nil, nil, time.Now(), &a.out)
		return
	}
	req := ev.REQ
	child := a.newRequestID(l, ev)
	dev := a.dev.Query()
	child.req = req
	child.srOffer = req.VendorID == GoroceECEVendorID && req.TransportServiceType == mad.TransportRC
	child.psn = rand.Uint32() & 0xFFFFFF
	child.respRes = min(req.InitiatorDepth, uint8(min(dev.MaxQPRdAtom, 0xFF)))
	child.initDepth = min(req.ResponderResources, uint8(min(dev.MaxQPInitRdAtom, 0xFF)))
	// What Accept will give the QP (ibcm's Accept computes the same), so
	// that InitQPAttr serves an application that moves its QP itself.
	child.attrs = ibcm.QPAttrs{DestQPN: req.LocalQPN, RQPSN: child.psn, SQPSN: req.StartingPSN, PathMTU: req.PathMTU,
		MaxDestRdAtomic: child.respRes, MaxRdAtomic: child.initDepth, RetryCount: req.RetryCount,
		RNRRetry: req.RNRRetryCount, Timeout: max(req.Primary.LocalACKTimeout, 1), PKey: req.PKey,
		RemoteGID: req.Primary.LocalGID, FlowLabel: req.Primary.FlowLabel, HopLimit: req.Primary.HopLimit,
		TrafficClass: req.Primary.TrafficClass}
	child.haveAttrs = true
	child.route = Route{SGID: verbs.GID(req.Primary.RemoteGID), DGID: verbs.GID(req.Primary.LocalGID),
		PathMTU: verbs.MTU(req.PathMTU), HopLimit: req.Primary.HopLimit, TrafficClass: req.Primary.TrafficClass,
		FlowLabel: req.Primary.FlowLabel, PacketLifetime: max(req.Primary.LocalACKTimeout, 1) - 1,
		UDPPort: peerUDPPort(child.dst.Addr())}
	child.routeOK = true
	a.report(l, child, &Event{Type: EventConnectRequest, Conn: ConnParam{
		PrivateData: req.PrivateData[mad.CMAHeaderSize:], ResponderResources: req.InitiatorDepth,
		InitiatorDepth: req.ResponderResources, FlowControl: req.EndToEndFlowControl, RetryCount: req.RetryCount,
		RNRRetryCount: req.RNRRetryCount, SRQ: req.SRQ, QPNum: req.LocalQPN, SelectiveRepeat: child.srOffer}})
}

// onSIDRRequest makes the ID of a UD service request. The caller holds
// state.mu.
func (a *agent) onSIDRRequest(ev *ibcm.Event) {
	l := a.match
	if l == nil || l.st != idListen || l.qpType != verbs.QPTypeUD {
		_ = a.mgr.SIDRReply(ev.ID, ibcm.SIDRReplyParams{Status: mad.SIDRReject}, &a.out)
		return
	}
	child := a.newRequestID(l, ev)
	a.report(l, child, &Event{Type: EventConnectRequest, UD: UDParam{PrivateData: ev.PrivateData[mad.CMAHeaderSize:]}})
}

// newRequestID makes the ID of a request to listener l, on the
// listener's channel with its context (cma_ib_new_conn_id). The caller
// holds state.mu.
func (a *agent) newRequestID(l *ID, ev *ibcm.Event) *ID {
	child := newID(l.ch, l.context, l.ps, l.qpType)
	a.attach(child)
	child.st, child.parent, child.cmID = idConnect, l, ev.ID
	child.opts = l.opts
	child.opts.reuseAddr, child.opts.afOnlySet = false, false
	h := a.matchHdr
	child.src = netip.AddrPortFrom(h.Dst, l.src.Port())
	child.dst = netip.AddrPortFrom(h.Src, h.SrcPort)
	a.ids[ev.ID] = child
	return child
}

// report posts a request's EventConnectRequest to its listener's channel,
// counted against the backlog until GetEvent takes it. The caller holds
// state.mu.
func (a *agent) report(l, child *ID, ev *Event) {
	ev.Listen = l
	child.requestEvent = ev
	l.pendingRequests++
	child.post(ev)
}

// dropRequest forgets a request whose EventConnectRequest the application
// has not taken: the Manager gave up on it (the peer rejected, timed out,
// or the request waited too long). The caller holds state.mu.
func (a *agent) dropRequest(child *ID) {
	ev := child.requestEvent
	child.requestEvent = nil
	child.ch.unpost(func(e *Event) bool { return e == ev })
	if l := child.parent; l != nil {
		l.pendingRequests--
	}
	child.destroyLocked()
}

// Accept accepts a connection request (rdma_accept): it moves the ID's QP
// INIT→RTR→RTS with the connection's values, then sends the REP with p's
// private data (at most MaxAcceptPrivateData), the depths (p's, or the
// peer's offer within the device's limits for MaxResponderResources and
// MaxInitiatorDepth or a nil p) and RNR retry count. EventEstablished
// follows on the RTU, or on the QP's first packet if the RTU is lost. If
// the QP cannot be moved, the request is rejected and Accept fails. On a
// UD request Accept answers the SIDR_REQ with the QP's number and Q_Key;
// no event follows.
func (id *ID) Accept(p *ConnParam) error {
	lock()
	defer unlock()
	if err := id.onDevice("accept"); err != nil {
		return err
	}
	if id.hw != nil {
		if id.st != idConnect || id.active || id.replied || id.requestEvent != nil {
			return id.errState("accept")
		}
		if p == nil && id.qp == nil {
			return fmt.Errorf("cm: accept: no QP and no parameters: %w", verbs.ErrInvalidArgument)
		}
		return id.hwAccept(p)
	}
	if id.st != idConnect || id.active || id.replied || id.cmID == 0 || id.requestEvent != nil {
		return id.errState("accept")
	}
	if p == nil && id.qp == nil {
		return fmt.Errorf("cm: accept: no QP and no parameters: %w", verbs.ErrInvalidArgument)
	}
	if id.qpType == verbs.QPTypeUD {
		return id.acceptUD(p)
	}
	pp := defaultConnParam
	if p != nil {
		pp = *p
	}
	if len(pp.PrivateData) > MaxAcceptPrivateData {
		return fmt.Errorf("cm: accept: %d bytes of private data exceed %d: %w", len(pp.PrivateData), MaxAcceptPrivateData, verbs.ErrInvalidArgument)
	}
	attr := id.agent.dev.Query()
	if err := checkDepths(&pp, attr); err != nil {
		return fmt.Errorf("cm: accept: %w", err)
	}
	if pp.ResponderResources != MaxResponderResources {
		id.respRes = pp.ResponderResources
	}
	if pp.InitiatorDepth != MaxInitiatorDepth {
		id.initDepth = pp.InitiatorDepth
	}
	qpn, srq, err := id.qpNumber(&pp)
	if err != nil {
		return fmt.Errorf("cm: accept: %w", err)
	}
	a := id.agent
	now := time.Now()
	var out ibcm.Output
	id.sr = id.srOffer && pp.SelectiveRepeat
	ap := ibcm.AcceptParams{QPN: qpn, StartingPSN: id.psn, ResponderResources: id.respRes,
		InitiatorDepth: id.initDepth, RNRRetryCount: min(pp.RNRRetryCount, 7), FlowControl: pp.FlowControl, SRQ: srq,
		PrivateData: pp.PrivateData}
	if id.sr {
		ap.VendorID = GoroceECEVendorID
	}
	attrs, err := a.mgr.Accept(id.cmID, ap, now, &out)
	if err != nil {
		return fmt.Errorf("cm: accept: %w", managerErr(err))
	}
	id.attrs = attrs
	if id.qp != nil {
		if err := id.connectQP(); err != nil {
			// __rdma_accept: the QP to ERR, the request rejected.
			out.Reset()
			_ = a.mgr.Reject(id.cmID, mad.RejectConsumer, nil, nil, now, &out)
			_ = id.qpToErr()
			a.flushOut(&out, now)
			return fmt.Errorf("cm: accept from %v: %w", id.dst, err)
		}
		a.byQPN[qpn] = id
	}
	id.replied = true
	a.flushOut(&out, now) // the REP, now that the QP is in RTS
	return nil
}

// acceptUD answers a SIDR_REQ with the QP's number and Q_Key. The caller
// holds state.mu.
func (id *ID) acceptUD(p *ConnParam) error {
	var pd []byte
	if p != nil {
		pd = p.PrivateData
	}
	if len(pd) > MaxUDAcceptPrivateData {
		return fmt.Errorf("cm: accept: %d bytes of private data exceed %d: %w", len(pd), MaxUDAcceptPrivateData, verbs.ErrInvalidArgument)
	}
	qpn := uint32(0)
	if id.qp != nil {
		qpn = id.qp.QPN()
	} else {
		qpn = p.QPNum
	}
	a := id.agent
	var out ibcm.Output
	if err := a.mgr.SIDRReply(id.cmID, ibcm.SIDRReplyParams{Status: mad.SIDRSuccess, QPN: qpn, QKey: id.qkey,
		PrivateData: pd}, &out); err != nil {
		return fmt.Errorf("cm: accept: %w", managerErr(err))
	}
	id.replied = true
	a.forget(id)
	a.flushOut(&out, time.Now())
	return nil
}

// Reject refuses a connection request (rdma_reject): a REJ "consumer
// defined" with privateData (at most MaxRejectPrivateData), or for a UD
// request a SIDR_REP "rejected" (at most MaxUDAcceptPrivateData). The
// active side may reject a REP the same way after EventConnectResponse.
func (id *ID) Reject(privateData []byte) error {
	return id.RejectWith(RejectConsumer, privateData)
}

// RejectWith is Reject with another reason (rdma_reject_ece uses
// RejectVendorOption).
func (id *ID) RejectWith(reason RejectReason, privateData []byte) error {
	lock()
	defer unlock()
	if err := id.onDevice("reject"); err != nil {
		return err
	}
	if id.hw != nil {
		if id.st != idConnect || id.requestEvent != nil {
			return id.errState("reject")
		}
		return id.hwReject(reason, privateData)
	}
	if id.st != idConnect || id.cmID == 0 || id.requestEvent != nil {
		return id.errState("reject")
	}
	a := id.agent
	now := time.Now()
	var out ibcm.Output
	if id.qpType == verbs.QPTypeUD {
		if len(privateData) > MaxUDAcceptPrivateData {
			return fmt.Errorf("cm: reject: %d bytes of private data exceed %d: %w", len(privateData), MaxUDAcceptPrivateData, verbs.ErrInvalidArgument)
		}
		if err := a.mgr.SIDRReply(id.cmID, ibcm.SIDRReplyParams{Status: mad.SIDRReject, PrivateData: privateData}, &out); err != nil {
			return fmt.Errorf("cm: reject: %w", managerErr(err))
		}
	} else {
		if len(privateData) > MaxRejectPrivateData {
			return fmt.Errorf("cm: reject: %d bytes of private data exceed %d: %w", len(privateData), MaxRejectPrivateData, verbs.ErrInvalidArgument)
		}
		if err := a.mgr.Reject(id.cmID, mad.RejectReason(reason), nil, privateData, now, &out); err != nil {
			return fmt.Errorf("cm: reject: %w", managerErr(err))
		}
	}
	if _, live := a.mgr.State(id.cmID); !live || id.qpType == verbs.QPTypeUD {
		a.forget(id)
	}
	a.flushOut(&out, now)
	return nil
}
