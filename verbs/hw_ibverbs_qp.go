//go:build linux && cgo && goroce_ibverbs

package verbs

// The hardware backend's QPs, SRQs and address handles. Work requests are
// converted into the per-queue C arrays internal/ibverbs allocates when
// the queue is created: posting allocates nothing, and only numbers (and
// C pointers) are stored in C memory.

import (
	"context"
	"sync"
	"unsafe"

	"github.com/goroce/goroce/internal/ibverbs"
)

type ibvQP struct {
	qp         *ibverbs.QP
	smu, rmu   sync.Mutex // serialise the send and the receive slots
	send       ibverbs.SendRequest
	hasSRQ     bool
	lastState  QPState // guarded by smu: what state reports once destroyed
	destroyMu  sync.Mutex
	destroyed  bool // guarded by destroyMu
	maxSendSGE int
}

// hwQPMask are the QP attributes the hardware backend passes on.
const hwQPMask = QPAttrState | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrPort | QPAttrQKey | QPAttrAV |
	QPAttrPathMTU | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrRQPSN | QPAttrMaxQPRdAtomic |
	QPAttrMinRNRTimer | QPAttrSQPSN | QPAttrMaxDestRdAtomic | QPAttrDestQPN

// hwCQ returns cq's hardware CQ, or an error naming field.
func hwCQOf(op, field string, cq *CQ) (*ibvCQ, error) {
	if cq == nil {
		return nil, newError(op, field, ErrInvalidArgument, "nil")
	}
	h, ok := cq.hw.(*ibvCQ)
	if !ok {
		return nil, newError(op, field, ErrInvalidArgument, "not a CQ of a hardware device")
	}
	return h, nil
}

func (p *ibvPD) createQP(pd *PD, init *QPInitAttr) (*QP, error) {
	const op = "CreateQP"
	switch {
	case init.QPType != QPTypeRC && init.QPType != QPTypeUC && init.QPType != QPTypeUD:
		return nil, hwUnsupported(op, "qp_type", init.QPType.String())
	case init.RecvFeeder != nil:
		return nil, hwUnsupported(op, "RecvFeeder", "a receive feeder")
	}
	scq, err := hwCQOf(op, "send_cq", init.SendCQ)
	if err != nil {
		return nil, err
	}
	rcq, err := hwCQOf(op, "recv_cq", init.RecvCQ)
	if err != nil {
		return nil, err
	}
	c := init.Cap
	a := ibverbs.QPInitAttr{Type: int(init.QPType), SendCQ: scq.cq, RecvCQ: rcq.cq, MaxSendWR: c.MaxSendWR,
		MaxRecvWR: c.MaxRecvWR, MaxSendSGE: c.MaxSendSGE, MaxRecvSGE: c.MaxRecvSGE, MaxInline: c.MaxInlineData,
		SigAll: init.SQSigAll}
	if init.SRQ != nil {
		hs, ok := init.SRQ.hw.(*ibvSRQ)
		if !ok {
			return nil, newError(op, "srq", ErrInvalidArgument, "not an SRQ of a hardware device")
		}
		a.SRQ = hs.srq
		c.MaxRecvWR, c.MaxRecvSGE = 0, 0
	}
	if err := pd.use(op); err != nil {
		return nil, err
	}
	q, err := p.pd.CreateQP(a)
	if err != nil {
		pd.unuse()
		return nil, hwError(op, err)
	}
	h := &ibvQP{qp: q, hasSRQ: init.SRQ != nil, maxSendSGE: c.MaxSendSGE, lastState: QPStateReset}
	qp := &QP{dev: pd.dev, pd: pd, qpType: init.QPType, qpn: q.QPN, sendCQ: init.SendCQ, recvCQ: init.RecvCQ,
		srq: init.SRQ, sqSigAll: init.SQSigAll, cap: c, timerIndex: -1, hw: h}
	qp.state.Store(int32(QPStateReset))
	if err := pd.dev.register(op, func() { pd.dev.qps.Store(q.QPN, qp) }); err != nil {
		_ = q.Destroy()
		pd.unuse()
		return nil, err
	}
	return qp, nil
}

