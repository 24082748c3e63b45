package verbs_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netio"
	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// testSpin is the spin budget of the tests and benchmarks that spin before
// parking.
const testSpin = 5 * time.Microsecond

// waitResult is what one Wait call returned.
type waitResult struct {
	wrids []uint64
	err   error
}

// startWaiter runs WaitSpin on cq in a goroutine and reports its result.
func startWaiter(ctx context.Context, cq *verbs.CQ, spin time.Duration, room int) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		wc := make([]verbs.WorkCompletion, room)
		n, err := cq.WaitSpin(ctx, wc, spin)
		r := waitResult{err: err}
		for _, c := range wc[:n] {
			r.wrids = append(r.wrids, c.WRID)
		}
		ch <- r
	}()
	return ch
}

func TestWaitReturnsQueuedCompletions(t *testing.T) {
	for _, tc := range []struct {
		name string
		spin time.Duration
	}{{"park", 0}, {"spin", testSpin}, {"busy", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			cq := rdmatest.CQ(t, newDevice(t), 8)
			for i := range 3 {
				cq.Push(verbs.WorkCompletion{WRID: uint64(i + 1)}, false)
			}
			// A done context does not hide completions already queued.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			wc := make([]verbs.WorkCompletion, 2)
			n, err := cq.WaitSpin(ctx, wc, tc.spin)
			if err != nil || n != 2 || wc[0].WRID != 1 || wc[1].WRID != 2 {
				t.Fatalf("WaitSpin = %d, %v (%+v), want WRIDs 1 and 2", n, err, wc[:n])
			}
			n, err = cq.WaitSpin(ctx, wc, tc.spin)
			if err != nil || n != 1 || wc[0].WRID != 3 {
				t.Fatalf("second WaitSpin = %d, %v (%+v), want WRID 3", n, err, wc[:n])
			}
		})
	}
}

func TestWaitParksUntilPush(t *testing.T) {
	for name, spin := range map[string]time.Duration{"park": 0, "spin": testSpin} {
		t.Run(name, func(t *testing.T) {
			cq := rdmatest.CQ(t, newDevice(t), 8)
			res := startWaiter(testkit.Context(t), cq, spin, 4)
			testkit.WaitFor(t, "the waiter to park", func() bool { return verbs.ParkedWaiters(cq) == 1 })
			cq.Push(verbs.WorkCompletion{WRID: 42}, false)
			r := <-res
			if r.err != nil || len(r.wrids) != 1 || r.wrids[0] != 42 {
				t.Fatalf("Wait returned %v, %v; want WRID 42", r.wrids, r.err)
			}
			if n := verbs.ParkedWaiters(cq); n != 0 {
				t.Fatalf("%d waiters left parked", n)
			}
		})
	}
}

func TestWaitContext(t *testing.T) {
	for _, tc := range []struct {
		name string
		spin time.Duration
	}{{"park", 0}, {"busy", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			cq := rdmatest.CQ(t, newDevice(t), 8)
			ctx, cancel := context.WithCancel(context.Background())
			res := startWaiter(ctx, cq, tc.spin, 1)
			if tc.spin == 0 {
				testkit.WaitFor(t, "the waiter to park", func() bool { return verbs.ParkedWaiters(cq) == 1 })
			}
			cancel()
			if r := <-res; !errors.Is(r.err, context.Canceled) || len(r.wrids) != 0 {
				t.Fatalf("Wait after cancel = %v, %v; want context.Canceled", r.wrids, r.err)
			}
			// The CQ still works, and the cancelled waiter took no
			// wake-up meant for a later one.
			cq.Push(verbs.WorkCompletion{WRID: 7}, false)
			wc := make([]verbs.WorkCompletion, 1)
			if n, err := cq.Wait(context.Background(), wc); n != 1 || err != nil || wc[0].WRID != 7 {
				t.Fatalf("Wait after the cancelled one = %d, %v", n, err)
			}
		})
	}
}

