package transport

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/wire"
)

// psnOf returns the PSN of a delivered-log entry relative to base.
func logPSN(entry string) string { return entry[strings.LastIndexByte(entry, '@')+1:] }

// TestRetryExhaustion: with nothing getting through, the first packet is
// sent once, then in retry_cnt retransmission rounds (7 means 7 retries,
// not infinite), each sending it three times, from the second round on
// four times (QP.retry), then the oldest WQE fails with RETRY_EXC_ERR and
// the rest flush.
func TestRetryExhaustion(t *testing.T) {
	for retry := uint8(0); retry <= 7; retry++ {
		t.Run(fmt.Sprint(retry), func(t *testing.T) {
			o := defaultOpts()
			o.retryCnt = retry
			o.timeout = 10 // 4.19 ms
			a, b := newPair(t, o)
			l := newLink(t, a, b)
			sent := 0
			l.drop = func(from *endpoint, p *wire.Packet) bool {
				if from == a && p.BTH.PSN() == base {
					sent++
				}
				return true
			}
			rkey := b.mem.register(pd, make([]byte, 8), 0, ibv.AccessRemoteWrite)
			start := l.now
			l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendInline, Inline: []byte{1}, RKey: rkey})
			l.post(a, SendWQE{WRID: 2, Opcode: ibv.WRSend})
			l.post(a, SendWQE{WRID: 3, Opcode: ibv.WRRDMARead, RKey: rkey})
			l.run(time.Hour)
			want := 1
			for i := 1; i <= int(retry); i++ {
				want += min(2+i, 4)
			}
			if sent != want {
				t.Errorf("first packet sent %d times, want %d", sent, want)
			}
			wantCompletions(t, a.scq.take(),
				Completion{WRID: 1, Status: ibv.WCRetryExcErr, Opcode: ibv.WCRDMAWrite, QPN: qpnA},
				Completion{WRID: 2, Status: ibv.WCWRFlushErr, Opcode: ibv.WCSend, QPN: qpnA},
				Completion{WRID: 3, Status: ibv.WCWRFlushErr, Opcode: ibv.WCRDMARead, QPN: qpnA})
			if a.qp.State() != ibv.QPStateErr {
				t.Errorf("state %v", a.qp.State())
			}
			c := a.qp.Counters()
			if c.RetryExceeded != 1 || c.Timeouts != uint64(retry)+1 || c.CompleterRetry != uint64(retry) {
				t.Errorf("counters %+v", c)
			}
			timeout := a.qp.timeoutDuration()
			if got, want := l.now.Sub(start), time.Duration(retry+1)*timeout; got != want {
				t.Errorf("gave up after %v, want %v", got, want)
			}
			if _, armed := a.qp.Deadline(); armed {
				t.Error("a timer is still armed in ERR")
			}
		})
	}
}

// TestTimeoutGoBackN: the ACK of a multi-packet WRITE is lost; the timer
// fires and the requester resends the whole unacknowledged message, its
// first packet three times.
func TestTimeoutGoBackN(t *testing.T) {
	o := defaultOpts()
	o.mtu = 256
	a, b := newPair(t, o)
	l := newLink(t, a, b)
	acks := 0
	l.drop = func(from *endpoint, p *wire.Packet) bool {
		if from == b {
			acks++
			return acks == 1
		}
		return false
	}
	n := 4*256 + 1
	src := pattern(n, 2)
	dst := make([]byte, n)
	rkey := b.mem.register(pd, dst, 0, ibv.AccessRemoteWrite)
	l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled, SGL: []SGE{{0, uint32(n), a.mem.register(pd, src, 0, 0)}}, RKey: rkey})
	start := l.now
	l.run(time.Second)
	wantBytes(t, "target", dst, src)
	wantCompletions(t, a.scq.take(), Completion{WRID: 1, Opcode: ibv.WCRDMAWrite, ByteLen: uint32(n), QPN: qpnA})
	if got := countOps(l.log, "a", "WRITE"); got != 12 {
		t.Errorf("%d WRITE packets, want 12 (5 + 7 again): %v", got, l.log)
	}
	if c := a.qp.Counters(); c.Timeouts != 1 || c.CompleterRetry != 1 {
		t.Errorf("counters %+v", c)
	}
	if c := b.qp.Counters(); c.DuplicateRequest != 7 {
		t.Errorf("responder counted %d duplicates", c.DuplicateRequest)
	}
	if got := l.now.Sub(start); got != a.qp.timeoutDuration() {
		t.Errorf("recovered after %v", got)
	}
	checkIdle(t, a, b)
}

