package cm

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/ibcm"
	"github.com/goroce/goroce/internal/mad"
	"github.com/goroce/goroce/internal/seal"
	"github.com/goroce/goroce/verbs"
)

// The active side: Connect (REQ, or SIDR_REQ for UD) → the REP → QP to
// RTS → RTU → EventEstablished; or EventConnectResponse for an ID
// without a QP, then Establish.

// Connect asks the peer of a resolved route for a connection
// (rdma_connect): a REQ with rdma_cm's header and p's private data, its
// QP's number, a random starting PSN, the depths, retry counts and the
// path. With a QP the answer is EventEstablished (the QP moved to RTS and
// the RTU sent), or EventRejected (the peer's reason and private data),
// EventUnreachable (no answer: -ETIMEDOUT), EventConnectError (our QP
// could not take the peer's values: a REJ went back). Without a QP (p
// gives QPNum) it is EventConnectResponse: move the QP with InitQPAttr,
// then call Establish. A UD ID sends a SIDR_REQ instead: EventEstablished
// carries the service's QP number, Q_Key and address. A nil p is
// librdmacm's NULL: the device's depths, 7 retries.
func (id *ID) Connect(p *ConnParam) error {
	lock()
	defer unlock()
	if err := id.onDevice("connect"); err != nil {
		return err
	}
	if id.st != idRouteResolved {
		return id.errState("connect")
	}
	if p == nil {
		if id.qp == nil && id.qpType != verbs.QPTypeUD {
			return fmt.Errorf("cm: connect: no QP and no parameters: %w", verbs.ErrInvalidArgument)
		}
		d := defaultConnParam
		p = &d
	}
	if id.hw != nil {
		return id.hwConnect(p)
	}
	qpn, srq, err := id.qpNumber(p)
	if err != nil {
		return fmt.Errorf("cm: connect: %w", err)
	}
	if id.qpType == verbs.QPTypeUD {
		return id.connectUD(p, qpn)
	}
	if len(p.PrivateData) > MaxConnectPrivateData {
		return fmt.Errorf("cm: connect: %d bytes of private data exceed %d: %w", len(p.PrivateData), MaxConnectPrivateData, verbs.ErrInvalidArgument)
	}
	attr := id.agent.dev.Query()
	if err := checkDepths(p, attr); err != nil {
		return fmt.Errorf("cm: connect: %w", err)
	}
	id.respRes = depth(p.ResponderResources, attr.MaxQPRdAtom)
	id.initDepth = depth(p.InitiatorDepth, attr.MaxQPInitRdAtom)
	id.psn = rand.Uint32() & 0xFFFFFF
	pd, err := id.cmaHeader(p.PrivateData)
	if err != nil {
		return err
	}
	transport := mad.TransportRC
	if id.qp != nil && id.qp.Type() == verbs.QPTypeUC {
		transport = mad.TransportUC
	}
	r := &id.route
	cp := ibcm.ConnectParams{
		Peer: id.dst.Addr(), ServiceID: mad.RDMAServiceID(mad.PortSpace(id.ps), id.dst.Port()),
		QPN: qpn, Transport: transport, StartingPSN: id.psn,
		ResponderResources: id.respRes, InitiatorDepth: id.initDepth,
		RetryCount: min(p.RetryCount, 7), RNRRetryCount: min(p.RNRRetryCount, 7),
		PathMTU: uint8(r.PathMTU), FlowControl: p.FlowControl, SRQ: srq,
		Path: mad.Path{LocalGID: mad.GID(r.SGID), RemoteGID: mad.GID(r.DGID), FlowLabel: r.FlowLabel,
			TrafficClass: r.TrafficClass, HopLimit: r.HopLimit},
		PacketLifetime: r.PacketLifetime, ResponseTimeout: id.opts.respTimeout, MaxCMRetries: id.opts.maxCMRetries,
		PrivateData: pd,
	}
	id.srOffer, id.sr = p.SelectiveRepeat && transport == mad.TransportRC, false
	if id.srOffer {
		cp.VendorID = GoroceECEVendorID
	}
	a := id.agent
	now := time.Now()
	var out ibcm.Output
	cmID, err := a.mgr.Connect(cp, now, &out)
	if err != nil {
		return fmt.Errorf("cm: connect to %v: %w", id.dst, managerErr(err))
	}
	id.cmID, id.active, id.st = cmID, true, idConnect
	a.ids[cmID] = id
	a.flushOut(&out, now)
	return nil
}