func TestWaitDestroyWakesAllWaiters(t *testing.T) {
	cq := rdmatest.CQ(t, newDevice(t), 8)
	const waiters = 3
	var res []<-chan waitResult
	for range waiters {
		res = append(res, startWaiter(testkit.Context(t), cq, 0, 1))
	}
	testkit.WaitFor(t, "the waiters to park", func() bool { return verbs.ParkedWaiters(cq) == waiters })
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	for i, ch := range res {
		if r := <-ch; !errors.Is(r.err, verbs.ErrClosed) {
			t.Errorf("waiter %d: %v, %v; want ErrClosed", i, r.wrids, r.err)
		}
	}
	if _, err := cq.Wait(context.Background(), make([]verbs.WorkCompletion, 1)); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("Wait on a destroyed CQ: %v, want ErrClosed", err)
	}
}

func TestWaitEmptySlice(t *testing.T) {
	cq := rdmatest.CQ(t, newDevice(t), 8)
	if _, err := cq.Wait(context.Background(), nil); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("Wait(nil) = %v, want ErrInvalidArgument", err)
	}
}

// Every completion reaches exactly one of several waiters, however the
// pushes and wake-ups interleave.
func TestWaitManyWaitersEachCompletionOnce(t *testing.T) {
	for name, spin := range map[string]time.Duration{"park": 0, "spin": testSpin} {
		t.Run(name, func(t *testing.T) { testWaitManyWaiters(t, spin) })
	}
}

func testWaitManyWaiters(t *testing.T, spin time.Duration) {
	{
		cq := rdmatest.CQ(t, newDevice(t), 1024)
		const waiters, perWaiter = 4, 50
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var (
			mu   sync.Mutex
			seen = map[uint64]int{}
			wg   sync.WaitGroup
		)
		total := waiters * perWaiter
		var got int
		for range waiters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wc := make([]verbs.WorkCompletion, 3)
				for {
					n, err := cq.WaitSpin(ctx, wc, spin)
					if err != nil {
						return
					}
					mu.Lock()
					for _, c := range wc[:n] {
						seen[c.WRID]++
					}
					got += n
					if got == total {
						cancel() // release the other waiters
					}
					mu.Unlock()
				}
			}()
		}
		for i := range total {
			cq.Push(verbs.WorkCompletion{WRID: uint64(i)}, false)
		}
		wg.Wait()
		if ctx.Err() == context.DeadlineExceeded {
			t.Fatalf("spin %v: %d of %d completions reached a waiter", spin, got, total)
		}
		cancel()
		if len(seen) != total {
			t.Fatalf("spin %v: %d distinct completions, want %d", spin, len(seen), total)
		}
		for id, k := range seen {
			if k != 1 {
				t.Fatalf("spin %v: WRID %d returned %d times", spin, id, k)
			}
		}
	}
}

// Wait sees the completion of a real RDMA WRITE over loopback, and the
// data is in place when it returns.
func TestWaitRDMAWrite(t *testing.T) {
	a, b := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	fill(a.Buf[:512], 9)
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 5, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 512)}, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]verbs.WorkCompletion, 4)
	n, err := a.CQ.Wait(ctx, wc)
	if err != nil || n != 1 || wc[0].WRID != 5 || wc[0].Status != verbs.WCSuccess || wc[0].Opcode != verbs.WCRDMAWrite {
		t.Fatalf("Wait = %d, %v, %+v", n, err, wc[:n])
	}
	_, _ = b.CQ.Poll(nil) // the device's stores are published by a poll
	for i := range 512 {
		if b.Buf[i] != a.Buf[i] {
			t.Fatalf("byte %d: %#x, want %#x", i, b.Buf[i], a.Buf[i])
		}
	}
}