// TestSequenceNakResumes: a lost middle packet draws one sequence NAK; the
// requester resumes from the NAKed PSN at once (no timeout), resending only
// what was not acknowledged, the NAKed packet three times.
func TestSequenceNakResumes(t *testing.T) {
	o := defaultOpts()
	o.mtu = 256
	a, b := newPair(t, o)
	must(t, a.qp.SetAckEvery(2))
	l := newLink(t, a, b)
	dropped := false
	l.drop = func(from *endpoint, p *wire.Packet) bool {
		if from == a && p.BTH.PSN() == base.Add(4) && !dropped {
			dropped = true
			return true
		}
		return false
	}
	n := 6 * 256
	src := pattern(n, 4)
	dst := make([]byte, n)
	rkey := b.mem.register(pd, dst, 0, ibv.AccessRemoteWrite)
	l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled, SGL: []SGE{{0, uint32(n), a.mem.register(pd, src, 0, 0)}}, RKey: rkey})
	start := l.now
	l.run(time.Second)
	wantBytes(t, "target", dst, src)
	wantCompletions(t, a.scq.take(), Completion{WRID: 1, Opcode: ibv.WCRDMAWrite, ByteLen: uint32(n), QPN: qpnA})
	var psns []string
	for _, e := range l.log {
		if strings.HasPrefix(e, "a>") {
			psns = append(psns, logPSN(e))
		}
	}
	want := []string{}
	for _, i := range []uint32{0, 1, 2, 3, 5, 4, 4, 4, 5} {
		want = append(want, base.Add(i).String())
	}
	eq(t, "PSNs sent", psns, want...)
	if l.now != start {
		t.Errorf("recovery waited %v", l.now.Sub(start))
	}
	if c := a.qp.Counters(); c.RcvdSeqErr != 1 || c.CompleterRetry != 1 || c.Timeouts != 0 {
		t.Errorf("counters %+v", c)
	}
	checkIdle(t, a, b)
}

// TestReadResumesPartially: a lost READ response makes the requester
// re-request only the missing bytes, at the PSN of the first missing
// response, with an adjusted RETH: at once when the next response shows the
// gap, the request three times (QP.lostResponse).
func TestReadResumesPartially(t *testing.T) {
	o := defaultOpts()
	o.mtu = 256
	a, b := newPair(t, o)
	l := newLink(t, a, b)
	n := 5*256 - 3
	src := pattern(n, 8)
	rkey := b.mem.register(pd, src, 0x4000, ibv.AccessRemoteRead)
	dst := make([]byte, n)
	var reads []wire.RETHFields
	dropped := false
	l.drop = func(from *endpoint, p *wire.Packet) bool {
		if from == a && p.BTH.Opcode() == wire.RCRDMAReadRequest {
			reads = append(reads, p.RETH.Fields())
			if p.BTH.PSN() != base.Add(min(uint32(len(reads)-1), 1)*2) {
				t.Errorf("READ request %d at PSN %v", len(reads), p.BTH.PSN())
			}
		}
		if from == b && p.BTH.PSN() == base.Add(2) && !dropped {
			dropped = true
			return true
		}
		return false
	}
	l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRRDMARead, Flags: ibv.SendSignaled, SGL: splitSGL(a.mem, dst, 0, ibv.AccessLocalWrite), RemoteAddr: 0x4000, RKey: rkey})
	l.run(time.Second)
	wantBytes(t, "read", dst, src)
	wantCompletions(t, a.scq.take(), Completion{WRID: 1, Opcode: ibv.WCRDMARead, ByteLen: uint32(n), QPN: qpnA})
	if len(reads) != 4 || reads[0] != (wire.RETHFields{VA: 0x4000, RKey: rkey, DMALength: uint32(n)}) ||
		reads[1] != (wire.RETHFields{VA: 0x4000 + 512, RKey: rkey, DMALength: uint32(n - 512)}) ||
		reads[2] != reads[1] || reads[3] != reads[1] {
		t.Errorf("READ requests %+v", reads)
	}
	if got := countOps(l.log, "b", "READ_RESPONSE"); got != 4+3*3 {
		t.Errorf("%d responses delivered: %v", got, l.log)
	}
	checkIdle(t, a, b)
}

