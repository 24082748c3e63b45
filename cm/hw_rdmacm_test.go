//go:build linux && cgo && goroce_ibverbs

package cm

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// The net-like API on a kernel RDMA device, through librdmacm: these need
// an IP address of one (GOROCE_RDMACM_ADDR); test/hw/run.sh runs them in
// the rxe VM on rxe0's.

// hwListenTest listens on the device's address and returns the listener
// and the device's name.
func hwListenTest(t *testing.T) (*Listener, string) {
	t.Helper()
	s := os.Getenv("GOROCE_RDMACM_ADDR")
	if s == "" {
		t.Skip("no kernel RDMA device address here (set GOROCE_RDMACM_ADDR, or run test/hw/run.sh)")
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("GOROCE_RDMACM_ADDR: %v", err)
	}
	l, err := Listen(netip.AddrPortFrom(a, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if l.hw == nil {
		t.Fatalf("Listen(%v) did not take the kernel device", a)
	}
	return l, l.hw.id.DeviceName()
}

func hwEnd(t *testing.T, name string) *rdmatest.End {
	t.Helper()
	return rdmatest.NewEnd(t, rdmatest.EndOptions{Open: func(verbs.DeviceConfig) (*verbs.Device, error) {
		return verbs.OpenHardware(name)
	}})
}

// hwPair connects two QPs of the device with Dial and Accept, with
// private data both ways, and checks what each side learnt.
func hwPair(t *testing.T, ctx context.Context) (cc, sc *Conn, ce, se *rdmatest.End) {
	t.Helper()
	l, name := hwListenTest(t)
	ce, se = hwEnd(t, name), hwEnd(t, name)
	type result struct {
		c   *Conn
		err error
	}
	accepted := make(chan result, 1)
	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			accepted <- result{nil, err}
			return
		}
		if !bytes.HasPrefix(req.PrivateData(), []byte("hello")) {
			_ = req.Reject(nil)
			accepted <- result{nil, errors.New("request's private data " + string(req.PrivateData()))}
			return
		}
		c, err := req.Accept(ctx, se.QP, &Params{PrivateData: []byte("welcome")})
		accepted <- result{c, err}
	}()
	cc, err := Dial(ctx, l.Addr().String(), ce.QP, &Params{PrivateData: []byte("hello")})
	if err != nil {
		t.Fatal(err)
	}
	r := <-accepted
	if r.err != nil {
		t.Fatal(r.err)
	}
	sc = r.c
	if !bytes.HasPrefix(cc.Remote().PrivateData, []byte("welcome")) || cc.Remote().QPN != se.QP.QPN() {
		t.Fatalf("client's view of the server: %+v", cc.Remote())
	}
	if sc.Remote().QPN != ce.QP.QPN() || sc.Remote().Addr != cc.LocalAddr() || cc.Remote().Addr != sc.LocalAddr() {
		t.Fatalf("server's view of the client: %+v; client %v, server %v", sc.Remote(), cc.LocalAddr(), sc.LocalAddr())
	}
	if ce.QP.State() != verbs.QPStateRTS || se.QP.State() != verbs.QPStateRTS {
		t.Fatalf("QPs in %v and %v", ce.QP.State(), se.QP.State())
	}
	return cc, sc, ce, se
}

