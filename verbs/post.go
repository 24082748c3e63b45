package verbs

import (
	"errors"
	"time"
	"unsafe"

	"github.com/goroce/goroce/internal/transport"
)

// Posting work requests (ibv_post_send, ibv_post_recv): the checks a
// request passes before it is queued, and its conversion for the transport.
// What a posted request makes the device send is engine_send.go's.

// PostSend posts a send work request (ibv_post_send) and, on an RC QP in
// RTS, transmits at once what the send window allows, on the caller's
// goroutine: before PostSend returns after an idle moment; when posts come
// faster than the kernel takes them, through the device's doorbell, which
// sends many posts' packets in one system call.
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
// no data (see QP.BindMW, MWBindParams and SendWR for their own fields). A full send queue fails
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
	if qp.hw != nil {
		_, err := hwPostSend(qp, unsafe.Slice(wr, 1))
		return err
	}
	info, err := qp.checkSendWR(op, wr)
	if err != nil {
		return err
	}
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	err = qp.postSendLocked(op, wr, info, time.Now())
	// Even after an error: qp.out may hold what the receive path left
	// for the end of its batch.
	qp.ringLocked()
	return err
}

// PostSendList posts the work requests of wrs in order, as ibv_post_send
// posts a chained list, and then transmits what they made ready in one
// batch: one system call for many small requests (perftest's
// -l/--post_list), and corked like PostSend's when lists come back to back. Each request is checked and queued as
// PostSend does. It returns how many were posted: on an error, wrs[n] is
// the request that failed (ibv_post_send's bad_wr), the ones before it are
// posted and will complete, and none after it is. PostSendList does not
// allocate.
func (qp *QP) PostSendList(wrs []SendWR) (int, error) {
	const op = "PostSendList"
	if qp.hw != nil {
		return hwPostSend(qp, wrs)
	}
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	// One clock reading for the list, whose packets leave together: it
	// starts their retransmission timer. A reading costs ~65 ns in this
	// project's VM, 8 % of what a 64-byte WRITE in a list of 16 cost its
	// poster (goroce-perf write_bw -l 16 -t 512 --cpuprofile).
	now := time.Now()
	for i := range wrs {
		info, err := qp.checkSendWR(op, &wrs[i])
		if err == nil {
			err = qp.postSendLocked(op, &wrs[i], info, now)
		}
		if err != nil {
			qp.ringLocked()
			return i, err
		}
	}
	qp.ringLocked()
	return len(wrs), nil
}

// checkSendWR runs the checks of a send work request that need no lock.
func (qp *QP) checkSendWR(op string, wr *SendWR) (*opcodeInfo, error) {
	if qp.closed.Load() {
		return nil, closedError(op, "qp")
	}
	info := lookupOpcode(wr.Opcode)
	switch {
	case !info.known:
		return nil, errorf(op, "opcode", ErrInvalidArgument, "%v", wr.Opcode)
	case !info.validFor(qp.qpType):
		return nil, errorf(op, "opcode", ErrInvalidArgument, "%v is not valid on a %v QP", wr.Opcode, qp.qpType)
	case !info.supported:
		return nil, errorf(op, "opcode", ErrNotSupported, "%v", wr.Opcode)
	}
	if unknown := wr.SendFlags &^ sendFlagsKnown; unknown != 0 {
		return nil, errorf(op, "send_flags", ErrInvalidArgument, "unknown bits %#x", uint32(unknown))
	}
	if wr.SendFlags&SendIPCsum != 0 {
		return nil, newError(op, "send_flags", ErrNotSupported, "IP checksum offload")
	}
	if len(wr.SGList) > qp.cap.MaxSendSGE {
		return nil, errorf(op, "num_sge", ErrInvalidArgument, "%d exceeds max_send_sge %d", len(wr.SGList), qp.cap.MaxSendSGE)
	}
	length := sgListLength(wr.SGList)
	if length > maxMessageSize {
		return nil, errorf(op, "sg_list", ErrInvalidArgument, "message of %d bytes exceeds 2^31", length)
	}
	if info.atomic && (length != 8 || len(wr.SGList) != 1) {
		return nil, errorf(op, "sg_list", ErrInvalidArgument, "atomic operand of %d bytes in %d SGEs, want one of 8", length, len(wr.SGList))
	}
	inline := wr.SendFlags&SendInline != 0
	if inline {
		if !info.inline {
			return nil, errorf(op, "send_flags", ErrInvalidArgument, "%v cannot carry inline data", wr.Opcode)
		}
		if length > uint64(qp.cap.MaxInlineData) {
			return nil, errorf(op, "sg_list", ErrInvalidArgument, "%d bytes of inline data exceed max_inline_data %d", length, qp.cap.MaxInlineData)
		}
	}
	if qp.qpType == QPTypeUC && wr.Opcode == WRSendWithInv {
		// rxe's opcode table admits it, but IBTA gives UC no opcode
		// with an IETH: rxe's requester then fails the request.
		return nil, newError(op, "opcode", ErrNotSupported, "SEND_WITH_INV on a UC QP: no UC opcode carries an IETH")
	}
	if qp.qpType == QPTypeUD {
		ah := wr.UD.AH
		switch {
		case ah == nil:
			return nil, newError(op, "ud.ah", ErrInvalidArgument, "missing")
		case ah.pd != qp.pd:
			return nil, newError(op, "ud.ah", ErrInvalidArgument, "in another protection domain")
		case ah.closed.Load():
			return nil, closedError(op, "ud.ah")
		case wr.UD.RemoteQPN > 0xFFFFFF:
			return nil, errorf(op, "ud.remote_qpn", ErrInvalidArgument, "%#x exceeds 24 bits", wr.UD.RemoteQPN)
		case length > uint64(qp.udMTU.Bytes()):
			return nil, errorf(op, "sg_list", ErrInvalidArgument, "UD message of %d bytes exceeds the MTU %d: a datagram is one packet", length, qp.udMTU.Bytes())
		}
	}
	return info, nil
}