// TestRNRRetry: the requester waits the responder's RNR time and retries;
// rnr_retry n gives up after n retries with RNR_RETRY_EXC_ERR, 7 never.
func TestRNRRetry(t *testing.T) {
	for retry := uint8(0); retry <= 7; retry++ {
		t.Run(fmt.Sprint(retry), func(t *testing.T) {
			o := defaultOpts()
			o.rnrRetry = retry
			o.minRNR = 1 // 10 µs
			a, b := newPair(t, o)
			l := newLink(t, a, b)
			start := l.now
			l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRSendWithImm, Flags: ibv.SendSignaled, Imm: 3})
			l.post(a, SendWQE{WRID: 2, Opcode: ibv.WRSend, Flags: ibv.SendSignaled})
			l.run(time.Millisecond)
			naks := int(b.qp.Counters().RNRNakSent)
			if retry < 7 {
				if naks != int(retry)+1 {
					t.Errorf("%d RNR NAKs, want %d", naks, retry+1)
				}
				wantCompletions(t, a.scq.take(),
					Completion{WRID: 1, Status: ibv.WCRNRRetryExcErr, Opcode: ibv.WCSend, QPN: qpnA},
					Completion{WRID: 2, Status: ibv.WCWRFlushErr, Opcode: ibv.WCSend, QPN: qpnA})
				if got, want := l.now.Sub(start), time.Duration(retry)*10*time.Microsecond; got != want {
					t.Errorf("gave up after %v, want %v", got, want)
				}
				return
			}
			if naks < 50 {
				t.Fatalf("only %d RNR NAKs in 1 ms with rnr_retry 7", naks)
			}
			l.recv(b, 10)
			l.recv(b, 11)
			l.run(time.Millisecond)
			wantCompletions(t, a.scq.take(),
				Completion{WRID: 1, Opcode: ibv.WCSend, QPN: qpnA, Flags: ibv.WCWithImm},
				Completion{WRID: 2, Opcode: ibv.WCSend, QPN: qpnA})
			wantCompletions(t, b.rcq.take(),
				Completion{WRID: 10, Opcode: ibv.WCRecv, QPN: qpnB, SrcQP: qpnA, Imm: 3, Flags: ibv.WCWithImm},
				Completion{WRID: 11, Opcode: ibv.WCRecv, QPN: qpnB, SrcQP: qpnA})
			checkIdle(t, a, b)
		})
	}
}

// TestRNRThenSequenceNak: packets sent after an RNR-NAKed one draw a
// sequence NAK, which must not cut the RNR wait short nor spend retry_cnt.
func TestRNRThenSequenceNak(t *testing.T) {
	o := defaultOpts()
	o.minRNR = 14 // 1.28 ms
	a, b := newPair(t, o)
	l := newLink(t, a, b)
	for i := range 3 {
		l.post(a, SendWQE{WRID: uint64(i), Opcode: ibv.WRSend, Flags: ibv.SendSignaled})
	}
	start := l.now
	l.step() // three SENDs out
	l.step() // RNR NAK and sequence NAK back
	if s := a.qp.Snapshot(); !s.RNRWait || s.RetryLeft != 7 || s.RNRRetryLeft != 7 {
		t.Fatalf("after RNR + sequence NAK: %+v", s)
	}
	for i := range 3 {
		l.recv(b, uint64(10+i))
	}
	l.run(time.Second)
	if got := l.now.Sub(start); got != wire.RNRDelay(14) {
		t.Errorf("resumed after %v", got)
	}
	if len(a.scq.take()) != 3 || len(b.rcq.take()) != 3 {
		t.Fatal("missing completions")
	}
	checkIdle(t, a, b)
}

