package verbs_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// A NIC sends the ACK of a message before the CPU hears of its
// completion, so an application woken by the completion event cannot
// answer before that ACK has left. goroce sends a receive batch's ACKs at
// the end of the batch (EndBatch), so the events of the batch's
// completions wait for that end. Otherwise the answer can overtake the
// ACK: perftest's ib_send_lat -e, whose send and receive CQs share one
// channel, then takes the peer's next message for the event of its own
// SEND's completion, polls an empty send CQ and fails. These tests hold
// the receiver's batch before it sends its replies (verbs.BatchStart):
// the completion is there to poll, the event must not be.

// TestCompletionEventWaitsForTheBatchReplies: the completion channel's
// event of a receive.
func TestCompletionEventWaitsForTheBatchReplies(t *testing.T) {
	a, b := ackPairWith(t, rdmatest.EndOptions{Channel: true})
	if err := b.CQ.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	held, release := holdBatch(t, b.Dev, verbs.BatchStart)
	sendOne(t, a, b)
	<-held
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.CQ.Channel().GetEvent(done); err == nil {
		t.Fatalf("the receive's completion event was raised with %d packets sent, before the batch sent the SEND's ACK",
			b.Dev.Counters().SentPkts)
	}
	release()
	ctx := testkit.Context(t)
	cq, err := b.CQ.Channel().GetEvent(ctx)
	if err != nil {
		t.Fatalf("no completion event once the batch ended: %v", err)
	}
	cq.AckEvents(1)
	wantAckSent(t, b, "the completion event")
	wantSendDone(t, a)
}

// notifySink is a CompletionSink with its own notifications, as
// goroce-nic's: it counts the completions delivered and the
// NotifyCompletions calls, and what had been delivered at the last call.
type notifySink struct {
	delivered, notified, deliveredAtNotify atomic.Int32
}

func (s *notifySink) DeliverCompletion(verbs.WorkCompletion) bool {
	s.delivered.Add(1)
	return true
}

func (s *notifySink) NotifyCompletions() {
	s.deliveredAtNotify.Store(s.delivered.Load())
	s.notified.Add(1)
}

// TestSinkNotificationWaitsForTheBatchReplies: a sink that implements
// CompletionNotifier is told of a receive batch's completions after the
// batch's replies, and of a completion a verb makes at once.
func TestSinkNotificationWaitsForTheBatchReplies(t *testing.T) {
	a, b := ackPair(t)
	s := &notifySink{}
	if err := b.CQ.SetSink(s); err != nil {
		t.Fatal(err)
	}
	held, release := holdBatch(t, b.Dev, verbs.BatchStart)
	rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{b.MR.SGE(0, 64)}})
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 64)}})
	<-held
	if d, n := s.delivered.Load(), s.notified.Load(); d != 1 || n != 0 {
		t.Fatalf("with the batch held before its replies: %d completions delivered, %d notifications; want 1 and 0", d, n)
	}
	release()
	testkit.WaitFor(t, "the sink's notification after the batch", func() bool { return s.notified.Load() == 1 })
	wantAckSent(t, b, "NotifyCompletions")
	wantSendDone(t, a)

	// A completion made by a verb (a receive flushed by the move to
	// ERR) is notified before the verb returns.
	rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: 3, SGList: []verbs.SGE{b.MR.SGE(0, 64)}})
	if err := b.QP.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if d, n, at := s.delivered.Load(), s.notified.Load(), s.deliveredAtNotify.Load(); d != 2 || n != 2 || at != 2 {
		t.Fatalf("after Modify to ERR flushed a receive: %d delivered, %d notifications, the last after %d; want 2, 2, 2", d, n, at)
	}
}
