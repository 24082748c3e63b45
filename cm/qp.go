package cm

import (
	"errors"
	"fmt"

	"github.com/goroce/goroce/verbs"
)

// The QP of an ID, and how the CM moves it, as librdmacm does:
//
//   - CreateQP creates a QP on the ID's device; SetQP hands over one the
//     application made. A connected (RC, UC) QP handed over in RESET is
//     moved to INIT at once, with no remote rights yet (what
//     rdma_create_qp does); one in INIT stays as it is. Either way the
//     application may post receives before the connection exists, so that
//     the peer's first SEND finds one.
//   - When the connection's attributes are known (the passive side's
//     Accept, the active side's REP), the QP gets the connection's rights
//     by an INIT→INIT transition (or RESET→INIT): REMOTE_WRITE, and
//     REMOTE_READ and REMOTE_ATOMIC if it serves RDMA READs and atomics
//     (responder resources above 0), as the kernel's ib_cm_init_qp_attr
//     grants them; then RTR and RTS. The passive side moves its QP before
//     it sends the REP, the active side before the RTU: each QP is in RTS
//     when its peer may first send to it.
//   - A UD QP is moved to RTS at once with the port space's Q_Key
//     (UDPQKey), from RESET, INIT or RTR; one in RTS gets the Q_Key by an
//     RTS→RTS transition.
//   - Disconnect, a rejection and a lost peer move the QP to ERR, which
//     flushes its work requests; the CM never destroys a QP it did not
//     create.

// cmAccess returns the remote rights the CM grants a connection's QP.
func cmAccess(t verbs.QPType, respRes uint8) verbs.AccessFlags {
	acc := verbs.AccessRemoteWrite
	if t == verbs.QPTypeRC && respRes > 0 {
		acc |= verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	}
	return acc
}

// InitQPAttr returns the attributes and mask that move the ID's QP to
// state (rdma_init_qp_attr): INIT (the connection's rights once known, none
// before; a UD QP's Q_Key), RTR and RTS (the connection's address, QP
// numbers, PSNs, depths, timers). RTR and RTS need the connection's
// values: after EventConnectRequest on the passive side, after the REP
// (EventConnectResponse) on the active side.
func (id *ID) InitQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	lock()
	defer unlock()
	if err := id.onDevice("init QP attributes"); err != nil {
		return verbs.QPAttr{}, 0, err
	}
	return id.qpAttr(state, id.qpTypeNow())
}

// qpTypeNow is the type of the ID's QP, or the port space's without one.
// The caller holds state.mu.
func (id *ID) qpTypeNow() verbs.QPType {
	if id.qp != nil {
		return id.qp.Type()
	}
	return id.qpType
}

