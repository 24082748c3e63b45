package verbs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Buffer layout of the data tests: each end's 64 KiB region is cut into
// areas far enough apart for the largest message (3·4096+7 bytes with the
// gaps between SGEs).
const (
	srcOff   = 0      // gathered from by SENDs and WRITEs, READ source
	dstOff   = 16384  // WRITE target, READ scatter target
	recvOff  = 32768  // receive buffers
	guardLen = 64     // bytes checked untouched around every target
	sgeGap   = 5      // bytes skipped between the SGEs of a list
	extraCap = 13     // receive capacity beyond the message
	areaMax  = 0x3F00 // the largest span an area may use
)

// messageSizes are the sizes the issue asks for around the path MTU.
func messageSizes(mtu int) []int {
	return []int{0, 1, mtu - 1, mtu, mtu + 1, 3*mtu + 7}
}

// checkUntouched fails if buf[lo:hi] is not all want: bytes next to a
// target must not be written.
func checkUntouched(t *testing.T, what string, buf []byte, lo, hi int, want byte) {
	t.Helper()
	lo, hi = max(lo, 0), min(hi, len(buf))
	for i := lo; i < hi; i++ {
		if buf[i] != want {
			t.Fatalf("%s: byte %d is %#x, want %#x (untouched)", what, i, buf[i], want)
		}
	}
}

// checkBytes compares byte by byte and reports the first difference.
func checkBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d bytes, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: byte %d of %d is %#x, want %#x", what, i, len(got), got[i], want[i])
		}
	}
}

// TestE2EOpcodes moves every RC opcode across the MTU boundary with
// scatter/gather lists on both sides, and checks the data byte by byte and
// every field of both completions.
func TestE2EOpcodes(t *testing.T) {
	mtus := []MTU{MTU1024}
	if !testing.Short() {
		mtus = append(mtus, MTU256, MTU4096)
	}
	for _, mtu := range mtus {
		t.Run(mtu.String(), func(t *testing.T) {
			a, b := newEnd(t, "127.0.1.1", endOpts{}), newEnd(t, "127.0.1.2", endOpts{})
			la, lb := defaultLink(), defaultLink()
			la.mtu, lb.mtu = mtu, mtu
			connect(t, a, b, la, lb)
			seed := byte(0)
			for _, op := range []WROpcode{WRSend, WRSendWithImm, WRRDMAWrite, WRRDMAWriteWithImm, WRRDMARead} {
				for _, n := range messageSizes(mtu.Bytes()) {
					for _, parts := range []int{1, 3} {
						seed += 17
						t.Run(fmt.Sprintf("%v/%d/%dsge", op, n, parts), func(t *testing.T) {
							runOpcode(t, a, b, op, n, parts, seed)
						})
					}
				}
			}
		})
	}
}

