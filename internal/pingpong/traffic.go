package pingpong

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goroce/goroce/verbs"
)

// postRecv posts up to n receives, to the QP or the SRQ, and returns how
// many it posted, as pp_post_recv does.
func (pp *pingpongCtx) postRecv(n int) int {
	for i := range n {
		var err error
		if pp.srq != nil {
			err = pp.srq.PostRecv(&pp.recvWR)
		} else {
			err = pp.qps[0].PostRecv(&pp.recvWR)
		}
		if err != nil {
			return i
		}
	}
	return n
}

func (pp *pingpongCtx) postSend(i int) error {
	if err := pp.qps[i].PostSend(&pp.sendWRs[i]); err != nil {
		return fmt.Errorf("couldn't post send: %w", err)
	}
	return nil
}

// result is what one run measured.
type result struct {
	elapsed time.Duration
}

// run is the examples' traffic loop: the client starts with a send on
// every QP; every QP then sends again once both its previous send and the
// peer's next message on it have completed, until iters sends and
// receives, all QPs together, have completed. It returns when both counts
// are reached, on the first failed completion, or when ctx ends.
func (pp *pingpongCtx) run(ctx context.Context) (result, error) {
	o := pp.opts
	if !o.server() && o.chk {
		pp.writePattern()
	}
	for i := range pp.qps {
		pp.pending[i] = recvWRID
		if !o.server() {
			if err := pp.postSend(i); err != nil {
				return result{}, err
			}
			pp.pending[i] |= sendWRID
		}
	}
	start := time.Now()
	for pp.rcnt < o.iters || pp.scnt < o.iters {
		if o.events {
			if err := pp.waitEvent(ctx); err != nil {
				return result{}, err
			}
		}
		if err := pp.poll(ctx); err != nil {
			return result{}, err
		}
	}
	return result{elapsed: time.Since(start)}, nil
}

// drainTime is how long drain keeps the QPs open after the run.
const drainTime = 500 * time.Millisecond

