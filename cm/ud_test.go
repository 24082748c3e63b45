package cm

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// TestUD: a UD service resolved through SIDR: DialUD learns the
// service's QP number, Q_Key and address with its private data, and a
// datagram sent with them arrives; a refused request and a port nobody
// listens on fail with their SIDR status.
func TestUD(t *testing.T) {
	checkLeaks(t)
	a, b := newHost(t, 1), newHost(t, 2)
	l, err := ListenConfig{PortSpace: PortSpaceUDP}.Listen(context.Background(), b.at(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	qa, qb := a.qp(t, verbs.QPTypeUD), b.qp(t, verbs.QPTypeUD)
	served := make(chan error, 1)
	go func() {
		req, err := l.Accept(testkit.Context(t))
		if err != nil {
			served <- err
			return
		}
		if !req.UD() || !bytes.HasPrefix(req.PrivateData(), []byte("who serves?")) || len(req.PrivateData()) != MaxUDConnectPrivateData {
			served <- errors.New("bad request")
			return
		}
		served <- req.AcceptUD(qb, []byte("QP b does"))
	}()
	svc, err := DialUD(testkit.Context(t), l.Addr().String(), qa, &Params{PrivateData: []byte("who serves?")})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if svc.QPN != qb.QPN() || svc.QKey != UDPQKey || !bytes.HasPrefix(svc.PrivateData, []byte("QP b does")) ||
		svc.AH.DGID != verbs.GIDFromAddr(b.dev.Addr()) {
		t.Fatalf("service %+v", svc)
	}
	if qa.State() != verbs.QPStateRTS || qb.State() != verbs.QPStateRTS {
		t.Fatalf("UD QPs in %v, %v", qa.State(), qb.State())
	}

	// A datagram to the service.
	ah, err := a.pd.CreateAH(svc.AH)
	if err != nil {
		t.Fatal(err)
	}
	if err := qb.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{b.mr.SGE(0, 40+64)}}); err != nil {
		t.Fatal(err)
	}
	copy(a.buf, "datagram")
	if err := qa.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 8)}, UD: verbs.UDParams{AH: ah, RemoteQPN: svc.QPN, RemoteQKey: svc.QKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := rdmatest.WaitOne(t, b.cq); wc.Status != verbs.WCSuccess || !bytes.Equal(b.buf[40:48], []byte("datagram")) {
		t.Fatalf("receive %+v", wc)
	}
	rdmatest.WaitOne(t, a.cq)

	// Refused, and nobody listening.
	go func() {
		if req, err := l.Accept(testkit.Context(t)); err == nil {
			_ = req.Reject([]byte("no"))
		}
	}()
	_, err = DialUD(testkit.Context(t), l.Addr().String(), qa, nil)
	var rej *RejectError
	if !errors.As(err, &rej) || !rej.SIDR || rej.SIDRStatus != SIDRReject || !bytes.HasPrefix(rej.PrivateData, []byte("no")) {
		t.Fatalf("refused DialUD: %v", err)
	}
	_, err = DialUD(testkit.Context(t), b.at(4000), qa, nil)
	if !errors.Is(err, ErrNoListener) || !errors.As(err, &rej) || rej.SIDRStatus != SIDRUnsupported {
		t.Fatalf("DialUD to no listener: %v", err)
	}
}
