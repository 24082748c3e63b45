package verbs_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

// The black-box tests of RemoteRegion, PostSendWait, completion errors,
// refusals and memory consistency connect two devices on loopback by
// hand. They use 127.0.1.30 to 127.0.1.39, in this package's range
// (127.0.1.x); no test of the package runs in parallel.

// sideOpts shapes one side of a connection.
type sideOpts struct {
	addr     string
	bufSize  int               // default 64 KiB
	mrAccess verbs.AccessFlags // default: local write and every remote right
	qpAccess verbs.AccessFlags // the QP's access flags; see qpAccessNone
	sendCQ   bool              // a send CQ of its own instead of one CQ for both
	timeout  uint8             // local ACK timeout code; default 18 (1 s)
}

// qpAccessNone asks for QP access flags 0 (the zero sideOpts.qpAccess means
// every remote right).
const qpAccessNone = verbs.AccessFlags(1 << 31)

const allRemote = verbs.AccessRemoteRead | verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic

// side is one end: a device, a registered buffer and an RC QP.
type side struct {
	dev     *verbs.Device
	pd      *verbs.PD
	buf     []byte
	mr      *verbs.MR
	cq      *verbs.CQ // the receive CQ, and the send CQ unless sendCQ
	sendCQ  *verbs.CQ
	qp      *verbs.QP
	access  verbs.AccessFlags
	timeout uint8
}

// openSide opens a device with a PD, a buffer registered with o.mrAccess,
// its CQs and an RC QP in RESET; the device is closed at the end of t.
func openSide(t testing.TB, o sideOpts) *side {
	t.Helper()
	if o.bufSize == 0 {
		o.bufSize = 64 << 10
	}
	if o.mrAccess == 0 {
		o.mrAccess = verbs.AccessLocalWrite | allRemote
	}
	switch o.qpAccess {
	case 0:
		o.qpAccess = allRemote
	case qpAccessNone:
		o.qpAccess = 0
	}
	dev, err := verbs.Open(verbs.DeviceConfig{Addr: netip.MustParseAddr(o.addr)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	if o.timeout == 0 {
		o.timeout = 18
	}
	s := &side{dev: dev, buf: make([]byte, o.bufSize), access: o.qpAccess, timeout: o.timeout}
	if s.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if s.mr, err = s.pd.RegMR(s.buf, o.mrAccess); err != nil {
		t.Fatal(err)
	}
	if s.cq, err = dev.CreateCQ(256, nil, 0); err != nil {
		t.Fatal(err)
	}
	s.sendCQ = s.cq
	if o.sendCQ {
		if s.sendCQ, err = dev.CreateCQ(256, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	s.qp, err = s.pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: s.sendCQ, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// connectSides opens two sides and brings their QPs to RTS toward each
// other, as an out-of-band exchange or cm would.
func connectSides(t testing.TB, a, b sideOpts) (*side, *side) {
	t.Helper()
	sa, sb := openSide(t, a), openSide(t, b)
	sa.connect(t, sb)
	sb.connect(t, sa)
	return sa, sb
}

// connect moves s's QP through INIT and RTR to RTS toward peer's, with a
// 1024-byte path MTU and by default a local ACK timeout of 18 (1 s:
// nothing is lost on loopback, and a loaded machine must not run the
// retries out).
func (s *side) connect(t testing.TB, peer *side) {
	t.Helper()
	gid, err := peer.dev.QueryGID(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: s.access},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
		{verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPNum: peer.qp.QPN(),
			MaxDestRdAtomic: 16, MinRNRTimer: 1,
			AHAttr: verbs.AddressVector{DGID: gid, SGIDIndex: 1, HopLimit: 64, IsGlobal: true, PortNum: 1}},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN |
				verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
		{verbs.QPAttr{QPState: verbs.QPStateRTS, Timeout: s.timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
			verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt |
				verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic},
	}
	for _, st := range steps {
		if err := s.qp.Modify(&st.attr, st.mask); err != nil {
			t.Fatal(err)
		}
	}
}

// testCtx returns a context that bounds a test's waits: long enough for a
// loaded machine, short enough to report a hang as a failure.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// nextEvent returns the device's next asynchronous event.
func nextEvent(t testing.TB, dev *verbs.Device) verbs.AsyncEvent {
	t.Helper()
	ev, err := dev.GetAsyncEvent(testCtx(t))
	if err != nil {
		t.Fatalf("no asynchronous event: %v", err)
	}
	return ev
}
