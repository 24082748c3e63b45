package cm

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/verbs"
)

// This file holds the connection state machine proper: what each side
// proposes, how a proposal is checked and negotiated, and how the QP moves
// RESET → INIT → RTR → RTS. It knows messages, not how they travel, so the
// TCP side channel (dial.go, listener.go) and a future IB CM on QP1 share it.

// endpoint is one side of a connection being established.
type endpoint struct {
	qp  *verbs.QP
	s   settings
	psn uint32 // starting send PSN

	// connected is set once the QP has a destination (RTR or later): from
	// then on a failed setup moves the QP to ERR.
	connected bool
}

// newEndpoint checks qp and resolves p for it.
func newEndpoint(qp *verbs.QP, p *Params) (*endpoint, error) {
	if qp == nil {
		return nil, fmt.Errorf("nil QP: %w", verbs.ErrInvalidArgument)
	}
	if t := qp.Type(); t != verbs.QPTypeRC && t != verbs.QPTypeUC {
		return nil, fmt.Errorf("%v QP: only RC and UC QPs are connected: %w", t, verbs.ErrNotSupported)
	}
	state := qp.State()
	if state != verbs.QPStateReset && state != verbs.QPStateInit {
		return nil, fmt.Errorf("QP %#x is in %v, want RESET or INIT: %w", qp.QPN(), state, verbs.ErrInvalidState)
	}
	s, err := p.resolve(qp.PD().Device(), state)
	if err != nil {
		return nil, err
	}
	// The starting PSN is random, as in perftest and rdma_cm, so that
	// packets of an earlier connection between the same QP numbers fall
	// outside the new one's window.
	return &endpoint{qp: qp, s: s, psn: rand.Uint32() & psn.Mask}, nil
}

// proposal returns this side's REQ or REP. For a REP, the READ/atomic
// depths and the MTU are the negotiated ones (as the IB CM's REP carries
// them), given by n.
func (e *endpoint) proposal(typ msgType, n *negotiated) message {
	m := message{
		typ:                typ,
		qpType:             e.qp.Type(),
		mtu:                e.s.mtu,
		responderResources: uint8(e.s.responderResources),
		initiatorDepth:     uint8(e.s.initiatorDepth),
		qpn:                e.qp.QPN(),
		psn:                e.psn,
		gid:                e.s.gid,
		udpPort:            e.s.udpPort,
		retryCount:         e.s.retryCount,
		rnrRetryCount:      e.s.rnrRetryCount,
		minRNRTimer:        e.s.minRNRTimer,
		timeout:            e.s.timeout,
		privateData:        e.s.privateData,
	}
	if n != nil {
		m.mtu = n.mtu
		m.responderResources = uint8(n.maxDestRdAtomic)
		m.initiatorDepth = uint8(n.maxRdAtomic)
	}
	return m
}

// checkProposal checks a REQ or REP on its own: a connected QP type, an
// IB MTU, a usable QP number and GID, retry fields within their widths.
func checkProposal(m *message) *rejection {
	switch {
	case m.qpType != verbs.QPTypeRC && m.qpType != verbs.QPTypeUC:
		return &rejection{RejectInvalidTransportType, fmt.Sprintf("%v QP type %v is not RC or UC", m.typ, m.qpType)}
	case !m.mtu.Valid():
		return &rejection{RejectInvalidMTU, fmt.Sprintf("%v path MTU %d is not an IB MTU (1..5)", m.typ, int(m.mtu))}
	case m.qpn < 2:
		// QP0 and QP1 are the management QPs, never a connection's.
		return &rejection{RejectUnsupported, fmt.Sprintf("%v QPN %d is a special QP", m.typ, m.qpn)}
	case m.gid.IsZero():
		return &rejection{RejectInvalidGID, fmt.Sprintf("%v GID is zero", m.typ)}
	case m.retryCount > 7 || m.rnrRetryCount > 7:
		return &rejection{RejectUnsupported, fmt.Sprintf("%v retry counts %d/%d exceed 7", m.typ, m.retryCount, m.rnrRetryCount)}
	case m.minRNRTimer > 31 || m.timeout > 31:
		return &rejection{RejectUnsupported, fmt.Sprintf("%v RNR timer %d or timeout %d exceeds 31", m.typ, m.minRNRTimer, m.timeout)}
	}
	return nil
}

// negotiated are the attributes both sides agreed on, seen from one side.
type negotiated struct {
	mtu             verbs.MTU
	maxDestRdAtomic int // incoming READs/atomics this side accepts
	maxRdAtomic     int // READs/atomics this side may have outstanding
}

