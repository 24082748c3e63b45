package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/goroce/goroce/internal/oob"
	"github.com/goroce/goroce/verbs"
)

// runBW is run_iter_bw: each QP keeps up to -t work requests outstanding,
// one in cqMod of them signaled (and the last), until -n per QP are done,
// or until -D seconds have passed (then every request is signaled, so that
// the run can stop after any of them). Times are taken when each work
// request is posted and when the completion covering it is polled. With -b
// in ib_send_bw the peer's messages arrive meanwhile, on the receive CQ.
func (s *side) runBW(ctx context.Context, size int) (result, error) {
	l := s.newBWLoop(size)
	recv := s.cfg.bidir && s.cfg.test.verb == verbSend
	st := s.newStall()
	defer st.done()
	st.progress()
	prog := s.newProgress(size)
	for {
		if !l.stopping && !l.deadline.IsZero() && time.Now().After(l.deadline) {
			l.stopping = true
		}
		if err := l.post(); err != nil {
			return result{}, err
		}
		finished := l.sent()
		if recv {
			n, err := pollAll(s.rcq, l.wc)
			if err != nil {
				return result{}, err
			}
			if err := s.takeRecvs(l.wc[:n], size, l.iters, l.got); err != nil {
				return result{}, err
			}
			if n > 0 {
				st.progress()
			}
			finished = finished && l.received()
		}
		if finished {
			break
		}
		var (
			n   int
			err error
		)
		if recv {
			// Both CQs need watching: poll, and sleep below.
			n, err = pollAll(s.cq, l.wc)
		} else {
			// Every QP's window is full or its run is over: a
			// completion is due.
			n, err = st.waitCQ(ctx, s.cq, l.wc, "completions")
		}
		if err != nil {
			return result{}, err
		}
		t := time.Now()
		l.complete(l.wc[:n], stampOf(t))
		if n > 0 {
			st.progress()
			prog.update(t, len(l.done))
		} else if err := st.idle(ctx, "completions"); err != nil {
			return result{}, err
		}
	}
	prog.finish()
	cpuEnd := cpuTime() // the reckoning below is not the transfer's
	s.perQP = append(s.perQP[:0], l.scnt...)
	// posted and done are paired by rank, as perftest's tposted and
	// tcompleted arrays are.
	r := bwResult(s.cfg, size, l.posted, l.done)
	r.qpBW = qpShares(r.bwAvg, l.ccnt)
	r.cpuEnd = cpuEnd
	return r, nil
}

// bwLoop is the state of one runBW: per QP the work requests posted (scnt)
// and completed (ccnt) and the messages received (got), and the times of
// every post and completion.
type bwLoop struct {
	s               *side
	iters, cqMod    int
	deadline        time.Time // -D; zero: run -n iterations
	stopping        bool      // the deadline has passed: post no more
	scnt, ccnt, got []int
	// tailSignaled: the QP's last posted work request is signaled, so
	// its completion covers all the QP's work (a -D run with -Q).
	tailSignaled []bool
	wrs          []verbs.SendWR // each QP's work request, reused
	list         []verbs.SendWR // -l: a post list
	posted, done []stamp
	wc           []verbs.WorkCompletion
}

func (s *side) newBWLoop(size int) *bwLoop {
	cfg := s.cfg
	nq := len(s.qps)
	l := &bwLoop{s: s, iters: cfg.iters, cqMod: cfg.cqMod(size)}
	if cfg.duration > 0 {
		l.iters = 1 << 40
		l.deadline = time.Now().Add(time.Duration(cfg.duration) * time.Second)
	}
	capHint := min(l.iters*nq, 1<<22)
	l.posted = make([]stamp, 0, capHint)
	l.done = make([]stamp, 0, capHint)
	if cfg.duration == 0 {
		// Touch their pages now: the kernel maps a fresh page at its
		// first store, and taking those faults in the timed loop
		// (one per 512 messages, each slice) slowed 2 M/s runs by a
		// few per cent. A timed run's arrays are sized for the
		// longest run and touched as they fill.
		clear(l.posted[:capHint])
		clear(l.done[:capHint])
	}
	l.scnt, l.ccnt, l.got = make([]int, nq), make([]int, nq), make([]int, nq)
	l.tailSignaled = make([]bool, nq)
	l.wrs = make([]verbs.SendWR, nq)
	for q := range nq {
		l.wrs[q] = s.buildWR(q, size)
	}
	l.list = make([]verbs.SendWR, 0, max(cfg.postList, 1))
	l.wc = make([]verbs.WorkCompletion, 64)
	return l
}

