package verbs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/cputime"
	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
)

// The benchmarks run an RC connection between devices on testkit.Addr(1) and
// Addr(2) over the loopback interface, path MTU 4096 (a loopback
// device's active MTU). Throughput benchmarks keep a window of requests
// outstanding, as perftest's ib_write_bw does with its tx depth, and
// report bytes per second; the latency benchmark is a ping-pong like
// ib_write_lat.

const benchWindow = 16

// benchKeys seal the "-sealed" benchmarks' connections (SetPacketKeys).
var benchKeys = verbs.PacketKeys{Send: [32]byte{7}, Recv: [32]byte{8}}

// benchPair connects two ends with room for size-byte messages in a
// window of benchWindow.
func benchPair(b *testing.B, size int) (x, y *rdmatest.End) {
	return benchPairKeys(b, size, nil)
}

// benchPairKeys is benchPair with the connection sealed under k (x's side)
// unless k is nil.
func benchPairKeys(b *testing.B, size int, k *verbs.PacketKeys) (x, y *rdmatest.End) {
	b.Helper()
	o := rdmatest.EndOptions{BufSize: max(2*size, 4096)}
	x, y = newEnd(b, 1, o), newEnd(b, 2, o)
	if k != nil {
		if err := x.QP.SetPacketKeys(k); err != nil {
			b.Fatal(err)
		}
		if err := y.QP.SetPacketKeys(&verbs.PacketKeys{Send: k.Recv, Recv: k.Send}); err != nil {
			b.Fatal(err)
		}
	}
	l := rdmatest.DefaultLink()
	l.MTU = verbs.MTU4096
	rdmatest.Connect(b, x, y, l, l)
	return x, y
}

// runWindow posts b.N work requests built by wr(i), keeping benchWindow
// outstanding, each signaled, and polls cq for their completions, handing
// each to onWC if not nil.
func runWindow(b *testing.B, qp *verbs.QP, cq *verbs.CQ, wr *verbs.SendWR, onWC func(verbs.WorkCompletion)) {
	b.Helper()
	var wcs [benchWindow]verbs.WorkCompletion
	posted, done := 0, 0
	deadline := time.Now().Add(time.Minute)
	for done < b.N {
		for posted < b.N && posted-done < benchWindow {
			wr.WRID = uint64(posted)
			if err := qp.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		n, err := cq.Poll(wcs[:])
		if err != nil {
			b.Fatal(err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				b.Fatalf("completion %+v", wc)
			}
			if onWC != nil {
				onWC(wc)
			}
		}
		done += n
		if n == 0 {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d completions in a minute", done, b.N)
			}
			idle()
		}
	}
}

func BenchmarkRCWrite(b *testing.B) {
	for _, bc := range []struct {
		name string
		size int
		keys *verbs.PacketKeys
	}{{"64B", 64, nil}, {"4KiB", 4 << 10, nil}, {"64KiB", 64 << 10, nil}, {"4KiB-sealed", 4 << 10, &benchKeys}, {"64KiB-sealed", 64 << 10, &benchKeys}} {
		b.Run(bc.name, func(b *testing.B) {
			x, y := benchPairKeys(b, bc.size, bc.keys)
			wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{x.MR.SGE(0, bc.size)},
				RDMA: verbs.RDMAParams{RemoteAddr: y.MR.IOVA(), RKey: y.MR.RKey()}}
			b.SetBytes(int64(bc.size))
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cputime.Process()
			runWindow(b, x.QP, x.CQ, &wr, nil)
			reportCPUPerGB(b, cpu0, bc.size)
		})
	}
}

// reportCPUPerGB adds cpu-s/GB to b's results: the process's CPU time
// (both devices, the benchmark's goroutine, the runtime) per GB moved
// since cpu0. Unlike the wall-clock MB/s it means much the same on a
// machine whose other load takes its cores now and then.
func reportCPUPerGB(b *testing.B, cpu0 time.Duration, size int) {
	if cpu0 <= 0 || b.N == 0 {
		return // no CPU clock on this system
	}
	b.ReportMetric((cputime.Process()-cpu0).Seconds()/(float64(b.N)*float64(size)/1e9), "cpu-s/GB")
}

func BenchmarkRCRead(b *testing.B) {
	for _, bc := range []struct {
		name string
		size int
	}{{"4KiB", 4 << 10}, {"64KiB", 64 << 10}} {
		b.Run(bc.name, func(b *testing.B) {
			x, y := benchPair(b, bc.size)
			wr := verbs.SendWR{Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{x.MR.SGE(0, bc.size)},
				RDMA: verbs.RDMAParams{RemoteAddr: y.MR.IOVA(), RKey: y.MR.RKey()}}
			b.SetBytes(int64(bc.size))
			b.ReportAllocs()
			b.ResetTimer()
			runWindow(b, x.QP, x.CQ, &wr, nil)
		})
	}
}

func BenchmarkRCSend(b *testing.B) {
	const size = 4 << 10
	x, y := benchPair(b, size)
	// The receiver keeps twice the window posted and reposts each receive
	// as it completes, on the benchmark goroutine: the receive side's
	// work is part of the cost.
	recv := verbs.RecvWR{SGList: []verbs.SGE{y.MR.SGE(0, size)}}
	for range 2 * benchWindow {
		if err := y.QP.PostRecv(&recv); err != nil {
			b.Fatal(err)
		}
	}
	var rwcs [2 * benchWindow]verbs.WorkCompletion
	drain := func(verbs.WorkCompletion) {
		n, err := y.CQ.Poll(rwcs[:])
		if err != nil {
			b.Fatal(err)
		}
		for _, wc := range rwcs[:n] {
			if wc.Status != verbs.WCSuccess || wc.ByteLen != size {
				b.Fatalf("receive completion %+v", wc)
			}
			if err := y.QP.PostRecv(&recv); err != nil {
				b.Fatal(err)
			}
		}
	}
	wr := verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{x.MR.SGE(0, size)}}
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	runWindow(b, x.QP, x.CQ, &wr, drain)
}

