package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/oob"
	"github.com/goroce/goroce/verbs"
)

// stallTimeout is how long a run waits without any progress (no
// completion, no byte changing) before it gives up on the peer.
const stallTimeout = 10 * time.Second

// ucSettle is how long --check waits for the last UC WRITEs to land on
// the passive side, which nothing tells when they have.
const ucSettle = 5 * time.Second

// awaitUCWrites waits, before --check reads what the peer's UC WRITEs
// wrote on QP q, until the QP has taken in every packet of the run. A UC
// WRITE completes at the writer once sent, so the barrier that follows may
// overtake its packets. The QP's packet counter is read under the lock the
// device holds while it places a packet: once it shows them all, the bytes
// are settled and ours to read. With -D the count is not known: it waits
// until the counter has not moved for a while. A packet that never comes
// leaves it waiting ucSettle, and the check then fails.
func (s *side) awaitUCWrites(q int) {
	want := uint64(0)
	if s.cfg.duration == 0 {
		mtu := s.mtu.Bytes()
		for _, size := range s.sizes() {
			want += uint64(s.cfg.iters) * uint64(max(1, (size+mtu-1)/mtu))
		}
	}
	deadline := time.Now().Add(ucSettle)
	last, since := s.qps[q].Counters().RcvdPkts, time.Now()
	for time.Now().Before(deadline) {
		n := s.qps[q].Counters().RcvdPkts
		switch {
		case want > 0 && n >= want:
			return
		case n != last:
			last, since = n, time.Now()
		case want == 0 && time.Since(since) > 100*time.Millisecond:
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// idleSleep is the pause of a waiting loop after spinRounds empty polls.
const idleSleep = time.Microsecond

// randPSN returns a random 24-bit starting PSN, as perftest's
// lrand48() & 0xffffff.
func randPSN() uint32 { return rand.Uint32() & 0xffffff }

// pattern is the byte at offset off of the data a QP sends, seeded with the
// QP's starting PSN, which the peer learns from the key line: so --check
// can validate the data without another exchange.
func pattern(seed uint32, off int) byte {
	x := uint32(off)*2654435761 + seed*40503
	return byte(x>>24) ^ byte(x>>8)
}

func fillPattern(b []byte, seed uint32) {
	for i := range b {
		b[i] = pattern(seed, i)
	}
}

// fillForCheck fills the memory the peer will read, or that we will send,
// with the pattern seeded by the QP's PSN.
func (s *side) fillForCheck() error {
	ms := s.maxSize()
	for i := range s.qps {
		seed := s.local[i].PSN
		switch s.cfg.test.verb {
		case verbWrite, verbSend:
			fillPattern(s.buf[i*s.slot:i*s.slot+ms], seed)
		case verbRead:
			fillPattern(s.buf[(s.cfg.qps+i)*s.slot:(s.cfg.qps+i)*s.slot+ms], seed)
		}
	}
	return nil
}

// sendSlot and recvSlot are the offsets of QP i's two areas in the buffer.
func (s *side) sendSlot(i int) int { return i * s.slot }
func (s *side) recvSlot(i int) int { return (s.cfg.qps + i) * s.slot }

// cpuTime returns the process's user+system CPU time (getrusage).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// traffic runs this side's part of one message size and records the result.
func (s *side) traffic(ctx context.Context, size int) error {
	t := s.cfg.test
	var r result
	var err error
	cpu0 := cpuTime()
	switch {
	case !t.lat && t.verb == verbSend && s.cfg.bidir:
		r, err = s.runBW(ctx, size)
	case !t.lat && t.verb == verbSend && s.role == oob.Server:
		r, err = s.runRecvBW(ctx, size)
	case !t.lat:
		r, err = s.runBW(ctx, size)
	case t.verb == verbWrite:
		r, err = s.runLatWrite(ctx, size)
	case t.verb == verbSend:
		r, err = s.runLatSend(ctx, size)
	default:
		r, err = s.runLat(ctx, size)
	}
	if err != nil {
		return fmt.Errorf("%d-byte messages: %w", size, err)
	}
	r.cpu = cpuTime() - cpu0
	r.side = s.role.String()
	if s.cfg.bidir {
		s.pending = append(s.pending, r)
		return nil
	}
	s.addResult(r)
	return nil
}

// pollAll polls cq into wc and fails on an unsuccessful completion.
func pollAll(cq *verbs.CQ, wc []verbs.WorkCompletion) (int, error) {
	n, err := cq.Poll(wc)
	if err != nil {
		return 0, err
	}
	for _, c := range wc[:n] {
		if c.Status != verbs.WCSuccess {
			return 0, fmt.Errorf("completion error: %v (wr_id %#x, vendor_err %#x)", c.Status, c.WRID, c.VendorErr)
		}
	}
	return n, nil
}

// stall tracks progress and reports a run that has none for stallTimeout.
type stall struct {
	last  time.Time
	spins int
	busy  bool // --busy-poll: never yield or sleep

	// wctx bounds the waits of waitCQ; it is renewed every waitSlice,
	// so one context serves many waits.
	wctx    context.Context
	wcancel context.CancelFunc
}

// newStall returns the progress tracker of a traffic loop, busy-polling
// with --busy-poll.
func (s *side) newStall() stall { return stall{busy: s.cfg.busyPoll} }

func (st *stall) progress() { st.last, st.spins = time.Now(), 0 }

// idle is called when a poll found nothing. Unless busy polling, it sleeps
// at once: the device's receive goroutines wait for packets in Go's
// network poller, which a processor only consults when it has nothing else
// to run, so any waiting loop that keeps its processor (spinning, or
// yielding with runtime.Gosched, which never polls the network) delays
// every packet whenever all processors are busy: on two cores in
// --loopback mode, where both sides wait at once, 64 yields before the
// first sleep made write_lat's median half round trip 22 µs instead of
// 12 µs. Every few thousand rounds it checks ctx and the clock.
func (st *stall) idle(ctx context.Context, what string) error {
	st.spins++
	if st.busy {
		if st.spins%busyCheckRounds != 0 {
			return nil
		}
		return st.check(ctx, what)
	}
	time.Sleep(idleSleep)
	if st.spins%1024 != 0 {
		return nil
	}
	return st.check(ctx, what)
}

// waitWrite waits, unless busy polling (then it is idle), until the
// count of remote stores into mr differs from seen. It fails after
// stallTimeout without progress, or when ctx ends.
func (st *stall) waitWrite(ctx context.Context, mr *verbs.MR, seen uint64, what string) error {
	if st.busy {
		return st.idle(ctx, what)
	}
	return st.sliced(ctx, what, func(c context.Context) error {
		_, err := mr.WaitRemoteWrite(c, seen)
		return err
	})
}

// waitSlice is how long one wait context of waitCQ lasts: the longest a
// stalled run waits before it looks at the clock again.
const waitSlice = time.Second

// waitCQ waits for completions on cq and fails on an unsuccessful one.
// Unless busy polling, it parks in CQ.Wait, woken by the device when it
// adds a completion: no timer, no processor held. It fails after
// stallTimeout without progress, or when ctx ends.
func (st *stall) waitCQ(ctx context.Context, cq *verbs.CQ, wc []verbs.WorkCompletion, what string) (int, error) {
	if st.busy {
		for {
			n, err := pollAll(cq, wc)
			if n > 0 || err != nil {
				return n, err
			}
			if err := st.idle(ctx, what); err != nil {
				return 0, err
			}
		}
	}
	var n int
	err := st.sliced(ctx, what, func(c context.Context) (err error) {
		if n, err = cq.Wait(c, wc); n > 0 {
			return nil // completions come first, whatever the context
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	for _, c := range wc[:n] {
		if c.Status != verbs.WCSuccess {
			return 0, fmt.Errorf("completion error: %v (wr_id %#x, vendor_err %#x)", c.Status, c.WRID, c.VendorErr)
		}
	}
	return n, nil
}

// sliced runs wait with a context that ends after waitSlice at most, so
// that a stalled run is noticed: each time the slice runs out (not ctx) it
// fails after stallTimeout without progress, or renews the slice and waits
// again. It returns wait's first other result.
func (st *stall) sliced(ctx context.Context, what string, wait func(context.Context) error) error {
	for {
		if st.wctx == nil {
			st.wctx, st.wcancel = context.WithTimeout(ctx, waitSlice)
		}
		err := wait(st.wctx)
		if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return err
		}
		st.wcancel()
		st.wctx = nil
		if err := st.check(ctx, what); err != nil {
			return err
		}
	}
}

// done releases the wait context; a traffic loop defers it.
func (st *stall) done() {
	if st.wcancel != nil {
		st.wcancel()
		st.wctx, st.wcancel = nil, nil
	}
}

// busyCheckRounds is how often a busy-polling loop looks at ctx and the
// clock: rarely enough to cost nothing next to the polls, often enough to
// notice a stall or an interrupt within a few milliseconds.
const busyCheckRounds = 1 << 14

// check fails when ctx is done or the run has made no progress for
// stallTimeout.
func (st *stall) check(ctx context.Context, what string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if time.Since(st.last) > stallTimeout {
		return fmt.Errorf("no progress for %v waiting for %s: is the peer still there?", stallTimeout, what)
	}
	return nil
}

// buildWR is the send work request QP i posts for one message.
func (s *side) buildWR(i, size int) verbs.SendWR {
	r := s.remote[i]
	wr := verbs.SendWR{SGList: []verbs.SGE{s.mr.SGE(s.sendSlot(i), size)}}
	switch s.cfg.test.verb {
	case verbWrite:
		wr.Opcode = verbs.WRRDMAWrite
		wr.RDMA = verbs.RDMAParams{RemoteAddr: r.VAddr, RKey: r.RKey}
	case verbRead:
		wr.Opcode = verbs.WRRDMARead
		wr.RDMA = verbs.RDMAParams{RemoteAddr: r.VAddr, RKey: r.RKey}
	case verbSend:
		wr.Opcode = verbs.WRSend
		if s.cfg.conn == "UD" {
			wr.UD = verbs.UDParams{AH: s.ahs[i], RemoteQPN: r.QPN, RemoteQKey: udQKey}
		}
	case verbAtomic:
		wr.Opcode = verbs.WRAtomicFetchAndAdd
		if s.cfg.atomicType == "CMP_AND_SWAP" {
			wr.Opcode = verbs.WRAtomicCmpAndSwp
		}
		wr.Atomic = verbs.AtomicParams{RemoteAddr: r.VAddr, RKey: r.RKey, CompareAdd: 1}
	}
	if (wr.Opcode == verbs.WRRDMAWrite || wr.Opcode == verbs.WRSend) && size <= s.cfg.inline {
		wr.SendFlags |= verbs.SendInline
	}
	return wr
}

// runBW is run_iter_bw: each QP keeps up to -t work requests outstanding,
// one in cqMod of them signaled (and the last), until -n per QP are done,
// or until -D seconds have passed (then every request is signaled, so that
// the run can stop after any of them). Times are taken when each work
// request is posted and when the completion covering it is polled.
func (s *side) runBW(ctx context.Context, size int) (result, error) {
	cfg := s.cfg
	nq := len(s.qps)
	iters := cfg.iters
	cqMod := cfg.cqMod(size)
	var deadline time.Time
	if cfg.duration > 0 {
		iters = 1 << 40
		cqMod = 1
		deadline = time.Now().Add(time.Duration(cfg.duration) * time.Second)
	}
	capHint := min(iters*nq, 1<<22)
	posted := make([]time.Time, 0, capHint)
	done := make([]time.Time, 0, capHint)
	scnt := make([]int, nq)
	ccnt := make([]int, nq)
	wrs := make([]verbs.SendWR, nq)
	for q := range nq {
		wrs[q] = s.buildWR(q, size)
	}
	list := make([]verbs.SendWR, 0, max(cfg.postList, 1))
	recv := cfg.bidir && cfg.test.verb == verbSend
	got := make([]int, nq)
	wc := make([]verbs.WorkCompletion, 64)
	st := s.newStall()
	defer st.done()
	st.progress()
	stopping := false
	prog := s.newProgress(size)
	for {
		if !stopping && !deadline.IsZero() && time.Now().After(deadline) {
			stopping = true
		}
		finished := 0
		for q := range nq {
			for !stopping && scnt[q] < iters && scnt[q]-ccnt[q] < cfg.txDepth {
				if cfg.postList > 1 {
					// -l: a list of WRs in one post, one batch of
					// system calls.
					n := min(cfg.postList, iters-scnt[q], cfg.txDepth-(scnt[q]-ccnt[q]))
					list = list[:n]
					for i := range list {
						list[i] = wrs[q]
						prepareWR(&list[i], q, scnt[q]+1+i, cqMod, iters)
					}
					now := time.Now()
					for range n {
						posted = append(posted, now)
					}
					if _, err := s.qps[q].PostSendList(list); err != nil {
						return result{}, err
					}
					scnt[q] += n
					continue
				}
				wr := &wrs[q]
				k := scnt[q] + 1
				prepareWR(wr, q, k, cqMod, iters)
				posted = append(posted, time.Now())
				if err := s.qps[q].PostSend(wr); err != nil {
					return result{}, err
				}
				scnt[q] = k
			}
			if scnt[q] == ccnt[q] && (scnt[q] >= iters || stopping) {
				finished++
			}
		}
		if recv {
			// -b in ib_send_bw: the peer's messages arrive meanwhile.
			n, err := pollAll(s.rcq, wc)
			if err != nil {
				return result{}, err
			}
			for _, c := range wc[:n] {
				q := int(c.WRID >> 48)
				if int(c.ByteLen) != size+s.recvExtra() {
					return result{}, fmt.Errorf("received %d bytes, want %d", c.ByteLen, size+s.recvExtra())
				}
				got[q]++
				if s.posted[q] < iters {
					if err := s.postRecv(q, size); err != nil {
						return result{}, err
					}
				}
			}
			if n > 0 {
				st.progress()
			}
			for q := range nq {
				if got[q] < iters {
					finished = 0
				}
			}
		}
		if finished == nq {
			break
		}
		var (
			n   int
			err error
		)
		if recv {
			// Both CQs need watching: poll, and sleep below.
			n, err = pollAll(s.cq, wc)
		} else {
			// Every QP's window is full or its run is over: a
			// completion is due.
			n, err = st.waitCQ(ctx, s.cq, wc, "completions")
		}
		if err != nil {
			return result{}, err
		}
		now := time.Now()
		for _, c := range wc[:n] {
			q, k := int(c.WRID>>48), int(c.WRID&(1<<48-1))
			for ccnt[q] < k {
				done = append(done, now)
				ccnt[q]++
			}
		}
		if n > 0 {
			st.progress()
			prog.update(now, len(done))
		} else if err := st.idle(ctx, "completions"); err != nil {
			return result{}, err
		}
	}
	prog.finish()
	s.perQP = append(s.perQP[:0], scnt...)
	// posted and done are paired by rank, as perftest's tposted and
	// tcompleted arrays are.
	return bwResult(cfg, size, posted, done), nil
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
		for _, c := range wc[:n] {
			q := int(c.WRID >> 48)
			if int(c.ByteLen) != size+s.recvExtra() {
				return result{}, fmt.Errorf("received %d bytes, want %d", c.ByteLen, size+s.recvExtra())
			}
			got[q]++
			total++
			if s.posted[q] < want {
				if err := s.postRecv(q, size); err != nil {
					return result{}, err
				}
			}
		}
	}
	r := result{size: size, iters: uint64(total), p9999: math.NaN()}
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

// runLat is run_iter_lat, the ib_read_lat and ib_atomic_lat client: one
// signaled request at a time, timed from post to post (a full round trip).
func (s *side) runLat(ctx context.Context, size int) (result, error) {
	wr := s.buildWR(0, size)
	wr.SendFlags |= verbs.SendSignaled
	iters := s.cfg.iters
	var deadline time.Time
	if s.cfg.duration > 0 {
		iters = 1 << 30
		deadline = time.Now().Add(time.Duration(s.cfg.duration) * time.Second)
	}
	posted := make([]time.Time, 0, min(iters, 1<<22))
	wc := make([]verbs.WorkCompletion, 1)
	st := s.newStall()
	defer st.done()
	prog := s.newProgress(size)
	for k := range iters {
		if !deadline.IsZero() && time.Now().After(deadline) {
			break
		}
		if wr.Opcode == verbs.WRAtomicCmpAndSwp {
			wr.Atomic.CompareAdd, wr.Atomic.Swap = uint64(k), uint64(k+1)
		}
		wr.WRID = uint64(k + 1)
		posted = append(posted, time.Now())
		if err := s.qps[0].PostSend(&wr); err != nil {
			return result{}, err
		}
		st.progress()
		if _, err := st.waitCQ(ctx, s.cq, wc, "a completion"); err != nil {
			return result{}, err
		}
		prog.update(time.Now(), k+1)
	}
	prog.finish()
	return latResult(s.cfg, size, posted, 1), nil
}

// runLatWrite is run_iter_lat_write, both sides of ib_write_lat: each side
// writes a message whose last byte is its count into the peer's buffer and
// waits until the peer's count shows up in its own; the server answers.
//
// Waiting reads memory that the device's receive goroutine writes. Each
// round first reads the region's count of remote stores and polls the CQ,
// the points where the device publishes its memory stores (see verbs' race
// notes), then reads the byte. Unless busy polling, it then parks in
// MR.WaitRemoteWrite until the next store: sleeping between looks instead
// (time.Sleep(1µs)) left one round in a hundred to a timer wake-up of
// about 85 µs, the p99.9 of the run.
func (s *side) runLatWrite(ctx context.Context, size int) (result, error) {
	wr := s.buildWR(0, size)
	wr.SendFlags |= verbs.SendSignaled
	iters := s.cfg.iters
	postIdx := s.sendSlot(0) + size - 1
	pollIdx := s.recvSlot(0) + size - 1
	posted := make([]time.Time, 0, iters+1)
	wc := make([]verbs.WorkCompletion, 1)
	st := s.newStall()
	defer st.done()
	prog := s.newProgress(size)
	var scnt, rcnt, ccnt int
	for scnt < iters || ccnt < iters || rcnt < iters {
		if rcnt < iters && !(scnt < 1 && s.role == oob.Server) {
			rcnt++
			st.progress()
			for {
				// The count first: a store after it changes it,
				// so the wait below cannot miss the byte.
				seen := s.mr.RemoteWrites()
				_, _ = s.cq.Poll(nil)
				if s.buf[pollIdx] == byte(rcnt) {
					break
				}
				if err := st.waitWrite(ctx, s.mr, seen, "the peer's write"); err != nil {
					return result{}, err
				}
			}
		}
		if scnt < iters {
			posted = append(posted, time.Now())
			scnt++
			s.buf[postIdx] = byte(scnt)
			wr.WRID = uint64(scnt)
			if err := s.qps[0].PostSend(&wr); err != nil {
				return result{}, err
			}
		}
		if ccnt < iters {
			st.progress()
			if _, err := st.waitCQ(ctx, s.cq, wc, "a completion"); err != nil {
				return result{}, err
			}
			ccnt++
		}
		prog.update(time.Now(), scnt)
	}
	prog.finish()
	return latResult(s.cfg, size, posted, 2), nil
}

// runLatSend is run_iter_lat_send, both sides of ib_send_lat: the client
// sends first, the server answers each message it receives.
func (s *side) runLatSend(ctx context.Context, size int) (result, error) {
	wr := s.buildWR(0, size)
	wr.SendFlags |= verbs.SendSignaled
	iters := s.cfg.iters
	posted := make([]time.Time, 0, iters+1)
	wc := make([]verbs.WorkCompletion, 1)
	st := s.newStall()
	defer st.done()
	prog := s.newProgress(size)
	var scnt, rcnt int
	for scnt < iters || rcnt < iters {
		if rcnt < iters && !(scnt < 1 && s.role == oob.Client) {
			st.progress()
			if _, err := st.waitCQ(ctx, s.rcq, wc, "the peer's message"); err != nil {
				return result{}, err
			}
			if int(wc[0].ByteLen) != size+s.recvExtra() {
				return result{}, fmt.Errorf("received %d bytes, want %d", wc[0].ByteLen, size+s.recvExtra())
			}
			rcnt++
			if s.posted[0] < iters {
				if err := s.postRecv(0, size); err != nil {
					return result{}, err
				}
			}
		}
		if scnt < iters {
			posted = append(posted, time.Now())
			scnt++
			wr.WRID = uint64(scnt)
			if err := s.qps[0].PostSend(&wr); err != nil {
				return result{}, err
			}
			st.progress()
			if _, err := st.waitCQ(ctx, s.cq, wc, "a completion"); err != nil {
				return result{}, err
			}
		}
		prog.update(time.Now(), scnt)
	}
	prog.finish()
	return latResult(s.cfg, size, posted, 2), nil
}

// checkData validates, with --check, what this side can see of the data
// after the last size: the bytes written, read or sent into its memory
// carry the pattern of the peer's QP, and atomics left the expected value.
func (s *side) checkData() error {
	if !s.cfg.check {
		return nil
	}
	_, _ = s.cq.Poll(nil) // synchronise with the device's memory stores
	cfg := s.cfg
	t := cfg.test
	size := s.maxSize()
	// In ib_write_lat the sender's last byte of each size carries its
	// count, so with -a the bytes at 2^k-1 hold counts, not the pattern.
	countByte := func(j int) bool { return t.lat && t.verb == verbWrite && (j+1)&j == 0 }
	region := func(off, n int, seed uint32) error {
		for j := range n {
			if got, want := s.buf[off+j], pattern(seed, j); got != want && !countByte(j) {
				return fmt.Errorf("check: byte %d is %#02x, want %#02x", j, got, want)
			}
		}
		return nil
	}
	checked := false
	for q := range s.qps {
		peer := s.remote[q].PSN
		var err error
		switch {
		case t.verb == verbWrite && t.lat:
			// The last byte carries the count.
			err = region(s.recvSlot(q), size-1, peer)
			if err == nil && s.buf[s.recvSlot(q)+size-1] != byte(cfg.iters) {
				err = fmt.Errorf("check: the count byte is %d, want %d", s.buf[s.recvSlot(q)+size-1], byte(cfg.iters))
			}
			checked = true
		case t.verb == verbWrite && (s.role == oob.Server || cfg.bidir):
			if cfg.conn == "UC" {
				s.awaitUCWrites(q)
			}
			err, checked = region(s.recvSlot(q), size, peer), true
		case t.verb == verbSend && (s.role == oob.Server || t.lat || cfg.bidir):
			// After the GRH with UD.
			err, checked = region(s.recvSlot(q)+s.recvExtra(), size, peer), true
		case t.verb == verbRead && (s.role == oob.Client || cfg.bidir):
			err, checked = region(s.sendSlot(q), size, peer), true
		case t.verb == verbAtomic && (s.role == oob.Client || cfg.bidir):
			// Each atomic returned the value before it; the last one
			// returned the number of atomics before it on this QP.
			n := s.atomicsDone(q)
			if got := binary.NativeEndian.Uint64(s.buf[s.sendSlot(q):]); got != uint64(n-1) {
				err = fmt.Errorf("check: the last atomic returned %d, want %d", got, n-1)
			}
			if err == nil && cfg.bidir && cfg.duration == 0 {
				err = s.checkAtomicTarget(q)
			}
			checked = true
		case t.verb == verbAtomic && s.role == oob.Server && !t.lat && cfg.duration == 0:
			want := uint64(cfg.iters)
			if got := binary.NativeEndian.Uint64(s.buf[s.recvSlot(q):]); got != want {
				err = fmt.Errorf("check: the target holds %d after the atomics, want %d", got, want)
			}
			checked = true
		}
		if err != nil {
			return fmt.Errorf("QP %d: %w", q, err)
		}
	}
	s.checked = checked
	return nil
}

// atomicsDone is how many atomics QP q ran in the last run.
func (s *side) atomicsDone(q int) int {
	if q < len(s.perQP) {
		return s.perQP[q]
	}
	if q == 0 && len(s.results) > 0 {
		return int(s.results[len(s.results)-1].iters) // runLat
	}
	return 0
}

// checkAtomicTarget checks the 8 bytes the peer's atomics on QP q ran on:
// each added 1, or swapped in one more than it found.
func (s *side) checkAtomicTarget(q int) error {
	want := uint64(s.cfg.iters)
	if got := binary.NativeEndian.Uint64(s.buf[s.recvSlot(q):]); got != want {
		return fmt.Errorf("check: the target holds %d after the atomics, want %d", got, want)
	}
	return nil
}

// prepareWR makes wr the k-th work request (from 1) of QP q: its WRID, a
// signaled completion every cqMod requests and on the last, and for a
// compare-and-swap the operands that chain the values (k-1 → k).
func prepareWR(wr *verbs.SendWR, q, k, cqMod, iters int) {
	wr.WRID = uint64(q)<<48 | uint64(k)
	wr.SendFlags &^= verbs.SendSignaled
	if k%cqMod == 0 || k == iters {
		wr.SendFlags |= verbs.SendSignaled
	}
	if wr.Opcode == verbs.WRAtomicCmpAndSwp {
		wr.Atomic.CompareAdd, wr.Atomic.Swap = uint64(k-1), uint64(k)
	}
}
