package verbs

import (
	"errors"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/transport"
)

// testNet is the third octet of the loopback addresses the tests' devices
// bind (127.0.testNet.x): 1 unless GOROCE_TEST_NET says otherwise, so that
// two runs of this package on one machine (say, with and without
// -tags goroce_faults, or by two developers) don't fight over the ports.
var testNet = func() byte {
	if n, err := strconv.Atoi(os.Getenv("GOROCE_TEST_NET")); err == nil && n > 0 && n < 255 {
		return byte(n)
	}
	return 1
}()

// testAddr moves an address of 127.0.1.0/24 to 127.0.testNet.0/24.
func testAddr(a netip.Addr) netip.Addr {
	if !a.Is4() {
		return a
	}
	if b := a.As4(); b[0] == 127 && b[1] == 0 && b[2] == 1 {
		b[2] = testNet
		return netip.AddrFrom4(b)
	}
	return a
}

// openDevice opens a loopback device closed at the end of the test.
func openDevice(t testing.TB, cfg DeviceConfig) *Device {
	t.Helper()
	if !cfg.Addr.IsValid() {
		cfg.Addr = netip.MustParseAddr("127.0.1.1")
	}
	cfg.Addr = testAddr(cfg.Addr)
	d, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func mustAddr(s string) netip.Addr { return testAddr(netip.MustParseAddr(s)) }

func newDevice(t testing.TB) *Device { return openDevice(t, DeviceConfig{}) }

func mustPD(t testing.TB, d *Device) *PD {
	t.Helper()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	return pd
}

func mustCQ(t testing.TB, d *Device, cqe int) *CQ {
	t.Helper()
	cq, err := d.CreateCQ(cqe, nil, 0)
	if err != nil {
		t.Fatalf("CreateCQ(%d): %v", cqe, err)
	}
	return cq
}

func mustMR(t testing.TB, pd *PD, n int, access AccessFlags) *MR {
	t.Helper()
	mr, err := pd.RegMR(make([]byte, n), access)
	if err != nil {
		t.Fatalf("RegMR(%d, %v): %v", n, access, err)
	}
	return mr
}

// defaultCap is a small, valid set of queue capacities.
var defaultCap = QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}

func mustQP(t testing.TB, pd *PD, typ QPType, cq *CQ) *QP {
	t.Helper()
	qp, err := pd.CreateQP(QPInitAttr{QPType: typ, SendCQ: cq, RecvCQ: cq, Cap: defaultCap})
	if err != nil {
		t.Fatalf("CreateQP(%v): %v", typ, err)
	}
	return qp
}

// remoteAV is a valid address vector toward 127.0.1.2 for a loopback
// (IPv4) device.
func remoteAV() AddressVector {
	return AddressVector{
		DGID:      GIDFromAddr(netip.MustParseAddr("127.0.1.2")),
		SGIDIndex: 1,
		HopLimit:  64,
		IsGlobal:  true,
		PortNum:   1,
	}
}

// step is one ModifyQP call with its attributes.
type step struct {
	attr QPAttr
	mask QPAttrMask
}

// initStep, rtrStep and rtsStep carry exactly the required attributes of
// RESET->INIT, INIT->RTR and RTR->RTS for each QP type, with the values
// rdma-core's tools use.
func initStep(t QPType) step {
	a := QPAttr{QPState: QPStateInit, PKeyIndex: 0, PortNum: 1}
	m := QPAttrState | QPAttrPKeyIndex | QPAttrPort
	if t == QPTypeUD {
		a.QKey = 0x11111111
		return step{a, m | QPAttrQKey}
	}
	a.QPAccessFlags = AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	return step{a, m | QPAttrAccessFlags}
}

func rtrStep(t QPType) step {
	a := QPAttr{QPState: QPStateRTR}
	m := QPAttrState
	switch t {
	case QPTypeRC:
		a.AHAttr, a.PathMTU, a.DestQPNum, a.RQPSN = remoteAV(), MTU1024, 0x123, 0x42
		a.MaxDestRdAtomic, a.MinRNRTimer = 1, 12
		m |= QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
	case QPTypeUC:
		a.AHAttr, a.PathMTU, a.DestQPNum, a.RQPSN = remoteAV(), MTU1024, 0x123, 0x42
		m |= QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN
	}
	return step{a, m}
}

func rtsStep(t QPType) step {
	a := QPAttr{QPState: QPStateRTS, SQPSN: 0x77}
	m := QPAttrState | QPAttrSQPSN
	if t == QPTypeRC {
		a.Timeout, a.RetryCnt, a.RNRRetry, a.MaxRdAtomic = 14, 7, 7, 1
		m |= QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic
	}
	return step{a, m}
}

func mustModify(t testing.TB, qp *QP, s step) {
	t.Helper()
	if err := qp.Modify(&s.attr, s.mask); err != nil {
		t.Fatalf("Modify(%v, %v) from %v: %v", s.attr.QPState, s.mask, qp.State(), err)
	}
}

// toState moves a fresh QP to RESET, INIT, RTR or RTS.
func toState(t testing.TB, qp *QP, target QPState) {
	t.Helper()
	steps := []step{initStep(qp.Type()), rtrStep(qp.Type()), rtsStep(qp.Type())}
	for _, s := range steps[:target] {
		mustModify(t, qp, s)
	}
}

// forceState puts a QP in a state no verb reaches directly (SQE), as the
// transport will on a send error.
func forceState(qp *QP, s QPState) {
	qp.mu.Lock()
	qp.xmu.Lock()
	qp.state.Store(int32(s))
	if qp.tq != nil {
		qp.tq.SetState(s)
	}
	qp.xmu.Unlock()
	qp.mu.Unlock()
}

// wantErr checks that err wraps sentinel and names field (if field is not
// empty); a nil sentinel expects success.
func wantErr(t testing.TB, err, sentinel error, field string) {
	t.Helper()
	if sentinel == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("error %v, want %v", err, sentinel)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %T %v is not an *Error", err, err)
	}
	if field != "" && e.Field != field {
		t.Fatalf("error %q names field %q, want %q", err, e.Field, field)
	}
	if !strings.HasPrefix(err.Error(), "verbs: ") {
		t.Fatalf("error %q lacks the package prefix", err)
	}
}

// pollAll drains a CQ.
func pollAll(t testing.TB, cq *CQ) []WorkCompletion {
	t.Helper()
	var out []WorkCompletion
	buf := make([]WorkCompletion, 4)
	for {
		n, err := cq.Poll(buf)
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		out = append(out, buf[:n]...)
		if n < len(buf) {
			return out
		}
	}
}

// srqTake takes a receive work request from srq as a QP's responder does.
func srqTake(s *SRQ, dst *recvWQE) bool {
	w := transport.RecvWQE{SGL: make([]transport.SGE, 0, 8)}
	if !(*srqSource)(s).TakeRecv(&w) {
		return false
	}
	dst.wrID = w.WRID
	dst.sge = dst.sge[:0]
	for _, g := range w.SGL {
		dst.sge = append(dst.sge, SGE{Addr: g.Addr, Length: g.Length, LKey: g.LKey})
	}
	dst.length = sgListLength(dst.sge)
	return true
}
