package verbs

import (
	"context"
)

// PostSendWait is the synchronous send of simple programs: it posts wr
// (signaled, whatever its SendFlags say) and waits until it completes, ctx
// ends or the QP goes away, and returns the completion and its error
// (WorkCompletion.Err: nil on success, otherwise an error wrapping the
// status's sentinel and naming the likely causes):
//
//	wr, _ := remote.Read(0, mr.SGE(0, 64))
//	if _, err := qp.PostSendWait(ctx, &wr); err != nil {
//		return err
//	}
//
// The CQ may be shared: with the QP's receives, with other QPs, with other
// goroutines polling or waiting on it, and with other PostSendWait calls.
// The completion of wr goes to this call alone, never to Poll, Wait or a
// completion event; every other completion stays in the CQ for them. To
// find its own, PostSendWait posts the request under a work request ID of
// its own (wr is not modified), from a range no counter or pointer reaches
// (0xC1A1 in the top 16 bits, which a program's other requests on the QP
// must not use), and returns the completion with wr.WRID restored.
//
// If ctx ends first, PostSendWait returns ctx.Err(): the request is still
// posted, and its completion goes to the CQ like any other, with wr.WRID.
// If the QP is reset or destroyed meanwhile, which discards its work
// requests without completions, it returns an error wrapping
// ErrInvalidState or ErrClosed. Errors of PostSend are returned as they
// are.
//
// Each call allocates a little; a loop that must not allocate posts with
// PostSend and polls with CQ.Poll or CQ.Wait.
func (qp *QP) PostSendWait(ctx context.Context, wr *SendWR) (WorkCompletion, error) {
	const op = "PostSendWait"
	if qp.hw != nil {
		return WorkCompletion{}, hwUnsupported(op, "qp", "PostSendWait")
	}
	if wr == nil {
		return WorkCompletion{}, newError(op, "wr", ErrInvalidArgument, "nil")
	}
	w := *wr
	w.SendFlags |= SendSignaled
	cq := qp.sendCQ
	c := cq.claim(qp.qpn, wr.WRID)
	w.WRID = c.token
	if err := qp.PostSend(&w); err != nil {
		cq.unclaim(c)
		return WorkCompletion{}, err
	}
	select {
	case r := <-c.done:
		if r.err != nil {
			return WorkCompletion{}, r.err
		}
		return r.wc, r.wc.Err()
	case <-ctx.Done():
		if r, ok := cq.abandon(c); ok {
			// The completion came as ctx ended.
			if r.err != nil {
				return WorkCompletion{}, r.err
			}
			return r.wc, r.wc.Err()
		}
		return WorkCompletion{}, ctx.Err()
	}
}

// cqClaim is a PostSendWait waiting for the completion of its request on
// a CQ. It is guarded by the CQ's mu.
type cqClaim struct {
	qpn   uint32
	token uint64 // the WRID the request was posted with
	wrid  uint64 // the caller's WRID, restored in the completion
	done  chan claimResult
	// abandoned: the caller stopped waiting; the completion goes into the
	// CQ's ring with wrid, as if posted by PostSend.
	abandoned bool
}

// claimResult is what a claim receives: the completion, or why none will
// come.
type claimResult struct {
	wc  WorkCompletion
	err error
}

// claimTag marks the work request IDs of claimed requests: a range that
// counters and pointers, the usual WRIDs, do not reach by accident.
const claimTag = 0xC1A1_0000_0000_0000

// claim registers a claim for the next request of QP qpn.
func (cq *CQ) claim(qpn uint32, wrid uint64) *cqClaim {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	cq.claimSeq++
	c := &cqClaim{qpn: qpn, token: claimTag | cq.claimSeq&(1<<48-1), wrid: wrid, done: make(chan claimResult, 1)}
	cq.claims = append(cq.claims, c)
	return c
}

// unclaim withdraws a claim whose request was not posted.
func (cq *CQ) unclaim(c *cqClaim) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	cq.removeClaimLocked(c)
}

// abandon withdraws the claim of a caller that stops waiting. If the
// result arrived meanwhile it returns it and true; otherwise the
// request's completion will go to the ring.
func (cq *CQ) abandon(c *cqClaim) (claimResult, bool) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	select {
	case r := <-c.done:
		return r, true
	default:
	}
	c.abandoned = true
	return claimResult{}, false
}

// removeClaimLocked drops c from the CQ's claims. The caller holds mu.
func (cq *CQ) removeClaimLocked(c *cqClaim) {
	for i, x := range cq.claims {
		if x == c {
			last := len(cq.claims) - 1
			cq.claims[i] = cq.claims[last]
			cq.claims[last] = nil
			cq.claims = cq.claims[:last]
			return
		}
	}
}

// claimedLocked hands wc to the claim waiting for it, if any, and reports
// whether it did. A completion whose claim was abandoned gets the caller's
// WRID back and goes to the ring (false). The caller holds mu; push calls
// it only while claims exist, so the data path pays one length test.
func (cq *CQ) claimedLocked(wc *WorkCompletion) bool {
	for _, c := range cq.claims {
		if c.qpn != wc.QPNum || c.token != wc.WRID {
			continue
		}
		cq.removeClaimLocked(c)
		wc.WRID = c.wrid
		if c.abandoned {
			return false
		}
		c.done <- claimResult{wc: *wc} // capacity 1, one send per claim
		return true
	}
	return false
}

// dropClaims ends the claims of QP qpn, whose work requests were discarded
// without completions (a move to RESET, or Destroy), with err.
func (cq *CQ) dropClaims(qpn uint32, err error) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	for i := 0; i < len(cq.claims); {
		c := cq.claims[i]
		if c.qpn != qpn {
			i++
			continue
		}
		cq.removeClaimLocked(c)
		if !c.abandoned {
			c.done <- claimResult{err: err}
		}
	}
}
