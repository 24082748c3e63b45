package main

import (
	"context"
	"fmt"
	"time"

	"github.com/goroce/goroce/internal/oob"
	"github.com/goroce/goroce/verbs"
)

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
	posted := make([]stamp, 0, min(iters, 1<<22))
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
		posted = append(posted, now())
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
	posted := make([]stamp, 0, iters+1)
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
			posted = append(posted, now())
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
	posted := make([]stamp, 0, iters+1)
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
			posted = append(posted, now())
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
