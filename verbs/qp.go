package verbs

import (
	"sync"
	"sync/atomic"
)

// QP is a queue pair (struct ibv_qp): a send queue and a receive queue (or
// an SRQ) bound to CQs, moved through the IBA state machine with Modify.
//
// Locking: mu serializes Modify, Query and Destroy and guards the
// attributes; sqMu and rqMu guard the queues. The state is changed only
// with all three held and is read atomically, so a post sees either the old
// or the new state, never a queue being cleared or flushed underneath it.
type QP struct {
	dev      *Device
	pd       *PD
	qpType   QPType
	qpn      uint32
	sendCQ   *CQ
	recvCQ   *CQ
	srq      *SRQ
	sqSigAll bool
	cap      QPCap

	mu   sync.Mutex
	attr QPAttr // QPState and CurQPState are kept in state

	state  atomic.Int32 // QPState
	closed atomic.Bool

	sqMu sync.Mutex
	sq   sendQueue
	rqMu sync.Mutex
	rq   recvQueue // unused with an SRQ
}

// CreateQP creates a queue pair in the RESET state (ibv_create_qp).
//
// The send and receive CQs are required and must belong to the PD's device.
// With an SRQ the receive capacities are ignored and read back as 0. Each
// capacity is checked against the device limits (max_qp_wr, max_sge,
// MaxInlineData); the QP gets exactly the capacities requested, which Cap
// returns. QP numbers are 24-bit, never 0 or 1, and unique among the
// device's live QPs.
func (pd *PD) CreateQP(init QPInitAttr) (*QP, error) {
	const op = "CreateQP"
	if pd == nil {
		return nil, newError(op, "pd", ErrInvalidArgument, "nil")
	}
	d := pd.dev
	switch init.QPType {
	case QPTypeRC, QPTypeUC, QPTypeUD:
	case QPTypeRawPacket, QPTypeXRCSend, QPTypeXRCRecv, QPTypeDriver:
		return nil, errorf(op, "qp_type", ErrNotSupported, "%v", init.QPType)
	default:
		return nil, errorf(op, "qp_type", ErrInvalidArgument, "%v", init.QPType)
	}
	switch {
	case init.SendCQ == nil:
		return nil, newError(op, "send_cq", ErrInvalidArgument, "missing")
	case init.RecvCQ == nil:
		return nil, newError(op, "recv_cq", ErrInvalidArgument, "missing")
	case init.SendCQ.dev != d:
		return nil, newError(op, "send_cq", ErrInvalidArgument, "belongs to another device")
	case init.RecvCQ.dev != d:
		return nil, newError(op, "recv_cq", ErrInvalidArgument, "belongs to another device")
	case init.SRQ != nil && init.SRQ.pd.dev != d:
		return nil, newError(op, "srq", ErrInvalidArgument, "belongs to another device")
	}
	c := init.Cap
	if init.SRQ != nil {
		c.MaxRecvWR, c.MaxRecvSGE = 0, 0
	}
	limits := []struct {
		field string
		val   int
		max   int
	}{
		{"max_send_wr", c.MaxSendWR, d.attr.MaxQPWR},
		{"max_recv_wr", c.MaxRecvWR, d.attr.MaxQPWR},
		{"max_send_sge", c.MaxSendSGE, d.attr.MaxSGE},
		{"max_recv_sge", c.MaxRecvSGE, d.attr.MaxSGE},
		{"max_inline_data", c.MaxInlineData, d.attr.MaxInlineData},
	}
	for _, l := range limits {
		if l.val < 0 || l.val > l.max {
			return nil, errorf(op, l.field, ErrInvalidArgument, "%d outside 0..%d", l.val, l.max)
		}
	}

	var undo []func()
	rollback := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	if err := pd.use(op); err != nil {
		return nil, err
	}
	undo = append(undo, pd.unuse)
	if err := d.res.qp.acquire(op); err != nil {
		rollback()
		return nil, err
	}
	undo = append(undo, d.res.qp.release)
	if err := init.SendCQ.attach(op, "send_cq"); err != nil {
		rollback()
		return nil, err
	}
	undo = append(undo, init.SendCQ.detach)
	if err := init.RecvCQ.attach(op, "recv_cq"); err != nil {
		rollback()
		return nil, err
	}
	undo = append(undo, init.RecvCQ.detach)
	if init.SRQ != nil {
		if err := init.SRQ.attach(op); err != nil {
			rollback()
			return nil, err
		}
		undo = append(undo, init.SRQ.detach)
	}

	qp := &QP{
		dev:      d,
		pd:       pd,
		qpType:   init.QPType,
		sendCQ:   init.SendCQ,
		recvCQ:   init.RecvCQ,
		srq:      init.SRQ,
		sqSigAll: init.SQSigAll,
		cap:      c,
		attr: QPAttr{
			// UD has no PATH_MTU attribute; its messages are bounded by
			// the port's active MTU, which is the default here.
			PathMTU: d.port.ActiveMTU,
			PortNum: 1,
		},
		sq: newSendQueue(c.MaxSendWR, c.MaxSendSGE, c.MaxInlineData),
	}
	if init.SRQ == nil {
		qp.rq = newRecvQueue(c.MaxRecvWR, c.MaxRecvSGE)
	}
	if err := d.addQP(op, qp); err != nil {
		rollback()
		return nil, err
	}
	return qp, nil
}

