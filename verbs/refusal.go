package verbs

import (
	"fmt"

	"github.com/goroce/goroce/internal/transport"
)

// RefusalReason is the check with which a QP's responder refused a
// request from its peer. Its String method names the check, e.g. "QP
// access flags".
type RefusalReason = transport.RefusalReason

// Refusal reasons, in the order the responder checks a request.
const (
	RefusedNone           = transport.RefusedNone           // nothing refused
	RefusedOpcodeSequence = transport.RefusedOpcodeSequence // a packet out of its message's order
	RefusedQPAccess       = transport.RefusedQPAccess       // the QP's access flags lack the operation's right
	RefusedPacketLength   = transport.RefusedPacketLength   // a payload that breaks the path MTU or the announced length
	RefusedMessageLength  = transport.RefusedMessageLength  // a length over 2^31, an ATOMIC_WRITE not of 8 bytes
	RefusedNoResources    = transport.RefusedNoResources    // READ, atomic or FLUSH to a QP with max_dest_rd_atomic 0
	RefusedOpcode         = transport.RefusedOpcode         // an operation the QP does not execute
	RefusedKey            = transport.RefusedKey            // the rkey names no live region or bound window
	RefusedPD             = transport.RefusedPD             // the rkey's memory is in another protection domain
	RefusedMemoryAccess   = transport.RefusedMemoryAccess   // the region or window lacks the operation's right
	RefusedBounds         = transport.RefusedBounds         // the range is not inside the region or window
	RefusedMisaligned     = transport.RefusedMisaligned     // an atomic's address is not 8-byte aligned
	RefusedRecvTooShort   = transport.RefusedRecvTooShort   // a SEND longer than the receive buffer
	RefusedRecvBuffer     = transport.RefusedRecvBuffer     // the receive buffer cannot be written
	RefusedInvalidate     = transport.RefusedInvalidate     // SEND_WITH_INV of an rkey the QP cannot invalidate
)

// Refusal says why a QP's responder refused a request from its peer, and
// which request: the refusal that moved the QP to ERR. The peer only
// learns a NAK code (its work request completes with WCRemInvReqErr,
// WCRemAccessErr or WCRemOpErr); the reason is on this side, in the
// QP_REQ_ERR or QP_ACCESS_ERR event (AsyncEvent.Refusal) or, for an error
// charged to a receive work request, in QP.Refusal. String says what to
// change.
type Refusal struct {
	Reason     RefusalReason
	Op         WROpcode    // what the peer posted: WRRDMARead, WRRDMAWrite, WRSend, ...
	PSN        uint32      // the request's packet sequence number
	RKey       uint32      // the remote key the request named (RDMA, atomics, SEND_WITH_INV)
	RemoteAddr uint64      // the address it named, in the region's IOVA space
	Length     uint32      // the bytes it asked for (RDMA, SEND), or 8 (atomics)
	Need       AccessFlags // the right the operation needs
	QPAccess   AccessFlags // the QP's access flags when it refused
	RecvLength uint32      // the receive buffer's length (RefusedRecvTooShort)
}

// refusalOf converts the transport's record.
func refusalOf(r transport.Refusal) Refusal {
	op, _ := transport.RequestOp(r.Opcode)
	return Refusal{
		Reason:     r.Reason,
		Op:         op,
		PSN:        uint32(r.PSN),
		RKey:       r.RKey,
		RemoteAddr: r.VA,
		Length:     r.Length,
		Need:       r.Need,
		QPAccess:   r.QPAccess,
		RecvLength: r.RecvLength,
	}
}

// Refusal returns the first request the QP's responder refused since the
// QP was created or last reset, the one that moved it to ERR; its Reason
// is RefusedNone if there was none. The QP_REQ_ERR and QP_ACCESS_ERR
// events carry the same value; Refusal also explains errors that are
// charged to a receive work request and raise no event (a SEND longer
// than the receive buffer, a buffer the device cannot write).
func (qp *QP) Refusal() Refusal {
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	if qp.tq == nil {
		return Refusal{}
	}
	return refusalOf(qp.tq.Refusal())
}

