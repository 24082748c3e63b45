package verbs

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/netio"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/transport"
)

// QP is a queue pair (struct ibv_qp): a send queue and a receive queue (or
// an SRQ) bound to CQs, moved through the IBA state machine with Modify.
//
// An RC QP moves data through its transport state machines (requester,
// completer, responder), which own its send and receive queues. Posting runs
// the requester on the caller's goroutine and sends what the window allows;
// the device's receive goroutine runs the responder and completer inline.
//
// Locking: mu serializes Modify, Query and Destroy and guards the
// attributes; xmu serializes everything that touches the transport state
// machines: posting, packet handling, timers and the effects of Modify. The
// state is read atomically; Modify changes it with both held, and the
// transport's own move to ERR (an error completion) is mirrored into it
// with xmu held.
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

	// sqDraining is set by a move to SQD with en_sqd_async_notify until
	// the send queue has drained and EventSQDrained is raised; guarded
	// by xmu.
	sqDraining bool

	state  atomic.Int32 // QPState
	closed atomic.Bool

	xmu    sync.Mutex
	tq     *transport.QP     // the transport state machines (RC, UC or UD)
	out    *transport.Output // packets produced under xmu; nil when none (outputLocked)
	msgs   []netio.Message   // their batch for the socket
	sgl    []transport.SGE   // work request conversion scratch
	inline []byte            // inline data gathering scratch
	peer   netip.AddrPort    // the remote device, from the AV (RTR on)
	sender *netio.Sender     // our UDP source port for this connection

	timerIndex int       // position in the engine's timer heap; -1 if absent
	deadline   time.Time // when the transport wants OnTimer; guarded by engine.tmu

	folded bool // counters added to the device's totals; guarded by engine.cmu
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
		timerIndex: -1,
		sgl:        make([]transport.SGE, 0, max(c.MaxSendSGE, c.MaxRecvSGE, 1)),
		inline:     make([]byte, 0, c.MaxInlineData),
	}
	// The receive path finds the QP as soon as addQP publishes it; holding
	// xmu until tq is set makes it wait for a complete QP.
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	if err := d.addQP(op, qp); err != nil {
		rollback()
		return nil, err
	}
	cfg := transport.Config{
		Type:        transportQPType(qp.qpType),
		QPN:         qp.qpn,
		MaxSendWR:   c.MaxSendWR,
		MaxRecvWR:   c.MaxRecvWR,
		MaxSGE:      max(c.MaxSendSGE, c.MaxRecvSGE),
		MaxInline:   c.MaxInlineData,
		Memory:      (*qpMemory)(qp),
		SendCQ:      (*cqSink)(qp.sendCQ),
		RecvCQ:      (*cqSink)(qp.recvCQ),
		SQSigAll:    qp.sqSigAll,
		AtomicLocks: &d.eng.atomics,
	}
	if qp.srq != nil {
		cfg.SRQ = (*srqSource)(qp.srq)
	}
	qp.tq = transport.NewQP(cfg)
	if qp.qpType == QPTypeUD {
		// A UD QP has no path MTU attribute: a datagram is bounded
		// by the port's active MTU (rxe takes the port's too).
		_ = qp.tq.SetPathMTU(d.port.ActiveMTU.Bytes())
	}
	return qp, nil
}

// transportQPType converts a QP type the transport implements.
func transportQPType(t QPType) transport.QPType {
	switch t {
	case QPTypeUC:
		return transport.TypeUC
	case QPTypeUD:
		return transport.TypeUD
	}
	return transport.TypeRC
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
	// The current state is read under xmu: the transport may move the QP
	// to ERR at any time, and a transition must start from the state the
	// QP is really in (no RTS->RTS that would revive a failed QP).
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	// What the receive path built for the end of its batch leaves before
	// the transition (which discards the Output); a move to ERR it made,
	// not mirrored yet, counts, with its events.
	qp.transmitDeferredLocked()
	qp.noteTransportErrorLocked()
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

	if err := qp.applyTransportLocked(op, &a, mask, cur, next); err != nil {
		return err
	}
	qp.attr = a
	qp.state.Store(int32(next))
	if next == QPStateErr && cur != QPStateErr {
		qp.raiseQPEventsLocked(false)
	}
	// IBA 11.6.3: SQ Drained is raised when asked for by the move to SQD.
	qp.sqDraining = next == QPStateSQD && (qp.sqDraining ||
		cur != QPStateSQD && mask&QPAttrEnSQDAsyncNotify != 0 && attr.EnSQDAsyncNotify)
	qp.checkSQDrainedLocked()
	return nil
}

