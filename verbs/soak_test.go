//go:build goroce_faults

package verbs_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
)

// TestSoakFaults is the long soak of the RC transport, outside the default
// test run: GOROCE_SOAK=N (for example 1000000) runs N mixed operations,
// WRITE, READ, SEND, FETCH_ADD and CMP_SWAP of up to three packets, between
// two loopback devices whose fault injection drops 5% of what they receive
// and also reorders, duplicates and corrupts packets. Every work request
// must complete exactly once, in order, successfully, with the right data
// (and every atomic must run exactly once); the test prints the counts of
// completions, retries, timeouts, ICRC errors and injected faults.
//
//	GOROCE_SOAK=1000000 go test -tags goroce_faults -run TestSoakFaults -v -timeout 2h ./verbs
//
// It uses testkit.Addr(18) and Addr(19).
func TestSoakFaults(t *testing.T) {
	total, err := strconv.Atoi(os.Getenv("GOROCE_SOAK"))
	if err != nil || total <= 0 {
		t.Skip("set GOROCE_SOAK to the number of operations to run the soak")
	}
	f := verbs.Faults{Drop: 0.05, Duplicate: 0.02, Corrupt: 0.01, Reorder: 0.02}
	fa, fb := f, f
	fa.Seed, fb.Seed = uint64(time.Now().UnixNano()), uint64(time.Now().UnixNano())+1
	t.Logf("fault seeds %d and %d", fa.Seed, fb.Seed)
	a := newFaultyEnd(t, 18, fa, 1<<20)
	b := newFaultyEnd(t, 19, fb, 1<<20)
	// perftest's timeout 14 (67 ms): with a few ms, a receiver starved of
	// CPU (a loaded machine) falls behind a backlog of go-back-N
	// retransmissions in its socket buffer for longer than (retry_cnt+1)
	// timeouts, and the run ends in RETRY_EXC_ERR although nothing is lost
	// for good.
	link := rdmatest.DefaultLink()
	link.Timeout = 14
	rdmatest.Connect(t, a, b, link, link)

	const (
		window  = 48        // work requests outstanding (SQ and RQ hold 64)
		slot    = 4096      // bytes per slot in each area
		srcArea = 0         // a: WRITE and SEND sources
		rdArea  = 256 << 10 // a: READ destinations; b: READ sources
		atArea  = 512 << 10 // a: atomic results; b: SEND destinations
		dstArea = 768 << 10 // b: WRITE destinations
		counter = 1020 << 10
	)
	type pending struct {
		op       verbs.WROpcode
		n        int
		orig     uint64 // atomics: the value expected back
		recvDone bool   // SEND: its receive completion was checked
		sendDone bool
	}
	var (
		slots   [window]pending
		busy    [window]bool
		posted  uint64 // next WRID
		done    uint64 // send completions seen (WRIDs 0..done-1)
		recvs   uint64 // receive completions seen
		nrecv   uint64 // receives posted
		value   = uint64(0x0100_0000_0000_0000)
		counts  = map[verbs.WROpcode]int{}
		wcs     = make([]verbs.WorkCompletion, 32)
		lastWC  = time.Now()
		started = time.Now()
		nextLog = uint64(100_000)
	)
	binary.NativeEndian.PutUint64(b.Buf[counter:], value)
	wantWC := map[verbs.WROpcode]verbs.WCOpcode{verbs.WRRDMAWrite: verbs.WCRDMAWrite, verbs.WRRDMARead: verbs.WCRDMARead, verbs.WRSend: verbs.WCSend,
		verbs.WRAtomicFetchAndAdd: verbs.WCFetchAdd, verbs.WRAtomicCmpAndSwp: verbs.WCCompSwap}
	ops := []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMARead, verbs.WRSend, verbs.WRAtomicFetchAndAdd, verbs.WRRDMAWrite, verbs.WRRDMARead, verbs.WRSend, verbs.WRAtomicCmpAndSwp}
	// The slot of WRID k is k % window: a slot is reused only after its
	// previous work request completed (in order) and, for a SEND, after its
	// receive was checked.
	post := func(k uint64) {
		j := int(k % window)
		op := ops[(k*0x9E3779B97F4A7C15)>>61]
		n := 1 + int(k*997)%(3*1024)
		off := j * slot
		p := pending{op: op, n: n}
		wr := verbs.SendWR{WRID: k, Opcode: op, SendFlags: verbs.SendSignaled}
		switch op {
		case verbs.WRRDMAWrite, verbs.WRSend:
			fill(a.Buf[srcArea+off:srcArea+off+n], byte(k))
			wr.SGList = []verbs.SGE{a.MR.SGE(srcArea+off, n)}
			if op == verbs.WRSend {
				clear(b.Buf[atArea+off : atArea+off+slot])
				rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: k, SGList: []verbs.SGE{b.MR.SGE(atArea+off, slot)}})
				nrecv++
			} else {
				clear(b.Buf[dstArea+off : dstArea+off+slot])
				wr.RDMA = verbs.RDMAParams{RemoteAddr: b.MR.IOVA() + uint64(dstArea+off), RKey: b.MR.RKey()}
			}
		case verbs.WRRDMARead:
			fill(b.Buf[rdArea+off:rdArea+off+n], byte(k))
			clear(a.Buf[rdArea+off : rdArea+off+slot])
			wr.SGList = []verbs.SGE{a.MR.SGE(rdArea+off, n)}
			wr.RDMA = verbs.RDMAParams{RemoteAddr: b.MR.IOVA() + uint64(rdArea+off), RKey: b.MR.RKey()}
		case verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp:
			p.n = 8
			p.orig = value
			wr.SGList = []verbs.SGE{a.MR.SGE(atArea+off, 8)}
			wr.Atomic = verbs.AtomicParams{RemoteAddr: b.MR.IOVA() + counter, RKey: b.MR.RKey(), CompareAdd: k + 1}
			if op == verbs.WRAtomicFetchAndAdd {
				value += k + 1
			} else {
				// Every other compare fails and leaves the value.
				wr.Atomic.CompareAdd, wr.Atomic.Swap = value+k%2, value^k<<8
				if k%2 == 0 {
					value ^= k << 8
				}
			}
		}
		slots[j], busy[j] = p, true
		rdmatest.PostSend(t, a.QP, wr)
		counts[op]++
	}
	report := func() {
		for _, e := range []*rdmatest.End{a, b} {
			c, fc := e.Dev.Counters(), e.Dev.FaultCounters()
			t.Logf("%v: faults %+v; ICRC errors %d, malformed %d; go-back-N retries %d, timeouts %d, sequence NAKs sent %d, duplicate requests %d, retry exceeded %d",
				e.Dev.Addr(), fc, c.ICRCErrors, c.Malformed, c.CompleterRetryErr, c.RetryTimeouts, c.SentSeqErr,
				c.DuplicateRequest, c.RetryExceededErr)
		}
	}

	check := func(wc verbs.WorkCompletion) {
		if wc.WRID != done {
			t.Fatalf("completion %+v out of order or repeated: want wr_id %d", wc, done)
		}
		j := int(wc.WRID % window)
		p := &slots[j]
		if wc.Status != verbs.WCSuccess || wc.Opcode != wantWC[p.op] {
			report()
			t.Fatalf("wr %d (%v): completion %+v", wc.WRID, p.op, wc)
		}
		off := j * slot
		what := fmt.Sprintf("wr %d (%v, %d bytes)", wc.WRID, p.op, p.n)
		want := make([]byte, p.n)
		fill(want, byte(wc.WRID))
		switch p.op {
		case verbs.WRRDMAWrite:
			checkBytes(t, what, b.Buf[dstArea+off:dstArea+off+p.n], want)
		case verbs.WRRDMARead:
			checkBytes(t, what, a.Buf[rdArea+off:rdArea+off+p.n], want)
		case verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp:
			if got := binary.NativeEndian.Uint64(a.Buf[atArea+off:]); got != p.orig {
				t.Fatalf("%s: original value %#x, want %#x", what, got, p.orig)
			}
		}
		p.sendDone = true
		busy[j] = p.op == verbs.WRSend && !p.recvDone
		done++
	}
	checkRecv := func(wc verbs.WorkCompletion) {
		j := int(wc.WRID % window)
		p := &slots[j]
		if wc.WRID >= posted || p.op != verbs.WRSend || p.recvDone {
			t.Fatalf("unexpected or repeated receive completion %+v", wc)
		}
		if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || wc.ByteLen != uint32(p.n) {
			t.Fatalf("receive of wr %d: completion %+v, want %d bytes", wc.WRID, wc, p.n)
		}
		want := make([]byte, p.n)
		fill(want, byte(wc.WRID))
		checkBytes(t, fmt.Sprintf("SEND %d", wc.WRID), b.Buf[atArea+j*slot:atArea+j*slot+p.n], want)
		p.recvDone = true
		busy[j] = !p.sendDone
		recvs++
	}
	for done < uint64(total) {
		for posted < uint64(total) && posted-done < window && !busy[posted%window] {
			post(posted)
			posted++
		}
		progress := false
		n, err := a.CQ.Poll(wcs)
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range wcs[:n] {
			progress = true
			if wc.QPNum != a.QP.QPN() {
				t.Fatalf("completion of another QP %+v", wc)
			}
			check(wc)
		}
		if n, err = b.CQ.Poll(wcs); err != nil {
			t.Fatal(err)
		}
		for _, wc := range wcs[:n] {
			progress = true
			checkRecv(wc)
		}
		switch {
		case progress:
			lastWC = time.Now()
		case time.Since(lastWC) > 30*time.Second:
			report()
			t.Fatalf("no completion for 30 s: %d of %d posted, %d completed", posted, total, done)
		default:
			time.Sleep(20 * time.Microsecond)
		}
		if done >= nextLog {
			t.Logf("%d operations in %v", done, time.Since(started).Round(time.Millisecond))
			nextLog += 100_000
		}
	}
	// The last receives may still be on their way to the CQ.
	for recvs < nrecv {
		for _, wc := range rdmatest.WaitN(t, b.CQ, int(nrecv-recvs)) {
			checkRecv(wc)
		}
	}
	if got := binary.NativeEndian.Uint64(b.Buf[counter:]); got != value {
		t.Errorf("atomic target %#x, want %#x: an atomic ran twice or never", got, value)
	}
	rdmatest.ExpectEmpty(t, a.CQ)
	rdmatest.ExpectEmpty(t, b.CQ)
	elapsed := time.Since(started)
	t.Logf("%d operations (%v) in %v, %.0f ops/s: %d send completions, %d receive completions, 0 errors",
		done, counts, elapsed.Round(time.Millisecond), float64(done)/elapsed.Seconds(), done, recvs)
	report()
}