// qpAttr computes InitQPAttr. The caller holds state.mu.
func (id *ID) qpAttr(state verbs.QPState, t verbs.QPType) (verbs.QPAttr, verbs.QPAttrMask, error) {
	if id.hw != nil {
		return id.hwQPAttr(state)
	}
	a := verbs.QPAttr{QPState: state}
	switch state {
	case verbs.QPStateInit:
		init, mask := initAttr(t, id.qkey)
		if t != verbs.QPTypeUD && id.haveAttrs {
			init.QPAccessFlags = cmAccess(t, id.respRes)
			if id.opts.access != 0 {
				init.QPAccessFlags = id.opts.access
			}
		}
		return init, mask, nil
	case verbs.QPStateRTR:
		if t == verbs.QPTypeUD {
			return a, verbs.QPAttrState, nil
		}
		if !id.haveAttrs {
			return a, 0, fmt.Errorf("cm: init QP attributes for RTR: no connection yet: %w", verbs.ErrInvalidState)
		}
		c := &id.attrs
		a.PathMTU = verbs.MTU(c.PathMTU)
		a.DestQPNum = c.DestQPN
		a.RQPSN = c.RQPSN
		a.AHAttr = verbs.AddressVector{DGID: verbs.GID(c.RemoteGID), FlowLabel: c.FlowLabel, SGIDIndex: 1,
			HopLimit: c.HopLimit, TrafficClass: c.TrafficClass, IsGlobal: true, PortNum: 1,
			UDPPort: peerUDPPort(id.dst.Addr())}
		mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
		if t == verbs.QPTypeRC {
			a.MaxDestRdAtomic = int(id.respRes)
			a.MinRNRTimer = id.opts.minRNRTimer
			if a.MinRNRTimer == 0 {
				a.MinRNRTimer = DefaultMinRNRTimer
			}
			mask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
			if id.sr {
				a.SelectiveRepeat = true
				mask |= verbs.QPAttrSelectiveRepeat
			}
		}
		return a, mask, nil
	case verbs.QPStateRTS:
		if t == verbs.QPTypeUD {
			return a, verbs.QPAttrState | verbs.QPAttrSQPSN, nil
		}
		if !id.haveAttrs {
			return a, 0, fmt.Errorf("cm: init QP attributes for RTS: no connection yet: %w", verbs.ErrInvalidState)
		}
		c := &id.attrs
		a.SQPSN = c.SQPSN
		mask := verbs.QPAttrState | verbs.QPAttrSQPSN
		if t == verbs.QPTypeRC {
			a.Timeout = c.Timeout
			if id.opts.ackTimeout != 0 {
				a.Timeout = id.opts.ackTimeout
			}
			a.RetryCnt, a.RNRRetry, a.MaxRdAtomic = c.RetryCount, c.RNRRetry, int(id.initDepth)
			mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
		}
		return a, mask, nil
	}
	return a, 0, fmt.Errorf("cm: init QP attributes: state %v: %w", state, verbs.ErrInvalidArgument)
}

// initAttr returns what moves a QP of type t from RESET to INIT before its
// connection is known: port 1, P_Key index 0, and no remote rights for a
// connected QP, the Q_Key qkey for a UD QP.
func initAttr(t verbs.QPType, qkey uint32) (verbs.QPAttr, verbs.QPAttrMask) {
	a := verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1}
	mask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort
	if t == verbs.QPTypeUD {
		a.QKey = qkey
		return a, mask | verbs.QPAttrQKey
	}
	return a, mask | verbs.QPAttrAccessFlags
}

// PrepareQP moves qp from RESET to INIT as the CM would on taking it (as
// rdma_create_qp does), so that receives can be posted before Dial,
// Request.Accept, DialUD or Request.AcceptUD hands it over: the peer's
// first SEND then finds one waiting. A connected (RC, UC) QP gets no remote
// rights here; the connection grants them (Params.Access, or REMOTE_WRITE,
// READ and ATOMIC by default) when it is established. A UD QP gets the
// Q_Key UDPQKey. A QP already in INIT is left as it is; one in another
// state is an error wrapping verbs.ErrInvalidState.
func PrepareQP(qp *verbs.QP) error {
	if qp == nil {
		return fmt.Errorf("cm: prepare QP: nil QP: %w", verbs.ErrInvalidArgument)
	}
	switch s := qp.State(); s {
	case verbs.QPStateInit:
		return nil
	case verbs.QPStateReset:
	default:
		return fmt.Errorf("cm: prepare QP %#x: in %v, want RESET or INIT: %w", qp.QPN(), s, verbs.ErrInvalidState)
	}
	a, mask := initAttr(qp.Type(), UDPQKey)
	if err := qp.Modify(&a, mask); err != nil {
		return fmt.Errorf("cm: prepare QP %#x: %w", qp.QPN(), err)
	}
	return nil
}