// checkSQDrainedLocked raises EventSQDrained once the send queue of a QP
// moved to SQD with en_sqd_async_notify has no work request in flight.
// The caller holds xmu.
func (qp *QP) checkSQDrainedLocked() {
	if qp.sqDraining && qp.State() == QPStateSQD && qp.tq != nil && qp.tq.SendQueueDrained() {
		qp.sqDraining = false
		qp.dev.events().post(AsyncEvent{Type: EventSQDrained, QP: qp})
	}
}

// applyTransportLocked hands the new attributes to the transport state
// machines and, on the way to RTR, connects the QP to its peer. Values were
// validated; what can still fail is the socket for the source port, and
// then nothing has changed. The caller holds mu and xmu.
func (qp *QP) applyTransportLocked(op string, a *QPAttr, mask QPAttrMask, cur, next QPState) error {
	tq := qp.tq
	if tq == nil {
		return nil
	}
	if mask&(QPAttrAV|QPAttrDestQPN) != 0 && next != QPStateReset && next != QPStateErr {
		if err := qp.connectLocked(op, a); err != nil {
			return err
		}
	}
	if qp.qpType == QPTypeUD && qp.sender == nil && next != QPStateReset && next != QPStateErr {
		if err := qp.openDatagramLocked(op); err != nil {
			return err
		}
	}
	if mask&QPAttrQKey != 0 {
		tq.SetQKey(a.QKey)
	}
	var errs []error
	set := func(bit QPAttrMask, err error) {
		if mask&bit != 0 && err != nil {
			errs = append(errs, err)
		}
	}
	if mask&QPAttrPathMTU != 0 {
		set(QPAttrPathMTU, tq.SetPathMTU(a.PathMTU.Bytes()))
	}
	if mask&QPAttrRQPSN != 0 {
		tq.SetRQPSN(psn.PSN(a.RQPSN))
	}
	if mask&QPAttrSQPSN != 0 {
		tq.SetSQPSN(psn.PSN(a.SQPSN))
	}
	if mask&QPAttrDestQPN != 0 {
		tq.SetDestQPN(a.DestQPNum)
	}
	set(QPAttrTimeout, tq.SetTimeout(a.Timeout))
	set(QPAttrRetryCnt, tq.SetRetryCnt(a.RetryCnt))
	set(QPAttrRNRRetry, tq.SetRNRRetry(a.RNRRetry))
	set(QPAttrMinRNRTimer, tq.SetMinRNRTimer(a.MinRNRTimer))
	set(QPAttrMaxQPRdAtomic, tq.SetMaxRdAtomic(a.MaxRdAtomic))
	set(QPAttrMaxDestRdAtomic, tq.SetMaxDestRdAtomic(a.MaxDestRdAtomic))
	if mask&QPAttrAccessFlags != 0 {
		tq.SetAccessFlags(transport.Access(a.QPAccessFlags))
	}
	if len(errs) > 0 {
		// checkAttrValues admits only values the transport takes.
		return newError(op, "attr", ErrInvalidArgument, errors.Join(errs...).Error())
	}
	if next != cur || mask&QPAttrState != 0 {
		tq.SetState(transport.State(next))
		if next == QPStateReset {
			qp.disconnectLocked()
		}
	}
	qp.releaseOutputLocked()
	// RESET empties the queues; ERR flushes them through the CQs; RTS
	// starts work posted in SQD: the transport says when to run next.
	qp.dev.eng.schedule(qp)
	return nil
}

// connectLocked points the QP at the device its AV names and takes the UDP
// source port of the connection: one per QP pair, as rxe derives it from
// both QP numbers, so all packets of a connection follow one path.
func (qp *QP) connectLocked(op string, a *QPAttr) error {
	addr := a.AHAttr.DGID.Addr()
	if !addr.IsValid() {
		return newError(op, "ah_attr.dgid", ErrInvalidArgument, "not an IP address")
	}
	port := a.AHAttr.UDPPort
	if port == 0 {
		port = DefaultUDPPort
	}
	peer := netip.AddrPortFrom(addr.Unmap(), port)
	sport := netio.SourcePortForFlow(wireQPN(qp.qpn), wireQPN(a.DestQPNum))
	if qp.sender != nil && qp.peer == peer && qp.sender.Port() == sport {
		return nil
	}
	sender, err := qp.dev.eng.conn.Sender(sport)
	if err != nil {
		return errorf(op, "ah_attr", ErrNoMemory, "UDP source port: %v", err)
	}
	qp.disconnectLocked()
	qp.peer, qp.sender = peer, sender
	return nil
}

