package cm

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// accepted is what a passive goroutine got.
type accepted struct {
	conn *Conn
	req  *Request
	err  error
}

// acceptOne accepts one request on l with qp and p, in the background.
func acceptOne(t *testing.T, l *Listener, qp *verbs.QP, p *Params) <-chan accepted {
	ch := make(chan accepted, 1)
	go func() {
		req, err := l.Accept(testkit.Context(t))
		if err != nil {
			ch <- accepted{err: err}
			return
		}
		conn, err := req.Accept(testkit.Context(t), qp, p)
		ch <- accepted{conn: conn, req: req, err: err}
	}()
	return ch
}

// TestDialAccept: an RC connection between two devices with private data
// both ways, a WRITE and a SEND over it, then a disconnect from the
// active side that the passive side sees, and nothing left behind.
func TestDialAccept(t *testing.T) {
	checkLeaks(t)
	a, b := newHost(t, 1), newHost(t, 2)
	l, err := Listen(b.at(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Addr().Port() == 0 || l.Addr().Addr() != b.dev.Addr() {
		t.Fatalf("listener address %v", l.Addr())
	}
	qa, qb := a.qp(t, verbs.QPTypeRC), b.qp(t, verbs.QPTypeRC)
	done := acceptOne(t, l, qb, &Params{PrivateData: []byte("from b")})
	ca, err := Dial(testkit.Context(t), l.Addr().String(), qa, &Params{PrivateData: []byte("from a")})
	if err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	cb := r.conn
	if !bytes.HasPrefix(ca.Remote().PrivateData, []byte("from b")) || len(ca.Remote().PrivateData) != MaxAcceptPrivateData {
		t.Errorf("active side got private data %q", ca.Remote().PrivateData)
	}
	if !bytes.HasPrefix(r.req.PrivateData(), []byte("from a")) || len(r.req.PrivateData()) != MaxConnectPrivateData {
		t.Errorf("passive side got private data %q", r.req.PrivateData())
	}
	if ca.Remote().QPN != qb.QPN() || cb.Remote().QPN != qa.QPN() {
		t.Errorf("remote QPNs %#x %#x, want %#x %#x", ca.Remote().QPN, cb.Remote().QPN, qb.QPN(), qa.QPN())
	}
	if cb.Remote().Addr != ca.LocalAddr() || ca.Remote().Addr != l.Addr() {
		t.Errorf("addresses: passive sees %v, active is %v; active sees %v", cb.Remote().Addr, ca.LocalAddr(), ca.Remote().Addr)
	}
	if qa.State() != verbs.QPStateRTS || qb.State() != verbs.QPStateRTS {
		t.Fatalf("QP states %v %v", qa.State(), qb.State())
	}

	// Data moves: a WRITE into b's buffer, a SEND to a posted receive.
	copy(a.buf, "written by a")
	if err := qb.PostRecv(&verbs.RecvWR{WRID: 7, SGList: []verbs.SGE{b.mr.SGE(1024, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 12)}, RDMA: verbs.RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := rdmatest.WaitOne(t, a.cq); wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE: %v", wc.Status)
	}
	if err := qa.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 12)}}); err != nil {
		t.Fatal(err)
	}
	if wc := rdmatest.WaitOne(t, b.cq); wc.Status != verbs.WCSuccess || wc.WRID != 7 || !bytes.Equal(b.buf[:12], []byte("written by a")) {
		t.Fatalf("receive %+v, buffer %q", wc, b.buf[:12])
	}
	rdmatest.WaitOne(t, a.cq)

	if err := ca.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cb.Done():
	case <-testkit.Context(t).Done():
		t.Fatal("the passive side did not see the disconnect")
	}
	if !errors.Is(cb.Err(), ErrDisconnected) || !errors.Is(ca.Err(), net.ErrClosed) {
		t.Errorf("errors: passive %v, active %v", cb.Err(), ca.Err())
	}
	testkit.WaitFor(t, "QPs in ERR", func() bool { return qa.State() == verbs.QPStateErr && qb.State() == verbs.QPStateErr })
	_ = cb.Close()
	// Both records go after timewait (0.5 s).
	testkit.WaitFor(t, "timewait", func() bool { return records(a.dev) == 0 && records(b.dev) == 0 })
	_ = context.Background
}

