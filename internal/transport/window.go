package transport

import "github.com/goroce/goroce/internal/psn"

// The requester's window adapts between a floor and the maximum set by
// SetMaxUnackedPSNs: under go-back-N a loss costs a resend of everything
// sent after it, so a path that loses packets is better served by a
// smaller window, while a clean one wants the full maximum (see doc.go).
const (
	// windowFloor is the least the window shrinks to: rxe's
	// RXE_MAX_UNACKED_PSNS. A QP whose maximum is at or below it keeps that
	// maximum as a fixed window.
	windowFloor = 128
	// windowGrowth is how many acknowledged PSNs widen the window by one
	// PSN after a retry narrowed it: slow enough that a path losing a
	// packet every few hundred stays near the floor, fast enough that a
	// clean path regains the maximum within a few MiB.
	windowGrowth = 32
)

// floorWindow returns the floor of the adaptive window for the configured
// maximum.
func (qp *QP) floorWindow() uint32 { return min(windowFloor, qp.window) }

// shrinkWindow halves the effective window, not below the floor, when a
// go-back-N retry starts; the credit toward the next increment is lost.
func (qp *QP) shrinkWindow() {
	qp.req.win = max(qp.req.win/2, qp.floorWindow())
	qp.req.winCredit = 0
}

// growWindow widens the effective window for the PSNs from up to the
// completer's oldest unacknowledged one, which the peer has just
// acknowledged: one PSN per windowGrowth of them, up to the maximum.
func (qp *QP) growWindow(from psn.PSN) {
	if qp.req.win >= qp.window {
		return
	}
	n := qp.comp.psn.Sub(from)
	if n <= 0 {
		return
	}
	qp.req.winCredit += uint32(n)
	if g := qp.req.winCredit / windowGrowth; g > 0 {
		qp.req.winCredit -= g * windowGrowth
		qp.req.win = min(qp.req.win+g, qp.window)
	}
}

// ackInterval returns how many packets the requester sends at most without
// asking for an acknowledgement: SetAckEvery's count at the maximum window,
// scaled down with a narrowed one, so that a window carries as many ACK
// requests as the full one. After a loss the responder repeats its
// sequence NAK for each packet that asks (doc.go): with half the window and
// the same interval there would be half the chances for one NAK to get
// through, and on a 20 % lossy path WRITEs then waited for the retransmit
// timer twice as often, halving their throughput.
//
// The RTT window (swift.go) narrows it the same way: a window of a few
// packets must ask for an ACK within each.
func (qp *QP) ackInterval() uint32 {
	w := qp.sendWindow()
	if w >= qp.window {
		return qp.ackEvery
	}
	return max(uint32(uint64(qp.ackEvery)*uint64(w)/uint64(qp.window)), 1)
}

// smallPacket is the payload, in bytes, at or below which a packet counts
// as small against the default window, which holds DefaultWindowBytes with
// every packet charged at least this much: MaxDefaultWindow packets.
const smallPacket = DefaultWindowBytes / MaxDefaultWindow

// windowFor returns how many PSNs may be unacknowledged when the requester
// sends the next packet of s. The default window is sized in bytes
// (defaultWindow): at path MTU 4096 it is 256 PSNs, 1 MiB of full packets,
// which leaves small messages (64-byte WRITEs in post lists) waiting for
// ACKs with the path idle. So a WQE whose packets are small (a message or
// READ of at most smallPacket bytes) may go on up to MaxDefaultWindow PSNs,
// the window at MTU 1024, narrowed in proportion while a retry narrowed the
// window. In flight then: at most MaxDefaultWindow packets, as at MTU 1024,
// of which at most the default window's are large (a large packet waits
// for its own window): 1 MiB plus 256 small ones. A window set with
// SetMaxUnackedPSNs counts packets only, and so does selective repeat.
func (qp *QP) windowFor(s *sendSlot) uint32 {
	if qp.windowSet || qp.window >= MaxDefaultWindow || s.length > smallPacket {
		return qp.sendWindow()
	}
	w := uint32(uint64(qp.req.win) * MaxDefaultWindow / uint64(qp.window))
	if qp.cc.cfg.RTT {
		w = min(w, qp.cc.win.packets(MaxDefaultWindow))
	}
	return w
}