// openDatagramLocked takes the UDP source port of a UD QP: rxe gives each
// QP one derived from its number at creation, used for every destination.
func (qp *QP) openDatagramLocked(op string) error {
	sender, err := qp.dev.eng.conn.Sender(netio.SourcePortForQPN(wireQPN(qp.qpn)))
	if err != nil {
		return errorf(op, "qp_state", ErrNoMemory, "UDP source port: %v", err)
	}
	qp.sender = sender
	return nil
}

// disconnectLocked gives back the source port.
func (qp *QP) disconnectLocked() {
	if qp.sender != nil {
		qp.sender.Release()
		qp.sender = nil
	}
	qp.peer = netip.AddrPort{}
}

// transmitLocked sends the packets the transport produced, in one batch,
// and files the QP's next deadline. A packet the socket refuses counts as
// lost: the transport's retransmission recovers it. The caller holds xmu.
func (qp *QP) transmitLocked() { qp.transmitRepliesToLocked(nil) }

// transmitRepliesToLocked is transmitLocked, except that the replies among
// the packets go to replies, unless nil, instead of the QP's port (the
// engine's EndBatch sends them; see engine.go).
func (qp *QP) transmitRepliesToLocked(replies *replyBatch) {
	var pkts []transport.OutPacket
	if qp.out != nil { // nil: nothing was built since the last transmission
		pkts = qp.out.Packets()
	}
	if len(pkts) > 0 && qp.sender != nil {
		msgs := qp.msgs[:0]
		from := len(pkts)
		if replies != nil {
			from = firstReply(pkts)
			// Held until the QP's own packets have left: a
			// Destroy's flush must not send its replies first.
			replies.mu.Lock()
		}
		for i := range pkts {
			dst := qp.peer
			if ah, ok := pkts[i].Dest.(*AH); ok {
				dst = ah.dst // a UD send: the WR's address handle
			}
			if i >= from && pkts[i].Payload == nil && replies.take(dst, pkts[i].Bytes) {
				continue
			}
			msgs = append(msgs, netio.Message{Dst: dst, Packet: pkts[i].Bytes, Payload: pkts[i].Payload})
		}
		if len(msgs) > 0 {
			_, _ = qp.sender.SendBatch(msgs)
		}
		if replies != nil {
			replies.mu.Unlock()
		}
		clear(msgs) // drop references to the packet buffers
		qp.msgs = msgs[:0]
	}
	qp.releaseOutputLocked()
	qp.noteTransportErrorLocked()
	qp.checkSQDrainedLocked()
	qp.dev.eng.schedule(qp)
}

// transmitDeferredLocked sends what the receive path left in qp.out for
// the end of its batch, as a NIC would already have sent it, before a
// Modify or Destroy changes what the QP may send: among it may be the ACK
// of a SEND whose completion the application already holds, and without
// it the peer retries that SEND into a QP in ERR or a closed port until
// RETRY_EXC_ERR. The caller holds xmu.
func (qp *QP) transmitDeferredLocked() {
	if qp.out != nil && qp.out.Len() > 0 {
		qp.transmitLocked()
	}
}

