//go:build linux && cgo && goroce_ibverbs

package cm

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// hwUDListen listens for UD services (SIDR) on the kernel device's
// address, and returns an end with a UD QP on that device.
func hwUDListen(t *testing.T, ctx context.Context) (*Listener, *rdmatest.End, *rdmatest.End) {
	t.Helper()
	l, name := hwListenTest(t)
	ul, err := ListenConfig{PortSpace: PortSpaceUDP}.Listen(ctx, netip.AddrPortFrom(l.Addr().Addr(), 0).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ul.Close() })
	if ul.hw == nil || !ul.hw.ud {
		t.Fatalf("the UD listener on %v is not the kernel device's", l.Addr().Addr())
	}
	open := func(verbs.DeviceConfig) (*verbs.Device, error) { return verbs.OpenHardware(name) }
	ce := rdmatest.NewEnd(t, rdmatest.EndOptions{Type: verbs.QPTypeUD, Open: open})
	se := rdmatest.NewEnd(t, rdmatest.EndOptions{Type: verbs.QPTypeUD, Open: open})
	return ul, ce, se
}

// TestHardwareUD resolves a UD service through librdmacm's UDP port space
// (SIDR) with private data both ways, then sends it a datagram through an
// address handle made from the answer, with the answer's QP and Q_Key.
func TestHardwareUD(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Timeout)
	defer cancel()
	ul, ce, se := hwUDListen(t, ctx)
	accepted := make(chan error, 1)
	go func() {
		req, err := ul.Accept(ctx)
		if err == nil && !bytes.HasPrefix(req.PrivateData(), []byte("which")) {
			_ = req.Reject(nil)
			err = errors.New("request's private data " + string(req.PrivateData()))
		}
		if err == nil {
			err = req.AcceptUD(se.QP, []byte("this one"))
		}
		accepted <- err
	}()
	svc, err := DialUD(ctx, ul.Addr().String(), ce.QP, &Params{PrivateData: []byte("which")})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	if svc.QPN != se.QP.QPN() || svc.QKey != UDPQKey || !bytes.HasPrefix(svc.PrivateData, []byte("this one")) {
		t.Fatalf("service %+v; want QPN %#x, Q_Key %#x", svc, se.QP.QPN(), UDPQKey)
	}
	if ce.QP.State() != verbs.QPStateRTS || se.QP.State() != verbs.QPStateRTS {
		t.Fatalf("UD QPs in %v and %v", ce.QP.State(), se.QP.State())
	}
	ah, err := ce.PD.CreateAH(svc.AH)
	if err != nil {
		t.Fatal(err)
	}
	rdmatest.PostRecv(t, se.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{se.MR.SGE(0, verbs.GRHSize+64)}})
	copy(ce.Buf[100:], "datagram")
	rdmatest.PostSend(t, ce.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{ce.MR.SGE(100, 8)}, UD: verbs.UDParams{AH: ah, RemoteQPN: svc.QPN, RemoteQKey: svc.QKey}})
	if wc := rdmatest.WaitOne(t, ce.CQ); wc.Status != verbs.WCSuccess || wc.WRID != 2 {
		t.Fatalf("send: %+v", wc)
	}
	wc := rdmatest.WaitOne(t, se.CQ)
	if wc.Status != verbs.WCSuccess || wc.ByteLen != verbs.GRHSize+8 || wc.SrcQP != ce.QP.QPN() {
		t.Fatalf("receive: %+v", wc)
	}
	if got := string(se.Buf[verbs.GRHSize : verbs.GRHSize+8]); got != "datagram" {
		t.Fatalf("received %q", got)
	}
}

// TestHardwareUDReject: a refused SIDR request is DialUD's *RejectError.
func TestHardwareUDReject(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Timeout)
	defer cancel()
	ul, ce, _ := hwUDListen(t, ctx)
	rejected := make(chan error, 1)
	go func() {
		req, err := ul.Accept(ctx)
		if err == nil {
			err = req.Reject(nil)
		}
		rejected <- err
	}()
	_, err := DialUD(ctx, ul.Addr().String(), ce.QP, nil)
	if rerr := <-rejected; rerr != nil {
		t.Fatal(rerr)
	}
	var re *RejectError
	if !errors.As(err, &re) || !errors.Is(err, ErrRejected) {
		t.Fatalf("DialUD: %v, want a *RejectError", err)
	}
}