// CreateQP creates a QP on the ID's device for its port space
// (rdma_create_qp): attr.QPType is taken from the ID when zero; the QP is
// then handed over as by SetQP. DestroyQP destroys it.
func (id *ID) CreateQP(pd *verbs.PD, attr verbs.QPInitAttr) (*verbs.QP, error) {
	if pd == nil {
		return nil, fmt.Errorf("cm: create QP: nil PD: %w", verbs.ErrInvalidArgument)
	}
	if attr.QPType == 0 {
		attr.QPType = id.qpType
	}
	lock()
	dev, err := id.deviceLocked("create QP")
	unlock()
	if err != nil {
		return nil, err
	}
	if !sameDevice(pd.Device(), dev) {
		return nil, fmt.Errorf("cm: create QP: the PD is of another device than the ID's: %w", verbs.ErrInvalidArgument)
	}
	qp, err := pd.CreateQP(attr)
	if err != nil {
		return nil, fmt.Errorf("cm: create QP: %w", err)
	}
	if err := id.setQP(qp, true); err != nil {
		_ = qp.Destroy()
		return nil, err
	}
	return qp, nil
}

// SetQP hands the ID a QP the application created on the ID's device
// (an RC or UC QP in RESET or INIT for the TCP port space, a UD QP for the
// others), which the CM then moves as the connection requires (see the
// package documentation). The CM does not destroy it. On a kernel device
// the QP may be of any verbs.OpenHardware of the ID's device, not only of
// ID.Device.
func (id *ID) SetQP(qp *verbs.QP) error {
	if qp == nil {
		return fmt.Errorf("cm: set QP: nil QP: %w", verbs.ErrInvalidArgument)
	}
	return id.setQP(qp, false)
}

func (id *ID) setQP(qp *verbs.QP, owned bool) error {
	lock()
	defer unlock()
	dev, err := id.deviceLocked("set QP")
	if err != nil {
		return err
	}
	if !sameDevice(qp.PD().Device(), dev) {
		return fmt.Errorf("cm: set QP %#x: of another device than the ID's: %w", qp.QPN(), verbs.ErrInvalidArgument)
	}
	if id.qp != nil {
		return fmt.Errorf("cm: set QP %#x: the ID has QP %#x: %w", qp.QPN(), id.qp.QPN(), verbs.ErrInvalidState)
	}
	t := qp.Type()
	switch {
	case id.qpType == verbs.QPTypeUD && t != verbs.QPTypeUD,
		id.qpType != verbs.QPTypeUD && t != verbs.QPTypeRC && t != verbs.QPTypeUC:
		return fmt.Errorf("cm: set QP %#x: a %v QP for the %v port space: %w", qp.QPN(), t, id.ps, verbs.ErrInvalidArgument)
	}
	if t == verbs.QPTypeUD {
		err = id.readyUD(qp)
	} else {
		err = id.initConnected(qp)
	}
	if err != nil {
		return fmt.Errorf("cm: set QP %#x: %w", qp.QPN(), err)
	}
	id.qp, id.pd, id.qpOwned = qp, qp.PD(), owned
	return nil
}

// sameDevice reports whether a and b are the same device: the same
// goroce device, or the same kernel device (each OpenHardware opens the
// kernel device anew; the CM's calls take QPs of any of them).
func sameDevice(a, b *verbs.Device) bool {
	return a == b || a.Hardware() && b.Hardware() && a.Name() == b.Name()
}

// deviceLocked returns the ID's device. The caller holds state.mu.
func (id *ID) deviceLocked(op string) (*verbs.Device, error) {
	if err := id.onDevice(op); err != nil {
		return nil, err
	}
	if id.hw != nil && id.hw.dev != nil {
		return id.hw.dev, nil
	}
	if id.agent == nil {
		return nil, fmt.Errorf("cm: %s: the ID has no device yet (bind or resolve an address): %w", op, verbs.ErrInvalidState)
	}
	return id.agent.dev, nil
}