// qpNumber returns the QP number and SRQ flag the REQ or REP announces:
// the ID's QP's, or p's without one. The caller holds state.mu.
func (id *ID) qpNumber(p *ConnParam) (uint32, bool, error) {
	if id.qp == nil {
		if p.QPNum == 0 || p.QPNum > 0xFFFFFF {
			return 0, false, fmt.Errorf("no QP and QP number %#x: %w", p.QPNum, verbs.ErrInvalidArgument)
		}
		id.noQPNum, id.noQPSRQ = p.QPNum, p.SRQ
		return p.QPNum, p.SRQ, nil
	}
	_, init, err := id.qp.Query(0)
	if err != nil {
		return 0, false, err
	}
	return id.qp.QPN(), init.SRQ != nil, nil
}

// checkDepths refuses depths above the device's limits (librdmacm's
// ucma_valid_param), the Max* values aside.
func checkDepths(p *ConnParam, attr verbs.DeviceAttr) error {
	if p.ResponderResources != MaxResponderResources && int(p.ResponderResources) > attr.MaxQPRdAtom {
		return fmt.Errorf("responder resources %d exceed the device's %d: %w", p.ResponderResources, attr.MaxQPRdAtom, verbs.ErrInvalidArgument)
	}
	if p.InitiatorDepth != MaxInitiatorDepth && int(p.InitiatorDepth) > attr.MaxQPInitRdAtom {
		return fmt.Errorf("initiator depth %d exceeds the device's %d: %w", p.InitiatorDepth, attr.MaxQPInitRdAtom, verbs.ErrInvalidArgument)
	}
	return nil
}

// cmaHeader returns rdma_cm's header for the ID's addresses followed by
// the user's private data. The caller holds state.mu.
func (id *ID) cmaHeader(user []byte) ([]byte, error) {
	h := mad.CMAHeader{SrcPort: id.src.Port(), Src: id.src.Addr(), Dst: id.dst.Addr()}
	b, err := h.Append(make([]byte, 0, mad.CMAHeaderSize+len(user)))
	if err != nil {
		return nil, fmt.Errorf("cm: connect: %v to %v: %w", id.src, id.dst, verbs.ErrInvalidArgument)
	}
	return append(b, user...), nil
}

// managerErr converts an error of the Manager's calls.
func managerErr(err error) error {
	switch err {
	case ibcm.ErrTooMany:
		return errnoErr(syscall.ENOMEM, nil, "too many connection records")
	case ibcm.ErrState, ibcm.ErrUnknownID:
		return fmt.Errorf("%v: %w", err, verbs.ErrInvalidState)
	}
	return fmt.Errorf("%v: %w", err, verbs.ErrInvalidArgument)
}

// onReply handles the REP of id's REQ (cma_ib_handler's REP_RECEIVED and
// librdmacm's ucma_process_conn_resp). The caller holds state.mu.
func (a *agent) onReply(id *ID, ev *ibcm.Event) {
	rep := ev.REP
	attr := a.dev.Query()
	id.attrs, id.haveAttrs, id.replied = ev.QP, true, true
	id.respRes = min(ev.QP.MaxDestRdAtomic, uint8(min(attr.MaxQPRdAtom, 0xFF)))
	id.initDepth = min(ev.QP.MaxRdAtomic, uint8(min(attr.MaxQPInitRdAtom, 0xFF)))
	id.sr = id.srOffer && rep.VendorID == GoroceECEVendorID
	conn := ConnParam{PrivateData: rep.PrivateData, ResponderResources: rep.InitiatorDepth,
		InitiatorDepth: rep.ResponderResources, FlowControl: rep.EndToEndFlowControl,
		RNRRetryCount: rep.RNRRetryCount, SRQ: rep.SRQ, QPNum: rep.LocalQPN, SelectiveRepeat: id.sr}
	if id.qp == nil {
		id.post(&Event{Type: EventConnectResponse, Conn: conn})
		return
	}
	if id.sec != nil {
		pd, err := id.finishActive(rep)
		if err != nil {
			_ = a.mgr.Reject(id.cmID, mad.RejectConsumer, nil, seal.RejectData(seal.CodeOf(err)), time.Now(), &a.out)
			_ = id.qpToErr()
			id.connErr = true
			a.forget(id)
			id.post(&Event{Type: EventConnectError, Conn: conn, Err: fmt.Errorf("cm: connect to %v: %w", id.dst, err)})
			return
		}
		conn.PrivateData = pd
	}
	if err := id.connectQP(); err != nil {
		// cma_rep_recv: refuse the REP, the QP to ERR.
		_ = a.mgr.Reject(id.cmID, mad.RejectConsumer, nil, nil, time.Now(), &a.out)
		_ = id.qpToErr()
		id.connErr = true
		a.forget(id)
		id.post(&Event{Type: EventConnectError, Conn: conn,
			Err: errnoErr(syscall.EINVAL, ErrConnect, "cm: connect to %v: %v: %v", id.dst, ErrConnect, err)})
		return
	}
	if err := a.mgr.Ready(id.cmID, nil, &a.out); err != nil {
		id.post(&Event{Type: EventConnectError, Err: errnoErr(syscall.EINVAL, ErrConnect, "cm: RTU: %v", err)})
		return
	}
	id.post(&Event{Type: EventEstablished, Conn: conn})
}