// drain keeps a multi-QP run's QPs open for drainTime before they are
// destroyed, so that the peer's extra sends are acknowledged.
//
// Why: the examples' loop (this one and ibv_srq_pingpong's) counts sends and
// receives over all QPs together and posts a send on a QP whenever the total
// of send completions is below iters, so a side may post up to numQP-1 sends
// more than its peer waits for. If the peer has destroyed its QPs by then,
// the sender retransmits into nothing until its retry count runs out (rxe
// counts completer_retry_err). The extra sends are posted as soon as the
// sender sees this side's last messages, so they arrive within a round trip;
// the SRQ still holds receives for them. Their completions are left on the
// CQ, which is destroyed with the QPs.
func (pp *pingpongCtx) drain(ctx context.Context) {
	t := time.NewTimer(drainTime)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// poll takes completions from the CQ and accounts for them.
//
// After an event (--events) it takes everything the CQ holds: the CQ is
// armed again already, so a completion left behind would only be seen with
// the next event, which might never come.
//
// Otherwise it polls until there is at least one, but does not spin on an
// empty CQ as the examples do: it arms the CQ and sleeps on the completion
// channel instead. The device is goroutines of this process, whose receive
// path waits in the Go runtime's network poller; a goroutine spinning on
// Poll (yielding or not) keeps its processor from consulting the poller, so
// the packet it waits for is only noticed by the runtime's background
// monitor, up to 10 ms later. Measured on 2 cores between two processes,
// 64-byte round trips took 8 ms spinning with runtime.Gosched and 75 µs
// sleeping; spinning for a while before sleeping only made them slower.
func (pp *pingpongCtx) poll(ctx context.Context) error {
	for {
		n, err := pp.cq.Poll(pp.wc)
		if err != nil {
			return fmt.Errorf("poll CQ failed: %w", err)
		}
		for i := range n {
			if err := pp.complete(&pp.wc[i]); err != nil {
				return err
			}
		}
		switch {
		case pp.opts.events && n < len(pp.wc):
			return nil // drained
		case pp.opts.events:
			continue
		case n > 0:
			return nil
		}
		if got, err := pp.sleep(ctx); err != nil || got {
			// Completions found once the CQ was armed are progress
			// too: they may be the run's last, after which no event
			// comes, so the loop must see the counts before polling
			// again.
			return err
		}
	}
}

// armed, when set (by tests only), runs between sleep's arming of the CQ
// and its poll: a completion that arrives meanwhile is found by the poll.
var armed func()

// sleep waits, when polling, until the CQ may hold a completion: it arms the
// CQ, and sleeps on its channel unless a completion arrived before the CQ
// was armed (which raises no event); got reports that it took completions
// itself.
func (pp *pingpongCtx) sleep(ctx context.Context) (got bool, err error) {
	if err := pp.cq.ReqNotify(false); err != nil {
		return false, fmt.Errorf("couldn't request CQ notification: %w", err)
	}
	if armed != nil {
		armed()
	}
	n, err := pp.cq.Poll(pp.wc)
	if err != nil {
		return false, fmt.Errorf("poll CQ failed: %w", err)
	}
	for i := range n {
		if err := pp.complete(&pp.wc[i]); err != nil {
			return true, err
		}
	}
	if n > 0 {
		return true, nil
	}
	cq, err := pp.channel.GetEvent(ctx)
	if err != nil {
		return false, fmt.Errorf("failed to get cq_event: %w", err)
	}
	cq.AckEvents(1)
	return false, nil
}

// waitEvent sleeps until the CQ reports a completion event and re-arms it.
func (pp *pingpongCtx) waitEvent(ctx context.Context) error {
	cq, err := pp.channel.GetEvent(ctx)
	if err != nil {
		return fmt.Errorf("failed to get cq_event: %w", err)
	}
	pp.events++
	if cq != pp.cq {
		return errors.New("CQ event for unknown CQ")
	}
	if err := pp.cq.ReqNotify(false); err != nil {
		return fmt.Errorf("couldn't request CQ notification: %w", err)
	}
	return nil
}

// qpIndex returns the index of the QP numbered qpn (find_qp).
func (pp *pingpongCtx) qpIndex(qpn uint32) int {
	for i, qp := range pp.qps {
		if qp.QPN() == qpn {
			return i
		}
	}
	return -1
}

// complete accounts for one completion (the examples' loop body): counts
// it, replenishes the receives when few are left, and posts the QP's next
// send when its iteration is complete.
func (pp *pingpongCtx) complete(wc *verbs.WorkCompletion) error {
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("failed status %v (%d) for wr_id %d", wc.Status, int(wc.Status), wc.WRID)
	}
	q := pp.qpIndex(wc.QPNum)
	if q < 0 {
		return fmt.Errorf("couldn't find QPN %06x", wc.QPNum)
	}
	switch wc.WRID {
	case sendWRID:
		pp.scnt++
	case recvWRID:
		pp.routs--
		if pp.routs <= pp.refill {
			pp.routs += pp.postRecv(pp.opts.rxDepth - pp.routs)
			if pp.routs < pp.opts.rxDepth {
				return fmt.Errorf("couldn't post receive (%d)", pp.routs)
			}
		}
		pp.rcnt++
	default:
		return fmt.Errorf("completion for unknown wr_id %d", wc.WRID)
	}
	pp.pending[q] &^= int(wc.WRID)
	if pp.scnt < pp.opts.iters && pp.pending[q] == 0 {
		if err := pp.postSend(q); err != nil {
			return err
		}
		pp.pending[q] = recvWRID | sendWRID
	}
	return nil
}

// sent and received are the parts of the buffer the messages are sent
// from and received into: the same bytes, except with SRQ.
func (pp *pingpongCtx) sent() []byte     { return pp.buf[pp.sendOff : pp.sendOff+pp.msgLen] }
func (pp *pingpongCtx) received() []byte { return pp.buf[pp.payload : pp.payload+pp.msgLen] }

// writePattern writes the -c pattern over the fill: a zero at the start of
// each page of the message (the examples write i / page_size %
// sizeof(char), which is always 0).
func (pp *pingpongCtx) writePattern() {
	m := pp.sent()
	for i := 0; i < len(m); i += pp.pageSize {
		m[i] = markByte
	}
}

// invalidPages returns the pages of the message last received that do not
// hold the -c pattern. Every message carries it: the client writes it, and
// each side sends what it last received (with SRQ, the zeros of its send
// copy). Read it once the QPs are destroyed: with SRQ a message may still
// be arriving when the counts are reached.
func (pp *pingpongCtx) invalidPages() []int {
	m := pp.received()
	var bad []int
	for off := 0; off < len(m); off += pp.pageSize {
		page := m[off:min(off+pp.pageSize, len(m))]
		ok := page[0] == markByte
		for _, b := range page[1:] {
			ok = ok && b == pp.fill
		}
		if !ok {
			bad = append(bad, off/pp.pageSize)
		}
	}
	return bad
}
