package verbs

import (
	"context"
	"net/netip"
	"runtime"
	"testing"
	"time"
)

// The end-to-end tests run real RC connections between devices bound to
// loopback addresses 127.0.1.1 to 127.0.1.20 (the range reserved for this
// package), one test at a time: no test here calls t.Parallel, so the
// addresses can be reused from test to test once the devices are closed.

// endOpts shapes one side of an end-to-end connection.
type endOpts struct {
	bufSize  int  // registered buffer; default 64 KiB
	channel  bool // give the CQ a completion channel
	sqSigAll bool
	mrAccess AccessFlags // default rcAccess
	cap      QPCap       // default: 64 WRs, 4 SGEs, 64 bytes inline
	busyPoll bool        // DeviceConfig.BusyPoll
}

// newEnd opens a device on addr with a PD, a CQ, a registered buffer and an
// RC QP in RESET. Everything is closed with the device at the end of t.
func newEnd(t testing.TB, addr string, o endOpts) *rcEnd {
	t.Helper()
	if o.bufSize == 0 {
		o.bufSize = 1 << 16
	}
	if o.mrAccess == 0 {
		o.mrAccess = rcAccess
	}
	if o.cap == (QPCap{}) {
		o.cap = QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}
	}
	e := &rcEnd{dev: openDevice(t, DeviceConfig{Addr: netip.MustParseAddr(addr), BusyPoll: o.busyPoll})}
	e.pd = mustPD(t, e.dev)
	var ch *CompChannel
	if o.channel {
		var err error
		if ch, err = e.dev.CreateCompChannel(); err != nil {
			t.Fatal(err)
		}
	}
	cq, err := e.dev.CreateCQ(512, ch, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.cq = cq
	e.buf = make([]byte, o.bufSize)
	e.mr = mustMR2(t, e.pd, e.buf, o.mrAccess)
	e.qp, err = e.pd.CreateQP(QPInitAttr{QPType: QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq, Cap: o.cap, SQSigAll: o.sqSigAll})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// linkOpts are the connection attributes one QP is given on its way to RTS.
type linkOpts struct {
	mtu         MTU
	access      AccessFlags // the QP's QPAccessFlags (what its responder allows)
	timeout     uint8       // local ACK timeout code
	retryCnt    uint8
	rnrRetry    uint8
	minRNRTimer uint8
	maxRdAtomic int
}

// defaultLink is what rdma-core's tests use, with a 1024-byte path MTU,
// except for the local ACK timeout: 18 (1.07 s, rdma-core's 14 is 67 ms).
// Nothing is lost on loopback, so the timeout only bounds how long a
// receive goroutine may wait for a CPU; under -race on two loaded cores
// that exceeded 14's (retry_cnt+1) × 67 ms = 0.54 s, and a test that is not
// about retries ended in RETRY_EXC_ERR. Tests of timeouts set their own.
func defaultLink() linkOpts {
	return linkOpts{mtu: MTU1024, access: rcAccess, timeout: 18, retryCnt: 7, rnrRetry: 7, minRNRTimer: 1, maxRdAtomic: 16}
}

// linkQP moves local from RESET to RTS toward remote (a QP of remoteDev).
func linkQP(t testing.TB, local, remote *QP, remoteDev *Device, o linkOpts, lpsn, rpsn uint32) {
	t.Helper()
	gid, err := remoteDev.QueryGID(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	mustModify(t, local, step{QPAttr{QPState: QPStateInit, PortNum: 1, QPAccessFlags: o.access},
		QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags})
	mustModify(t, local, step{QPAttr{QPState: QPStateRTR, PathMTU: o.mtu, DestQPNum: remote.QPN(),
		RQPSN: rpsn, MaxDestRdAtomic: 16, MinRNRTimer: o.minRNRTimer,
		AHAttr: AddressVector{DGID: gid, SGIDIndex: 1, HopLimit: 64, IsGlobal: true, PortNum: 1}},
		QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer})
	mustModify(t, local, step{QPAttr{QPState: QPStateRTS, SQPSN: lpsn, Timeout: o.timeout, RetryCnt: o.retryCnt,
		RNRRetry: o.rnrRetry, MaxRdAtomic: o.maxRdAtomic},
		QPAttrState | QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic})
}

// connect links a and b both ways, a with oa and b with ob. a's PSNs start
// just below 2^24, so every test also crosses the PSN wrap.
func connect(t testing.TB, a, b *rcEnd, oa, ob linkOpts) {
	t.Helper()
	linkQP(t, a.qp, b.qp, b.dev, oa, 0xFFFFF8, 0x2000)
	linkQP(t, b.qp, a.qp, a.dev, ob, 0x2000, 0xFFFFF8)
}

// newPair opens two connected ends on 127.0.1.1 and 127.0.1.2 with the
// default link attributes.
func newPair(t testing.TB, oa, ob endOpts) (a, b *rcEnd) {
	t.Helper()
	a, b = newEnd(t, "127.0.1.1", oa), newEnd(t, "127.0.1.2", ob)
	connect(t, a, b, defaultLink(), defaultLink())
	return a, b
}

func mustPostSend(t testing.TB, qp *QP, wr SendWR) {
	t.Helper()
	if err := qp.PostSend(&wr); err != nil {
		t.Fatalf("PostSend(%v, wr_id %d): %v", wr.Opcode, wr.WRID, err)
	}
}

func mustPostRecv(t testing.TB, qp *QP, wr RecvWR) {
	t.Helper()
	if err := qp.PostRecv(&wr); err != nil {
		t.Fatalf("PostRecv(wr_id %d): %v", wr.WRID, err)
	}
}

// waitN polls cq until n completions have arrived, failing after 10 s.
func waitN(t testing.TB, cq *CQ, n int) []WorkCompletion {
	t.Helper()
	out := make([]WorkCompletion, 0, n)
	buf := make([]WorkCompletion, 16)
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n {
		k, err := cq.Poll(buf[:min(len(buf), n-len(out))])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d completions within 10 s: %+v", len(out), n, out)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	return out
}

// expectEmpty fails if cq holds a completion.
func expectEmpty(t testing.TB, cq *CQ) {
	t.Helper()
	if wcs := pollAll(t, cq); len(wcs) != 0 {
		t.Fatalf("unexpected completions %+v", wcs)
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// fill writes a pattern derived from seed, so that data from an earlier
// step can never pass for the current one.
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*31) ^ byte(i>>8) + seed
	}
}

// sgeList cuts n bytes at offset off of mr into up to parts SGEs of uneven
// lengths, leaving gap bytes between them, and returns the SGEs and the
// offsets (in mr) they cover. n = 0 gives no SGE at all.
func sgeList(mr *MR, off, n, parts, gap int) ([]SGE, [][2]int) {
	var (
		sges   []SGE
		ranges [][2]int
	)
	left := n
	for i := 0; left > 0; i++ {
		k := left
		if i < parts-1 {
			k = max(1, left/(parts-i)+i*3-1)
			k = min(k, left)
		}
		sges = append(sges, mr.SGE(off, k))
		ranges = append(ranges, [2]int{off, off + k})
		off += k + gap
		left -= k
	}
	return sges, ranges
}

// gather concatenates the bytes of buf that ranges cover.
func gather(buf []byte, ranges [][2]int) []byte {
	var out []byte
	for _, r := range ranges {
		out = append(out, buf[r[0]:r[1]]...)
	}
	return out
}

// goroutineBaseline returns a function that fails t unless the number of
// goroutines drops back to what it was when goroutineBaseline was called.
func goroutineBaseline(t testing.TB) func() {
	base := runtime.NumGoroutine()
	return func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for runtime.NumGoroutine() > base {
			if ctx.Err() != nil {
				buf := make([]byte, 1<<16)
				buf = buf[:runtime.Stack(buf, true)]
				t.Fatalf("%d goroutines, %d before the test:\n%s", runtime.NumGoroutine(), base, buf)
			}
			time.Sleep(time.Millisecond)
		}
	}
}