// TestStaleResponses: duplicate ACKs, ACKs ahead of anything sent and READ
// responses out of order change nothing.
func TestStaleResponses(t *testing.T) {
	a, b := newPair(t, defaultOpts())
	l := newLink(t, a, b)
	rkey := b.mem.register(pd, make([]byte, 4096), 0, ibv.AccessRemoteWrite|ibv.AccessRemoteRead)
	l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled, RKey: rkey})
	ack := func(p uint32, op wire.Opcode) []byte {
		h := wire.Headers{BTH: wire.BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: qpnA, PSN: base.Add(p)},
			AETH: wire.AETHFields{Syndrome: wire.SyndromeAckUnlimited}}
		return wire.AppendHeaders(nil, &h)
	}
	a.out.Reset()
	eq(t, "ahead", l.inject(b, a, ack(1, wire.RCAcknowledge)))
	if a.qp.Snapshot().SQDepth != 1 {
		t.Fatal("an ACK ahead of anything sent completed a WQE")
	}
	eq(t, "ack", l.inject(b, a, ack(0, wire.RCAcknowledge)))
	eq(t, "duplicate", l.inject(b, a, ack(0, wire.RCAcknowledge)))
	wantCompletions(t, a.scq.take(), Completion{WRID: 1, Opcode: ibv.WCRDMAWrite, QPN: qpnA})
	// A READ response at a PSN after the expected one is dropped, and the
	// missing one re-requested at once (QP.lostResponse), three times.
	dst := make([]byte, 2048)
	l.post(a, SendWQE{WRID: 2, Opcode: ibv.WRRDMARead, Flags: ibv.SendSignaled, SGL: []SGE{{0, 2048, a.mem.register(pd, dst, 0, ibv.AccessLocalWrite)}}, RKey: rkey})
	a.out.Reset()
	last := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadResponseLast, PKey: 0xFFFF, DestQP: qpnA, PSN: base.Add(2)},
		AETH: wire.AETHFields{Syndrome: wire.SyndromeAckUnlimited}}
	eq(t, "out of order", l.inject(b, a, append(wire.AppendHeaders(nil, &last), make([]byte, 1024)...)),
		"RC RDMA_READ_REQUEST@1", "RC RDMA_READ_REQUEST@1", "RC RDMA_READ_REQUEST@1")
	if c := a.qp.Counters(); c.StaleResponses != 3 || a.qp.Snapshot().SQDepth != 1 {
		t.Fatalf("counters %+v", c)
	}
}

// TestBadResponse: a READ response of the wrong length is a protocol error.
func TestBadResponse(t *testing.T) {
	a, b := newPair(t, defaultOpts())
	l := newLink(t, a, b)
	dst := make([]byte, 100)
	l.post(a, SendWQE{WRID: 2, Opcode: ibv.WRRDMARead, SGL: []SGE{{0, 100, a.mem.register(pd, dst, 0, ibv.AccessLocalWrite)}}, RKey: 1})
	a.out.Reset()
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadResponseOnly, PKey: 0xFFFF, DestQP: qpnA, PSN: base},
		AETH: wire.AETHFields{Syndrome: wire.SyndromeAckUnlimited}}
	l.inject(b, a, append(wire.AppendHeaders(nil, &h), make([]byte, 96)...))
	wantCompletions(t, a.scq.take(), Completion{WRID: 2, Status: ibv.WCBadRespErr, Opcode: ibv.WCRDMARead, QPN: qpnA})
}