// noteTransportErrorLocked mirrors a move to ERR that the transport made by
// itself (an error completion, exhausted retries, a CQ overrun) into the
// QP's state, so that State and Query report ERR afterwards, as
// ibv_query_qp does on rxe. The caller holds xmu.
func (qp *QP) noteTransportErrorLocked() {
	if qp.tq != nil && qp.tq.State() == transport.StateErr && qp.State() != QPStateErr {
		qp.state.Store(int32(QPStateErr))
		qp.raiseQPEventsLocked(true)
	}
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
	qp.xmu.Lock()
	qp.transmitDeferredLocked()
	qp.closed.Store(true)
	if qp.tq != nil {
		// RESET discards the queued work requests without completions.
		qp.tq.SetState(transport.StateReset)
	}
	qp.disconnectLocked()
	qp.releaseOutputLocked()
	// Fold the QP's counters into the device's totals in the same xmu
	// section that closes it: Device.Counters sees it either live or
	// folded, never both nor neither.
	qp.dev.eng.retire(qp)
	qp.xmu.Unlock()
	qp.mu.Unlock()
	// The replies a receive batch took from the QP before it closed may
	// still wait for that batch's end, on a goroutine the scheduler may
	// hold up until the device has closed its socket (Device.Close
	// right after Destroy): they leave now.
	qp.dev.eng.flushReplies()
	qp.dev.eng.unschedule(qp)

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
// message arrives, as in hardware. On a UD QP each buffer must hold the
// 40-byte GRH area before the payload (GRHSize). PostRecv does not
// allocate.
func (qp *QP) PostRecv(wr *RecvWR) error {
	const op = "PostRecv"
	switch {
	case qp.closed.Load():
		return closedError(op, "qp")
	case wr == nil:
		return newError(op, "wr", ErrInvalidArgument, "nil")
	case qp.srq != nil:
		return newError(op, "srq", ErrInvalidArgument, "the QP receives through an SRQ; use SRQ.PostRecv")
	case len(wr.SGList) > qp.cap.MaxRecvSGE:
		return errorf(op, "num_sge", ErrInvalidArgument, "%d exceeds max_recv_sge %d", len(wr.SGList), qp.cap.MaxRecvSGE)
	case sgListLength(wr.SGList) >= maxMessageSize:
		return newError(op, "sg_list", ErrInvalidArgument, "total length reaches 2^31")
	}
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	if qp.closed.Load() {
		return closedError(op, "qp")
	}
	if state := qp.State(); state == QPStateReset {
		return errorf(op, "qp_state", ErrInvalidState, "cannot post receives in %v", state)
	}
	err := qp.tq.PostRecv(&transport.RecvWQE{WRID: wr.WRID, SGL: qp.convertSGL(wr.SGList)})
	qp.noteTransportErrorLocked() // a flushed receive can overrun the CQ
	if errors.Is(err, transport.ErrRecvQueueFull) {
		return errorf(op, "rq", ErrNoMemory, "all %d entries posted", qp.cap.MaxRecvWR)
	}
	return transportPostError(op, err)
}

// convertSGL copies a verbs scatter/gather list into the QP's scratch list
// in the transport's type. The caller holds xmu; the transport copies it.
func (qp *QP) convertSGL(sgl []SGE) []transport.SGE {
	out := qp.sgl[:0]
	for _, e := range sgl {
		out = append(out, transport.SGE{Addr: e.Addr, Length: e.Length, LKey: e.LKey})
	}
	qp.sgl = out
	return out
}

// transportPostError names the field of a work request the transport
// refused. Verbs validates first, so these are rare.
func transportPostError(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, transport.ErrSendQueueFull):
		return newError(op, "sq", ErrNoMemory, "send queue full")
	case errors.Is(err, transport.ErrQPState):
		return newError(op, "qp_state", ErrInvalidState, err.Error())
	case errors.Is(err, transport.ErrNoRdAtomic):
		return newError(op, "max_rd_atomic", ErrInvalidArgument, "READ or atomic on a QP with max_rd_atomic 0")
	case errors.Is(err, transport.ErrTooManySGE):
		return newError(op, "num_sge", ErrInvalidArgument, err.Error())
	case errors.Is(err, transport.ErrInlineTooLong):
		return newError(op, "sg_list", ErrInvalidArgument, err.Error())
	case errors.Is(err, transport.ErrMessageTooLong):
		return newError(op, "sg_list", ErrInvalidArgument, err.Error())
	case errors.Is(err, transport.ErrBadOpcodeForType):
		return newError(op, "opcode", ErrInvalidArgument, err.Error())
	}
	return newError(op, "wr", ErrInvalidArgument, err.Error())
}

