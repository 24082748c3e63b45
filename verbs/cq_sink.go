package verbs

// CompletionSink takes a CQ's completions as the device produces them, in
// place of the CQ's own ring: a layer that keeps completions elsewhere (such
// as goroce-nic, which writes them into a ring shared with another process)
// receives each one on the goroutine that produced it, with no goroutine of
// its own moving them and no second queue in between.
//
// DeliverCompletion is called with the CQ's lock held, once per completion
// and in the CQ's order, from the device's receive and timer goroutines and
// from the goroutines of the verbs that complete work requests themselves
// (posting on a QP in ERR, Modify to ERR, Destroy). It must not block, must
// not call the CQ's methods (nor verbs that complete work requests into the
// CQ), and must not keep wc's address. It returns false when it has no room:
// the CQ then overruns exactly as when its ring is full (see CQ), so the
// sink's capacity is the CQ's. WorkCompletion.Solicited tells a sink that
// implements its own completion notifications which receives satisfy a
// solicited-only request.
type CompletionSink interface {
	DeliverCompletion(wc WorkCompletion) bool
}

// CompletionNotifier is implemented by a CompletionSink that raises its
// own completion notifications (goroce-nic: the arm flag its client sets
// in the shared ring, and the client's channel). The CQ calls
// NotifyCompletions, with its lock held, after the completions that
// DeliverCompletion took: at once for a completion made by a verb or a
// timer, and for those a receive batch made once that batch has sent its
// replies, so that an application woken by the notification cannot answer
// a message before its ACK has left (a NIC sends the ACK before the CPU
// learns of the completion). A sink that notifies from DeliverCompletion
// instead lets the answer overtake the ACK. The same rules as for
// DeliverCompletion apply: it must not block nor call the CQ's methods.
type CompletionNotifier interface {
	NotifyCompletions()
}

// SetSink makes s take the CQ's completions from now on (nil gives them
// back to the CQ's ring). Completions already in the ring stay there for
// Poll; with a sink, Poll and Wait find only those. The CQ's notification
// requests (ReqNotify) and its completion channel keep working, counted on
// what the sink accepts.
func (cq *CQ) SetSink(s CompletionSink) error {
	if cq.hw != nil {
		return hwUnsupported("SetSinkCQ", "sink", "completion sinks")
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return closedError("SetSinkCQ", "cq")
	}
	cq.sink = s
	cq.notifier, _ = s.(CompletionNotifier)
	return nil
}
