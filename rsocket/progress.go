package rsocket

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/goroce/goroce/verbs"
)

// Completions reach a connection through a sink (verbs.CompletionSink)
// that queues them on the device's goroutine and wakes Read and Write;
// whichever of them runs next applies them to the flow state under mu
// (progress), reposts the receives consumed and returns credits when due,
// as rsockets does in its calls (rs_process_cq). A message thus wakes the
// reader directly, with no goroutine of the connection's own in between.
// Data and ring SGEs land in memory before their completion is queued,
// so what a completion announces may be read once it is taken.

// completions is the sink: a ring as deep as the CQ. Its lock is never
// held while calling verbs, so the device may deliver at any time.
type completions struct {
	mu   sync.Mutex
	ring []verbs.WorkCompletion
	head int
	n    int
	wake func()
}

// DeliverCompletion queues wc (called with the CQ's lock held).
func (q *completions) DeliverCompletion(wc verbs.WorkCompletion) bool {
	one := [1]verbs.WorkCompletion{wc}
	return q.deliver(one[:]) == 1
}

// deliver queues as many of wcs as the ring has room for, in order, and
// wakes Read and Write once; it returns how many it queued.
func (q *completions) deliver(wcs []verbs.WorkCompletion) int {
	q.mu.Lock()
	k := min(len(wcs), len(q.ring)-q.n)
	for _, wc := range wcs[:k] {
		q.ring[(q.head+q.n)%len(q.ring)] = wc
		q.n++
	}
	q.mu.Unlock()
	if k > 0 {
		q.wake()
	}
	return k
}

// take moves up to len(dst) completions into dst.
func (q *completions) take(dst []verbs.WorkCompletion) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := min(q.n, len(dst))
	for i := range k {
		dst[i] = q.ring[(q.head+i)%len(q.ring)]
	}
	q.head = (q.head + k) % len(q.ring)
	q.n -= k
	return k
}

// pollHardware takes a kernel device's completions (CQ.Wait parks in Go's
// poller on the CQ's completion channel) and queues them as the sink
// does, until Close destroys the CQ.
func (c *Conn) pollHardware() {
	defer close(c.hwDone)
	var wcs [32]verbs.WorkCompletion
	for {
		n, err := c.ep.cq.Wait(context.Background(), wcs[:])
		if err != nil {
			if !errors.Is(err, verbs.ErrClosed) {
				c.mu.Lock()
				c.broken(fmt.Errorf("rsocket: completions: %w", err))
				c.mu.Unlock()
				c.wake()
			}
			return
		}
		// The ring is as deep as the CQ, and every work request's
		// completion is taken before its slot is reused: it has room.
		for rest := wcs[:n]; len(rest) > 0; {
			if rest = rest[c.cq.deliver(rest):]; len(rest) > 0 {
				time.Sleep(10 * time.Microsecond)
			}
		}
	}
}

// progress applies the completions queued, then returns credits if due.
// The caller holds mu.
func (c *Conn) progress() {
	for {
		n := c.cq.take(c.wcs[:])
		for i := range c.wcs[:n] {
			c.complete(&c.wcs[i])
		}
		if n < len(c.wcs) {
			break
		}
	}
	c.updateCredits()
}

// complete applies one completion. The caller holds mu.
func (c *Conn) complete(wc *verbs.WorkCompletion) {
	if wc.WRID&recvFlag != 0 {
		c.received(wc)
	} else {
		c.sendDone(wc)
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
	m, err := parseMsg(wc.ImmData, wc.ByteLen)
	if err != nil {
		c.broken(err)
		return
	}
	switch m.op {
	case opData:
		if !c.rcv.arrived(int(m.data)) {
			c.broken(fmt.Errorf("%w: %d bytes beyond the buffer or credits given", errProtocol, m.data))
		}
	case opSGL:
		var region *sge
		if m.region {
			s := getSGE(c.tbuf[c.snd.nextSlot*sgeLen:], false)
			region = &s
		}
		c.snd.credit(uint16(m.data), region)
	case opIOMapSGL:
		if err := c.maps.announced(c.tbuf, m.data); err != nil {
			c.broken(err)
		}
	case opCtrl:
		switch m.data {
		case ctrlDisconnect:
			c.rdEOF, c.peerGone = true, true
		case ctrlShutdown:
			c.rdEOF = true
			c.peerGone = c.wrShut
		}
		// opWrite: rsockets' riowrite carries no immediate data, so
		// this is no message; ignored, as rsockets does.
	}
}

// sendDone handles a send completion. The caller holds mu.
func (c *Conn) sendDone(wc *verbs.WorkCompletion) {
	m := uint32(wc.WRID)
	switch msgOp(m) {
	case opData, opWrite:
		c.snd.sent(int(msgData(m)))
	case opIOMapSGL:
		c.snd.sent(ioMapLen)
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