// PostSend posts a send work request (ibv_post_send) and, on an RC QP in
// RTS, transmits at once what the send window allows, on the caller's
// goroutine.
//
// Sends are accepted in RTS, queued without processing in SQD, and
// completed at once with WCWRFlushErr in SQE and ERR (as libibverbs
// providers do); RESET, INIT and RTR fail with ErrInvalidState. The request
// is checked as rxe does: the opcode must be valid for the QP type
// (ErrInvalidArgument) and implemented (ErrNotSupported: TSO); at most
// max_send_sge SGEs ("num_sge"); a message of at most 2^31 bytes; atomics
// and ATOMIC_WRITE move exactly 8 bytes; SendInline only for sends and
// writes and at most max_inline_data bytes; READ, atomics, FLUSH and
// ATOMIC_WRITE need max_rd_atomic > 0; BIND_MW, LOCAL_INV and FLUSH carry
// no data (see mw.go and SendWR for their own fields). A full send queue fails
// with ErrNoMemory ("sq"). A misaligned atomic is the responder's to refuse:
// it completes with WCRemInvReqErr, as on rxe and hardware.
//
// Except with SendInline, SGEs are not resolved at post time: their keys and
// bounds are checked when the device reads them, as in hardware, and a bad
// one completes the request with WCLocProtErr.
//
// On a UC QP the request completes when its last packet leaves: nothing
// acknowledges it. On a UD QP UD names the destination (an AH of the QP's
// PD, the remote QPN and Q_Key; a Q_Key with the high bit set sends the
// QP's own), and the message must fit in one packet of the port's active
// MTU ("sg_list"). PostSend does not allocate.
func (qp *QP) PostSend(wr *SendWR) error {
	const op = "PostSend"
	if wr == nil {
		return newError(op, "wr", ErrInvalidArgument, "nil")
	}
	info, err := qp.checkSendWR(op, wr)
	if err != nil {
		return err
	}
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	err = qp.postSendLocked(op, wr, info)
	// Even after an error: qp.out may hold what the receive path left
	// for the end of its batch.
	qp.transmitLocked()
	return err
}

// PostSendList posts the work requests of wrs in order, as ibv_post_send
// posts a chained list, and then transmits what they made ready in one
// batch: one system call for many small requests where PostSend makes one
// each (perftest's -l/--post_list). Each request is checked and queued as
// PostSend does. It returns how many were posted: on an error, wrs[n] is
// the request that failed (ibv_post_send's bad_wr), the ones before it are
// posted and will complete, and none after it is. PostSendList does not
// allocate.
func (qp *QP) PostSendList(wrs []SendWR) (int, error) {
	const op = "PostSendList"
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	for i := range wrs {
		info, err := qp.checkSendWR(op, &wrs[i])
		if err == nil {
			err = qp.postSendLocked(op, &wrs[i], info)
		}
		if err != nil {
			qp.transmitLocked()
			return i, err
		}
	}
	qp.transmitLocked()
	return len(wrs), nil
}

// checkSendWR runs the checks of a send work request that need no lock.
func (qp *QP) checkSendWR(op string, wr *SendWR) (opcodeInfo, error) {
	if qp.closed.Load() {
		return opcodeInfo{}, closedError(op, "qp")
	}
	info := lookupOpcode(wr.Opcode)
	switch {
	case !info.known:
		return opcodeInfo{}, errorf(op, "opcode", ErrInvalidArgument, "%v", wr.Opcode)
	case !info.validFor(qp.qpType):
		return opcodeInfo{}, errorf(op, "opcode", ErrInvalidArgument, "%v is not valid on a %v QP", wr.Opcode, qp.qpType)
	case !info.supported:
		return opcodeInfo{}, errorf(op, "opcode", ErrNotSupported, "%v", wr.Opcode)
	}
	if unknown := wr.SendFlags &^ sendFlagsKnown; unknown != 0 {
		return opcodeInfo{}, errorf(op, "send_flags", ErrInvalidArgument, "unknown bits %#x", uint32(unknown))
	}
	if wr.SendFlags&SendIPCsum != 0 {
		return opcodeInfo{}, newError(op, "send_flags", ErrNotSupported, "IP checksum offload")
	}
	if len(wr.SGList) > qp.cap.MaxSendSGE {
		return opcodeInfo{}, errorf(op, "num_sge", ErrInvalidArgument, "%d exceeds max_send_sge %d", len(wr.SGList), qp.cap.MaxSendSGE)
	}
	length := sgListLength(wr.SGList)
	if length > maxMessageSize {
		return opcodeInfo{}, errorf(op, "sg_list", ErrInvalidArgument, "message of %d bytes exceeds 2^31", length)
	}
	if info.atomic && (length != 8 || len(wr.SGList) != 1) {
		return opcodeInfo{}, errorf(op, "sg_list", ErrInvalidArgument, "atomic operand of %d bytes in %d SGEs, want one of 8", length, len(wr.SGList))
	}
	inline := wr.SendFlags&SendInline != 0
	if inline {
		if !info.inline {
			return opcodeInfo{}, errorf(op, "send_flags", ErrInvalidArgument, "%v cannot carry inline data", wr.Opcode)
		}
		if length > uint64(qp.cap.MaxInlineData) {
			return opcodeInfo{}, errorf(op, "sg_list", ErrInvalidArgument, "%d bytes of inline data exceed max_inline_data %d", length, qp.cap.MaxInlineData)
		}
	}
	if qp.qpType == QPTypeUC && wr.Opcode == WRSendWithInv {
		// rxe's opcode table admits it, but IBTA gives UC no opcode
		// with an IETH: rxe's requester then fails the request.
		return opcodeInfo{}, newError(op, "opcode", ErrNotSupported, "SEND_WITH_INV on a UC QP: no UC opcode carries an IETH")
	}
	if qp.qpType == QPTypeUD {
		ah := wr.UD.AH
		switch {
		case ah == nil:
			return opcodeInfo{}, newError(op, "ud.ah", ErrInvalidArgument, "missing")
		case ah.pd != qp.pd:
			return opcodeInfo{}, newError(op, "ud.ah", ErrInvalidArgument, "in another protection domain")
		case ah.closed.Load():
			return opcodeInfo{}, closedError(op, "ud.ah")
		case wr.UD.RemoteQPN > 0xFFFFFF:
			return opcodeInfo{}, errorf(op, "ud.remote_qpn", ErrInvalidArgument, "%#x exceeds 24 bits", wr.UD.RemoteQPN)
		case length > uint64(qp.dev.port.ActiveMTU.Bytes()):
			return opcodeInfo{}, errorf(op, "sg_list", ErrInvalidArgument, "UD message of %d bytes exceeds the MTU %d: a datagram is one packet", length, qp.dev.port.ActiveMTU.Bytes())
		}
	}
	return info, nil
}