// initConnected moves a connected QP handed over in RESET to INIT; one in
// INIT stays. The caller holds state.mu.
func (id *ID) initConnected(qp *verbs.QP) error {
	switch qp.State() {
	case verbs.QPStateReset:
		a, mask, err := id.qpAttr(verbs.QPStateInit, qp.Type())
		if err != nil {
			return err
		}
		return modify(qp, &a, mask)
	case verbs.QPStateInit:
		return nil
	}
	return fmt.Errorf("QP is in %v, want RESET or INIT: %w", qp.State(), verbs.ErrInvalidState)
}

// readyUD moves a UD QP to RTS with the ID's Q_Key. The caller holds
// state.mu.
func (id *ID) readyUD(qp *verbs.QP) error {
	for {
		switch s := qp.State(); s {
		case verbs.QPStateReset:
			a, mask, _ := id.qpAttr(verbs.QPStateInit, verbs.QPTypeUD)
			if err := modify(qp, &a, mask); err != nil {
				return err
			}
		case verbs.QPStateInit:
			// The Q_Key again, in case the QP came in INIT with another.
			if err := modify(qp, &verbs.QPAttr{QPState: verbs.QPStateRTR, QKey: id.qkey}, verbs.QPAttrState|verbs.QPAttrQKey); err != nil {
				return err
			}
		case verbs.QPStateRTR:
			return modify(qp, &verbs.QPAttr{QPState: verbs.QPStateRTS}, verbs.QPAttrState|verbs.QPAttrSQPSN)
		case verbs.QPStateRTS:
			return modify(qp, &verbs.QPAttr{QPState: verbs.QPStateRTS, QKey: id.qkey}, verbs.QPAttrState|verbs.QPAttrQKey)
		default:
			return fmt.Errorf("UD QP is in %v: %w", s, verbs.ErrInvalidState)
		}
	}
}

// connectQP moves the ID's connected QP to RTS with the connection's
// attributes: INIT (again, for the rights), RTR, RTS. The caller holds
// state.mu.
func (id *ID) connectQP() error {
	qp := id.qp
	if s := qp.State(); s != verbs.QPStateReset && s != verbs.QPStateInit {
		return fmt.Errorf("QP %#x is in %v, want RESET or INIT: %w", qp.QPN(), s, verbs.ErrInvalidState)
	}
	for _, s := range [...]verbs.QPState{verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS} {
		a, mask, err := id.qpAttr(s, qp.Type())
		if err != nil {
			return err
		}
		if err := modify(qp, &a, mask); err != nil {
			return fmt.Errorf("QP %#x to %v: %w", qp.QPN(), s, err)
		}
	}
	return nil
}

// modify is qp.Modify.
func modify(qp *verbs.QP, a *verbs.QPAttr, mask verbs.QPAttrMask) error { return qp.Modify(a, mask) }

// qpToErr moves the ID's QP to ERR (flushing its work requests), if it
// has one that is connected. The caller holds state.mu.
func (id *ID) qpToErr() error {
	qp := id.qp
	if qp == nil || qp.Type() == verbs.QPTypeUD {
		return nil
	}
	switch qp.State() {
	case verbs.QPStateReset, verbs.QPStateErr:
		return nil
	}
	err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)
	if err != nil && !errors.Is(err, verbs.ErrClosed) {
		return fmt.Errorf("QP %#x to ERR: %w", qp.QPN(), err)
	}
	return nil
}

// DestroyQP destroys the QP CreateQP made, or lets go of the one SetQP
// gave without destroying it (rdma_destroy_qp).
func (id *ID) DestroyQP() error {
	lock()
	qp, owned := id.qp, id.qpOwned
	if qp != nil && id.agent != nil && id.agent.byQPN[qp.QPN()] == id {
		delete(id.agent.byQPN, qp.QPN())
	}
	id.qp, id.qpOwned = nil, false
	unlock()
	if qp == nil {
		return fmt.Errorf("cm: destroy QP: the ID has none: %w", verbs.ErrInvalidState)
	}
	if owned {
		return qp.Destroy()
	}
	return nil
}