// post fills every QP's window of -t outstanding work requests, one post
// at a time or (-l) a list per post, one batch of system calls.
func (l *bwLoop) post() error {
	cfg := l.s.cfg
	for q, qp := range l.s.qps {
		if l.stopping && !l.tailSignaled[q] && l.scnt[q] > l.ccnt[q] && l.scnt[q]-l.ccnt[q] < cfg.txDepth {
			// A moderated -D run has stopped after an unsignaled
			// request, whose completion would never come: one more,
			// signaled, ends the QP's work (perftest stops counting
			// at the deadline instead; this run waits for its
			// requests, so that the data path ends idle).
			if err := l.postOne(q, qp, true); err != nil {
				return err
			}
			continue
		}
		for !l.stopping && l.scnt[q] < l.iters && l.scnt[q]-l.ccnt[q] < cfg.txDepth {
			if cfg.postList > 1 {
				n := min(cfg.postList, l.iters-l.scnt[q], cfg.txDepth-(l.scnt[q]-l.ccnt[q]))
				l.list = l.list[:n]
				for i := range l.list {
					l.list[i] = l.wrs[q]
					prepareWR(&l.list[i], q, l.scnt[q]+1+i, l.cqMod, l.iters)
				}
				l.tailSignaled[q] = l.list[n-1].SendFlags&verbs.SendSignaled != 0
				t := now()
				for range n {
					l.posted = append(l.posted, t)
				}
				if _, err := qp.PostSendList(l.list); err != nil {
					return err
				}
				l.scnt[q] += n
				continue
			}
			if err := l.postOne(q, qp, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// postOne posts QP q's next work request, signaled if its number says so
// or signal is set.
func (l *bwLoop) postOne(q int, qp *verbs.QP, signal bool) error {
	wr := &l.wrs[q]
	k := l.scnt[q] + 1
	prepareWR(wr, q, k, l.cqMod, l.iters)
	if signal {
		wr.SendFlags |= verbs.SendSignaled
	}
	l.tailSignaled[q] = wr.SendFlags&verbs.SendSignaled != 0
	l.posted = append(l.posted, now())
	if err := qp.PostSend(wr); err != nil {
		return err
	}
	l.scnt[q] = k
	return nil
}

// sent reports whether every QP has posted all its work requests (or the
// deadline has passed) and seen them complete.
func (l *bwLoop) sent() bool {
	for q := range l.scnt {
		if l.scnt[q] != l.ccnt[q] || (l.scnt[q] < l.iters && !l.stopping) {
			return false
		}
	}
	return true
}

// received reports whether every QP has received -n messages.
func (l *bwLoop) received() bool {
	for _, g := range l.got {
		if g < l.iters {
			return false
		}
	}
	return true
}

// complete counts the work requests the completions wc cover, each
// signaled one covering its QP's unsignaled ones before it, all done now.
func (l *bwLoop) complete(wc []verbs.WorkCompletion, at stamp) {
	for _, c := range wc {
		q, k := int(c.WRID>>48), int(c.WRID&(1<<48-1))
		for l.ccnt[q] < k {
			l.done = append(l.done, at)
			l.ccnt[q]++
		}
	}
}

// takeRecvs counts the received messages of the completions wc in got, per
// QP, checks their length and posts a receive in place of each, up to
// iters per QP in the size.
func (s *side) takeRecvs(wc []verbs.WorkCompletion, size, iters int, got []int) error {
	for _, c := range wc {
		q := int(c.WRID >> 48)
		if int(c.ByteLen) != size+s.recvExtra() {
			return fmt.Errorf("received %d bytes, want %d", c.ByteLen, size+s.recvExtra())
		}
		got[q]++
		if s.posted[q] < iters {
			if err := s.postRecv(q, size); err != nil {
				return err
			}
		}
	}
	return nil
}

// runRecvBW is the ib_send_bw server (run_iter_bw_server): it keeps the
// receives posted and counts the messages. Like perftest it has no post
// times, so its peak is 0 and its average runs from the first message to
// the last.
func (s *side) runRecvBW(ctx context.Context, size int) (result, error) {
	nq := len(s.qps)
	want := s.cfg.iters
	got := make([]int, nq)
	wc := make([]verbs.WorkCompletion, 64)
	var first, last time.Time
	total := 0
	st := s.newStall()
	defer st.done()
	st.progress()
	for total < want*nq {
		n, err := st.waitCQ(ctx, s.rcq, wc, "messages")
		if err != nil {
			return result{}, err
		}
		now := time.Now()
		st.progress()
		if first.IsZero() {
			first = now
		}
		last = now
		if err := s.takeRecvs(wc[:n], size, want, got); err != nil {
			return result{}, err
		}
		total += n
	}
	r := result{size: size, iters: uint64(total), p9999: math.NaN(), p50: math.NaN()}
	span := last.Sub(first).Seconds()
	if span > 0 {
		r.bwAvg = float64(size) * float64(total) / span / s.cfg.unitFactor()
		r.msgRate = float64(total) / span / 1e6
	}
	r.bytes = float64(size) * float64(total)
	r.hasBW = true
	return r, nil
}

// prepareRecvs posts the receives of a send test before its start barrier
// (ctx_set_recv_wqes): on the server of ib_send_bw and on both sides of
// ib_send_lat, at most -n (and the RX depth) per QP.
func (s *side) prepareRecvs(size int) error {
	if !s.cfg.test.lat && s.role != oob.Server && !s.cfg.bidir {
		return nil
	}
	if s.posted == nil {
		s.posted = make([]int, len(s.qps))
	}
	for q := range s.qps {
		s.posted[q] = 0
		for range min(s.cfg.rxDepth(), s.cfg.iters) {
			if err := s.postRecv(q, size); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *side) postRecv(q, size int) error {
	s.posted[q]++
	wr := verbs.RecvWR{WRID: uint64(q)<<48 | uint64(s.posted[q]), SGList: []verbs.SGE{s.mr.SGE(s.recvSlot(q), size+s.recvExtra())}}
	return s.qps[q].PostRecv(&wr)
}

// qpShares splits the run's average bandwidth bw between the QPs in
// proportion to the work requests each completed (done): each QP's
// bandwidth over the run's span. nil for a run of one QP.
func qpShares(bw float64, done []int) []float64 {
	total := 0
	for _, n := range done {
		total += n
	}
	if len(done) < 2 || total == 0 {
		return nil
	}
	out := make([]float64, len(done))
	for q, n := range done {
		out[q] = bw * float64(n) / float64(total)
	}
	return out
}