// postSendLocked queues a checked send work request in the transport,
// which builds the packets it may send now into qp.out; the caller holds
// xmu and transmits them.
func (qp *QP) postSendLocked(op string, wr *SendWR, info opcodeInfo) error {
	inline := wr.SendFlags&SendInline != 0
	if qp.closed.Load() {
		return closedError(op, "qp")
	}
	state := qp.State()
	if state < QPStateRTS {
		return errorf(op, "qp_state", ErrInvalidState, "cannot post sends in %v", state)
	}
	if state == QPStateSQE {
		// The send queue is in error: new work flushes (IBA 10.8.3.5).
		qp.sendCQ.push(WorkCompletion{WRID: wr.WRID, Status: WCWRFlushErr, Opcode: info.wc, QPNum: qp.qpn}, false)
		return nil
	}
	w := transport.SendWQE{
		WRID:           wr.WRID,
		Opcode:         transport.WROpcode(wr.Opcode),
		Flags:          transport.SendFlags(wr.SendFlags),
		RemoteAddr:     wr.RDMA.RemoteAddr,
		RKey:           wr.RDMA.RKey,
		Imm:            wr.ImmData,
		InvalidateRKey: wr.InvalidateRKey,
	}
	if qp.qpType == QPTypeUD {
		w.RemoteQPN, w.RemoteQKey, w.Dest = wr.UD.RemoteQPN, wr.UD.RemoteQKey, wr.UD.AH
	}
	if info.atomic {
		w.RemoteAddr, w.RKey = wr.Atomic.RemoteAddr, wr.Atomic.RKey
		w.CompareAdd, w.Swap = wr.Atomic.CompareAdd, wr.Atomic.Swap
	}
	if err := qp.extendedWQE(op, wr, &w); err != nil {
		return err
	}
	if inline {
		data, err := qp.gatherInline(op, wr.SGList)
		if err != nil {
			return err
		}
		w.Inline = data
	} else {
		w.SGL = qp.convertSGL(wr.SGList)
	}
	raceSync()
	if err := qp.tq.PostSend(&w, time.Now(), qp.outputLocked()); err != nil {
		return transportPostError(op, err)
	}
	return nil
}

// gatherInline copies the data of sges into the QP's inline scratch buffer,
// which the transport copies in turn. Each SGE is resolved through its
// lkey, which must name a region of the QP's PD covering it; no access
// right is needed to read local memory. The caller holds xmu.
func (qp *QP) gatherInline(op string, sges []SGE) ([]byte, error) {
	buf := qp.inline[:0]
	for i := range sges {
		s := &sges[i]
		if s.Length == 0 {
			continue
		}
		r, err := qp.dev.acquireMR(s.LKey, qp.pd, s.Addr, int(s.Length), 0)
		if err != nil {
			return nil, errorf(op, "sg_list", ErrInvalidArgument, "inline entry %d: %v", i, err)
		}
		buf = append(buf, r.bytes(s.Addr, int(s.Length))...)
		r.release()
	}
	qp.inline = buf
	return buf, nil
}
