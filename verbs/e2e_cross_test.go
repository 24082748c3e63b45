package verbs_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// The cross tests run in two processes at once (rdmatest.CrossRun,
// GOROCE_TEST_CROSS), one end in each, every case in both directions: on
// the host's goroce device against rxe0 in the VM through the hardware
// backend (test/hw/cross.sh), or between two processes' goroce devices
// (TestE2ECrossProcesses). Both processes run the code below; x.Requester
// says which half is this one's. Each case checks the data the peer
// placed, or will check, byte by byte, and both ends' completions.

const (
	crossImm    = 0xC0FFEE01
	crossFiller = 0xEE
	crossAtomic = 0x1122334455667788 // the responder's 8 bytes at dstOff before an atomic
	crossSwap   = 0x0102030405060708
	crossAdd    = 0x10001
)

// crossSeed makes a case's pattern, the same in both processes.
func crossSeed(op verbs.WROpcode, n int) byte { return byte(op)*31 + byte(n) }

// crossConsumesRecv tells whether op consumes a receive at the responder.
func crossConsumesRecv(op verbs.WROpcode) bool {
	return op == verbs.WRSend || op == verbs.WRSendWithImm || op == verbs.WRRDMAWriteWithImm
}

// TestCrossRC moves every RC opcode between the processes, in one packet
// and in five (1024-byte path MTU).
func TestCrossRC(t *testing.T) {
	rdmatest.SkipUnlessCross(t)
	cases := []crossCase{
		{verbs.WRSend, []int{1, 4*1024 + 7}},
		{verbs.WRSendWithImm, []int{0, 4*1024 + 7}},
		{verbs.WRRDMAWrite, []int{1, 4*1024 + 7}},
		{verbs.WRRDMAWriteWithImm, []int{0, 4*1024 + 7}},
		{verbs.WRRDMARead, []int{1, 4*1024 + 7}},
		{verbs.WRAtomicCmpAndSwp, []int{8}},
		{verbs.WRAtomicFetchAndAdd, []int{8}},
	}
	crossOps(t, rdmatest.EndOptions{}, cases)
}

// crossCase is an opcode and the sizes it moves.
type crossCase struct {
	op    verbs.WROpcode
	sizes []int
}

// crossOps runs each case's opcode and sizes on connected Ends of o.
func crossOps(t *testing.T, o rdmatest.EndOptions, cases []crossCase) {
	for _, c := range cases {
		for _, n := range c.sizes {
			t.Run(fmt.Sprintf("%v/%d", c.op, n), func(t *testing.T) {
				rdmatest.CrossRun(t, func(t *testing.T, x *rdmatest.Cross) {
					e := x.Connect(o)
					if x.Requester {
						crossRequest(t, x, e, c.op, n)
					} else {
						crossRespond(t, x, e, c.op, n)
					}
				})
			})
		}
	}
}

// TestCrossUC moves UC's opcodes (SEND and WRITE, with and without
// immediate) between the processes, in one packet and in five.
func TestCrossUC(t *testing.T) {
	rdmatest.SkipUnlessCross(t)
	sizes := []int{1, 4*1024 + 7}
	crossOps(t, rdmatest.EndOptions{Type: verbs.QPTypeUC}, []crossCase{
		{verbs.WRSend, sizes}, {verbs.WRSendWithImm, sizes},
		{verbs.WRRDMAWrite, sizes}, {verbs.WRRDMAWriteWithImm, sizes},
	})
}

// TestCrossSRQ sends to an RC QP whose receives come from a shared
// receive queue, with and without immediate, and a WRITE_WITH_IMM, whose
// immediate consumes one of its receives.
func TestCrossSRQ(t *testing.T) {
	rdmatest.SkipUnlessCross(t)
	sizes := []int{1, 4*1024 + 7}
	crossOps(t, rdmatest.EndOptions{SRQ: &verbs.SRQInitAttr{MaxWR: 16, MaxSGE: 1}}, []crossCase{
		{verbs.WRSend, sizes}, {verbs.WRSendWithImm, sizes}, {verbs.WRRDMAWriteWithImm, []int{0, 4*1024 + 7}},
	})
}