// BenchmarkRCWriteLatency8BWait is BenchmarkRCWriteLatency8B with each side
// waiting for the peer's WRITE with immediate in CQ.WaitSpin instead of on
// a completion channel: "park" parks at once (Wait), "spin" spins 5 µs
// first and "busy" never parks; "busy-device" never parks either, on
// devices opened with BusyPoll, whose polls receive the packets
// themselves. One op is one round trip.
func BenchmarkRCWriteLatency8BWait(b *testing.B) {
	for _, tc := range []struct {
		name     string
		spin     time.Duration
		busyPoll bool
	}{{"park", 0, false}, {"spin", testSpin, false}, {"busy", -1, false}, {"busy-device", -1, true}} {
		b.Run(tc.name, func(b *testing.B) {
			if tc.spin < 0 && !tc.busyPoll && runtime.GOMAXPROCS(0) < 4 {
				// Two busy waiters and the two devices' receive
				// goroutines need four processors: with fewer, the
				// packets wait for the runtime's 10 ms background
				// poll and the transport's retries run out.
				b.Skip("busy polling needs GOMAXPROCS >= 4 here")
			}
			x, y := newImmPair(b, rdmatest.EndOptions{Device: verbs.DeviceConfig{BusyPoll: tc.busyPoll}})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			answered := make(chan error, 1)
			go func() {
				for seq := uint32(1); ; seq++ {
					if err := waitImm(ctx, y, seq, tc.spin); err != nil {
						answered <- err
						return
					}
					if err := pingImm(y, x, seq); err != nil {
						answered <- err
						return
					}
				}
			}()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				seq := uint32(i + 1)
				if err := pingImm(x, y, seq); err != nil {
					b.Fatal(err)
				}
				if err := waitImm(ctx, x, seq, tc.spin); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			cancel()
			if err := <-answered; !errors.Is(err, context.Canceled) {
				b.Fatal(err)
			}
		})
	}
}

// waitImm is awaitImm with CQ.WaitSpin.
func waitImm(ctx context.Context, e *rdmatest.End, seq uint32, spin time.Duration) error {
	var wcs [4]verbs.WorkCompletion
	for {
		n, err := e.CQ.WaitSpin(ctx, wcs[:], spin)
		if err != nil {
			return err
		}
		for _, wc := range wcs[:n] {
			switch {
			case wc.Status != verbs.WCSuccess:
				return fmt.Errorf("completion %+v", wc)
			case wc.Opcode != verbs.WCRecvRDMAWithImm:
			case wc.ImmData != seq:
				return fmt.Errorf("sequence %d, want %d", wc.ImmData, seq)
			default:
				return e.QP.PostRecv(&verbs.RecvWR{})
			}
		}
	}
}

// TestBusyPollDrivesDevice runs a WRITE-with-immediate ping-pong between
// two devices opened with BusyPoll, both sides spinning in WaitSpin
// without ever parking, on two processors: the spinners leave no
// processor to the devices' receive goroutines, so the round trips only
// go on if the polls receive the packets themselves (without BusyPoll the
// same loop waits for the runtime's background network poll, every 10 ms,
// until the transport's retries run out). Every round trip must complete
// in order, and both devices must count packets received by polls.
func TestBusyPollDrivesDevice(t *testing.T) {
	if !netio.PollReceives {
		t.Skip("the portable socket path does not receive in Poll")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	x, y := newImmPair(t, rdmatest.EndOptions{Device: verbs.DeviceConfig{BusyPoll: true}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rounds := 2000
	if testing.Short() {
		rounds = 300
	}
	answered := make(chan error, 1)
	go func() {
		for seq := uint32(1); seq <= uint32(rounds); seq++ {
			if err := waitImm(ctx, y, seq, -1); err != nil {
				answered <- err
				return
			}
			if err := pingImm(y, x, seq); err != nil {
				answered <- err
				return
			}
		}
		answered <- nil
	}()
	for seq := uint32(1); seq <= uint32(rounds); seq++ {
		if err := pingImm(x, y, seq); err != nil {
			t.Fatal(err)
		}
		if err := waitImm(ctx, x, seq, -1); err != nil {
			t.Fatalf("round trip %d: %v", seq, err)
		}
	}
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	for _, e := range []*rdmatest.End{x, y} {
		c := e.Dev.Counters()
		if c.RxPolled == 0 || c.RxPolled > c.RcvdPkts {
			t.Errorf("%s: rx_polled %d of rcvd_pkts %d; want some, at most all", e.Dev.Name(), c.RxPolled, c.RcvdPkts)
		}
		t.Logf("%s: %d of %d packets received by polls", e.Dev.Name(), c.RxPolled, c.RcvdPkts)
	}
	// A busy poll that reads the (empty) socket allocates nothing.
	var wcs [4]verbs.WorkCompletion
	if n := testing.AllocsPerRun(200, func() { _, _ = x.CQ.Poll(wcs[:]) }); n != 0 {
		t.Errorf("CQ.Poll on a BusyPoll device: %v allocations per call, want 0", n)
	}
}