// QPN returns the QP number.
func (qp *QP) QPN() uint32 { return qp.qpn }

// Type returns the QP type.
func (qp *QP) Type() QPType { return qp.qpType }

// State returns the current state.
func (qp *QP) State() QPState { return QPState(qp.state.Load()) }

// Cap returns the QP's queue capacities.
func (qp *QP) Cap() QPCap { return qp.cap }

// PD returns the QP's protection domain.
func (qp *QP) PD() *PD { return qp.pd }

// Query returns the QP's attributes and creation attributes (ibv_query_qp).
// Like libibverbs it may return more than mask asks for: every attribute is
// filled in. CurQPState equals QPState.
func (qp *QP) Query(mask QPAttrMask) (QPAttr, QPInitAttr, error) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closed.Load() {
		return QPAttr{}, QPInitAttr{}, closedError("QueryQP", "qp")
	}
	a := qp.attr
	a.QPState = qp.State()
	a.CurQPState = a.QPState
	a.Cap = qp.cap
	init := QPInitAttr{
		QPType:   qp.qpType,
		SendCQ:   qp.sendCQ,
		RecvCQ:   qp.recvCQ,
		SRQ:      qp.srq,
		Cap:      qp.cap,
		SQSigAll: qp.sqSigAll,
	}
	return a, init, nil
}

