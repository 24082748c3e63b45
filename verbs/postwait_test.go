package verbs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// addQP returns e with a second RC QP, in RESET, on the same PD, buffer
// and CQ.
func addQP(t *testing.T, e *rdmatest.End) *rdmatest.End {
	t.Helper()
	e2 := *e
	e2.QP = rdmatest.QP(t, e.PD, verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: e.CQ, RecvCQ: e.CQ, Cap: rdmatest.DefaultCap})
	return &e2
}

// TestPostSendWaitSharedCQ runs PostSendWait from several goroutines on two
// QPs that share one CQ with the receives of one of them, which another
// goroutine collects with Wait: each call gets its own completion, and the
// receives all stay in the CQ for Wait.
func TestPostSendWaitSharedCQ(t *testing.T) {
	server, client := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	server2, client2 := addQP(t, server), addQP(t, client)
	rdmatest.Connect(t, server2, client2, rdmatest.DefaultLink(), rdmatest.DefaultLink())
	ctx := testkit.Context(t)
	for i := range server.Buf {
		server.Buf[i] = byte(i * 7)
	}
	remote := server.MR.Remote()

	const recvs = 32
	for i := range recvs {
		if err := client.QP.PostRecv(&verbs.RecvWR{WRID: uint64(1000 + i), SGList: []verbs.SGE{client.MR.SGE(60000+i*16, 16)}}); err != nil {
			t.Fatal(err)
		}
	}

	var wg sync.WaitGroup
	errs := make(chan error, 16)
	const perCaller = 40
	for g := range 4 {
		qp := []*verbs.QP{client.QP, client2.QP}[g%2]
		wg.Go(func() {
			for i := range perCaller {
				off := (g*perCaller + i) * 64
				wr, err := remote.Read(off, client.MR.SGE(off, 64))
				if err != nil {
					errs <- err
					return
				}
				wr.WRID = uint64(g<<16 | i)
				wc, err := qp.PostSendWait(ctx, &wr)
				if err != nil || wc.WRID != wr.WRID || wc.QPNum != qp.QPN() {
					errs <- fmt.Errorf("caller %d read %d: %+v, %v", g, i, wc, err)
					return
				}
				if !bytes.Equal(client.Buf[off:off+64], server.Buf[off:off+64]) {
					errs <- fmt.Errorf("caller %d read %d: wrong bytes", g, i)
					return
				}
			}
		})
	}
	received := map[uint64]bool{}
	wg.Go(func() {
		wcs := make([]verbs.WorkCompletion, 8)
		for len(received) < recvs {
			n, err := client.CQ.Wait(ctx, wcs)
			if err != nil {
				errs <- err
				return
			}
			for _, wc := range wcs[:n] {
				if wc.Opcode != verbs.WCRecv || wc.Err() != nil || received[wc.WRID] || wc.WRID < 1000 || wc.WRID >= 1000+recvs {
					errs <- fmt.Errorf("Wait got %+v", wc)
					return
				}
				received[wc.WRID] = true
			}
		}
	})
	for i := range recvs {
		copy(server.Buf[50000:], fmt.Sprintf("msg %02d", i))
		wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SGList: []verbs.SGE{server.MR.SGE(50000, 6)}}
		if _, err := server.QP.PostSendWait(ctx, &wr); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n, _ := client.CQ.Poll(make([]verbs.WorkCompletion, 1)); n != 0 {
		t.Error("a claimed completion reached the CQ")
	}
}

// rnrStall posts, through PostSendWait on its own goroutine, a SEND that
// the server, which has no receive posted, answers with RNR NAKs forever
// (rnr_retry 7). It returns once the server has refused it at least once.
func rnrStall(t *testing.T, ctx context.Context, server, client *rdmatest.End) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		wr := verbs.SendWR{WRID: 77, Opcode: verbs.WRSend, SGList: []verbs.SGE{client.MR.SGE(0, 8)}}
		_, err := client.QP.PostSendWait(ctx, &wr)
		done <- err
	}()
	for server.QP.Counters().SendRNRErr == 0 {
		select {
		case err := <-done:
			t.Fatalf("PostSendWait returned before any RNR NAK: %v", err)
		case <-ctx.Done():
			t.Fatal("no RNR NAK")
		case <-time.After(time.Millisecond):
		}
	}
	return done
}

// TestPostSendWaitCancel ends a PostSendWait with its context: the request
// stays posted, and its completion goes to the CQ with the caller's WRID.
func TestPostSendWaitCancel(t *testing.T) {
	server, client := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	ctx := testkit.Context(t)
	waitCtx, cancel := context.WithCancel(ctx)
	done := rnrStall(t, waitCtx, server, client)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("PostSendWait after cancel: %v", err)
	}
	if err := server.QP.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{server.MR.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	wcs := make([]verbs.WorkCompletion, 1)
	if _, err := client.CQ.Wait(ctx, wcs); err != nil || wcs[0].WRID != 77 || wcs[0].Err() != nil || wcs[0].Opcode != verbs.WCSend {
		t.Fatalf("the abandoned SEND's completion: %+v, %v", wcs[0], err)
	}
}

// TestPostSendWaitQPGone ends a PostSendWait whose QP is reset or destroyed,
// which discards its request without a completion.
func TestPostSendWaitQPGone(t *testing.T) {
	for _, c := range []struct {
		name string
		end  func(qp *verbs.QP) error
		want error
	}{
		{"reset", func(qp *verbs.QP) error {
			return qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateReset}, verbs.QPAttrState)
		}, verbs.ErrInvalidState},
		{"destroy", (*verbs.QP).Destroy, verbs.ErrClosed},
	} {
		t.Run(c.name, func(t *testing.T) {
			server, client := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
			done := rnrStall(t, testkit.Context(t), server, client)
			if err := c.end(client.QP); err != nil {
				t.Fatal(err)
			}
			if err := <-done; !errors.Is(err, c.want) {
				t.Fatalf("PostSendWait: %v, want %v", err, c.want)
			}
		})
	}
}

// TestPostSendWaitPostError returns PostSend's error as it is.
func TestPostSendWaitPostError(t *testing.T) {
	s := newEnd(t, 1, rdmatest.EndOptions{})
	wr := verbs.SendWR{Opcode: verbs.WRSend}
	if _, err := s.QP.PostSendWait(testkit.Context(t), &wr); !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("PostSendWait on a QP in RESET: %v", err)
	}
	if _, err := s.QP.PostSendWait(testkit.Context(t), nil); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("PostSendWait(nil): %v", err)
	}
}