// runOpcode performs one work request of n bytes from a to b and checks
// data, neighbouring bytes and completions.
func runOpcode(t *testing.T, a, b *rcEnd, op WROpcode, n, parts int, seed byte) {
	const imm = 0x01020304
	// Fresh patterns everywhere: sources carry the data, targets a filler
	// byte that must survive outside the message.
	const filler = 0xEE
	fill(a.buf[srcOff:srcOff+areaMax], seed)
	fill(b.buf[srcOff:srcOff+areaMax], seed+1)
	for _, e := range []*rcEnd{a, b} {
		for i := dstOff - guardLen; i < recvOff+areaMax; i++ {
			e.buf[i] = filler
		}
	}
	wrid := uint64(seed)<<16 | uint64(n)
	wr := SendWR{WRID: wrid, Opcode: op, SendFlags: SendSignaled}

	// Which side gathers and which scatters.
	var (
		srcBuf, dstBuf []byte
		srcRanges      [][2]int
		dstRanges      [][2]int
		wantWC         WCOpcode
		consumesRecv   = op == WRSend || op == WRSendWithImm || op == WRRDMAWriteWithImm
		recvRanges     [][2]int
	)
	switch op {
	case WRSend, WRSendWithImm:
		wr.SGList, srcRanges = sgeList(a.mr, srcOff, n, parts, sgeGap)
		srcBuf, dstBuf = a.buf, b.buf
		wantWC = WCSend
	case WRRDMAWrite, WRRDMAWriteWithImm:
		wr.SGList, srcRanges = sgeList(a.mr, srcOff, n, parts, sgeGap)
		srcBuf, dstBuf = a.buf, b.buf
		dstRanges = [][2]int{{dstOff, dstOff + n}}
		wr.RDMA = RDMAParams{RemoteAddr: b.mr.IOVA() + dstOff, RKey: b.mr.RKey()}
		wantWC = WCRDMAWrite
	case WRRDMARead:
		// The READ's SGEs are where the response is scattered.
		wr.SGList, dstRanges = sgeList(a.mr, dstOff, n, parts, sgeGap)
		srcBuf, dstBuf = b.buf, a.buf
		srcRanges = [][2]int{{srcOff, srcOff + n}}
		wr.RDMA = RDMAParams{RemoteAddr: b.mr.IOVA() + srcOff, RKey: b.mr.RKey()}
		wantWC = WCRDMARead
	}
	if op == WRSendWithImm || op == WRRDMAWriteWithImm {
		wr.ImmData = imm
	}
	if consumesRecv {
		// Capacity beyond the message, spread over parts SGEs too; the
		// last SGE carries the slack.
		var sges []SGE
		sges, recvRanges = sgeList(b.mr, recvOff, n+extraCap, parts, sgeGap)
		mustPostRecv(t, b.qp, RecvWR{WRID: ^wrid, SGList: sges})
		if op == WRSend || op == WRSendWithImm {
			dstRanges = recvRanges
		}
	}
	want := gather(srcBuf, srcRanges)
	mustPostSend(t, a.qp, wr)

	wc := waitWC(t, a.cq)
	wantFlags := WCFlags(0)
	if wr.ImmData != 0 {
		wantFlags = WCWithImm
	}
	if wc.WRID != wrid || wc.Status != WCSuccess || wc.Opcode != wantWC || wc.ByteLen != uint32(n) ||
		wc.QPNum != a.qp.QPN() || wc.WCFlags != wantFlags {
		t.Fatalf("requester completion %+v, want wr_id %d %v success byte_len %d qp %d flags %v",
			wc, wrid, wantWC, n, a.qp.QPN(), wantFlags)
	}
	if consumesRecv {
		rc := waitWC(t, b.cq)
		wantRecv := WCRecv
		if op == WRRDMAWriteWithImm {
			wantRecv = WCRecvRDMAWithImm
		}
		if rc.WRID != ^wrid || rc.Status != WCSuccess || rc.Opcode != wantRecv || rc.ByteLen != uint32(n) ||
			rc.QPNum != b.qp.QPN() || rc.SrcQP != a.qp.QPN() || rc.WCFlags != wantFlags || rc.ImmData != wr.ImmData {
			t.Fatalf("receive completion %+v, want wr_id %d %v byte_len %d qp %d src_qp %d flags %v imm %#x",
				rc, ^wrid, wantRecv, n, b.qp.QPN(), a.qp.QPN(), wantFlags, wr.ImmData)
		}
	}
	expectEmpty(t, a.cq)
	expectEmpty(t, b.cq)

	// Data: byte by byte, then everything around it.
	got := gather(dstBuf, dstRanges)
	if op == WRSend || op == WRSendWithImm {
		got = got[:n] // the receive buffer is bigger than the message
	}
	checkBytes(t, "payload", got, want)
	// Every target byte that is not payload keeps the filler: gaps
	// between SGEs, guards, the slack of the receive buffer, and the
	// receive buffer of a WRITE with immediate (which carries no data).
	covered := make([]bool, len(dstBuf))
	left := n
	for _, r := range dstRanges {
		for i := r[0]; i < r[1] && left > 0; i++ {
			covered[i] = true
			left--
		}
	}
	for i := dstOff - guardLen; i < recvOff+areaMax; i++ {
		if !covered[i] && dstBuf[i] != filler {
			t.Fatalf("byte %d outside the message changed to %#x", i, dstBuf[i])
		}
	}
	if op == WRRDMARead {
		// A READ must not touch the responder's memory around the source.
		checkUntouched(t, "responder target area", b.buf, dstOff-guardLen, recvOff+areaMax, filler)
	} else {
		checkUntouched(t, "requester target area", a.buf, dstOff-guardLen, recvOff+areaMax, filler)
	}
}