// Modify changes the attributes selected by mask (ibv_modify_qp), usually
// together with a state transition (QPAttrState).
//
// The transition and the mask are checked against the IBA state machine as
// the Linux kernel encodes it: an impossible transition fails with
// ErrInvalidState naming "qp_state"; a missing required attribute or an
// attribute the transition does not accept fails with ErrInvalidArgument
// naming it. The values are then checked (port 1, P_Key index 0, PSNs and
// QP numbers within 24 bits, timeout and min_rnr_timer within 5 bits, retry
// counts within 3, path MTU up to the port's maximum, rd_atomic values up to
// the device limits, a valid address vector, QP access flags). With
// QPAttrCurState, CurQPState must equal the current state. A failed Modify
// changes nothing.
//
// Moving to RESET discards all posted work requests. Moving to ERR
// completes them with WCWRFlushErr on the QP's CQs (receive work requests of
// an SRQ stay in the SRQ).
func (qp *QP) Modify(attr *QPAttr, mask QPAttrMask) error {
	const op = "ModifyQP"
	if attr == nil {
		return newError(op, "attr", ErrInvalidArgument, "nil")
	}
	if unknown := mask &^ qpAttrKnown; unknown != 0 {
		return errorf(op, "attr_mask", ErrNotSupported, "unknown bits %#x", uint32(unknown))
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closed.Load() {
		return closedError(op, "qp")
	}
	cur := qp.State()
	next := cur
	if mask&QPAttrState != 0 {
		if attr.QPState < QPStateReset || attr.QPState > QPStateErr {
			return errorf(op, "qp_state", ErrInvalidArgument, "%v", attr.QPState)
		}
		next = attr.QPState
	}
	if mask&QPAttrCurState != 0 && attr.CurQPState != cur {
		return errorf(op, "cur_qp_state", ErrInvalidState, "%v, but the QP is in %v", attr.CurQPState, cur)
	}
	if err := checkTransition(op, qp.qpType, cur, next, mask); err != nil {
		return err
	}
	if err := qp.checkAttrValues(op, attr, mask); err != nil {
		return err
	}

	a := qp.attr
	applyQPAttr(&a, attr, mask)

	qp.sqMu.Lock()
	qp.rqMu.Lock()
	qp.attr = a
	qp.state.Store(int32(next))
	switch {
	case next == QPStateReset:
		qp.sq.ring.clear()
		qp.rq.ring.clear()
	case next == QPStateErr && cur != QPStateErr:
		qp.flushLocked()
	}
	qp.rqMu.Unlock()
	qp.sqMu.Unlock()
	return nil
}

// checkAttrValues validates the values of the attributes in mask.
func (qp *QP) checkAttrValues(op string, attr *QPAttr, mask QPAttrMask) error {
	d := qp.dev
	if mask&QPAttrAltPath != 0 {
		// The kernel refuses alternate paths on RoCE: there is no APM.
		return newError(op, "alt_ah_attr", ErrNotSupported, "alternate paths on RoCE")
	}
	if mask&QPAttrAccessFlags != 0 {
		if err := validateQPAccess(op, attr.QPAccessFlags); err != nil {
			return err
		}
	}
	if mask&QPAttrPKeyIndex != 0 && (attr.PKeyIndex < 0 || attr.PKeyIndex >= d.port.PKeyTblLen) {
		return errorf(op, "pkey_index", ErrInvalidArgument, "%d outside the P_Key table (length %d)", attr.PKeyIndex, d.port.PKeyTblLen)
	}
	if mask&QPAttrPort != 0 {
		if err := d.checkPort(op, "port_num", attr.PortNum); err != nil {
			return err
		}
	}
	if mask&QPAttrAV != 0 {
		if err := d.checkAV(op, "ah_attr", &attr.AHAttr); err != nil {
			return err
		}
	}
	if mask&QPAttrPathMTU != 0 && (!attr.PathMTU.Valid() || attr.PathMTU > d.port.MaxMTU) {
		return errorf(op, "path_mtu", ErrInvalidArgument, "%v is not an MTU up to %v", attr.PathMTU, d.port.MaxMTU)
	}
	type bound struct {
		bit   QPAttrMask
		value uint64
		max   uint64
	}
	for _, b := range [...]bound{
		{QPAttrTimeout, uint64(attr.Timeout), 31},
		{QPAttrRetryCnt, uint64(attr.RetryCnt), 7},
		{QPAttrRNRRetry, uint64(attr.RNRRetry), 7},
		{QPAttrMinRNRTimer, uint64(attr.MinRNRTimer), 31},
		{QPAttrRQPSN, uint64(attr.RQPSN), 0xFFFFFF},
		{QPAttrSQPSN, uint64(attr.SQPSN), 0xFFFFFF},
		{QPAttrDestQPN, uint64(attr.DestQPNum), 0xFFFFFF},
		{QPAttrPathMigState, uint64(attr.PathMigState), uint64(MigArmed)},
	} {
		if mask&b.bit != 0 && b.value > b.max {
			return errorf(op, b.bit.field(), ErrInvalidArgument, "%d exceeds %d", b.value, b.max)
		}
	}
	if mask&QPAttrMaxQPRdAtomic != 0 && (attr.MaxRdAtomic < 0 || attr.MaxRdAtomic > d.attr.MaxQPInitRdAtom) {
		return errorf(op, "max_rd_atomic", ErrInvalidArgument, "%d outside 0..%d", attr.MaxRdAtomic, d.attr.MaxQPInitRdAtom)
	}
	if mask&QPAttrMaxDestRdAtomic != 0 && (attr.MaxDestRdAtomic < 0 || attr.MaxDestRdAtomic > d.attr.MaxQPRdAtom) {
		return errorf(op, "max_dest_rd_atomic", ErrInvalidArgument, "%d outside 0..%d", attr.MaxDestRdAtomic, d.attr.MaxQPRdAtom)
	}
	return nil
}

// applyQPAttr copies the attributes selected by mask from src into a.
func applyQPAttr(a, src *QPAttr, mask QPAttrMask) {
	if mask&QPAttrEnSQDAsyncNotify != 0 {
		a.EnSQDAsyncNotify = src.EnSQDAsyncNotify
	}
	if mask&QPAttrAccessFlags != 0 {
		a.QPAccessFlags = src.QPAccessFlags
	}
	if mask&QPAttrPKeyIndex != 0 {
		a.PKeyIndex = src.PKeyIndex
	}
	if mask&QPAttrPort != 0 {
		a.PortNum = src.PortNum
	}
	if mask&QPAttrQKey != 0 {
		a.QKey = src.QKey
	}
	if mask&QPAttrAV != 0 {
		a.AHAttr = src.AHAttr
	}
	if mask&QPAttrPathMTU != 0 {
		a.PathMTU = src.PathMTU
	}
	if mask&QPAttrTimeout != 0 {
		a.Timeout = src.Timeout
	}
	if mask&QPAttrRetryCnt != 0 {
		a.RetryCnt = src.RetryCnt
	}
	if mask&QPAttrRNRRetry != 0 {
		a.RNRRetry = src.RNRRetry
	}
	if mask&QPAttrRQPSN != 0 {
		a.RQPSN = src.RQPSN
	}
	if mask&QPAttrMaxQPRdAtomic != 0 {
		a.MaxRdAtomic = src.MaxRdAtomic
	}
	if mask&QPAttrMinRNRTimer != 0 {
		a.MinRNRTimer = src.MinRNRTimer
	}
	if mask&QPAttrSQPSN != 0 {
		a.SQPSN = src.SQPSN
	}
	if mask&QPAttrMaxDestRdAtomic != 0 {
		a.MaxDestRdAtomic = src.MaxDestRdAtomic
	}
	if mask&QPAttrPathMigState != 0 {
		a.PathMigState = src.PathMigState
	}
	if mask&QPAttrDestQPN != 0 {
		a.DestQPNum = src.DestQPNum
	}
}

// flushLocked completes every posted work request with WCWRFlushErr, in
// posting order, and empties the QP's queues. The caller holds sqMu and
// rqMu. The transport calls it when it moves the QP to ERR on a fatal error.
func (qp *QP) flushLocked() {
	for w := qp.sq.ring.front(); w != nil; w = qp.sq.ring.front() {
		qp.sendCQ.push(WorkCompletion{
			WRID:   w.wr.WRID,
			Status: WCWRFlushErr,
			Opcode: lookupOpcode(w.wr.Opcode).wc,
			QPNum:  qp.qpn,
		}, false)
		qp.sq.ring.pop()
	}
	for w := qp.rq.ring.front(); w != nil; w = qp.rq.ring.front() {
		qp.recvCQ.push(flushRecvWC(w.wrID, qp.qpn), false)
		qp.rq.ring.pop()
	}
}

func flushRecvWC(wrID uint64, qpn uint32) WorkCompletion {
	return WorkCompletion{WRID: wrID, Status: WCWRFlushErr, Opcode: WCRecv, QPNum: qpn}
}

// Destroy destroys the QP (ibv_destroy_qp): posted work requests are
// discarded without completions, and the QP releases its CQs, SRQ and PD.
func (qp *QP) Destroy() error {
	const op = "DestroyQP"
	qp.mu.Lock()
	if qp.closed.Load() {
		qp.mu.Unlock()
		return closedError(op, "qp")
	}
	qp.sqMu.Lock()
	qp.rqMu.Lock()
	qp.closed.Store(true)
	qp.sq, qp.rq = sendQueue{}, recvQueue{}
	qp.rqMu.Unlock()
	qp.sqMu.Unlock()
	qp.mu.Unlock()

	qp.dev.qps.Delete(qp.qpn)
	qp.sendCQ.detach()
	qp.recvCQ.detach()
	if qp.srq != nil {
		qp.srq.detach()
	}
	qp.dev.res.qp.release()
	qp.pd.unuse()
	return nil
}

// PostRecv posts a receive work request (ibv_post_recv). It fails with
// ErrInvalidState in RESET, with ErrInvalidArgument when the QP uses an SRQ
// ("srq") or the request has more SGEs than max_recv_sge ("num_sge"), and
// with ErrNoMemory when the receive queue is full ("rq"). In ERR the request
// completes at once with WCWRFlushErr. The SGEs' keys are checked when a
// message arrives, as in hardware. PostRecv does not allocate.
func (qp *QP) PostRecv(wr *RecvWR) error {
	const op = "PostRecv"
	if qp.srq != nil {
		return newError(op, "srq", ErrInvalidArgument, "the QP receives through an SRQ; use SRQ.PostRecv")
	}
	qp.rqMu.Lock()
	defer qp.rqMu.Unlock()
	if qp.closed.Load() {
		return closedError(op, "qp")
	}
	state := qp.State()
	if state == QPStateReset {
		return errorf(op, "qp_state", ErrInvalidState, "cannot post receives in %v", state)
	}
	if err := qp.rq.checkRecv(op, "rq", wr); err != nil {
		return err
	}
	if state == QPStateErr {
		qp.recvCQ.push(flushRecvWC(wr.WRID, qp.qpn), false)
		return nil
	}
	qp.rq.post(wr)
	return nil
}

// PostSend posts a send work request (ibv_post_send).
//
// Sends are accepted in RTS, queued without processing in SQD, and
// completed at once with WCWRFlushErr in SQE and ERR (as libibverbs
// providers do); RESET, INIT and RTR fail with ErrInvalidState. The request
// is checked as rxe does: the opcode must be valid for the QP type
// (ErrInvalidArgument) and implemented (ErrNotSupported: LOCAL_INV,
// BIND_MW, TSO, FLUSH, ATOMIC_WRITE); at most max_send_sge SGEs
// ("num_sge"); a message of at most 2^31 bytes; atomics move exactly 8
// bytes to an 8-byte aligned address; SendInline only for sends and writes
// and at most max_inline_data bytes; UD needs an address handle of the QP's
// PD. A full send queue fails with ErrNoMemory ("sq").
//
// Except with SendInline, SGEs are not resolved at post time: their keys and
// bounds are checked when the device reads them, as in hardware. PostSend
// does not allocate.
func (qp *QP) PostSend(wr *SendWR) error {
	const op = "PostSend"
	if wr == nil {
		return newError(op, "wr", ErrInvalidArgument, "nil")
	}
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	if qp.closed.Load() {
		return closedError(op, "qp")
	}
	state := qp.State()
	if state < QPStateRTS {
		return errorf(op, "qp_state", ErrInvalidState, "cannot post sends in %v", state)
	}
	info := lookupOpcode(wr.Opcode)
	switch {
	case !info.known:
		return errorf(op, "opcode", ErrInvalidArgument, "%v", wr.Opcode)
	case !info.validFor(qp.qpType):
		return errorf(op, "opcode", ErrInvalidArgument, "%v is not valid on a %v QP", wr.Opcode, qp.qpType)
	case !info.supported:
		return errorf(op, "opcode", ErrNotSupported, "%v", wr.Opcode)
	}
	if unknown := wr.SendFlags &^ sendFlagsKnown; unknown != 0 {
		return errorf(op, "send_flags", ErrInvalidArgument, "unknown bits %#x", uint32(unknown))
	}
	if wr.SendFlags&SendIPCsum != 0 {
		return newError(op, "send_flags", ErrNotSupported, "IP checksum offload")
	}
	if len(wr.SGList) > qp.sq.maxSGE {
		return errorf(op, "num_sge", ErrInvalidArgument, "%d exceeds max_send_sge %d", len(wr.SGList), qp.sq.maxSGE)
	}
	length := sgListLength(wr.SGList)
	if length > maxMessageSize {
		return errorf(op, "sg_list", ErrInvalidArgument, "message of %d bytes exceeds 2^31", length)
	}
	if info.atomic {
		if length != 8 {
			return errorf(op, "sg_list", ErrInvalidArgument, "atomic operand of %d bytes, want 8", length)
		}
		if wr.Atomic.RemoteAddr&7 != 0 {
			return errorf(op, "atomic.remote_addr", ErrInvalidArgument, "%#x is not 8-byte aligned", wr.Atomic.RemoteAddr)
		}
	}
	inline := wr.SendFlags&SendInline != 0
	if inline {
		if !info.inline {
			return errorf(op, "send_flags", ErrInvalidArgument, "%v cannot carry inline data", wr.Opcode)
		}
		if length > uint64(qp.sq.maxInline) {
			return errorf(op, "sg_list", ErrInvalidArgument, "%d bytes of inline data exceed max_inline_data %d", length, qp.sq.maxInline)
		}
	}
	var av AddressVector
	if qp.qpType == QPTypeUD {
		ah := wr.UD.AH
		switch {
		case ah == nil:
			return newError(op, "ud.ah", ErrInvalidArgument, "missing")
		case ah.pd != qp.pd:
			return newError(op, "ud.ah", ErrInvalidArgument, "in another protection domain")
		case ah.closed.Load():
			return closedError(op, "ud.ah")
		case wr.UD.RemoteQPN > 0xFFFFFF:
			return errorf(op, "ud.remote_qpn", ErrInvalidArgument, "%#x exceeds 24 bits", wr.UD.RemoteQPN)
		}
		av = ah.av
	}
	signaled := wr.SendFlags&SendSignaled != 0 || qp.sqSigAll

	if state == QPStateSQE || state == QPStateErr {
		qp.sendCQ.push(WorkCompletion{WRID: wr.WRID, Status: WCWRFlushErr, Opcode: info.wc, QPNum: qp.qpn}, false)
		return nil
	}
	w := qp.sq.ring.next()
	if w == nil {
		return errorf(op, "sq", ErrNoMemory, "all %d entries posted", qp.sq.ring.cap())
	}
	if inline {
		if err := qp.gatherInline(op, w, wr.SGList); err != nil {
			return err
		}
	} else {
		w.sge = append(w.sge[:0], wr.SGList...)
		w.inline = w.inline[:0]
	}
	w.wr = *wr
	w.wr.SGList = w.sge
	w.wr.UD.AH = nil // the address vector is copied; the AH may be destroyed
	w.av = av
	w.length = length
	w.signaled = signaled
	w.solicited = wr.SendFlags&SendSolicited != 0
	qp.sq.ring.push()
	return nil
}

// gatherInline copies the data of sges into w's inline buffer. Each SGE is
// resolved through its lkey, which must name a region of the QP's PD
// covering it; no access right is needed to read local memory.
func (qp *QP) gatherInline(op string, w *sendWQE, sges []SGE) error {
	w.sge = w.sge[:0]
	w.inline = w.inline[:0]
	for i := range sges {
		s := &sges[i]
		if s.Length == 0 {
			continue
		}
		r, err := qp.dev.acquireMR(s.LKey, qp.pd, s.Addr, int(s.Length), 0)
		if err != nil {
			return errorf(op, "sg_list", ErrInvalidArgument, "inline entry %d: %v", i, err)
		}
		w.inline = append(w.inline, r.bytes(s.Addr, int(s.Length))...)
		r.release()
	}
	return nil
}