// state asks the device: it moves a QP to ERR on its own.
func (h *ibvQP) state() QPState {
	h.destroyMu.Lock()
	defer h.destroyMu.Unlock()
	if h.destroyed {
		return h.lastState
	}
	s, err := h.qp.State()
	if err != nil {
		return h.lastState
	}
	h.lastState = QPState(s)
	return h.lastState
}

func (h *ibvQP) modify(qp *QP, attr *QPAttr, mask QPAttrMask) error {
	const op = "ModifyQP"
	if attr == nil {
		return newError(op, "attr", ErrInvalidArgument, "nil")
	}
	if extra := mask &^ hwQPMask; extra != 0 {
		return hwUnsupported(op, extra.field(), "attribute "+extra.String())
	}
	if mask&QPAttrAV != 0 && attr.AHAttr.UDPPort != 0 && attr.AHAttr.UDPPort != DefaultUDPPort {
		return hwUnsupported(op, "ah_attr.UDPPort", "a UDP port other than 4791")
	}
	av := &attr.AHAttr
	a := ibverbs.QPAttr{State: int(attr.QPState), PathMTU: int(attr.PathMTU), QKey: attr.QKey, RQPSN: attr.RQPSN,
		SQPSN: attr.SQPSN, DestQPN: attr.DestQPNum, Access: int(attr.QPAccessFlags), PKeyIndex: attr.PKeyIndex,
		Port: attr.PortNum, MaxRdAtomic: attr.MaxRdAtomic, MaxDestRdAtomic: attr.MaxDestRdAtomic,
		MinRNRTimer: int(attr.MinRNRTimer), Timeout: int(attr.Timeout), RetryCnt: int(attr.RetryCnt),
		RNRRetry: int(attr.RNRRetry), DGID: av.DGID, SGIDIndex: av.SGIDIndex, HopLimit: int(av.HopLimit),
		TrafficClass: int(av.TrafficClass)}
	if mask&QPAttrAV != 0 && mask&QPAttrPort == 0 {
		a.Port = av.PortNum
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closed.Load() {
		return closedError(op, "qp")
	}
	if err := h.qp.Modify(&a, int(mask)); err != nil {
		return hwError(op, err)
	}
	applyQPAttr(&qp.attr, attr, mask)
	if mask&QPAttrState != 0 {
		qp.state.Store(int32(attr.QPState))
	}
	return nil
}

// hwSendOps are the opcodes the backend converts; the others need
// libibverbs' extended work request API (FLUSH, ATOMIC_WRITE).
func hwSendOp(op WROpcode) bool {
	switch op {
	case WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm, WRRDMARead, WRAtomicCmpAndSwp,
		WRAtomicFetchAndAdd, WRSendWithInv, WRLocalInv, WRBindMW:
		return true
	}
	return false
}

// hwMissingOp says why an opcode that goroce devices execute is refused
// on a hardware device.
var hwMissingOp = map[WROpcode]string{
	WRFlush: "libibverbs posts it only through ibv_wr_flush, which Debian bookworm's rdma-core 44 does not have, " +
		"and rxe executes it from Linux 6.2 on (the rxe VM's kernel is 6.1)",
	WRAtomicWrite: "libibverbs posts it only through ibv_wr_atomic_write on an extended QP, not ibv_post_send, " +
		"and rxe executes it from Linux 6.2 on (on the rxe VM's 6.1 it completes with a local QP operation error)",
}

// sgesOf views verbs SGEs as ibverbs'; the two have struct ibv_sge's
// layout (checked below).
func sgesOf(s []SGE) []ibverbs.SGE {
	return unsafe.Slice((*ibverbs.SGE)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

var _ [unsafe.Sizeof(SGE{}) - unsafe.Sizeof(ibverbs.SGE{})]byte
var _ [unsafe.Sizeof(ibverbs.SGE{}) - unsafe.Sizeof(SGE{})]byte

// sendable refuses a post to qp when it is destroyed or not yet in RTS:
// the state Modify set, since the provider's EINVAL in these says less.
// (The device's own move to ERR still lets sends post, and flush.) The
// caller holds the QP's smu.
func sendable(op string, qp *QP) error {
	if qp.closed.Load() {
		return closedError(op, "qp")
	}
	switch state := QPState(qp.state.Load()); state {
	case QPStateReset, QPStateInit, QPStateRTR:
		return errorf(op, "qp_state", ErrInvalidState, "cannot post sends in %v", state)
	}
	return nil
}

// postSend posts wrs in chunks of the QP's send slots and returns how many
// were posted; wrs[n] is the one refused.
func (h *ibvQP) postSend(qp *QP, wrs []SendWR) (int, error) {
	const op = "PostSend"
	h.smu.Lock()
	defer h.smu.Unlock()
	if err := sendable(op, qp); err != nil {
		return 0, err
	}
	n, err := postInChunks(op, len(wrs), h.qp.SendSlots(),
		func(slot, i int) error { return h.setSend(op, qp, slot, &wrs[i]) }, h.qp.PostSends)
	noteBinds(wrs[:n])
	return n, err
}

// postInChunks posts n work requests through a queue's slots, at most
// slots at a time: fill(slot, i) converts request i into the slot (or
// refuses it) and post(k) posts the first k slots. It returns how many
// were posted; the one after them was refused, or failed to post.
func postInChunks(op string, n, slots int, fill func(slot, i int) error, post func(int) (int, error)) (int, error) {
	done := 0
	for done < n {
		k := 0
		var refused error
		for ; k < slots && done+k < n; k++ {
			if refused = fill(k, done+k); refused != nil {
				break
			}
		}
		if k > 0 {
			m, err := post(k)
			done += m
			if err != nil {
				return done, hwError(op, err)
			}
		}
		if refused != nil {
			return done, refused
		}
	}
	return done, nil
}

// setSend converts wr into send slot i.
func (h *ibvQP) setSend(op string, qp *QP, i int, wr *SendWR) error {
	if !hwSendOp(wr.Opcode) {
		if why := hwMissingOp[wr.Opcode]; why != "" {
			return errorf(op, "opcode", ErrNotSupported, "%v on a hardware device (OpenHardware): %s", wr.Opcode, why)
		}
		return hwUnsupported(op, "opcode", wr.Opcode.String())
	}
	if len(wr.SGList) > h.maxSendSGE {
		return errorf(op, "num_sge", ErrInvalidArgument, "%d exceeds max_send_sge %d", len(wr.SGList), h.maxSendSGE)
	}
	// Inline as goroce checks it: providers differ (rxe ignores the flag
	// on a READ).
	if wr.SendFlags&SendInline != 0 {
		switch {
		case wr.Opcode == WRRDMARead || wr.Opcode == WRAtomicCmpAndSwp || wr.Opcode == WRAtomicFetchAndAdd:
			return errorf(op, "send_flags", ErrInvalidArgument, "INLINE with %v", wr.Opcode)
		case sgListLength(wr.SGList) > uint64(qp.cap.MaxInlineData):
			return errorf(op, "sg_list", ErrInvalidArgument, "%d bytes inline exceed max_inline_data %d",
				sgListLength(wr.SGList), qp.cap.MaxInlineData)
		}
	}
	s := &h.send
	*s = ibverbs.SendRequest{WRID: wr.WRID, Opcode: int(wr.Opcode), Flags: int(wr.SendFlags), RemoteAddr: wr.RDMA.RemoteAddr,
		RKey: wr.RDMA.RKey, Imm: wr.ImmData, InvRKey: wr.InvalidateRKey}
	switch wr.Opcode {
	case WRAtomicCmpAndSwp, WRAtomicFetchAndAdd:
		s.RemoteAddr, s.RKey, s.CompareAdd, s.Swap = wr.Atomic.RemoteAddr, wr.Atomic.RKey, wr.Atomic.CompareAdd, wr.Atomic.Swap
	case WRBindMW:
		if err := setBind(op, wr, s); err != nil {
			return err
		}
	}
	if qp.qpType == QPTypeUD {
		if wr.UD.AH == nil {
			return newError(op, "wr.ud.ah", ErrInvalidArgument, "nil")
		}
		ah, ok := wr.UD.AH.hw.(*ibvAH)
		if !ok || wr.UD.AH.closed.Load() {
			return newError(op, "wr.ud.ah", ErrInvalidArgument, "not a live address handle of a hardware device")
		}
		s.AH, s.RemoteQPN, s.RemoteQKey = ah.ah, wr.UD.RemoteQPN, wr.UD.RemoteQKey
	}
	if err := h.qp.SetSend(i, s, sgesOf(wr.SGList)); err != nil {
		return hwError(op, err)
	}
	return nil
}

func (h *ibvQP) postRecv(qp *QP, wrs []RecvWR) (int, error) {
	const op = "PostRecv"
	h.rmu.Lock()
	defer h.rmu.Unlock()
	if qp.closed.Load() {
		return 0, closedError(op, "qp")
	}
	if h.hasSRQ {
		return 0, newError(op, "srq", ErrInvalidArgument, "the QP receives from an SRQ")
	}
	if state := QPState(qp.state.Load()); state == QPStateReset {
		return 0, errorf(op, "qp_state", ErrInvalidState, "cannot post receives in %v", state)
	}
	return postRecvSlots(op, wrs, qp.cap.MaxRecvSGE, h.qp.RecvSlots(), h.qp.SetRecv, h.qp.PostRecvs)
}

// postRecvSlots posts wrs through a queue's receive slots, in chunks.
func postRecvSlots(op string, wrs []RecvWR, maxSGE, slots int, set func(int, uint64, []ibverbs.SGE) error,
	post func(int) (int, error)) (int, error) {
	return postInChunks(op, len(wrs), slots, func(slot, i int) error {
		w := &wrs[i]
		if len(w.SGList) > maxSGE {
			return errorf(op, "num_sge", ErrInvalidArgument, "%d exceeds max_recv_sge %d", len(w.SGList), maxSGE)
		}
		if err := set(slot, w.WRID, sgesOf(w.SGList)); err != nil {
			return hwError(op, err)
		}
		return nil
	}, post)
}

func (h *ibvQP) destroy(qp *QP) error {
	const op = "DestroyQP"
	qp.mu.Lock()
	defer qp.mu.Unlock()
	h.smu.Lock()
	defer h.smu.Unlock()
	h.rmu.Lock()
	defer h.rmu.Unlock()
	if qp.closed.Load() {
		return closedError(op, "qp")
	}
	h.destroyMu.Lock()
	defer h.destroyMu.Unlock()
	if err := h.qp.Destroy(); err != nil {
		return hwError(op, err)
	}
	h.destroyed = true
	qp.closed.Store(true)
	qp.dev.qps.Delete(qp.qpn)
	qp.pd.unuse()
	return nil
}

type ibvSRQ struct {
	srq    *ibverbs.SRQ
	maxSGE int
	mu     sync.Mutex // serialises the receive slots
}

func (p *ibvPD) createSRQ(pd *PD, attr *SRQInitAttr) (*SRQ, error) {
	const op = "CreateSRQ"
	maxSGE := attr.MaxSGE
	if maxSGE == 0 {
		maxSGE = 1
	}
	if err := pd.use(op); err != nil {
		return nil, err
	}
	s, err := p.pd.CreateSRQ(attr.MaxWR, maxSGE, attr.SRQLimit)
	if err != nil {
		pd.unuse()
		return nil, hwError(op, err)
	}
	srq := &SRQ{pd: pd, id: srqIDs.Add(1), hw: &ibvSRQ{srq: s, maxSGE: maxSGE}}
	d := pd.dev
	if err := d.register(op, func() { d.srqs[srq] = struct{}{} }); err != nil {
		_ = s.Destroy()
		pd.unuse()
		return nil, err
	}
	d.hw.(*ibvDevice).trackSRQ(s.Handle(), srq)
	return srq, nil
}

func (h *ibvSRQ) postRecv(s *SRQ, wrs []RecvWR) (int, error) {
	const op = "PostSRQRecv"
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.srq == nil {
		return 0, closedError(op, "srq")
	}
	return postRecvSlots(op, wrs, h.maxSGE, h.srq.RecvSlots(), h.srq.SetRecv, h.srq.PostRecvs)
}

func (h *ibvSRQ) query() (SRQAttr, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.srq == nil {
		return SRQAttr{}, closedError("QuerySRQ", "srq")
	}
	wr, sge, limit, err := h.srq.Query()
	if err != nil {
		return SRQAttr{}, hwError("QuerySRQ", err)
	}
	return SRQAttr{MaxWR: wr, MaxSGE: sge, SRQLimit: limit}, nil
}

// modify resizes the SRQ or arms its limit (ibv_modify_srq); the limit's
// event comes through GetAsyncEvent.
func (h *ibvSRQ) modify(attr *SRQAttr, mask SRQAttrMask) error {
	const op = "ModifySRQ"
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.srq == nil {
		return closedError(op, "srq")
	}
	if err := h.srq.Modify(attr.MaxWR, attr.SRQLimit, int(mask)); err != nil {
		return hwError(op, err)
	}
	return nil
}

func (h *ibvSRQ) destroy(s *SRQ) error {
	const op = "DestroySRQ"
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.srq == nil {
		return closedError(op, "srq")
	}
	handle := h.srq.Handle()
	if err := h.srq.Destroy(); err != nil {
		return hwError(op, err)
	}
	h.srq = nil
	d := s.pd.dev
	d.hw.(*ibvDevice).trackSRQ(handle, nil)
	d.unregister(func() { delete(d.srqs, s) })
	s.pd.unuse()
	return nil
}

type ibvAH struct{ ah *ibverbs.AH }

func (p *ibvPD) createAH(pd *PD, av *AddressVector) (*AH, error) {
	const op = "CreateAH"
	if av.UDPPort != 0 && av.UDPPort != DefaultUDPPort {
		return nil, hwUnsupported(op, "ah_attr.UDPPort", "a UDP port other than 4791")
	}
	if err := pd.use(op); err != nil {
		return nil, err
	}
	a, err := p.pd.CreateAH(&ibverbs.AHAttr{DGID: av.DGID, FlowLabel: av.FlowLabel, SGIDIndex: av.SGIDIndex,
		Port: av.PortNum, HopLimit: av.HopLimit, TrafficClass: av.TrafficClass, SL: av.SL})
	if err != nil {
		pd.unuse()
		return nil, hwError(op, err)
	}
	ah := &AH{pd: pd, av: *av, hw: &ibvAH{ah: a}}
	d := pd.dev
	if err := d.register(op, func() { d.ahs[ah] = struct{}{} }); err != nil {
		_ = a.Destroy()
		pd.unuse()
		return nil, err
	}
	return ah, nil
}

func (h *ibvAH) destroy(ah *AH) error {
	const op = "DestroyAH"
	if !ah.closed.CompareAndSwap(false, true) {
		return closedError(op, "ah")
	}
	if err := h.ah.Destroy(); err != nil {
		ah.closed.Store(false)
		return hwError(op, err)
	}
	d := ah.pd.dev
	d.unregister(func() { delete(d.ahs, ah) })
	ah.pd.unuse()
	return nil
}

// The data path's hardware calls (see hw.go): static, through the concrete
// types, so that escape analysis sees the arguments stay with the caller.

func hwPoll(cq *CQ, wc []WorkCompletion) (int, error) { return cq.hw.(*ibvCQ).poll(wc) }

func hwPark(cq *CQ, ctx context.Context, wc []WorkCompletion) (int, error) {
	return cq.hw.(*ibvCQ).park(ctx, wc)
}

func hwPostSend(qp *QP, wrs []SendWR) (int, error) { return qp.hw.(*ibvQP).postSend(qp, wrs) }

func hwPostRecv(qp *QP, wrs []RecvWR) (int, error) { return qp.hw.(*ibvQP).postRecv(qp, wrs) }

func hwPostSRQRecv(s *SRQ, wrs []RecvWR) (int, error) { return s.hw.(*ibvSRQ).postRecv(s, wrs) }

func hwModify(qp *QP, attr *QPAttr, mask QPAttrMask) error {
	return qp.hw.(*ibvQP).modify(qp, attr, mask)
}