// crossRequest is the requester's half of TestCrossRC: it posts op of n
// bytes once the responder is ready, and checks its completion and, for
// READ and the atomics, what came back.
func crossRequest(t *testing.T, x *rdmatest.Cross, e *rdmatest.CrossEnd, op verbs.WROpcode, n int) {
	seed := crossSeed(op, n)
	fill(e.Buf[srcOff:srcOff+n], seed)
	for i := dstOff - guardLen; i < recvOff; i++ {
		e.Buf[i] = crossFiller
	}
	x.Sync("ready")
	wr := verbs.SendWR{WRID: 7, Opcode: op, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{e.MR.SGE(srcOff, n)}}
	wantWC := verbs.WCSend
	switch op {
	case verbs.WRSendWithImm:
		wr.ImmData = crossImm
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		wr.RDMA = verbs.RDMAParams{RemoteAddr: e.Peer.Addr + dstOff, RKey: e.Peer.RKey}
		wantWC = verbs.WCRDMAWrite
		if op == verbs.WRRDMAWriteWithImm {
			wr.ImmData = crossImm
		}
	case verbs.WRRDMARead:
		wr.SGList = []verbs.SGE{e.MR.SGE(dstOff, n)}
		wr.RDMA = verbs.RDMAParams{RemoteAddr: e.Peer.Addr + srcOff, RKey: e.Peer.RKey}
		wantWC = verbs.WCRDMARead
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		wr.SGList = []verbs.SGE{e.MR.SGE(dstOff, 8)}
		wr.Atomic = verbs.AtomicParams{RemoteAddr: e.Peer.Addr + dstOff, RKey: e.Peer.RKey, CompareAdd: crossAdd}
		wantWC = verbs.WCFetchAdd
		if op == verbs.WRAtomicCmpAndSwp {
			wr.Atomic.CompareAdd, wr.Atomic.Swap = crossAtomic, crossSwap
			wantWC = verbs.WCCompSwap
		}
	}
	if n == 0 {
		wr.SGList = nil
	}
	rdmatest.PostSend(t, e.QP, wr)
	wc := rdmatest.WaitOne(t, e.CQ)
	want := verbs.WorkCompletion{WRID: 7, Status: verbs.WCSuccess, Opcode: wantWC, ByteLen: uint32(n), QPNum: e.QP.QPN()}
	if wr.ImmData != 0 {
		want.WCFlags = verbs.WCWithImm
	}
	if wc != want {
		t.Fatalf("%s's completion\n got %+v\nwant %+v", x.Local, wc, want)
	}
	rdmatest.ExpectEmpty(t, e.CQ)
	// What came back, and the filler everywhere else.
	lo, hi := dstOff, dstOff
	switch op {
	case verbs.WRRDMARead:
		want := make([]byte, n)
		fill(want, seed)
		lo, hi = dstOff, dstOff+n
		checkBytes(t, "READ from "+x.Remote, e.Buf[lo:hi], want)
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		if got := binary.NativeEndian.Uint64(e.Buf[dstOff:]); got != crossAtomic {
			t.Fatalf("the atomic returned %#x from %s, want %#x (the value before it)", got, x.Remote, uint64(crossAtomic))
		}
		lo, hi = dstOff, dstOff+8
	}
	checkUntouched(t, "before the requester's target", e.Buf, dstOff-guardLen, lo, crossFiller)
	checkUntouched(t, "after the requester's target", e.Buf, hi, recvOff, crossFiller)
	x.Sync("done")
}

