//go:build linux

package nic

import (
	"runtime"
	"time"
	"unsafe"

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
		q.mu.Unlock()
		if q.rq != nil {
			q.rmu.Lock()
			q.drainRecv()
			q.rmu.Unlock()
		}
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

// drainSend hands the published send slots to verbs in batches. A type 1
// window's bind is its own verb (QP.BindMW): the batch before it is posted
// first, so that the QP's order holds. The caller holds q.mu.
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
			pos := start + uint64(i)
			switch q.sendWR(pos, &q.swr[k]) {
			case slotBad:
				q.fail("malformed send slot")
			case slotBindType1:
				q.postSends(q.swr[:k], pos)
				k = 0
				q.sq.publishDrained(pos + 1)
				q.bindType1(pos)
			default:
				k++
			}
		}
		q.postSends(q.swr[:k], start+uint64(batch))
	}
}

// postSends makes the slots before end drained (so that their completions
// are accepted) and posts wrs.
func (q *qpObj) postSends(wrs []verbs.SendWR, end uint64) {
	q.sq.publishDrained(end)
	for len(wrs) > 0 {
		k, err := q.qp.PostSendList(wrs)
		if err == nil {
			return
		}
		q.fail(err.Error())
		wrs = wrs[k+1:]
	}
}

// Kinds of send slot for drainSend.
const (
	slotPost      = iota // a work request for PostSendList
	slotBindType1        // a bind of a type 1 window (bindType1)
	slotBad              // malformed: dropped
)

// sendWR converts the slot at pos into wr; slotBad if the slot is malformed
// (which libgoroce's checks make impossible) or names objects that do not
// exist.
func (q *qpObj) sendWR(pos uint64, wr *verbs.SendWR) int {
	slot := q.sq.slot(pos)
	w := (*nicproto.SWQE)(slot)
	if int(w.NumSGE) > q.sq.maxSGE || w.InlineLen > uint32(q.qp.Cap().MaxInlineData) {
		return slotBad
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
	slotOff := (pos % q.sq.entries) * uint64(q.sq.stride)
	switch {
	case wr.Opcode == verbs.WRBindMW:
		mw, mr, ok := q.sess.bindObjects(w.MW, w.MR)
		if !ok {
			return slotBad
		}
		if mw.Type() == verbs.MWType1 {
			return slotBindType1
		}
		wr.BindMW = verbs.MWBindParams{MW: mw, RKey: w.RKey, MR: mr, Addr: w.RemoteAddr, Length: w.Length,
			Access: verbs.AccessFlags(w.Access)}
	case wr.Opcode == verbs.WRAtomicWrite:
		// The 8 bytes wait in the slot's compare_add until sent.
		sgl = append(sgl, verbs.SGE{Addr: q.inline.IOVA() + slotOff + swqeCompareAdd, Length: 8, LKey: q.inline.LKey()})
	case q.qp.Type() == verbs.QPTypeUD:
		q.sess.mu.RLock()
		ah := q.sess.ahs[w.AH]
		q.sess.mu.RUnlock()
		if ah == nil {
			return slotBad
		}
		wr.UD = verbs.UDParams{AH: ah.ah, RemoteQPN: w.RemoteQPN, RemoteQKey: w.RemoteQKey}
	}
	if wr.SendFlags&verbs.SendInline != 0 {
		if w.InlineLen > 0 {
			off := slotOff + nicproto.SWQESize + nicproto.SGESize*uint64(q.sq.maxSGE)
			sgl = append(sgl, verbs.SGE{Addr: q.inline.IOVA() + off, Length: w.InlineLen, LKey: q.inline.LKey()})
		}
	} else {
		for _, e := range q.sq.sges(slot, nicproto.SWQESize)[:w.NumSGE] {
			sgl = append(sgl, verbs.SGE{Addr: e.Addr, Length: e.Length, LKey: e.LKey})
		}
	}
	wr.SGList = sgl
	return slotPost
}

// swqeCompareAdd is the offset of compare_add in a send slot.
const swqeCompareAdd = uint64(unsafe.Offsetof(nicproto.SWQE{}.CompareAdd))

// bindType1 binds a type 1 window (ibv_bind_mw): QP.BindMW hands out the
// window's next rkey, which is the one libgoroce computed the same way
// (ibv_inc_rkey of the window's rkey) and returned to the application.
func (q *qpObj) bindType1(pos uint64) {
	w := (*nicproto.SWQE)(q.sq.slot(pos))
	mw, mr, ok := q.sess.bindObjects(w.MW, w.MR)
	if !ok {
		q.fail("bind of a window or region that does not exist")
		return
	}
	rkey, err := q.qp.BindMW(mw, verbs.MWBind{WRID: wridSend | pos, SendFlags: verbs.SendFlags(w.SendFlags),
		MR: mr, Addr: w.RemoteAddr, Length: w.Length, Access: verbs.AccessFlags(w.Access)})
	switch {
	case err != nil:
		q.fail(err.Error())
	case rkey != w.RKey:
		q.sess.srv.cfg.Logf("qp %#x: window bound with rkey %#x, the client expected %#x", q.qp.QPN(), rkey, w.RKey)
	}
}

// drainRecv hands the published receive slots to verbs, a list at a time.
// The caller holds q.rmu.
func (q *qpObj) drainRecv() {
	for {
		n, broken := q.rq.pending()
		if broken {
			q.fail("receive ring index out of range")
		}
		if n == 0 {
			return
		}
		start := q.rq.drained.Load()
		batch := int(min(n, uint64(len(q.rwrs))))
		k := 0
		for i := range batch {
			pos := start + uint64(i)
			slot := q.rq.slot(pos)
			w := (*nicproto.RWQE)(slot)
			if int(w.NumSGE) > q.rq.maxSGE {
				q.fail("malformed receive slot")
				continue
			}
			q.rq.wrid[pos%q.rq.entries].Store(w.WRID)
			r := &q.rwrs[k]
			r.WRID = wridRecv | pos
			r.SGList = r.SGList[:0]
			for _, e := range q.rq.sges(slot, nicproto.RWQESize)[:w.NumSGE] {
				r.SGList = append(r.SGList, verbs.SGE{Addr: e.Addr, Length: e.Length, LKey: e.LKey})
			}
			k++
		}
		q.rq.publishDrained(start + uint64(batch))
		wrs := q.rwrs[:k]
		for len(wrs) > 0 {
			k, err := q.qp.PostRecvList(wrs)
			if err == nil {
				break
			}
			q.fail(err.Error())
			wrs = wrs[k+1:]
		}
	}
}

// fail handles a work request verbs refused although libgoroce checked it
// (or a ring the client corrupted): like a NIC meeting a malformed WQE, it
// moves the QP to ERR, so that the requests queued before and after it
// complete with errors instead of waiting forever. The request itself is
// dropped.
func (q *qpObj) fail(why string) {
	if !q.broken.Swap(true) {
		q.sess.srv.cfg.Logf("qp %#x: %s: moving to ERR", q.qp.QPN(), why)
	}
	q.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)
}