// dialPair connects a fresh RC QP of a to a listener on b and returns
// both connections and QPs.
func dialPair(t *testing.T, a, b *host, pa, pb *Params) (ca, cb *Conn, qa, qb *verbs.QP) {
	t.Helper()
	l, err := Listen(b.at(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	qa, qb = a.qp(t, verbs.QPTypeRC), b.qp(t, verbs.QPTypeRC)
	done := acceptOne(t, l, qb, pb)
	ca, err = Dial(testkit.Context(t), l.Addr().String(), qa, pa)
	if err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	return ca, r.conn, qa, qb
}

// TestDisconnectPassive: the passive side disconnects; the active side's
// Done closes with ErrDisconnected and its QP is in ERR.
func TestDisconnectPassive(t *testing.T) {
	checkLeaks(t)
	a, b := newHost(t, 1), newHost(t, 2)
	ca, cb, qa, _ := dialPair(t, a, b, nil, nil)
	if err := cb.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ca.Done():
	case <-testkit.Context(t).Done():
		t.Fatal("no disconnect")
	}
	if !errors.Is(ca.Err(), ErrDisconnected) {
		t.Errorf("active side: %v", ca.Err())
	}
	testkit.WaitFor(t, "active QP in ERR", func() bool { return qa.State() == verbs.QPStateErr })
	if err := ca.Close(); err != nil {
		t.Errorf("Close after the peer's disconnect: %v", err)
	}
	testkit.WaitFor(t, "timewait", func() bool { return records(a.dev) == 0 && records(b.dev) == 0 })
}

// TestReject: a consumer reject reaches Dial as a *RejectError with the
// reason and the private data; the QP is usable for another attempt.
func TestReject(t *testing.T) {
	checkLeaks(t)
	a, b := newHost(t, 1), newHost(t, 2)
	l, err := Listen(b.at(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		req, err := l.Accept(testkit.Context(t))
		if err == nil {
			_ = req.Reject([]byte("not today"))
		}
	}()
	qa := a.qp(t, verbs.QPTypeRC)
	_, err = Dial(testkit.Context(t), l.Addr().String(), qa, nil)
	var rej *RejectError
	if !errors.As(err, &rej) || !errors.Is(err, ErrRejected) || errors.Is(err, ErrNoListener) ||
		rej.Reason != RejectConsumer || !bytes.HasPrefix(rej.PrivateData, []byte("not today")) {
		t.Fatalf("Dial: %v (%+v)", err, rej)
	}
	if qa.State() != verbs.QPStateErr {
		t.Errorf("QP after a rejection: %v, want ERR (rdma_cm's)", qa.State())
	}
	testkit.WaitFor(t, "records", func() bool { return records(a.dev) == 0 && records(b.dev) == 0 })
}

// TestNoListener: a Dial to a port nobody listens on is refused with REJ
// "invalid service ID" by the peer's CM, which keeps nothing.
func TestNoListener(t *testing.T) {
	checkLeaks(t)
	a, b := newHost(t, 1), newHost(t, 2)
	_, err := Dial(testkit.Context(t), b.at(7174), a.qp(t, verbs.QPTypeRC), nil)
	var rej *RejectError
	if !errors.As(err, &rej) || !errors.Is(err, ErrNoListener) || rej.Reason != RejectInvalidServiceID {
		t.Fatalf("Dial: %v", err)
	}
	ab := agentOf(t, b.dev)
	lock()
	c := ab.mgr.Counters()
	unlock()
	if c.Received[0] != 1 || c.Sent[2] != 1 || records(b.dev) != 0 {
		t.Errorf("passive CM: received %d REQ, sent %d REJ, %d records", c.Received[0], c.Sent[2], records(b.dev))
	}
}
