package verbs_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// The two-process test re-executes the test binary as the target of the
// RDMA operations (the os/exec helper-process pattern). The processes
// exchange connection parameters as text lines over the child's stdin and
// stdout, the way ibv_rc_pingpong uses a TCP socket:
//
//	child  -> parent: "target <qpn> <psn> <rkey> <va> <len>"
//	parent -> child:  "initiator <qpn> <psn>"
//	child  -> parent: "ready"
//	parent -> child:  "exit"  (or EOF)
//	child  -> parent: "bye <first 8 bytes of its region in hex>"
//
// Past the exchange the child does nothing: every byte moves by RDMA.

const (
	helperRoleEnv = "GOROCE_E2E_HELPER_ROLE"
	targetHost    = 11 // testkit.Addr(11), shared with the child through testkit.HelperEnv
	initiatorHost = 12
	targetPSN     = 0x5A5A5A
	initiatorPSN  = 0xFFFFFE
	targetLen     = 1 << 16
	atomicInitial = 1000
)

// TestHelperProcess is the target process of TestE2ETwoProcesses; run
// normally, it does nothing.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperRoleEnv) != "target" {
		t.Skip("helper process for TestE2ETwoProcesses")
	}
	if err := runTarget(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "target:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runTarget is the child's side: it opens a device, registers memory and
// waits while the parent works on it.
func runTarget(in io.Reader, out io.Writer) error {
	dev, err := verbs.Open(verbs.DeviceConfig{Addr: testkit.Addr(targetHost)})
	if err != nil {
		return err
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	cq, err := dev.CreateCQ(16, nil, 0)
	if err != nil {
		return err
	}
	buf := make([]byte, targetLen)
	binary.NativeEndian.PutUint64(buf, atomicInitial)
	mr, err := pd.RegMR(buf, rdmatest.RCAccess)
	if err != nil {
		return err
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "target %d %d %d %d %d\n", qp.QPN(), targetPSN, mr.RKey(), mr.IOVA(), mr.Len())

	lines := bufio.NewScanner(in)
	if !lines.Scan() {
		return fmt.Errorf("no initiator line: %v", lines.Err())
	}
	var rqpn, rpsn uint32
	if _, err := fmt.Sscanf(lines.Text(), "initiator %d %d", &rqpn, &rpsn); err != nil {
		return fmt.Errorf("initiator line %q: %v", lines.Text(), err)
	}
	if err := bringUp(qp, rqpn, rpsn, targetPSN, testkit.Addr(initiatorHost)); err != nil {
		return err
	}
	fmt.Fprintln(out, "ready")
	for lines.Scan() && lines.Text() != "exit" {
	}
	// The parent is done: it has seen every completion, so nothing is in
	// flight toward this buffer any more.
	if err := mr.Dereg(); err != nil {
		return err
	}
	fmt.Fprintf(out, "bye %x\n", buf[:8])
	return nil
}

// bringUp moves qp through INIT and RTR to RTS toward the QP rqpn of the
// device at peer, without a testing.T (the child has none to fail).
func bringUp(qp *verbs.QP, rqpn, rpsn, lpsn uint32, peer netip.Addr) error {
	l := rdmatest.Link{MTU: verbs.MTU1024, Access: rdmatest.RCAccess, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
		MinRNRTimer: 12, MaxRdAtomic: 4, MaxDestRdAtomic: 4}
	return rdmatest.BringUp(qp, l, lpsn, rdmatest.Peer{GID: verbs.GIDFromAddr(peer), QPN: rqpn, PSN: rpsn})
}

// TestE2ETwoProcesses writes a pattern into another process's memory,
// reads it back and runs a FETCH_AND_ADD there.
func TestE2ETwoProcesses(t *testing.T) {
	rdmatest.SkipOnHardware(t, "its helper process opens goroce devices")
	if testing.Short() {
		t.Skip("starts a second process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperRoleEnv+"=target", testkit.HelperEnv())
	cmd.Stderr = os.Stderr
	toChild, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	fromChild, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The child's output is read to its end before Wait, which closes the
	// pipe: the child closes it by exiting (or being killed).
	lines := make(chan string, 16)
	exited := make(chan struct{}) // closed when waitErr is set
	var waitErr error
	go func() {
		s := bufio.NewScanner(fromChild)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = toChild.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	readLine := func() string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the target process ended early")
			}
			return l
		case <-time.After(20 * time.Second):
			t.Fatal("no line from the target process within 20 s")
		}
		return ""
	}

	var (
		rqpn, rpsn, rkey uint32
		va               uint64
		length           int
	)
	if _, err := fmt.Sscanf(readLine(), "target %d %d %d %d %d", &rqpn, &rpsn, &rkey, &va, &length); err != nil {
		t.Fatal(err)
	}
	if rpsn != targetPSN || length != targetLen {
		t.Fatalf("target advertises psn %#x, %d bytes", rpsn, length)
	}
	a := newEnd(t, initiatorHost, rdmatest.EndOptions{})
	if err := bringUp(a.QP, rqpn, rpsn, initiatorPSN, testkit.Addr(targetHost)); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(toChild, "initiator %d %d\n", a.QP.QPN(), initiatorPSN)
	if l := readLine(); l != "ready" {
		t.Fatalf("target says %q", l)
	}

	// WRITE a pattern across several packets, READ it back elsewhere.
	const n = 5000
	fill(a.Buf[:n], 0x42)
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, n)}, RDMA: verbs.RDMAParams{RemoteAddr: va + 4096, RKey: rkey}})
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(dstOff, n)}, RDMA: verbs.RDMAParams{RemoteAddr: va + 4096, RKey: rkey}})
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 3, Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(recvOff, 8)}, Atomic: verbs.AtomicParams{RemoteAddr: va, RKey: rkey, CompareAdd: 23}})
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled | verbs.SendFence,
		SGList: []verbs.SGE{a.MR.SGE(recvOff+8, 8)}, RDMA: verbs.RDMAParams{RemoteAddr: va, RKey: rkey}})
	for i, wc := range rdmatest.WaitN(t, a.CQ, 4) {
		if wc.WRID != uint64(i+1) || wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	checkBytes(t, "read back", a.Buf[dstOff:dstOff+n], a.Buf[:n])
	if orig, now := binary.NativeEndian.Uint64(a.Buf[recvOff:]), binary.NativeEndian.Uint64(a.Buf[recvOff+8:]); orig != atomicInitial || now != atomicInitial+23 {
		t.Fatalf("fetch-add returned %d and left %d, want %d and %d", orig, now, atomicInitial, atomicInitial+23)
	}

	fmt.Fprintln(toChild, "exit")
	var word [8]byte
	binary.NativeEndian.PutUint64(word[:], atomicInitial+23)
	if l, want := readLine(), fmt.Sprintf("bye %x", word); l != want {
		t.Fatalf("target says %q, want %q", l, want)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("target process: %v", waitErr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("target process still running 20 s after exit")
	}
}
