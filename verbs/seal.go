package verbs

import (
	"net/netip"
	"sync"

	"github.com/goroce/goroce/internal/netio"
	"github.com/goroce/goroce/internal/seal"
	"github.com/goroce/goroce/internal/wire"
)

// Sealed connections: authenticated, encrypted RDMA between goroce peers
// (internal/seal has the format and the construction). The keys come
// from the connection handshake (package cm, Params.Security); a QP with
// keys seals every packet it sends and takes only packets that open under
// its peer's key, replays refused. Without keys a QP speaks plain RoCEv2,
// as rxe and RDMA NICs do.
//
//   - Send: transmitRepliesToLocked seals the transport's packets into a
//     buffer lent by the engine (sealLocked, sealPool), the payload read
//     out of the MR by the cipher, each with a fresh counter,
//     retransmissions included. Sealed replies join the receive batch's
//     replies (replyBatch.takeSealed), sealed there after the QP's other
//     packets, and leave with every QP's in one send, as plain ones do.
//   - Receive: netio asks the engine whether a datagram is for a sealed QP
//     (Sealed: one atomic load while no QP is sealed), checks its ICRC,
//     and has it opened in place in its receive buffer (Unseal), before
//     parsing it; only then does it reach the QP's transport, so bytes
//     that did not authenticate never reach registered memory.

// PacketKeys are a connection's AES-256-GCM packet keys, one per direction.
type PacketKeys struct {
	Send, Recv [32]byte
}

// SetPacketKeys turns on authenticated encryption of the QP's packets
// under k, or off with nil: from then on the QP sends only sealed packets
// and takes only those its peer sealed under k.Recv. The peer must be a
// goroce QP with the mirrored keys; package cm sets them from its
// handshake (Params.Security), which is the way to use this. Only for RC
// and UC QPs in RESET or INIT, before any packet flows; a move to RESET
// drops the keys.
func (qp *QP) SetPacketKeys(k *PacketKeys) error {
	const op = "SetPacketKeys"
	if qp.hw != nil {
		return hwUnsupported(op, "qp", "packet sealing")
	}
	if qp.qpType != QPTypeRC && qp.qpType != QPTypeUC {
		return newError(op, "qp_type", ErrNotSupported, "only connected (RC, UC) QPs seal their packets")
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closed.Load() {
		return closedError(op, "qp")
	}
	if s := qp.State(); s != QPStateReset && s != QPStateInit {
		return newError(op, "qp_state", ErrInvalidState, "keys are set in RESET or INIT, before the connection's first packet")
	}
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	qp.dropKeysLocked()
	if k != nil {
		qp.sealer = seal.NewSealer(&k.Send)
		qp.opener.Store(seal.NewOpener(&k.Recv))
		qp.dev.eng.sealedQPs.Add(1)
	}
	return nil
}

// Sealed reports whether the QP's packets are sealed.
func (qp *QP) Sealed() bool { return qp.opener.Load() != nil }

// dropKeysLocked turns sealing off. The caller holds xmu.
func (qp *QP) dropKeysLocked() {
	if qp.opener.Swap(nil) != nil {
		qp.dev.eng.sealedQPs.Add(-1)
	}
	qp.sealer = nil
}

// sealPool lends the buffers sealed packets wait in until they are sent:
// held by each QP, a window of 4 KiB packets would keep hundreds of KiB
// per sealed QP (the reason for outputPool too). The last returned is lent
// first. Its lock is taken under a QP's xmu.
type sealPool struct {
	mu   sync.Mutex
	free [][]byte // LIFO
}

func (p *sealPool) get() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		return b
	}
	return nil // grown by the Sealer
}

func (p *sealPool) put(b []byte) {
	if cap(b) == 0 {
		return
	}
	p.mu.Lock()
	p.free = append(p.free, b[:0])
	p.mu.Unlock()
}

// sealLocked seals the packets of msgs in place of their plain forms, into
// a buffer from the engine's sealPool, which it returns: the caller gives
// it back once msgs are sent. The caller holds xmu.
func (qp *QP) sealLocked(msgs []netio.Message) []byte {
	buf := qp.dev.eng.seals.get()
	for i := range msgs {
		m := &msgs[i]
		pad := 0
		if len(m.Payload) > 0 {
			pad = int(wire.BTH(m.Packet).PadCount()) // not stored with a Payload
		}
		n := len(buf)
		buf = qp.sealer.Append(buf, m.Packet, m.Payload, pad)
		// If Append moved buf, the packets sealed so far keep the old
		// array until the send. The socket writes the ICRC after the
		// packet: the next one starts past it.
		end := len(buf)
		m.Packet, m.Payload = buf[n:end:end+wire.ICRCLen], nil
		buf = buf[:end+wire.ICRCLen]
	}
	return buf
}

// Sealed implements netio.Unsealer: is the datagram for a sealed QP? It
// remembers the QP for Unseal. The queue's receiver only.
func (q *rxQueue) Sealed(b []byte) bool {
	e := q.e
	if e.sealedQPs.Load() == 0 || len(b) < wire.BTHLen {
		return false
	}
	qp := e.dev.lookupQP(uint32(wire.BTH(b).DestQP()))
	if qp == nil || qp.opener.Load() == nil {
		return false
	}
	q.unsealQP = qp
	return true
}

// Unseal implements netio.Unsealer: it opens the datagram Sealed took
// under its QP's key, or counts why not. The queue's receiver only. A
// QP's packets may reach any receive queue (a GSO datagram is steered by
// its first packet's QP): openMu serialises its replay window.
func (q *rxQueue) Unseal(b []byte, _ netip.AddrPort) []byte {
	e := q.e
	qp := q.unsealQP
	q.unsealQP = nil
	o := qp.opener.Load()
	if o == nil { // the keys were dropped in between: not for us now
		e.authFail.Add(1)
		return nil
	}
	qp.openMu.Lock()
	plain, err := o.Open(b)
	qp.openMu.Unlock()
	switch err {
	case nil:
		return plain
	case seal.ErrReplay:
		e.replayed.Add(1)
	default:
		e.authFail.Add(1)
	}
	return nil
}