// TestE2EAtomics runs both atomics and checks the value returned, the value
// left in memory and the completion.
func TestE2EAtomics(t *testing.T) {
	a, b := newPair(t, endOpts{}, endOpts{})
	word := func(e *rcEnd, off int) uint64 { return binary.NativeEndian.Uint64(e.buf[off:]) }
	binary.NativeEndian.PutUint64(b.buf[dstOff:], 0x1111_0000_0000_0001)
	a.buf[srcOff+8] = 0xAB // the byte after the result must survive
	steps := []struct {
		op          WROpcode
		compareAdd  uint64
		swap        uint64
		wantOrig    uint64
		wantMem     uint64
		wantOpcode  WCOpcode
		description string
	}{
		{WRAtomicFetchAndAdd, 41, 0, 0x1111_0000_0000_0001, 0x1111_0000_0000_002A, WCFetchAdd, "add"},
		{WRAtomicFetchAndAdd, ^uint64(0x29), 0, 0x1111_0000_0000_002A, 0x1111_0000_0000_0000, WCFetchAdd, "add wraps"},
		{WRAtomicCmpAndSwp, 5, 99, 0x1111_0000_0000_0000, 0x1111_0000_0000_0000, WCCompSwap, "compare fails"},
		{WRAtomicCmpAndSwp, 0x1111_0000_0000_0000, 0xFEED_FACE_CAFE_BEEF, 0x1111_0000_0000_0000, 0xFEED_FACE_CAFE_BEEF, WCCompSwap, "compare matches"},
	}
	for i, s := range steps {
		binary.NativeEndian.PutUint64(a.buf[srcOff:], 0xDEAD)
		mustPostSend(t, a.qp, SendWR{WRID: uint64(i), Opcode: s.op, SendFlags: SendSignaled,
			SGList: []SGE{a.mr.SGE(srcOff, 8)},
			Atomic: AtomicParams{RemoteAddr: b.mr.IOVA() + dstOff, RKey: b.mr.RKey(), CompareAdd: s.compareAdd, Swap: s.swap}})
		wc := waitWC(t, a.cq)
		if wc.WRID != uint64(i) || wc.Status != WCSuccess || wc.Opcode != s.wantOpcode || wc.ByteLen != 8 || wc.QPNum != a.qp.QPN() {
			t.Fatalf("%s: completion %+v", s.description, wc)
		}
		if got := word(a, srcOff); got != s.wantOrig {
			t.Fatalf("%s: original value %#x, want %#x", s.description, got, s.wantOrig)
		}
		if got := word(b, dstOff); got != s.wantMem {
			t.Fatalf("%s: memory %#x, want %#x", s.description, got, s.wantMem)
		}
		if a.buf[srcOff+8] != 0xAB {
			t.Fatalf("%s: the byte after the result was overwritten", s.description)
		}
	}
	expectEmpty(t, b.cq) // atomics consume no receive
}

