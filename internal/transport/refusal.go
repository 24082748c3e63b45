package transport

import (
	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// A responder that refuses a request NAKs it with one of three codes and
// moves the QP to ERR; the code tells the requester little (an invalid
// request covers a disabled operation, a bad length and a misaligned
// atomic alike). The QP keeps what the failed check was and what the
// request asked for, so that the verbs layer can say it in the affiliated
// asynchronous event. Recording it is a struct copy on the error path:
// the data path pays nothing.

// RefusalReason is the responder check that refused a request.
type RefusalReason uint8

// Refusal reasons, in the order of the responder's checks.
const (
	// RefusedNone: the responder refused nothing since the QP was reset.
	RefusedNone RefusalReason = iota
	// RefusedOpcodeSequence: a MIDDLE or LAST packet without its FIRST,
	// or a new message before the previous one ended.
	RefusedOpcodeSequence
	// RefusedQPAccess: the QP's access flags do not enable the operation
	// (REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC, or a FLUSH type's right).
	RefusedQPAccess
	// RefusedPacketLength: a payload that does not fit the path MTU or
	// does not match the length its RETH announced.
	RefusedPacketLength
	// RefusedMessageLength: a RETH length over 2^31, or an ATOMIC_WRITE
	// not of 8 bytes.
	RefusedMessageLength
	// RefusedNoResources: a READ, atomic or FLUSH to a QP whose
	// max_dest_rd_atomic is 0.
	RefusedNoResources
	// RefusedOpcode: an opcode the QP does not execute.
	RefusedOpcode
	// RefusedKey: the rkey names no live memory region or bound memory
	// window (a wrong rkey, or one revoked by Dereg, Rereg, a rebind or
	// an invalidation; or a type 2 window bound to another QP).
	RefusedKey
	// RefusedPD: the rkey's region or window is in another protection
	// domain than the QP.
	RefusedPD
	// RefusedMemoryAccess: the region or window lacks the right.
	RefusedMemoryAccess
	// RefusedBounds: the range is not inside the region or window.
	RefusedBounds
	// RefusedMisaligned: an atomic's or ATOMIC_WRITE's address is not
	// 8-byte aligned.
	RefusedMisaligned
	// RefusedRecvTooShort: a SEND longer than the receive buffer it
	// consumed (charged to that receive: LOC_LEN_ERR).
	RefusedRecvTooShort
	// RefusedRecvBuffer: the receive buffer could not be written: its
	// lkey, range, PD or LOCAL_WRITE (charged to that receive:
	// LOC_PROT_ERR).
	RefusedRecvBuffer
	// RefusedInvalidate: a SEND_WITH_INV of an rkey the QP cannot
	// invalidate.
	RefusedInvalidate
)

var refusalNames = [...]string{
	RefusedNone:           "none",
	RefusedOpcodeSequence: "opcode sequence",
	RefusedQPAccess:       "QP access flags",
	RefusedPacketLength:   "packet length",
	RefusedMessageLength:  "message length",
	RefusedNoResources:    "no responder resources",
	RefusedOpcode:         "opcode",
	RefusedKey:            "rkey",
	RefusedPD:             "protection domain",
	RefusedMemoryAccess:   "memory access rights",
	RefusedBounds:         "bounds",
	RefusedMisaligned:     "alignment",
	RefusedRecvTooShort:   "receive buffer length",
	RefusedRecvBuffer:     "receive buffer",
	RefusedInvalidate:     "invalidation",
}

// String names the check, e.g. "QP access flags".
func (r RefusalReason) String() string {
	if int(r) < len(refusalNames) {
		return refusalNames[r]
	}
	return "unknown"
}

// Refusal is what a responder refused: the failed check and the request.
// RKey, VA and Length are those the request named (for a WRITE's later
// packet, where the message's memory is now); Need is the right the
// operation needs and QPAccess the QP's access flags when it refused.
// RecvLength is the receive buffer's length (RefusedRecvTooShort).
type Refusal struct {
	Reason     RefusalReason
	Opcode     wire.Opcode
	PSN        psn.PSN
	RKey       uint32
	VA         uint64
	Length     uint32
	Need       ibv.AccessFlags
	QPAccess   ibv.AccessFlags
	RecvLength uint32
}

// Refusal returns the first request the responder refused since the QP
// was last reset: the one that moved it to ERR. Its Reason is RefusedNone
// if there was none.
func (qp *QP) Refusal() Refusal { return qp.refusal }

// RequestOp returns the work request opcode a requester posts to send a
// request with opcode o, and false for an opcode that is no request.
func RequestOp(o wire.Opcode) (ibv.WROpcode, bool) {
	info := o.Info()
	switch {
	case !info.IsRequest():
		return 0, false
	case info.IsReadRequest():
		return ibv.WRRDMARead, true
	case info.IsWrite() && info.HasImmediate():
		return ibv.WRRDMAWriteWithImm, true
	case info.IsWrite():
		return ibv.WRRDMAWrite, true
	case info.IsSend() && info.HasImmediate():
		return ibv.WRSendWithImm, true
	case info.IsSend() && info.HasInvalidate():
		return ibv.WRSendWithInv, true
	case info.IsSend():
		return ibv.WRSend, true
	case o == wire.RCCompareSwap:
		return ibv.WRAtomicCmpAndSwp, true
	case info.IsAtomic():
		return ibv.WRAtomicFetchAndAdd, true
	case info.IsFlush():
		return ibv.WRFlush, true
	case info.IsAtomicWrite():
		return ibv.WRAtomicWrite, true
	}
	return 0, false
}

// refused describes a refusal of request p for reason: its opcode, PSN
// and the memory its RETH or AtomicETH names, or for a WRITE's MIDDLE or
// LAST packet the memory the message is writing.
func (qp *QP) refused(reason RefusalReason, p *wire.Packet, need ibv.AccessFlags) Refusal {
	r := Refusal{Reason: reason, Opcode: p.BTH.Opcode(), PSN: p.BTH.PSN(), Need: need, QPAccess: qp.access}
	info := r.Opcode.Info()
	switch {
	case info.Headers()&wire.HdrAtomicETH != 0 && len(p.AtomicETH) >= wire.AtomicETHLen:
		r.RKey, r.VA, r.Length = p.AtomicETH.RKey(), p.AtomicETH.VA(), 8
	case info.Headers()&wire.HdrRETH != 0 && len(p.RETH) >= wire.RETHLen:
		r.RKey, r.VA, r.Length = p.RETH.RKey(), p.RETH.VA(), p.RETH.DMALength()
	case info.IsWrite():
		r.RKey, r.VA, r.Length = qp.resp.rkey, qp.resp.va, uint32(len(p.Payload))
	case info.IsSend():
		r.Length = qp.resp.rcvd + uint32(len(p.Payload))
	}
	return r
}

// refusedAccess is refused for a memory check that failed with err (an
// AccessError, or nil for a Memory that gave no reason).
func (qp *QP) refusedAccess(err error, p *wire.Packet, need ibv.AccessFlags) Refusal {
	return qp.refused(accessReason(err), p, need)
}

// accessReason maps a Memory's refusal to the responder's reason.
func accessReason(err error) RefusalReason {
	switch err {
	case ErrWrongPD:
		return RefusedPD
	case ErrAccessDenied:
		return RefusedMemoryAccess
	case ErrOutOfBounds:
		return RefusedBounds
	}
	return RefusedKey
}

// noteRefusal keeps r if it is the QP's first refusal since reset.
func (qp *QP) noteRefusal(r Refusal) {
	if qp.refusal.Reason == RefusedNone && qp.state != ibv.QPStateErr {
		qp.refusal = r
	}
}

// opAccess is the QP access right request p's operation needs, as
// checkOpValid checks it.
func opAccess(p *wire.Packet, info wire.OpInfo) ibv.AccessFlags {
	switch {
	case info.IsWrite(), info.IsAtomicWrite():
		return ibv.AccessRemoteWrite
	case info.IsReadRequest():
		return ibv.AccessRemoteRead
	case info.IsAtomic():
		return ibv.AccessRemoteAtomic
	case info.IsFlush():
		return flushAccess(ibv.FlushType(p.FETH.PlacementType()))
	}
	return 0
}
