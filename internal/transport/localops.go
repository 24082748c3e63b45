package transport

import (
	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
)

// MWBind is the binding a BIND_MW work request asks for (the bind_mw part
// of struct ibv_send_wr, as rxe passes it to the kernel: the window by its
// current rkey, the region by its lkey). The transport does not interpret
// it; the QP's Memory executes it through LocalOps.
type MWBind struct {
	// MWRKey is the window's rkey when the request was posted; the bind
	// fails if the window's rkey changed since (rxe: mw_rkey).
	MWRKey uint32
	// RKey carries the window's new key byte in its low 8 bits.
	RKey uint32
	// MRLKey names the memory region the window is bound to; unused for a
	// zero-length bind, which unbinds a type 1 window.
	MRLKey uint32
	Addr   uint64 // first byte of the window, in the region's IOVA space
	Length uint64
	Access ibv.AccessFlags // the window's rights; AccessZeroBased for a zero-based window
	// Type1 marks a bind of a type 1 window, posted by the bind verb
	// (ibv_bind_mw) rather than by the consumer.
	Type1 bool
}

// LocalOps is implemented by a Memory that executes the local operations
// of the send queue. The requester calls it when it reaches the work
// request, in posting order, with nothing of the QP locked by the
// transport beyond what its caller holds. A Memory without it makes local
// operations fail: BIND_MW with MW_BIND_ERR, LOCAL_INV with LOC_QP_OP_ERR.
type LocalOps interface {
	// BindMW binds (or, with a zero length, unbinds) a memory window on
	// behalf of the QP in protection domain pd. It reports false if a
	// rule of IBA 10.6.7.2 forbids the bind.
	BindMW(pd uint32, b *MWBind) bool
	// LocalInvalidate invalidates rkey (IBV_WR_LOCAL_INV) on behalf of
	// the QP in protection domain pd. It reports false if the key cannot
	// be invalidated.
	LocalInvalidate(pd uint32, rkey uint32) bool
}

// startLocalOp executes the local operation s when the requester reaches
// it (rxe's rxe_do_local_ops): it takes no PSN, so its PSN range is empty
// (lastPSN just before firstPSN) and no response ever matches it, and it
// completes as soon as everything posted before it has. A fenced one waits
// for all earlier work requests to complete first. It reports false if the
// requester must stop: s waits for its fence, or failed.
func (qp *QP) startLocalOp(s *sendSlot) bool {
	if s.wqe.Flags&ibv.SendFence != 0 && qp.req.idx != qp.sq.head {
		return false
	}
	st := ibv.WCSuccess
	ops, _ := qp.mem.(LocalOps)
	switch s.wqe.Opcode {
	case ibv.WRBindMW:
		if ops == nil || !ops.BindMW(qp.pd, &s.wqe.Bind) {
			st = ibv.WCMWBindErr
		}
	case ibv.WRLocalInv:
		if ops == nil || !ops.LocalInvalidate(qp.pd, s.wqe.InvalidateRKey) {
			st = ibv.WCLocQPOpErr
		}
	}
	if st != ibv.WCSuccess {
		s.failed, s.status = true, st
		qp.counters.LocalErrors++
		qp.retireFailed()
		return false
	}
	s.started = true
	s.firstPSN = qp.req.psn
	s.lastPSN = qp.req.psn.Add(psn.Mask)
	return true
}

// retireLocalOps completes the executed local operations at the head of
// the send queue: nothing acknowledges them, so they complete once the
// work requests before them have.
func (qp *QP) retireLocalOps() {
	for qp.state != ibv.QPStateErr && qp.sq.len() > 0 {
		s := qp.sq.at(qp.sq.head)
		if !isLocal(s.wqe.Opcode) || !s.started || s.failed {
			return
		}
		qp.completeHead(ibv.WCSuccess)
	}
}

// checkExtendedWQE checks the shape of the work requests added by IBA 1.5
// and the memory management extensions, and sets *length to the message
// length a completion reports: none for the local operations, the range of
// a FLUSH (rxe reports it), the 8 bytes of an ATOMIC_WRITE.
func checkExtendedWQE(w *SendWQE, length *uint32) error {
	switch w.Opcode {
	case ibv.WRLocalInv, ibv.WRBindMW:
		if w.Flags&ibv.SendInline != 0 || len(w.SGL) != 0 {
			return ErrBadOpcode
		}
	case ibv.WRFlush:
		if w.Flags&ibv.SendInline != 0 || len(w.SGL) != 0 {
			return ErrBadOpcode
		}
		if w.FlushLength > 1<<31 {
			return ErrTooLong
		}
		*length = w.FlushLength
	case ibv.WRAtomicWrite:
		if w.Flags&ibv.SendInline != 0 || len(w.SGL) != 1 || w.SGL[0].Length != 8 {
			return ErrBadAtomicSGL
		}
	}
	return nil
}