// Establish completes an active connection whose QP the application moved
// to RTS itself after EventConnectResponse (rdma_establish): it sends the
// RTU. No event follows.
func (id *ID) Establish() error {
	lock()
	defer unlock()
	if err := id.onDevice("establish"); err != nil {
		return err
	}
	if id.qp != nil {
		return fmt.Errorf("cm: establish: the ID has a QP, which the CM moves itself: %w", verbs.ErrInvalidState)
	}
	if id.hw != nil {
		if id.st != idConnect || !id.active || !id.replied {
			return id.errState("establish")
		}
		if err := id.hwEstablish(); err != nil {
			return fmt.Errorf("cm: establish: %w", hwStateErr(err))
		}
		return nil
	}
	if id.st != idConnect || !id.active || !id.replied || id.cmID == 0 {
		return id.errState("establish")
	}
	var out ibcm.Output
	if err := id.agent.mgr.Ready(id.cmID, nil, &out); err != nil {
		return fmt.Errorf("cm: establish: %w", managerErr(err))
	}
	id.agent.flushOut(&out, time.Now())
	return nil
}

// connectUD asks for a UD service (SIDR_REQ). The caller holds state.mu.
func (id *ID) connectUD(p *ConnParam, _ uint32) error {
	if len(p.PrivateData) > MaxUDConnectPrivateData {
		return fmt.Errorf("cm: connect: %d bytes of private data exceed %d: %w", len(p.PrivateData), MaxUDConnectPrivateData, verbs.ErrInvalidArgument)
	}
	pd, err := id.cmaHeader(p.PrivateData)
	if err != nil {
		return err
	}
	rto := id.opts.respTimeout
	if rto == 0 {
		rto = ibcm.DefaultResponseTimeout
	}
	a := id.agent
	now := time.Now()
	var out ibcm.Output
	cmID, err := a.mgr.SIDRRequest(ibcm.SIDRParams{Peer: id.dst.Addr(),
		ServiceID: mad.RDMAServiceID(mad.PortSpace(id.ps), id.dst.Port()), Timeout: ibcm.IBATime(rto),
		MaxRetries: int(id.opts.maxCMRetries), PrivateData: pd}, now, &out)
	if err != nil {
		return fmt.Errorf("cm: connect to %v: %w", id.dst, managerErr(err))
	}
	id.cmID, id.active, id.st = cmID, true, idConnect
	a.ids[cmID] = id
	a.flushOut(&out, now)
	return nil
}

// onSIDRReply reports the answer to a UD service request
// (cma_sidr_rep_handler). The caller holds state.mu.
func (a *agent) onSIDRReply(id *ID, rep *mad.SIDRREP) {
	a.forget(id) // the Manager forgot the request
	if rep.Status != mad.SIDRSuccess {
		id.post(&Event{Type: EventUnreachable, Status: int(rep.Status), UD: UDParam{PrivateData: rep.PrivateData},
			Err: &RejectError{SIDR: true, SIDRStatus: SIDRStatus(rep.Status), PrivateData: rep.PrivateData}})
		return
	}
	id.post(&Event{Type: EventEstablished, UD: UDParam{PrivateData: rep.PrivateData, QPNum: rep.QPN, QKey: rep.QKey,
		AH: verbs.AddressVector{DGID: verbs.GIDFromAddr(id.dst.Addr()), SGIDIndex: 1, HopLimit: roceHopLimit,
			TrafficClass: id.opts.tos, IsGlobal: true, PortNum: 1, UDPPort: peerUDPPort(id.dst.Addr())}}})
}