// TestE2EInline checks that inline data is captured at post time: the
// buffer is overwritten as soon as PostSend returns.
func TestE2EInline(t *testing.T) {
	a, b := newPair(t, endOpts{}, endOpts{})
	for i, op := range []WROpcode{WRSend, WRRDMAWrite, WRSendWithImm, WRRDMAWriteWithImm} {
		for _, n := range []int{1, 33, 64} {
			seed := byte(i*50 + n)
			fill(a.buf[:256], seed)
			sges, ranges := sgeList(a.mr, 0, n, 2, 3)
			want := gather(a.buf, ranges)
			clear(b.buf[recvOff : recvOff+256])
			clear(b.buf[dstOff : dstOff+256])
			consumes := op != WRRDMAWrite
			if consumes {
				mustPostRecv(t, b.qp, RecvWR{WRID: 7, SGList: []SGE{b.mr.SGE(recvOff, 256)}})
			}
			mustPostSend(t, a.qp, SendWR{WRID: uint64(n), Opcode: op, SendFlags: SendSignaled | SendInline,
				SGList: sges, ImmData: 9, RDMA: RDMAParams{RemoteAddr: b.mr.IOVA() + dstOff, RKey: b.mr.RKey()}})
			fill(a.buf[:256], seed+1) // too late to matter
			if wc := waitWC(t, a.cq); wc.Status != WCSuccess || wc.WRID != uint64(n) {
				t.Fatalf("%v inline %d: completion %+v", op, n, wc)
			}
			if consumes {
				if wc := waitWC(t, b.cq); wc.Status != WCSuccess || wc.ByteLen != uint32(n) {
					t.Fatalf("%v inline %d: receive completion %+v", op, n, wc)
				}
			}
			got := b.buf[dstOff : dstOff+n]
			if op == WRSend || op == WRSendWithImm {
				got = b.buf[recvOff : recvOff+n]
			}
			checkBytes(t, fmt.Sprintf("%v inline %d", op, n), got, want)
		}
	}
	// Inline is refused for READ and above max_inline_data.
	err := a.qp.PostSend(&SendWR{Opcode: WRRDMARead, SendFlags: SendInline, SGList: []SGE{a.mr.SGE(0, 8)}})
	wantErr(t, err, ErrInvalidArgument, "send_flags")
	err = a.qp.PostSend(&SendWR{Opcode: WRSend, SendFlags: SendInline, SGList: []SGE{a.mr.SGE(0, 65)}})
	wantErr(t, err, ErrInvalidArgument, "sg_list")
}

// TestE2EUnsignaled: successful unsignaled work requests complete silently,
// a later signaled one completes (and so vouches for them), and an
// unsignaled error still completes.
func TestE2EUnsignaled(t *testing.T) {
	a, b := newPair(t, endOpts{}, endOpts{})
	fill(a.buf[:4096], 3)
	for i := range 4 {
		mustPostSend(t, a.qp, SendWR{WRID: uint64(i), Opcode: WRRDMAWrite,
			SGList: []SGE{a.mr.SGE(i*1024, 1024)},
			RDMA:   RDMAParams{RemoteAddr: b.mr.IOVA() + dstOff + uint64(i)*1024, RKey: b.mr.RKey()}})
	}
	mustPostRecv(t, b.qp, RecvWR{WRID: 50, SGList: []SGE{b.mr.SGE(recvOff, 100)}})
	mustPostSend(t, a.qp, SendWR{WRID: 4, Opcode: WRSend, SGList: []SGE{a.mr.SGE(0, 100)}})
	mustPostSend(t, a.qp, SendWR{WRID: 5, Opcode: WRRDMARead, SendFlags: SendSignaled,
		SGList: []SGE{a.mr.SGE(dstOff, 8)}, RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}})
	if wc := waitWC(t, a.cq); wc.WRID != 5 || wc.Status != WCSuccess {
		t.Fatalf("completion %+v, want only the signaled wr_id 5", wc)
	}
	// Completions are in order: had the unsignaled ones produced any,
	// they would be in the CQ before wr_id 5.
	expectEmpty(t, a.cq)
	checkBytes(t, "unsignaled writes", b.buf[dstOff:dstOff+4096], a.buf[:4096])
	// The receiver always completes, signaled or not.
	if wc := waitWC(t, b.cq); wc.WRID != 50 || wc.Status != WCSuccess || wc.ByteLen != 100 {
		t.Fatalf("receive completion %+v", wc)
	}

	// An unsignaled error completes: a bad rkey.
	mustPostSend(t, a.qp, SendWR{WRID: 6, Opcode: WRRDMAWrite, SGList: []SGE{a.mr.SGE(0, 8)},
		RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey() ^ 0x40}})
	if wc := waitWC(t, a.cq); wc.WRID != 6 || wc.Status != WCRemAccessErr || wc.QPNum != a.qp.QPN() {
		t.Fatalf("unsignaled error completion %+v", wc)
	}
	// So does an unsignaled request flushed in ERR.
	mustPostSend(t, a.qp, SendWR{WRID: 7, Opcode: WRSend})
	if wc := waitWC(t, a.cq); wc.WRID != 7 || wc.Status != WCWRFlushErr {
		t.Fatalf("unsignaled flushed completion %+v", wc)
	}
}