// TestHardwareConnSendWriteClose moves data with SEND and WRITE on a
// connection of the device, and disconnects from the active side.
func TestHardwareConnSendWriteClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Timeout)
	defer cancel()
	cc, sc, ce, se := hwPair(t, ctx)

	// The client's SEND may arrive before the receive: RNR retries
	// (infinite by default) cover it.
	rdmatest.PostRecv(t, se.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{se.MR.SGE(0, 64)}})
	copy(ce.Buf[100:], "ping")
	rdmatest.PostSend(t, ce.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{ce.MR.SGE(100, 4)}})
	if wc := rdmatest.WaitOne(t, ce.CQ); wc.Status != verbs.WCSuccess || wc.WRID != 2 {
		t.Fatalf("client's SEND: %+v", wc)
	}
	if wc := rdmatest.WaitOne(t, se.CQ); wc.Status != verbs.WCSuccess || wc.ByteLen != 4 || string(se.Buf[:4]) != "ping" {
		t.Fatalf("server's receive: %+v, %q", wc, se.Buf[:4])
	}
	copy(ce.Buf[200:], "written")
	rdmatest.PostSend(t, ce.QP, verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{ce.MR.SGE(200, 7)}, RDMA: verbs.RDMAParams{RemoteAddr: se.MR.IOVA() + 300, RKey: se.MR.RKey()}})
	if wc := rdmatest.WaitOne(t, ce.CQ); wc.Status != verbs.WCSuccess || wc.WRID != 3 {
		t.Fatalf("client's WRITE: %+v", wc)
	}
	if got := string(se.Buf[300:307]); got != "written" {
		t.Fatalf("server's buffer after the WRITE: %q", got)
	}

	if err := cc.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sc.Done():
	case <-ctx.Done():
		t.Fatal("the server did not see the disconnect")
	}
	if !errors.Is(sc.Err(), ErrDisconnected) || !errors.Is(cc.Err(), net.ErrClosed) {
		t.Fatalf("server's Err %v, client's %v", sc.Err(), cc.Err())
	}
	if se.QP.State() != verbs.QPStateErr || ce.QP.State() != verbs.QPStateErr {
		t.Fatalf("QPs after the disconnect in %v and %v", ce.QP.State(), se.QP.State())
	}
}

// TestHardwareServerClose disconnects from the passive side.
func TestHardwareServerClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Timeout)
	defer cancel()
	cc, sc, ce, se := hwPair(t, ctx)
	if err := sc.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cc.Done():
	case <-ctx.Done():
		t.Fatal("the client did not see the disconnect")
	}
	if !errors.Is(cc.Err(), ErrDisconnected) || !errors.Is(sc.Err(), net.ErrClosed) {
		t.Fatalf("client's Err %v, server's %v", cc.Err(), sc.Err())
	}
	if se.QP.State() != verbs.QPStateErr || ce.QP.State() != verbs.QPStateErr {
		t.Fatalf("QPs after the disconnect in %v and %v", ce.QP.State(), se.QP.State())
	}
	if err := cc.Close(); err != nil { // after the peer's: nothing left to do
		t.Fatal(err)
	}
}

// TestHardwareReject refuses a request with private data: Dial's error is
// a *RejectError carrying it.
func TestHardwareReject(t *testing.T) {
	l, name := hwListenTest(t)
	ce := hwEnd(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Timeout)
	defer cancel()
	rejected := make(chan error, 1)
	go func() {
		req, err := l.Accept(ctx)
		if err == nil {
			err = req.Reject([]byte("busy"))
		}
		rejected <- err
	}()
	_, err := Dial(ctx, l.Addr().String(), ce.QP, nil)
	if err := <-rejected; err != nil {
		t.Fatal(err)
	}
	var re *RejectError
	if !errors.As(err, &re) || !errors.Is(err, ErrRejected) || !bytes.HasPrefix(re.PrivateData, []byte("busy")) {
		t.Fatalf("Dial: %v, want a rejection with the private data", err)
	}
}

// TestHardwareNotSupported: what only goroce peers agree on is refused
// before anything is sent.
func TestHardwareNotSupported(t *testing.T) {
	l, name := hwListenTest(t)
	ce := hwEnd(t, name)
	for _, p := range []*Params{{SelectiveRepeat: true}, {Security: &Security{PSK: make([]byte, 32)}}} {
		if _, err := Dial(context.Background(), l.Addr().String(), ce.QP, p); !errors.Is(err, verbs.ErrNotSupported) {
			t.Errorf("Dial with %+v: %v, want ErrNotSupported", *p, err)
		}
	}
}