// TestLocalProtectionError: a WQE whose lkey is bad fails with LOC_PROT_ERR
// after the WQEs before it complete, sends nothing, and the QP errors.
func TestLocalProtectionError(t *testing.T) {
	for _, op := range []ibv.WROpcode{ibv.WRSend, ibv.WRRDMAWrite, ibv.WRRDMARead} {
		t.Run(fmt.Sprint(op), func(t *testing.T) {
			a, b := newPair(t, defaultOpts())
			l := newLink(t, a, b)
			rkey := b.mem.register(pd, make([]byte, 64), 0, ibv.AccessRemoteWrite|ibv.AccessRemoteRead)
			l.recv(b, 1)
			src := a.mem.register(pd, make([]byte, 64), 0, 0) // no LOCAL_WRITE
			l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled, RKey: rkey, SGL: []SGE{{0, 8, src}}})
			bad := SendWQE{WRID: 2, Opcode: op, RKey: rkey, SGL: []SGE{{0, 8, src}, {0, 8, src + 0x100}}}
			if op == ibv.WRRDMARead {
				bad.SGL = []SGE{{0, 8, src}} // lacks LOCAL_WRITE
			}
			l.post(a, bad)
			l.post(a, SendWQE{WRID: 3, Opcode: ibv.WRSend})
			l.run(time.Second)
			wantCompletions(t, a.scq.take(),
				Completion{WRID: 1, Opcode: ibv.WCRDMAWrite, ByteLen: 8, QPN: qpnA},
				Completion{WRID: 2, Status: ibv.WCLocProtErr, Opcode: wcOpcode(op), QPN: qpnA},
				Completion{WRID: 3, Status: ibv.WCWRFlushErr, Opcode: ibv.WCSend, QPN: qpnA})
			if got := countOps(l.log, "a", ""); got != 1 {
				t.Errorf("%d packets sent, want 1", got)
			}
		})
	}
}

// TestResponderLocalErrors: a SEND the responder cannot place fails on both
// sides: LOC_PROT_ERR on the receive, REM_OP_ERR on the send; a SEND longer
// than the receive buffer gives LOC_LEN_ERR and REM_INV_REQ_ERR.
func TestResponderLocalErrors(t *testing.T) {
	tests := []struct {
		name             string
		recvLen          uint32
		recvKeyOK        bool
		sendSt, recvStat ibv.WCStatus
	}{
		{"bad receive lkey", 64, false, ibv.WCRemOpErr, ibv.WCLocProtErr},
		{"receive too short", 7, true, ibv.WCRemInvReqErr, ibv.WCLocLenErr},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newPair(t, defaultOpts())
			l := newLink(t, a, b)
			key := b.mem.register(pd, make([]byte, 64), 0, ibv.AccessLocalWrite)
			if !tc.recvKeyOK {
				key += 0x100
			}
			l.recv(b, 1, SGE{0, tc.recvLen, key})
			l.recv(b, 2, SGE{0, 64, key})
			l.post(a, SendWQE{WRID: 7, Opcode: ibv.WRSend, Flags: ibv.SendInline, Inline: make([]byte, 8)})
			l.run(time.Second)
			wantCompletions(t, a.scq.take(), Completion{WRID: 7, Status: tc.sendSt, Opcode: ibv.WCSend, QPN: qpnA})
			wantCompletions(t, b.rcq.take(),
				Completion{WRID: 1, Status: tc.recvStat, Opcode: ibv.WCRecv, QPN: qpnB},
				Completion{WRID: 2, Status: ibv.WCWRFlushErr, Opcode: ibv.WCRecv, QPN: qpnB})
		})
	}
}