// crossRespond is the responder's half of TestCrossRC: it lays out its
// memory and posts a receive, and once the requester's work request has
// completed checks the receive's completion and its memory.
func crossRespond(t *testing.T, x *rdmatest.Cross, e *rdmatest.CrossEnd, op verbs.WROpcode, n int) {
	seed := crossSeed(op, n)
	for i := dstOff - guardLen; i < recvOff+areaMax; i++ {
		e.Buf[i] = crossFiller
	}
	fill(e.Buf[srcOff:srcOff+n], seed) // the READ's source
	if op == verbs.WRAtomicCmpAndSwp || op == verbs.WRAtomicFetchAndAdd {
		binary.NativeEndian.PutUint64(e.Buf[dstOff:], crossAtomic)
	}
	if crossConsumesRecv(op) {
		wr := verbs.RecvWR{WRID: 9, SGList: []verbs.SGE{e.MR.SGE(recvOff, n+extraCap)}}
		if e.SRQ != nil {
			if err := e.SRQ.PostRecv(&wr); err != nil {
				t.Fatal(err)
			}
		} else {
			rdmatest.PostRecv(t, e.QP, wr)
		}
	}
	x.Sync("ready")
	x.Sync("done")
	if crossConsumesRecv(op) {
		wc := rdmatest.ConnectedRecv(rdmatest.WaitOne(t, e.CQ), e.Peer.QPN)
		want := verbs.WorkCompletion{WRID: 9, Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: uint32(n), QPNum: e.QP.QPN(), SrcQP: e.Peer.QPN}
		if op != verbs.WRSend {
			want.ImmData, want.WCFlags = crossImm, verbs.WCWithImm
		}
		if op == verbs.WRRDMAWriteWithImm {
			want.Opcode = verbs.WCRecvRDMAWithImm
		}
		if wc != want {
			t.Fatalf("%s's receive completion\n got %+v\nwant %+v", x.Local, wc, want)
		}
	}
	rdmatest.ExpectEmpty(t, e.CQ)
	pattern := make([]byte, n)
	fill(pattern, seed)
	if op == verbs.WRRDMAWrite && e.QP.Type() == verbs.QPTypeUC {
		// UC is unacknowledged: the requester's completion says the
		// WRITE left, not that it landed. On a goroce device the
		// region's count of stored packets (1024-byte path MTU) says
		// when it has, and publishes the bytes (reading them before
		// was a data race under -race); a NIC does not count, and its
		// stores are awaited in memory.
		if e.Dev.Hardware() {
			testkit.WaitFor(t, "the UC WRITE's bytes", func() bool { return bytes.Equal(e.Buf[dstOff:dstOff+n], pattern) })
		} else {
			packets := uint64((n + 1023) / 1024)
			testkit.WaitFor(t, "the UC WRITE's packets", func() bool { return e.MR.RemoteWrites() >= packets })
		}
	}
	checkBytes(t, "the source area (a READ's)", e.Buf[srcOff:srcOff+n], pattern)
	// What the request changed, and the filler everywhere else.
	lo, hi := dstOff, dstOff
	switch op {
	case verbs.WRSend, verbs.WRSendWithImm:
		lo, hi = recvOff, recvOff+n
		checkBytes(t, "SEND from "+x.Remote, e.Buf[lo:hi], pattern)
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		lo, hi = dstOff, dstOff+n
		checkBytes(t, "WRITE from "+x.Remote, e.Buf[lo:hi], pattern)
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		want := uint64(crossAtomic + crossAdd)
		if op == verbs.WRAtomicCmpAndSwp {
			want = crossSwap
		}
		if got := binary.NativeEndian.Uint64(e.Buf[dstOff:]); got != want {
			t.Fatalf("%v from %s left %#x, want %#x", op, x.Remote, got, want)
		}
		lo, hi = dstOff, dstOff+8
	}
	checkUntouched(t, "before the target", e.Buf, dstOff-guardLen, lo, crossFiller)
	checkUntouched(t, "after the target", e.Buf, hi, recvOff+areaMax, crossFiller)
}