// opcodeInfo describes what a send opcode needs and where it is valid (the
// facts of rxe_wr_opcode_info for the QP types goroce has).
type opcodeInfo struct {
	known     bool    // defined by libibverbs
	qpTypes   [3]bool // RC, UC, UD
	supported bool    // implemented by goroce
	atomic    bool    // 8-byte operand at an aligned remote address
	inline    bool    // may carry IBV_SEND_INLINE data
	wc        WCOpcode
}

func (i *opcodeInfo) validFor(t QPType) bool {
	switch t {
	case QPTypeRC:
		return i.qpTypes[0]
	case QPTypeUC:
		return i.qpTypes[1]
	case QPTypeUD:
		return i.qpTypes[2]
	}
	return false
}

var (
	rcUCUD = [3]bool{true, true, true}
	rcUC   = [3]bool{true, true, false}
	rcOnly = [3]bool{true, false, false}
)

// opcodeTable is indexed by opcode, so PostSend's lookup is an array index.
var opcodeTable = [...]opcodeInfo{
	WRRDMAWrite:         {known: true, qpTypes: rcUC, supported: true, inline: true, wc: WCRDMAWrite},
	WRRDMAWriteWithImm:  {known: true, qpTypes: rcUC, supported: true, inline: true, wc: WCRDMAWrite},
	WRSend:              {known: true, qpTypes: rcUCUD, supported: true, inline: true, wc: WCSend},
	WRSendWithImm:       {known: true, qpTypes: rcUCUD, supported: true, inline: true, wc: WCSend},
	WRRDMARead:          {known: true, qpTypes: rcOnly, supported: true, wc: WCRDMARead},
	WRAtomicCmpAndSwp:   {known: true, qpTypes: rcOnly, supported: true, atomic: true, wc: WCCompSwap},
	WRAtomicFetchAndAdd: {known: true, qpTypes: rcOnly, supported: true, atomic: true, wc: WCFetchAdd},
	WRLocalInv:          {known: true, qpTypes: rcOnly, supported: true, wc: WCLocalInv},
	WRBindMW:            {known: true, qpTypes: rcUC, supported: true, wc: WCBindMW},
	WRSendWithInv:       {known: true, qpTypes: rcUC, supported: true, inline: true, wc: WCSend},
	WRTSO:               {known: true, wc: WCTSO},
	WRDriver1:           {known: true},
	WRFlush:             {known: true, qpTypes: rcOnly, supported: true, wc: WCFlush},
	WRAtomicWrite:       {known: true, qpTypes: rcOnly, supported: true, wc: WCAtomicWrite},
}