// TestFenceAndRdAtomicLimit: max_rd_atomic bounds outstanding READs; a
// fenced WQE waits for earlier READs to complete.
func TestFenceAndRdAtomicLimit(t *testing.T) {
	o := defaultOpts()
	o.rdAtomic = 2
	a, b := newPair(t, o)
	l := newLink(t, a, b)
	mem := make([]byte, 64)
	rkey := b.mem.register(pd, mem, 0, ibv.AccessRemoteWrite|ibv.AccessRemoteRead)
	lk := a.mem.register(pd, make([]byte, 64), 0, ibv.AccessLocalWrite)
	for i := range 3 {
		l.post(a, SendWQE{WRID: uint64(i), Opcode: ibv.WRRDMARead, SGL: []SGE{{0, 8, lk}}, RKey: rkey})
	}
	l.post(a, SendWQE{WRID: 3, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendFence | ibv.SendInline, Inline: []byte{1}, RKey: rkey})
	var ops []string
	for _, p := range a.out.Packets() {
		ops = append(ops, l.parse(a, p.Bytes).BTH.Opcode().String())
	}
	eq(t, "first burst", ops, "RC RDMA_READ_REQUEST", "RC RDMA_READ_REQUEST")
	if s := a.qp.Snapshot(); s.RdAtomicOut != 2 {
		t.Fatalf("%d outstanding", s.RdAtomicOut)
	}
	l.step() // requests to b, responses back: the third READ goes, the WRITE waits
	ops = nil
	for _, p := range a.out.Packets() {
		ops = append(ops, l.parse(a, p.Bytes).BTH.Opcode().String())
	}
	eq(t, "second burst", ops, "RC RDMA_READ_REQUEST")
	l.run(time.Second)
	if mem[0] != 1 || a.qp.Snapshot().SQDepth != 0 {
		t.Fatal("fenced WRITE not done")
	}
}

// TestWindow: at most the path MTU's default window of PSNs are
// unacknowledged: MaxDefaultWindow at MTU 256.
func TestWindow(t *testing.T) {
	o := defaultOpts()
	o.mtu = 256
	a, b := newPair(t, o)
	l := newLink(t, a, b)
	window := MaxDefaultWindow
	n := (window + 44) * 256
	dst := make([]byte, n)
	rkey := b.mem.register(pd, dst, 0, ibv.AccessRemoteWrite)
	src := pattern(n, 1)
	l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled, SGL: []SGE{{0, uint32(n), a.mem.register(pd, src, 0, 0)}}, RKey: rkey})
	if got := a.out.Len(); got != window {
		t.Fatalf("first burst of %d packets, want %d", got, window)
	}
	l.run(time.Second)
	wantBytes(t, "target", dst, src)
	checkIdle(t, a, b)
}

