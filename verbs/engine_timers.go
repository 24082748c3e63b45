package verbs

import (
	"container/heap"
	"context"
	"time"
)

// The timers of the software NIC. One goroutine per device sleeps until the
// earliest QP deadline (retransmission after 4.096 µs × 2^timeout, RNR
// waits, paced READ responses); an idle device uses no CPU.
//
//  1. Whoever runs a QP's transport files its next deadline (schedule,
//     under the QP's xmu, from transmitLocked and Modify).
//  2. runTimers pops the earliest due QP and runs its transport's OnTimer
//     under its xmu, then transmits; it never holds tmu while it takes a
//     QP's xmu.
//  3. Before a retransmission, runTimers takes what the receive socket
//     holds (netio.Conn.Poll): when the process did not run for a while,
//     the runtime may run this goroutine's timer before it notices that
//     the socket is readable, and the ACK that makes the retransmission
//     needless would be read only after it (seen in the rxe interop under
//     load: resends 240 ms after rxe's ACK arrived). A NIC processes
//     arrivals in order with its timers; this makes the engine do so too.
//  4. A deadline moved later, or removed, costs at most one early wake-up
//     at the old time: schedule wakes the goroutine only for a deadline
//     before the end of its sleep, not for every WRITE and ACK that arms
//     or moves its QP's retransmission deadline.

// schedule files qp's next deadline. The caller holds qp.xmu.
func (e *engine) schedule(qp *QP) {
	var (
		at time.Time
		ok bool
	)
	if qp.tq != nil && !qp.closed.Load() {
		at, ok = qp.tq.Deadline()
	}
	e.tmu.Lock()
	defer e.tmu.Unlock()
	if !ok {
		if qp.timerIndex >= 0 {
			heap.Remove(&e.timers, qp.timerIndex)
		}
		return
	}
	if qp.timerIndex >= 0 && qp.deadline.Equal(at) {
		return
	}
	qp.deadline = at
	if qp.timerIndex >= 0 {
		heap.Fix(&e.timers, qp.timerIndex)
	} else {
		heap.Push(&e.timers, qp)
	}
	if e.timers[0] == qp && e.sleeping && at.Before(e.sleepUntil) {
		e.sleeping = false // one wake-up is enough
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
}

// unschedule forgets qp's deadline (Destroy).
func (e *engine) unschedule(qp *QP) {
	e.tmu.Lock()
	defer e.tmu.Unlock()
	if qp.timerIndex >= 0 {
		heap.Remove(&e.timers, qp.timerIndex)
	}
}

// runTimers fires QP deadlines until ctx ends. It sleeps while no deadline
// is pending: an idle device burns no CPU.
func (e *engine) runTimers(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		e.tmu.Lock()
		var (
			due  *QP
			wait = time.Hour
		)
		now := time.Now()
		if len(e.timers) > 0 {
			if d := e.timers[0].deadline.Sub(now); d <= 0 {
				due = heap.Pop(&e.timers).(*QP)
			} else {
				wait = d
			}
		}
		e.sleeping = due == nil
		e.sleepUntil = now.Add(wait)
		e.tmu.Unlock()

		if due != nil {
			due.xmu.Lock()
			if due.tq != nil && !due.closed.Load() && due.tq.RetransmitDue(time.Now()) {
				due.xmu.Unlock()
				e.poll() // step 3; delivery takes QPs' xmu
				due.xmu.Lock()
			}
			if due.tq != nil && !due.closed.Load() {
				raceSync()
				due.tq.OnTimer(time.Now(), due.outputLocked())
				raceSync()
				due.transmitLocked()
			}
			due.xmu.Unlock()
			continue
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-e.wake:
		case <-t.C:
		}
	}
}

// timerHeap orders QPs by deadline (container/heap).
type timerHeap []*QP

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].timerIndex = i
	h[j].timerIndex = j
}
func (h *timerHeap) Push(x any) {
	qp := x.(*QP)
	qp.timerIndex = len(*h)
	*h = append(*h, qp)
}
func (h *timerHeap) Pop() any {
	old := *h
	qp := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	qp.timerIndex = -1
	return qp
}