// negotiate checks the peer's REQ (passive side, active false) or REP
// (active side) against this endpoint and returns the agreed attributes.
func (e *endpoint) negotiate(m *message, active bool) (negotiated, *rejection) {
	if r := checkProposal(m); r != nil {
		return negotiated{}, r
	}
	if t := e.qp.Type(); m.qpType != t {
		return negotiated{}, &rejection{RejectInvalidTransportType, fmt.Sprintf("QP types differ: %v offers %v, local QP is %v", m.typ, m.qpType, t)}
	}
	if m.gid.Addr().Is4() != e.s.gid.Addr().Is4() {
		return negotiated{}, &rejection{RejectInvalidGID, fmt.Sprintf("GIDs of different IP families: peer %v, local %v", m.gid, e.s.gid)}
	}
	n := negotiated{
		mtu:             min(e.s.mtu, m.mtu),
		maxDestRdAtomic: min(e.s.responderResources, int(m.initiatorDepth)),
		maxRdAtomic:     min(e.s.initiatorDepth, int(m.responderResources)),
	}
	// The passive side picks the minimum of the two proposals; a REP with
	// a larger MTU than the REQ offered breaks the negotiation.
	if active && m.mtu > e.s.mtu {
		return negotiated{}, &rejection{RejectInvalidMTU, fmt.Sprintf("REP path MTU %v exceeds the %v proposed", m.mtu, e.s.mtu)}
	}
	return n, nil
}

// toInit moves the QP from RESET to INIT; a QP handed over in INIT keeps its
// attributes.
func (e *endpoint) toInit() error {
	if e.qp.State() != verbs.QPStateReset {
		return nil
	}
	attr := verbs.QPAttr{QPState: verbs.QPStateInit, PKeyIndex: 0, PortNum: 1, QPAccessFlags: e.s.access}
	if err := e.qp.Modify(&attr, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return fmt.Errorf("QP to INIT: %w", err)
	}
	e.s.keepAccess = true // set now; RTR need not repeat it
	return nil
}

// connect moves the QP from INIT through RTR to RTS toward the peer of
// message m with the negotiated attributes.
func (e *endpoint) connect(m *message, n negotiated) error {
	rc := e.qp.Type() == verbs.QPTypeRC
	rtr := verbs.QPAttr{
		QPState:   verbs.QPStateRTR,
		PathMTU:   n.mtu,
		DestQPNum: m.qpn,
		RQPSN:     m.psn,
		AHAttr: verbs.AddressVector{
			DGID:      m.gid,
			SGIDIndex: e.s.gidIndex,
			HopLimit:  hopLimit,
			IsGlobal:  true,
			PortNum:   1,
			UDPPort:   m.udpPort, // a goroce peer may use another port than 4791
		},
		MaxDestRdAtomic: n.maxDestRdAtomic,
		MinRNRTimer:     e.s.minRNRTimer,
		QPAccessFlags:   e.s.access,
	}
	mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	if rc {
		mask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	}
	if !e.s.keepAccess {
		mask |= verbs.QPAttrAccessFlags
	}
	if err := e.qp.Modify(&rtr, mask); err != nil {
		return fmt.Errorf("QP to RTR: %w", err)
	}
	e.connected = true
	rts := verbs.QPAttr{
		QPState:     verbs.QPStateRTS,
		SQPSN:       e.psn,
		Timeout:     e.s.timeout,
		RetryCnt:    e.s.retryCount,
		RNRRetry:    e.s.rnrRetryCount,
		MaxRdAtomic: n.maxRdAtomic,
	}
	mask = verbs.QPAttrState | verbs.QPAttrSQPSN
	if rc {
		mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
	}
	if err := e.qp.Modify(&rts, mask); err != nil {
		return fmt.Errorf("QP to RTS: %w", err)
	}
	return nil
}

// abort undoes a failed setup: a QP that has a destination goes to ERR,
// flushing its work requests, because its peer may already be sending to
// it; a QP still in INIT (or RESET) stays there and can be used again.
func (e *endpoint) abort() {
	if e.connected {
		_ = moveToErr(e.qp)
	}
}

// moveToErr moves qp to ERR. A destroyed QP has nothing left to flush, so
// verbs.ErrClosed is not an error here.
func moveToErr(qp *verbs.QP) error {
	err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)
	if err != nil && !errors.Is(err, verbs.ErrClosed) {
		return fmt.Errorf("QP to ERR: %w", err)
	}
	return nil
}

// remoteInfo returns what the peer's REQ or REP says about it.
func remoteInfo(m *message) RemoteInfo {
	return RemoteInfo{
		QPType:             m.qpType,
		QPN:                m.qpn,
		PSN:                m.psn,
		GID:                m.gid,
		UDPPort:            m.udpPort,
		PathMTU:            m.mtu,
		ResponderResources: int(m.responderResources),
		InitiatorDepth:     int(m.initiatorDepth),
		RetryCount:         m.retryCount,
		RNRRetryCount:      m.rnrRetryCount,
		MinRNRTimer:        m.minRNRTimer,
		Timeout:            m.timeout,
		PrivateData:        cloneBytes(m.privateData),
	}
}