func TestPostErrors(t *testing.T) {
	e := newEndpoint("a", qpnA, defaultOpts(), nil)
	qp := e.qp
	var out Output
	now := time.Unix(0, 0)
	w := &SendWQE{Opcode: ibv.WRSend}
	for _, s := range []ibv.QPState{ibv.QPStateReset, ibv.QPStateInit, ibv.QPStateRTR} {
		qp.SetState(s)
		if err := qp.PostSend(w, now, &out); err != ErrQPState {
			t.Errorf("PostSend in %v: %v", s, err)
		}
	}
	qp.SetState(ibv.QPStateReset)
	if err := qp.PostRecv(&RecvWQE{}); err != ErrQPState {
		t.Errorf("PostRecv in RESET: %v", err)
	}
	qp.SetState(ibv.QPStateInit)
	for i := range 64 {
		must(t, qp.PostRecv(&RecvWQE{WRID: uint64(i)}))
	}
	if err := qp.PostRecv(&RecvWQE{}); err != ErrRecvQueueFull {
		t.Errorf("full RQ: %v", err)
	}
	if err := qp.PostRecv(&RecvWQE{SGL: make([]SGE, 5)}); err != ErrTooManySGE {
		t.Errorf("5 SGEs: %v", err)
	}
	qp.SetState(ibv.QPStateRTR)
	qp.SetState(ibv.QPStateRTS)
	cases := []struct {
		w   SendWQE
		err error
	}{
		{SendWQE{Opcode: 12}, ErrBadOpcode},
		{SendWQE{Opcode: ibv.WRLocalInv, SGL: []SGE{{Length: 8}}}, ErrBadOpcode},
		{SendWQE{Opcode: ibv.WRAtomicWrite, SGL: []SGE{{Length: 4}}}, ErrBadAtomicSGL},
		{SendWQE{Opcode: ibv.WRSend, SGL: make([]SGE, 5)}, ErrTooManySGE},
		{SendWQE{Opcode: ibv.WRRDMARead, Flags: ibv.SendInline}, ErrBadOpcode},
		{SendWQE{Opcode: ibv.WRAtomicFetchAndAdd, SGL: []SGE{{Length: 4}}}, ErrBadAtomicSGL},
		{SendWQE{Opcode: ibv.WRSend, SGL: []SGE{{Length: 1 << 31}, {Length: 1}}}, ErrTooLong},
	}
	for _, c := range cases {
		if err := qp.PostSend(&c.w, now, &out); err != c.err {
			t.Errorf("%+v: %v, want %v", c.w, err, c.err)
		}
	}
	must(t, qp.SetMaxRdAtomic(0))
	if err := qp.PostSend(&SendWQE{Opcode: ibv.WRRDMARead}, now, &out); err != ErrNoRdAtomic {
		t.Errorf("READ with max_rd_atomic 0: %v", err)
	}
	for i := range 64 {
		must(t, qp.PostSend(&SendWQE{WRID: uint64(i), Opcode: ibv.WRSend}, now, &out))
	}
	if err := qp.PostSend(w, now, &out); err != ErrSendQueueFull {
		t.Errorf("full SQ: %v", err)
	}
	for _, bad := range []error{qp.SetPathMTU(1000), qp.SetTimeout(32), qp.SetRetryCnt(8), qp.SetRNRRetry(8), qp.SetMinRNRTimer(32), qp.SetMaxUnackedPSNs(0), qp.SetAckEvery(0)} {
		if bad != ErrBadAttr {
			t.Errorf("bad attribute accepted: %v", bad)
		}
	}
	srq := NewSRQ(2, 1)
	must(t, srq.PostRecv(&RecvWQE{}))
	must(t, srq.PostRecv(&RecvWQE{}))
	if err := srq.PostRecv(&RecvWQE{}); err != ErrSRQFull {
		t.Errorf("full SRQ: %v", err)
	}
	if err := srq.PostRecv(&RecvWQE{SGL: make([]SGE, 2)}); err != ErrTooManySGE {
		t.Errorf("SRQ SGEs: %v", err)
	}
}

// TestFlushExactlyOnce: moving to ERR completes every outstanding send and
// receive WQE once, in order, whatever its progress; later posts flush at
// once.
func TestFlushExactlyOnce(t *testing.T) {
	a, b := newPair(t, defaultOpts())
	l := newLink(t, a, b)
	rkey := b.mem.register(pd, make([]byte, 64), 0, ibv.AccessRemoteWrite)
	for i := range 4 {
		l.post(a, SendWQE{WRID: uint64(i), Opcode: ibv.WRRDMAWrite, RKey: rkey})
	}
	l.drop = func(from *endpoint, _ *wire.Packet) bool { return from == b }
	l.step() // b got them; its ACK is lost
	for i := range 3 {
		l.recv(a, uint64(100+i))
	}
	a.qp.SetState(ibv.QPStateErr)
	a.qp.Flush()
	var want []Completion
	for i := range 4 {
		want = append(want, Completion{WRID: uint64(i), Status: ibv.WCWRFlushErr, Opcode: ibv.WCRDMAWrite, QPN: qpnA})
	}
	wantCompletions(t, a.scq.take(), want...)
	want = nil
	for i := range 3 {
		want = append(want, Completion{WRID: uint64(100 + i), Status: ibv.WCWRFlushErr, Opcode: ibv.WCRecv, QPN: qpnA})
	}
	wantCompletions(t, a.rcq.take(), want...)
	must(t, a.qp.PostSend(&SendWQE{WRID: 9, Opcode: ibv.WRRDMARead}, l.now, &a.out))
	must(t, a.qp.PostRecv(&RecvWQE{WRID: 10}))
	wantCompletions(t, a.scq.take(), Completion{WRID: 9, Status: ibv.WCWRFlushErr, Opcode: ibv.WCRDMARead, QPN: qpnA})
	wantCompletions(t, a.rcq.take(), Completion{WRID: 10, Status: ibv.WCWRFlushErr, Opcode: ibv.WCRecv, QPN: qpnA})
	if a.out.Len() != 0 {
		t.Fatal("an errored QP sent packets")
	}
	// RESET forgets everything without completions; the QP can be reused.
	a.qp.SetState(ibv.QPStateReset)
	if s := a.qp.Snapshot(); s.SQDepth != 0 || s.RQDepth != 0 {
		t.Fatalf("after RESET: %+v", s)
	}
}