// TestCrossUD sends datagrams of one byte and of the path MTU (1024, as
// on rxe0 behind a 1500-byte Ethernet MTU), with and without immediate,
// and checks the receive: byte_len counting the GRH, the IPv4 header in
// the GRH with both ends' addresses, the payload, the source QP.
func TestCrossUD(t *testing.T) {
	rdmatest.SkipUnlessCross(t)
	for _, op := range []verbs.WROpcode{verbs.WRSend, verbs.WRSendWithImm} {
		for _, n := range []int{1, 1024} {
			t.Run(fmt.Sprintf("%v/%d", op, n), func(t *testing.T) {
				rdmatest.CrossRun(t, func(t *testing.T, x *rdmatest.Cross) {
					e := x.Connect(rdmatest.EndOptions{Type: verbs.QPTypeUD})
					seed := crossSeed(op, n) + 1
					if x.Requester {
						fill(e.Buf[:n], seed)
						x.Sync("ready")
						rdmatest.PostSend(t, e.QP, verbs.SendWR{WRID: 3, Opcode: op, SendFlags: verbs.SendSignaled, ImmData: crossImm,
							SGList: []verbs.SGE{e.MR.SGE(0, n)}, UD: verbs.UDParams{AH: e.AH, RemoteQPN: e.Peer.QPN, RemoteQKey: rdmatest.UDQKey}})
						want := verbs.WorkCompletion{WRID: 3, Status: verbs.WCSuccess, Opcode: verbs.WCSend, ByteLen: uint32(n), QPNum: e.QP.QPN()}
						if op == verbs.WRSendWithImm {
							want.WCFlags = verbs.WCWithImm
						}
						if wc := rdmatest.WaitOne(t, e.CQ); wc != want {
							t.Fatalf("%s's send completion\n got %+v\nwant %+v", x.Local, wc, want)
						}
						x.Sync("done")
						return
					}
					for i := range e.Buf[:verbs.GRHSize+n+extraCap] {
						e.Buf[i] = crossFiller
					}
					rdmatest.PostRecv(t, e.QP, verbs.RecvWR{WRID: 4, SGList: []verbs.SGE{e.MR.SGE(0, verbs.GRHSize+n+extraCap)}})
					x.Sync("ready")
					x.Sync("done")
					wc := rdmatest.WaitOne(t, e.CQ)
					want := verbs.WorkCompletion{WRID: 4, Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: uint32(verbs.GRHSize + n),
						QPNum: e.QP.QPN(), SrcQP: e.Peer.QPN, WCFlags: verbs.WCGRH}
					if op == verbs.WRSendWithImm {
						want.ImmData, want.WCFlags = crossImm, verbs.WCGRH|verbs.WCWithImm
					}
					// The P_Key index, SL and path bits are the device's to
					// report: rxe says nothing of them either.
					wc.PKeyIndex, wc.SL, wc.DLIDPathBits, wc.SLID = 0, 0, 0, 0
					if wc != want {
						t.Fatalf("%s's receive completion\n got %+v\nwant %+v", x.Local, wc, want)
					}
					// RoCEv2 over IPv4: the GRH area's last 20 bytes are the
					// packet's IPv4 header.
					ip := e.Buf[20:verbs.GRHSize]
					from, to := e.Peer.GID.Addr().Unmap(), localAddr(t, e)
					if got := netip.AddrFrom4([4]byte(ip[12:16])); ip[0] != 0x45 || ip[9] != 17 || got != from {
						t.Fatalf("GRH's IPv4 header % x: want UDP from %v", ip, from)
					}
					if got := netip.AddrFrom4([4]byte(ip[16:20])); got != to {
						t.Fatalf("GRH's IPv4 header % x: want UDP to %v", ip, to)
					}
					pattern := make([]byte, n)
					fill(pattern, seed)
					checkBytes(t, "datagram from "+x.Remote, e.Buf[verbs.GRHSize:verbs.GRHSize+n], pattern)
					checkUntouched(t, "after the datagram", e.Buf, verbs.GRHSize+n, verbs.GRHSize+n+extraCap, crossFiller)
				})
			})
		}
	}
}

// localAddr returns the IPv4 address e's QP sends from.
func localAddr(t *testing.T, e *rdmatest.CrossEnd) netip.Addr {
	t.Helper()
	gid, err := e.Dev.QueryGID(1, rdmatest.GIDIndex(e.Dev))
	if err != nil {
		t.Fatal(err)
	}
	return gid.Addr().Unmap()
}