// lookupOpcode returns what is known of op; known is false for values
// libibverbs does not define. A pointer into the table, not a copy: the
// posting path passes it through several calls per work request, and a
// 16-byte struct of bools was copied through the stack each time with
// moves that stalled on the narrow stores before them.
func lookupOpcode(op WROpcode) *opcodeInfo {
	if op < 0 || int(op) >= len(opcodeTable) {
		return &unknownOpcode
	}
	return &opcodeTable[op]
}

// unknownOpcode is what lookupOpcode returns for a value out of the table.
var unknownOpcode opcodeInfo

// postSendLocked queues a checked send work request in the transport,
// which builds the packets it may send now into qp.out; the caller holds
// xmu and transmits them. now is the time of the post.
func (qp *QP) postSendLocked(op string, wr *SendWR, info *opcodeInfo, now time.Time) error {
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
		qp.sendCQ.push(nil, WorkCompletion{WRID: wr.WRID, Status: WCWRFlushErr, Opcode: info.wc, QPNum: qp.qpn}, false)
		return nil
	}
	// Zeroed and filled in place: a composite literal was built in a
	// temporary and copied into w with 16-byte moves that stalled on the
	// stores that had just built it.
	var w transport.SendWQE
	w.WRID, w.Opcode, w.Flags = wr.WRID, wr.Opcode, wr.SendFlags
	w.RemoteAddr, w.RKey = wr.RDMA.RemoteAddr, wr.RDMA.RKey
	w.Imm, w.InvalidateRKey = wr.ImmData, wr.InvalidateRKey
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
	if err := qp.tq.PostSend(&w, now, qp.outputLocked()); err != nil {
		return transportPostError(op, err)
	}
	return nil
}

// extendedWQE checks and converts the parts of a work request specific to
// BIND_MW, LOCAL_INV, FLUSH and ATOMIC_WRITE. The caller holds xmu.
func (qp *QP) extendedWQE(op string, wr *SendWR, w *transport.SendWQE) error {
	switch wr.Opcode {
	case WRBindMW:
		return qp.bindWQE(op, wr, w)
	case WRLocalInv:
		if len(wr.SGList) != 0 || wr.SendFlags&SendInline != 0 {
			return newError(op, "num_sge", ErrInvalidArgument, "LOCAL_INV carries no data")
		}
	case WRFlush:
		f := &wr.Flush
		switch {
		case len(wr.SGList) != 0 || wr.SendFlags&SendInline != 0:
			return newError(op, "num_sge", ErrInvalidArgument, "FLUSH carries no data")
		case f.Type == 0 || f.Type&^(FlushGlobal|FlushPersistent) != 0:
			return errorf(op, "flush.type", ErrInvalidArgument, "%#x", uint8(f.Type))
		case f.Level != FlushRange && f.Level != FlushMR:
			return errorf(op, "flush.level", ErrInvalidArgument, "%d", uint8(f.Level))
		case f.Length > maxMessageSize:
			return errorf(op, "flush.length", ErrInvalidArgument, "%d exceeds 2^31", f.Length)
		}
		w.RemoteAddr, w.RKey = f.RemoteAddr, f.RKey
		w.FlushLength, w.FlushType, w.FlushLevel = f.Length, f.Type, f.Level
	case WRAtomicWrite:
		if len(wr.SGList) != 1 || wr.SGList[0].Length != 8 {
			return errorf(op, "sg_list", ErrInvalidArgument, "ATOMIC_WRITE needs one SGE of 8 bytes")
		}
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
	if qp.hw != nil {
		if wr == nil {
			return newError(op, "wr", ErrInvalidArgument, "nil")
		}
		_, err := hwPostRecv(qp, unsafe.Slice(wr, 1))
		return err
	}
	if err := qp.checkRecvWR(op, wr); err != nil {
		return err
	}
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	return qp.postRecvLocked(op, wr)
}

// checkRecvWR runs the checks of a receive work request that need no lock.
func (qp *QP) checkRecvWR(op string, wr *RecvWR) error {
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
	return nil
}

// postRecvLocked queues a checked receive work request. The caller holds
// qp.xmu.
func (qp *QP) postRecvLocked(op string, wr *RecvWR) error {
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

// maxMessageSize is the largest message of a work request (IBA: 2^31).
const maxMessageSize = 1 << 31

// sgListLength sums the SGE lengths.
func sgListLength(sges []SGE) uint64 {
	var n uint64
	for i := range sges {
		n += uint64(sges[i].Length)
	}
	return n
}
