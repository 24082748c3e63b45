//go:build goroce_faults

package verbs

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
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
// It uses addresses 127.0.1.18 and 127.0.1.19 (moved by GOROCE_TEST_NET).
func TestSoakFaults(t *testing.T) {
	total, err := strconv.Atoi(os.Getenv("GOROCE_SOAK"))
	if err != nil || total <= 0 {
		t.Skip("set GOROCE_SOAK to the number of operations to run the soak")
	}
	f := Faults{Drop: 0.05, Duplicate: 0.02, Corrupt: 0.01, Reorder: 0.02}
	fa, fb := f, f
	fa.Seed, fb.Seed = uint64(time.Now().UnixNano()), uint64(time.Now().UnixNano())+1
	t.Logf("fault seeds %d and %d", fa.Seed, fb.Seed)
	a := newFaultyEnd(t, "127.0.1.18", fa, 1<<20)
	b := newFaultyEnd(t, "127.0.1.19", fb, 1<<20)
	// perftest's timeout 14 (67 ms): with a few ms, a receiver starved of
	// CPU (a loaded machine) falls behind a backlog of go-back-N
	// retransmissions in its socket buffer for longer than (retry_cnt+1)
	// timeouts, and the run ends in RETRY_EXC_ERR although nothing is lost
	// for good.
	link := defaultLink()
	link.timeout = 14
	connect(t, a, b, link, link)

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
		op       WROpcode
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
		counts  = map[WROpcode]int{}
		wcs     = make([]WorkCompletion, 32)
		lastWC  = time.Now()
		started = time.Now()
		nextLog = uint64(100_000)
	)
	binary.NativeEndian.PutUint64(b.buf[counter:], value)
	wantWC := map[WROpcode]WCOpcode{WRRDMAWrite: WCRDMAWrite, WRRDMARead: WCRDMARead, WRSend: WCSend,
		WRAtomicFetchAndAdd: WCFetchAdd, WRAtomicCmpAndSwp: WCCompSwap}
	ops := []WROpcode{WRRDMAWrite, WRRDMARead, WRSend, WRAtomicFetchAndAdd, WRRDMAWrite, WRRDMARead, WRSend, WRAtomicCmpAndSwp}
	// The slot of WRID k is k % window: a slot is reused only after its
	// previous work request completed (in order) and, for a SEND, after its
	// receive was checked.
	post := func(k uint64) {
		j := int(k % window)
		op := ops[(k*0x9E3779B97F4A7C15)>>61]
		n := 1 + int(k*997)%(3*1024)
		off := j * slot
		p := pending{op: op, n: n}
		wr := SendWR{WRID: k, Opcode: op, SendFlags: SendSignaled}
		switch op {
		case WRRDMAWrite, WRSend:
			fill(a.buf[srcArea+off:srcArea+off+n], byte(k))
			wr.SGList = []SGE{a.mr.SGE(srcArea+off, n)}
			if op == WRSend {
				clear(b.buf[atArea+off : atArea+off+slot])
				mustPostRecv(t, b.qp, RecvWR{WRID: k, SGList: []SGE{b.mr.SGE(atArea+off, slot)}})
				nrecv++
			} else {
				clear(b.buf[dstArea+off : dstArea+off+slot])
				wr.RDMA = RDMAParams{RemoteAddr: b.mr.IOVA() + uint64(dstArea+off), RKey: b.mr.RKey()}
			}
		case WRRDMARead:
			fill(b.buf[rdArea+off:rdArea+off+n], byte(k))
			clear(a.buf[rdArea+off : rdArea+off+slot])
			wr.SGList = []SGE{a.mr.SGE(rdArea+off, n)}
			wr.RDMA = RDMAParams{RemoteAddr: b.mr.IOVA() + uint64(rdArea+off), RKey: b.mr.RKey()}
		case WRAtomicFetchAndAdd, WRAtomicCmpAndSwp:
			p.n = 8
			p.orig = value
			wr.SGList = []SGE{a.mr.SGE(atArea+off, 8)}
			wr.Atomic = AtomicParams{RemoteAddr: b.mr.IOVA() + counter, RKey: b.mr.RKey(), CompareAdd: k + 1}
			if op == WRAtomicFetchAndAdd {
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
		mustPostSend(t, a.qp, wr)
		counts[op]++
	}
	report := func() {
		for _, e := range []*rcEnd{a, b} {
			c, fc := e.dev.Counters(), e.dev.FaultCounters()
			t.Logf("%v: faults %+v; ICRC errors %d, malformed %d; go-back-N retries %d, timeouts %d, sequence NAKs sent %d, duplicate requests %d, retry exceeded %d",
				e.dev.Addr(), fc, c.ICRCErrors, c.Malformed, c.CompleterRetryErr, c.RetryTimeouts, c.SentSeqErr,
				c.DuplicateRequest, c.RetryExceededErr)
		}
	}

	check := func(wc WorkCompletion) {
		if wc.WRID != done {
			t.Fatalf("completion %+v out of order or repeated: want wr_id %d", wc, done)
		}
		j := int(wc.WRID % window)
		p := &slots[j]
		if wc.Status != WCSuccess || wc.Opcode != wantWC[p.op] {
			report()
			t.Fatalf("wr %d (%v): completion %+v", wc.WRID, p.op, wc)
		}
		off := j * slot
		what := fmt.Sprintf("wr %d (%v, %d bytes)", wc.WRID, p.op, p.n)
		want := make([]byte, p.n)
		fill(want, byte(wc.WRID))
		switch p.op {
		case WRRDMAWrite:
			checkBytes(t, what, b.buf[dstArea+off:dstArea+off+p.n], want)
		case WRRDMARead:
			checkBytes(t, what, a.buf[rdArea+off:rdArea+off+p.n], want)
		case WRAtomicFetchAndAdd, WRAtomicCmpAndSwp:
			if got := binary.NativeEndian.Uint64(a.buf[atArea+off:]); got != p.orig {
				t.Fatalf("%s: original value %#x, want %#x", what, got, p.orig)
			}
		}
		p.sendDone = true
		busy[j] = p.op == WRSend && !p.recvDone
		done++
	}
	checkRecv := func(wc WorkCompletion) {
		j := int(wc.WRID % window)
		p := &slots[j]
		if wc.WRID >= posted || p.op != WRSend || p.recvDone {
			t.Fatalf("unexpected or repeated receive completion %+v", wc)
		}
		if wc.Status != WCSuccess || wc.Opcode != WCRecv || wc.ByteLen != uint32(p.n) {
			t.Fatalf("receive of wr %d: completion %+v, want %d bytes", wc.WRID, wc, p.n)
		}
		want := make([]byte, p.n)
		fill(want, byte(wc.WRID))
		checkBytes(t, fmt.Sprintf("SEND %d", wc.WRID), b.buf[atArea+j*slot:atArea+j*slot+p.n], want)
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
		n, err := a.cq.Poll(wcs)
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range wcs[:n] {
			progress = true
			if wc.QPNum != a.qp.QPN() {
				t.Fatalf("completion of another QP %+v", wc)
			}
			check(wc)
		}
		if n, err = b.cq.Poll(wcs); err != nil {
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
		for _, wc := range waitN(t, b.cq, int(nrecv-recvs)) {
			checkRecv(wc)
		}
	}
	if got := binary.NativeEndian.Uint64(b.buf[counter:]); got != value {
		t.Errorf("atomic target %#x, want %#x: an atomic ran twice or never", got, value)
	}
	expectEmpty(t, a.cq)
	expectEmpty(t, b.cq)
	elapsed := time.Since(started)
	t.Logf("%d operations (%v) in %v, %.0f ops/s: %d send completions, %d receive completions, 0 errors",
		done, counts, elapsed.Round(time.Millisecond), float64(done)/elapsed.Seconds(), done, recvs)
	report()
}