// BenchmarkRCWriteLatency8B is a ping-pong of 8-byte WRITEs between two
// goroutines, one per device, as ib_write_lat runs between two processes.
// One op is one round trip.
//
// ib_write_lat polls the memory the peer writes, but Go may read
// RDMA-written bytes only after a completion (see internal/racesync). So each hop is
// a WRITE with immediate whose immediate carries the sequence number, and
// each side waits for its receive completion sleeping on a completion
// channel between polls (ib_write_lat -e): a goroutine that spins on
// Poll holds a P that the devices' receive goroutines need.
// newImmPair opens two ends on testkit.Addr(1) and Addr(2) with opts o,
// connected with a 4096-byte path MTU, each with benchWindow empty
// receives posted: the set-up of the WRITE-with-immediate ping-pongs.
func newImmPair(tb testing.TB, o rdmatest.EndOptions) (x, y *rdmatest.End) {
	return newImmPairKeys(tb, o, nil)
}

// newImmPairKeys is newImmPair with the connection sealed under k (x's
// side) unless k is nil.
func newImmPairKeys(tb testing.TB, o rdmatest.EndOptions, k *verbs.PacketKeys) (x, y *rdmatest.End) {
	tb.Helper()
	x, y = newEnd(tb, 1, o), newEnd(tb, 2, o)
	if k != nil {
		if err := x.QP.SetPacketKeys(k); err != nil {
			tb.Fatal(err)
		}
		if err := y.QP.SetPacketKeys(&verbs.PacketKeys{Send: k.Recv, Recv: k.Send}); err != nil {
			tb.Fatal(err)
		}
	}
	l := rdmatest.DefaultLink()
	l.MTU = verbs.MTU4096
	rdmatest.Connect(tb, x, y, l, l)
	for _, e := range []*rdmatest.End{x, y} {
		for range benchWindow {
			if err := e.QP.PostRecv(&verbs.RecvWR{}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return x, y
}

func BenchmarkRCWriteLatency8B(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchWriteLatency8B(b, nil) })
	b.Run("sealed", func(b *testing.B) { benchWriteLatency8B(b, &benchKeys) })
}

func benchWriteLatency8B(b *testing.B, k *verbs.PacketKeys) {
	o := rdmatest.EndOptions{Channel: true}
	x, y := newImmPairKeys(b, o, k)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	answered := make(chan error, 1)
	go func() {
		// The answering side: wait for seq, send seq back.
		for seq := uint32(1); ; seq++ {
			if err := awaitImm(ctx, y, seq); err != nil {
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
		if err := awaitImm(ctx, x, seq); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cancel()
	if err := <-answered; !errors.Is(err, context.Canceled) {
		b.Fatal(err)
	}
}

// pingImm WRITEs 8 bytes from one end to the other with seq as the
// immediate. One request in eight is signaled, so that the send queue is
// emptied without a completion per hop. The work request comes from a pool:
// PostSend does not keep it, and a benchmark's allocations should be the
// library's.
func pingImm(from, to *rdmatest.End, seq uint32) error {
	wr := pingWRs.Get().(*verbs.SendWR)
	defer pingWRs.Put(wr)
	*wr = verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, ImmData: seq, SGList: append(wr.SGList[:0], from.MR.SGE(0, 8)),
		RDMA: verbs.RDMAParams{RemoteAddr: to.MR.IOVA() + 8, RKey: to.MR.RKey()}}
	if seq%8 == 0 {
		wr.SendFlags = verbs.SendSignaled
	}
	return from.QP.PostSend(wr)
}

// pingWRs holds pingImm's work requests.
var pingWRs = sync.Pool{New: func() any { return &verbs.SendWR{SGList: make([]verbs.SGE, 0, 1)} }}

// awaitImm waits on e's CQ for the WRITE with immediate that carries seq
// and reposts the receive it consumed. Send completions are skipped.
func awaitImm(ctx context.Context, e *rdmatest.End, seq uint32) error {
	var wcs [4]verbs.WorkCompletion
	for {
		// Arm before polling: a completion pushed after the poll then
		// raises an event, so the wait below cannot miss it.
		if err := e.CQ.ReqNotify(false); err != nil {
			return err
		}
		n, err := e.CQ.Poll(wcs[:])
		if err != nil {
			return err
		}
		found := false
		for _, wc := range wcs[:n] {
			switch {
			case wc.Status != verbs.WCSuccess:
				return fmt.Errorf("completion %+v", wc)
			case wc.Opcode != verbs.WCRecvRDMAWithImm:
			case wc.ImmData != seq:
				return fmt.Errorf("sequence %d, want %d", wc.ImmData, seq)
			default:
				if err := e.QP.PostRecv(&verbs.RecvWR{}); err != nil {
					return err
				}
				found = true
			}
		}
		if found {
			return nil
		}
		if n == 0 {
			cq, err := e.CQ.Channel().GetEvent(ctx)
			if err != nil {
				return err
			}
			cq.AckEvents(1)
		}
	}
}

// idle is what a benchmark's polling loop does when its CQ is empty. It
// must let the goroutine park: the devices' receive goroutines wait in the
// runtime's network poller, which a P only consults when it has nothing
// else to run, so with two busy-polling goroutines on a two-core machine
// packets would sit unread until the scheduler's 10 ms background poll.
func idle() { time.Sleep(time.Microsecond) }