// String describes the refused request and what to change, e.g.
// "rdma-read of 64 bytes at 0x7f3a2c000000 rkey 0x1234 (PSN 0x5a2c31):
// refused by the QP access flags check: the QP's access flags (0) do not
// enable REMOTE_READ: ...".
func (r Refusal) String() string {
	if r.Reason == RefusedNone {
		return "no request refused"
	}
	return r.request() + ": refused by the " + r.Reason.String() + " check: " + r.hint()
}

// request describes the refused request.
func (r Refusal) request() string {
	switch r.Op {
	case WRRDMARead, WRRDMAWrite, WRRDMAWriteWithImm, WRAtomicCmpAndSwp, WRAtomicFetchAndAdd, WRFlush, WRAtomicWrite:
		return fmt.Sprintf("%v of %d bytes at %#x rkey %#x (PSN %#06x)", r.Op, r.Length, r.RemoteAddr, r.RKey, r.PSN)
	}
	return fmt.Sprintf("%v of %d bytes (PSN %#06x)", r.Op, r.Length, r.PSN)
}

// hint says what the check found and what to change.
func (r Refusal) hint() string {
	switch r.Reason {
	case RefusedOpcodeSequence:
		return "a packet out of its message's order (a MIDDLE or LAST without its FIRST, or a new message before the last ended): a peer bug, or another connection's packets reaching this QP"
	case RefusedQPAccess:
		return fmt.Sprintf("the QP's access flags (%v) do not enable %v: grant it in QPAttr.QPAccessFlags (QPAttrAccessFlags, from INIT on) or cm.Params.Access; the memory region needs the right as well", r.QPAccess, r.Need)
	case RefusedPacketLength:
		return "a payload that does not fit the path MTU or the message's announced length: do both QPs use the same path MTU (QPAttr.PathMTU at RTR)?"
	case RefusedMessageLength:
		return "a message over 2^31 bytes, or an ATOMIC_WRITE not of 8 bytes"
	case RefusedNoResources:
		return "the QP accepts no RDMA READ, atomic or FLUSH: its max_dest_rd_atomic is 0; set QPAttr.MaxDestRdAtomic at RTR (cm.Params.ResponderResources)"
	case RefusedOpcode:
		return "an operation this QP does not execute"
	case RefusedKey:
		return fmt.Sprintf("rkey %#x names no memory region or bound memory window of this device: a wrong rkey, one revoked (MR.Dereg, MR.Rereg, a window rebound or invalidated), or a type 2 window bound through another QP", r.RKey)
	case RefusedPD:
		return fmt.Sprintf("the memory of rkey %#x is in another protection domain than this QP: register it in the QP's PD", r.RKey)
	case RefusedMemoryAccess:
		return fmt.Sprintf("the memory region or window of rkey %#x does not grant %v: register it with that right (PD.RegMR's access) or bind the window with it", r.RKey, r.Need)
	case RefusedBounds:
		return fmt.Sprintf("[%#x, %#x+%d) is not inside the memory region or window of rkey %#x", r.RemoteAddr, r.RemoteAddr, r.Length, r.RKey)
	case RefusedMisaligned:
		return fmt.Sprintf("the atomic's address %#x is not 8-byte aligned", r.RemoteAddr)
	case RefusedRecvTooShort:
		return fmt.Sprintf("at least %d bytes for a receive buffer of %d: post larger receive buffers (the receive completed with LOC_LEN_ERR)", r.Length, r.RecvLength)
	case RefusedRecvBuffer:
		return "the receive buffer cannot be written: check its SGEs' lkeys and ranges, their region's PD and LOCAL_WRITE (the receive completed with LOC_PROT_ERR)"
	case RefusedInvalidate:
		return fmt.Sprintf("rkey %#x to invalidate is no type 2 memory window bound through this QP", r.RKey)
	}
	return "unknown reason"
}
