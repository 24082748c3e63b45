package nic

import (
	"runtime"
	"time"

	"github.com/goroce/goroce/internal/nicproto"
	"github.com/goroce/goroce/verbs"
)

// pump drains the QP's rings into verbs until the QP is destroyed. Before
// it sleeps on the doorbell it sets need_doorbell and looks at the rings
// once more: the client publishes prod before it reads need_doorbell, so one
// of the two sees the other's store.
func (q *qpObj) pump() {
	defer close(q.pumpDone)
	var b [8]byte
	for {
		q.mu.Lock()
		q.drainSend()
		if q.rq != nil {
			q.drainRecv()
		}
		q.mu.Unlock()
		if q.spin() {
			continue
		}
		q.sleep(true)
		if q.hasWork() {
			q.sleep(false)
			continue
		}
		_, err := q.db.Read(b[:])
		q.sleep(false)
		if err != nil {
			return
		}
	}
}

func (q *qpObj) hasWork() bool {
	return q.sq.hasWork() || (q.rq != nil && q.rq.hasWork())
}

// spin polls the rings for Config.PollSpin before the pump sleeps, trading
// a processor for the wake-up of a sleeping pump (a doorbell write and an
// idle thread's wake-up) on every post: for machines with a core to spare.
func (q *qpObj) spin() bool {
	d := q.sess.srv.cfg.PollSpin
	if d <= 0 {
		return false
	}
	deadline := time.Now().Add(d)
	for i := 0; ; i++ {
		if q.hasWork() {
			return true
		}
		if i%64 == 63 {
			if time.Now().After(deadline) {
				return false
			}
			runtime.Gosched()
		}
	}
}

func (q *qpObj) sleep(on bool) {
	q.sq.sleep(on)
	if q.rq != nil {
		q.rq.sleep(on)
	}
}

// drainSend hands the published send slots to verbs in batches. The caller
// holds q.mu.
func (q *qpObj) drainSend() {
	for {
		n, broken := q.sq.pending()
		if broken {
			q.fail("send ring index out of range")
		}
		if n == 0 {
			return
		}
		start := q.sq.drained.Load()
		batch := int(min(n, uint64(len(q.swr))))
		k := 0
		for i := range batch {
			if !q.sendWR(start+uint64(i), &q.swr[k]) {
				q.fail("malformed send slot")
				continue
			}
			k++
		}
		wrs := q.swr[:k]
		q.sq.publishDrained(start + uint64(batch))
		for len(wrs) > 0 {
			k, err := q.qp.PostSendList(wrs)
			if err == nil {
				break
			}
			q.fail(err.Error())
			wrs = wrs[k+1:]
		}
	}
}

// sendWR converts the slot at pos into wr; false if the slot is malformed
// (which libgoroce's checks make impossible).
func (q *qpObj) sendWR(pos uint64, wr *verbs.SendWR) bool {
	slot := q.sq.slot(pos)
	w := *(*nicproto.SWQE)(slot)
	if int(w.NumSGE) > q.sq.maxSGE || w.InlineLen > uint32(q.qp.Cap().MaxInlineData) {
		return false
	}
	q.sq.wrid[pos%q.sq.entries].Store(w.WRID)
	sgl := wr.SGList[:0]
	*wr = verbs.SendWR{
		WRID:           wridSend | pos,
		Opcode:         verbs.WROpcode(w.Opcode),
		SendFlags:      verbs.SendFlags(w.SendFlags),
		ImmData:        w.ImmData,
		InvalidateRKey: w.ImmData,
		RDMA:           verbs.RDMAParams{RemoteAddr: w.RemoteAddr, RKey: w.RKey},
		Atomic:         verbs.AtomicParams{RemoteAddr: w.RemoteAddr, RKey: w.RKey, CompareAdd: w.CompareAdd, Swap: w.Swap},
	}
	if q.qp.Type() == verbs.QPTypeUD {
		q.sess.mu.RLock()
		ah := q.sess.ahs[w.AH]
		q.sess.mu.RUnlock()
		if ah == nil {
			return false
		}
		wr.UD = verbs.UDParams{AH: ah.ah, RemoteQPN: w.RemoteQPN, RemoteQKey: w.RemoteQKey}
	}
	if wr.SendFlags&verbs.SendInline != 0 {
		if w.InlineLen > 0 {
			off := (pos%q.sq.entries)*uint64(q.sq.stride) + nicproto.SWQESize + nicproto.SGESize*uint64(q.sq.maxSGE)
			sgl = append(sgl, verbs.SGE{Addr: q.inline.IOVA() + off, Length: w.InlineLen, LKey: q.inline.LKey()})
		}
	} else {
		for _, e := range q.sq.sges(slot, nicproto.SWQESize)[:w.NumSGE] {
			sgl = append(sgl, verbs.SGE{Addr: e.Addr, Length: e.Length, LKey: e.LKey})
		}
	}
	wr.SGList = sgl
	return true
}

// drainRecv hands the published receive slots to verbs. The caller holds q.mu.
func (q *qpObj) drainRecv() {
	n, broken := q.rq.pending()
	if broken {
		q.fail("receive ring index out of range")
	}
	start := q.rq.drained.Load()
	for i := range n {
		pos := start + i
		slot := q.rq.slot(pos)
		w := *(*nicproto.RWQE)(slot)
		q.rq.publishDrained(pos + 1)
		if int(w.NumSGE) > q.rq.maxSGE {
			q.fail("malformed receive slot")
			continue
		}
		q.rq.wrid[pos%q.rq.entries].Store(w.WRID)
		q.rwr.WRID = wridRecv | pos
		q.rwr.SGList = q.rwr.SGList[:0]
		for _, e := range q.rq.sges(slot, nicproto.RWQESize)[:w.NumSGE] {
			q.rwr.SGList = append(q.rwr.SGList, verbs.SGE{Addr: e.Addr, Length: e.Length, LKey: e.LKey})
		}
		if err := q.qp.PostRecv(&q.rwr); err != nil {
			q.fail(err.Error())
		}
	}
}

// fail handles a work request verbs refused although libgoroce checked it
// (or a ring the client corrupted): like a NIC meeting a malformed WQE, it
// moves the QP to ERR, so that the requests queued before and after it
// complete with errors instead of waiting forever. The request itself is
// dropped.
func (q *qpObj) fail(why string) {
	if !q.broken {
		q.broken = true
		q.sess.srv.cfg.Logf("qp %#x: %s: moving to ERR", q.qp.QPN(), why)
	}
	q.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)
}