// TestCrossRemoteAccessError: a WRITE with a key the responder never
// handed out completes with REM_ACCESS_ERR at the requester, whose QP
// goes to ERR; the responder's memory is untouched and its QP fails too.
func TestCrossRemoteAccessError(t *testing.T) {
	rdmatest.CrossRun(t, func(t *testing.T, x *rdmatest.Cross) {
		e := x.Connect(rdmatest.EndOptions{})
		for i := dstOff - guardLen; i < recvOff; i++ {
			e.Buf[i] = crossFiller
		}
		fill(e.Buf[srcOff:srcOff+64], 5)
		x.Sync("ready")
		if x.Requester {
			rdmatest.PostSend(t, e.QP, verbs.SendWR{WRID: 11, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{e.MR.SGE(srcOff, 64)}, RDMA: verbs.RDMAParams{RemoteAddr: e.Peer.Addr + dstOff, RKey: e.Peer.RKey ^ 0x11}})
			want := verbs.WorkCompletion{WRID: 11, Status: verbs.WCRemAccessErr, Opcode: verbs.WCRDMAWrite, QPNum: e.QP.QPN()}
			wc := rdmatest.WaitOne(t, e.CQ)
			// The byte count and opcode of a failed completion are
			// undefined (IBA 11.4.2.1): only the status, the WRID and the
			// QP are.
			wc.ByteLen, wc.Opcode, wc.VendorErr = 0, verbs.WCRDMAWrite, 0
			if wc != want {
				t.Fatalf("%s's completion of the WRITE with a bad rkey\n got %+v\nwant %+v", x.Local, wc, want)
			}
		}
		x.Sync("done")
		testkit.WaitFor(t, x.Local+"'s QP in ERR", func() bool { return e.QP.State() == verbs.QPStateErr })
		if !x.Requester {
			checkUntouched(t, "the target of the refused WRITE", e.Buf, dstOff-guardLen, recvOff, crossFiller)
		}
	})
}

// TestE2ECrossProcesses runs the cross tests between two processes of
// this test binary on goroce devices of their own loopback addresses,
// both directions of every case, as test/hw/cross.sh runs them between
// the host and rxe0: each process must pass every case, and the two must
// have run the same ones.
func TestE2ECrossProcesses(t *testing.T) {
	rdmatest.SkipOnHardware(t, "its two processes open goroce devices on loopback")
	if testing.Short() {
		t.Skip("starts two processes")
	}
	if os.Getenv(rdmatest.CrossEnv) != "" {
		t.Skipf("%s is set: this process is one end of cross mode", rdmatest.CrossEnv)
	}
	listen := netip.AddrPortFrom(testkit.Addr(30), testkit.Port())
	specs := []string{"listen " + listen.String(), "dial " + listen.String() + " from " + testkit.Addr(31).String()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	outs := make([]bytes.Buffer, len(specs))
	cmds := make([]*exec.Cmd, len(specs))
	for i, spec := range specs {
		cmds[i] = exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCross", "-test.v", "-test.count=1")
		cmds[i].Env = append(os.Environ(), rdmatest.CrossEnv+"="+spec, testkit.HelperEnv())
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	passed := make([]string, len(specs))
	for i, cmd := range cmds {
		err := cmd.Wait()
		var cases []string
		for line := range strings.Lines(outs[i].String()) {
			if name, ok := strings.CutPrefix(strings.TrimSpace(line), "--- PASS: "); ok && strings.Contains(name, "→") {
				cases = append(cases, strings.Fields(name)[0])
			}
		}
		passed[i] = strings.Join(cases, "\n")
		if err != nil || strings.Contains(outs[i].String(), "--- SKIP") || len(cases) == 0 {
			// Both outputs: a side that failed because its peer did
			// names only the peer.
			t.Errorf("the %q process: %v, %d cases passed; its output:\n%s", specs[i], err, len(cases), outs[i].String())
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if passed[0] != passed[1] {
		t.Fatalf("the processes passed different cases:\n%s\n\nand\n%s", passed[0], passed[1])
	}
	t.Logf("%d cases passed in both processes", strings.Count(passed[0], "\n")+1)
}