// TestE2ESQSigAll: with sq_sig_all every request completes.
func TestE2ESQSigAll(t *testing.T) {
	a, b := newPair(t, endOpts{sqSigAll: true}, endOpts{})
	for i := range 3 {
		mustPostSend(t, a.qp, SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, SGList: []SGE{a.mr.SGE(0, 8)},
			RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}})
	}
	for i, wc := range waitN(t, a.cq, 3) {
		if wc.WRID != uint64(i) || wc.Status != WCSuccess {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
}

// TestE2ESolicitedEvents: a CQ armed for solicited events wakes on a
// solicited SEND or an error completion, not on an unsolicited SEND.
func TestE2ESolicitedEvents(t *testing.T) {
	a, b := newPair(t, endOpts{}, endOpts{channel: true})
	ch := b.cq.Channel()
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	// noEvent: GetEvent with a done context still returns a pending event,
	// so an expired context tells "no event" without waiting.
	noEvent := func(what string) {
		t.Helper()
		if cq, err := ch.GetEvent(expired); !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: GetEvent = %v, %v; want no event", what, cq, err)
		}
	}
	event := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cq, err := ch.GetEvent(ctx)
		if err != nil || cq != b.cq {
			t.Fatalf("%s: GetEvent = %v, %v; want the CQ", what, cq, err)
		}
		cq.AckEvents(1)
	}
	send := func(wrid uint64, flags SendFlags, n int) {
		t.Helper()
		mustPostSend(t, a.qp, SendWR{WRID: wrid, Opcode: WRSend, SendFlags: SendSignaled | flags, SGList: []SGE{a.mr.SGE(0, n)}})
	}
	for i := range 4 {
		mustPostRecv(t, b.qp, RecvWR{WRID: uint64(100 + i), SGList: []SGE{b.mr.SGE(recvOff, 64)}})
	}
	if err := b.cq.ReqNotify(true); err != nil {
		t.Fatal(err)
	}

	send(1, 0, 10)
	if wc := waitWC(t, b.cq); wc.WRID != 100 || wc.Status != WCSuccess {
		t.Fatalf("unsolicited receive %+v", wc)
	}
	waitWC(t, a.cq)
	noEvent("unsolicited SEND") // the completion was pushed before we polled it

	send(2, SendSolicited, 10)
	event("solicited SEND")
	if wc := waitWC(t, b.cq); wc.WRID != 101 || wc.Status != WCSuccess {
		t.Fatalf("solicited receive %+v", wc)
	}
	waitWC(t, a.cq)

	// Disarmed by the event: another solicited SEND does not wake.
	send(3, SendSolicited, 10)
	waitWC(t, b.cq)
	waitWC(t, a.cq)
	noEvent("solicited SEND on a disarmed CQ")

	// Armed again, an error completion wakes: a SEND longer than the
	// receive buffer fails the receive with LOC_LEN_ERR.
	if err := b.cq.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	send(4, 0, 100)
	event("error completion")
	if wc := waitWC(t, b.cq); wc.WRID != 103 || wc.Status != WCLocLenErr {
		t.Fatalf("too-long receive %+v", wc)
	}
	if wc := waitWC(t, a.cq); wc.WRID != 4 || wc.Status != WCRemInvReqErr {
		t.Fatalf("too-long send %+v", wc)
	}
}
