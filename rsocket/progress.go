package rsocket

import (
	"context"
	"errors"
	"fmt"

	"github.com/goroce/goroce/verbs"
)

// The progress goroutine: the one waiter on a connection's CQ. It applies
// each completion to the flow state, reposts the receives consumed,
// returns credits when they are due, and wakes Read and Write. Data and
// ring SGEs land in memory before their completion is queued, so what a
// completion announces may be read once it is polled.

// errProtocol is wrapped by the errors of a peer that breaks rsockets'
// rules (writes beyond its credits, reserved operations).
var errProtocol = errors.New("rsocket: protocol violation")

func (c *Conn) run(ctx context.Context) {
	defer close(c.progress)
	wcs := make([]verbs.WorkCompletion, 32)
	for {
		n, err := c.ep.cq.Wait(ctx, wcs)
		if err != nil {
			if ctx.Err() == nil {
				c.fail(fmt.Errorf("rsocket: completion queue: %w", err))
			}
			return
		}
		c.mu.Lock()
		for i := range wcs[:n] {
			if wcs[i].WRID&recvFlag != 0 {
				c.received(&wcs[i])
			} else {
				c.sendDone(&wcs[i])
			}
		}
		c.updateCredits()
		c.mu.Unlock()
		c.wake()
	}
}

// received handles a receive completion: a message from the peer. The
// caller holds mu.
func (c *Conn) received(wc *verbs.WorkCompletion) {
	if wc.Status != verbs.WCSuccess {
		c.broken(wc.Err())
		return
	}
	if c.err == nil && !c.closed {
		if err := c.ep.qp.PostRecv(&c.recvWR); err != nil {
			c.broken(err)
		}
	}
	if wc.WCFlags&verbs.WCWithImm == 0 {
		c.broken(fmt.Errorf("%w: a message without immediate data", errProtocol))
		return
	}
	m := wc.ImmData
	switch msgOp(m) {
	case opData:
		if !c.rcv.arrived(int(msgData(m))) || int(wc.ByteLen) != int(msgData(m)) {
			c.broken(fmt.Errorf("%w: %d bytes beyond the buffer or credits given", errProtocol, msgData(m)))
		}
	case opSGL:
		var region *sge
		if wc.ByteLen == sgeLen {
			s := getSGE(c.tbuf[c.snd.nextSlot*sgeLen:], false)
			region = &s
		}
		c.snd.credit(uint16(msgData(m)), region)
	case opCtrl:
		switch msgData(m) {
		case ctrlDisconnect:
			c.rdEOF, c.peerGone = true, true
		case ctrlShutdown:
			c.rdEOF = true
			c.peerGone = c.wrShut
		}
	case opWrite, opIOMapSGL:
		// riowrite into an iomap: this side advertises none.
	default:
		c.broken(fmt.Errorf("%w: reserved operation %d", errProtocol, msgOp(m)))
	}
}

// sendDone handles a send completion. The caller holds mu.
func (c *Conn) sendDone(wc *verbs.WorkCompletion) {
	m := uint32(wc.WRID)
	switch msgOp(m) {
	case opData:
		c.snd.sent(int(msgData(m)))
	default:
		c.ctrlMax++
	}
	if wc.Status != verbs.WCSuccess {
		c.broken(wc.Err())
	}
}

// broken records why the connection failed, unless it was ending anyway:
// once the peer disconnected or Close began, flushed work requests are
// the QP going to ERR. The caller holds mu.
func (c *Conn) broken(err error) {
	if c.err != nil || c.peerGone || c.closed {
		return
	}
	if cerr := c.cmc.Err(); cerr != nil {
		err = fmt.Errorf("%w (%w)", errReset, cerr)
	}
	c.err = err
}

// updateCredits is rs_update_credits: return credits, and a region of the
// receive buffer when half of it is free again, if a control slot is
// free. The caller holds mu.
func (c *Conn) updateCredits() {
	if c.ctrlSeq == c.ctrlMax || c.err != nil || c.peerGone || c.discSent || !c.rcv.creditsDue() {
		return
	}
	m, region, off, slotAddr := c.rcv.credits()
	if err := c.postCtrl(m, region, off, slotAddr); err != nil {
		c.broken(err)
	}
}

// postCtrl posts a control message (rs_post_msg, a zero-length write with
// immediate data), or with region a credit message that also writes the
// SGE of the receive buffer at off into the peer's ring at slotAddr
// (rs_send_credits), from the control slot of this message. The caller
// holds mu.
func (c *Conn) postCtrl(m uint32, region bool, off int, slotAddr uint64) error {
	c.ctrlWR = verbs.SendWR{WRID: uint64(m), Opcode: verbs.WRRDMAWriteWithImm, ImmData: m, SGList: c.ctrlSGE[:0]}
	if region {
		slot := c.ep.sbufSz + (c.ctrlSeq%ctrlSlots)*sgeLen
		s := sge{addr: c.ep.rmr.IOVA() + uint64(off), key: c.ep.rmr.RKey(), length: uint32(c.ep.rbufSz / 2)}
		appendSGE(c.sbuf[slot:slot], s, c.peerBE)
		c.ctrlSGE[0] = c.ep.smr.SGE(slot, sgeLen)
		c.ctrlWR.SGList = c.ctrlSGE[:1]
		c.ctrlWR.RDMA = verbs.RDMAParams{RemoteAddr: slotAddr, RKey: c.rcv.remote.key}
	}
	c.ctrlSeq++
	return c.ep.qp.PostSend(&c.ctrlWR)
}