// TestSRQHeldWQEFlushed: a multi-packet SEND holding an SRQ WQE when the QP
// errors completes it with WR_FLUSH_ERR; the others stay in the SRQ.
func TestSRQHeldWQEFlushed(t *testing.T) {
	o := defaultOpts()
	o.mtu = 256
	o.srq = true
	a, b := newPair(t, o)
	l := newLink(t, a, b)
	must(t, b.qp.srq.(*SRQ).PostRecv(&RecvWQE{WRID: 1}))
	must(t, b.qp.srq.(*SRQ).PostRecv(&RecvWQE{WRID: 2}))
	l.inject(a, b, req(wire.RCSendFirst, base, false, make([]byte, 256), nil))
	// The empty receive buffer is too short: LOC_LEN_ERR.
	wantCompletions(t, b.rcq.take(), Completion{WRID: 1, Status: ibv.WCLocLenErr, Opcode: ibv.WCRecv, QPN: qpnB})
	if b.qp.srq.(*SRQ).Len() != 1 {
		t.Fatalf("SRQ holds %d", b.qp.srq.(*SRQ).Len())
	}
	o.srq = true
	c, d := newPair(t, o)
	l = newLink(t, c, d)
	buf := d.mem.register(pd, make([]byte, 1024), 0, ibv.AccessLocalWrite)
	must(t, d.qp.srq.(*SRQ).PostRecv(&RecvWQE{WRID: 1, SGL: []SGE{{0, 1024, buf}}}))
	must(t, d.qp.srq.(*SRQ).PostRecv(&RecvWQE{WRID: 2, SGL: []SGE{{0, 1024, buf}}}))
	l.inject(c, d, req(wire.RCSendFirst, base, false, make([]byte, 256), nil))
	d.qp.SetState(ibv.QPStateErr)
	wantCompletions(t, d.rcq.take(), Completion{WRID: 1, Status: ibv.WCWRFlushErr, Opcode: ibv.WCRecv, QPN: qpnB})
	if d.qp.srq.(*SRQ).Len() != 1 {
		t.Fatalf("SRQ holds %d", d.qp.srq.(*SRQ).Len())
	}
}

// TestCQOverflow: a full CQ moves the QP to ERR.
func TestCQOverflow(t *testing.T) {
	a, b := newPair(t, defaultOpts())
	l := newLink(t, a, b)
	b.rcq.limit = 1
	for i := range 3 {
		l.recv(b, uint64(i))
		l.post(a, SendWQE{WRID: uint64(i), Opcode: ibv.WRSend})
	}
	l.run(time.Second)
	if b.qp.State() != ibv.QPStateErr || b.qp.Counters().CQOverflow == 0 {
		t.Fatalf("state %v counters %+v", b.qp.State(), b.qp.Counters())
	}
}

// TestSQD: in SQD the requester finishes nothing new; back in RTS it goes on.
func TestSQD(t *testing.T) {
	a, b := newPair(t, defaultOpts())
	l := newLink(t, a, b)
	a.qp.SetState(ibv.QPStateSQD)
	l.recv(b, 1)
	l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRSend, Flags: ibv.SendSignaled})
	if a.out.Len() != 0 {
		t.Fatal("SQD started a WQE")
	}
	a.qp.SetState(ibv.QPStateRTS)
	if d, ok := a.qp.Deadline(); !ok || d.After(l.now) {
		t.Fatalf("back in RTS with work queued: Deadline %v %v", d, ok)
	}
	l.run(time.Second)
	wantCompletions(t, a.scq.take(), Completion{WRID: 1, Opcode: ibv.WCSend, QPN: qpnA})
}
