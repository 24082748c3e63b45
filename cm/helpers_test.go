package cm

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

// testTimeout bounds every exchange that is expected to succeed; it only
// turns a bug into a failure instead of a hung test.
const testTimeout = 20 * time.Second

// checkLeaks fails the test if goroutines started during it are still
// running when it ends. Call it first, so that its cleanup runs last.
// Goroutines may take a moment to finish after the objects that own them
// are closed, so it waits for the count to come down before failing.
func checkLeaks(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		for i := 0; ; i++ {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if i == 1000 {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutine leak: %d goroutines before the test, %d after:\n%s", before, n, buf)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// host is one device with the objects a QP needs.
type host struct {
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
}

// newHost opens a device on addr (a loopback address) for the test.
func newHost(t *testing.T, addr string, mtu verbs.MTU) *host {
	t.Helper()
	dev, err := verbs.Open(verbs.DeviceConfig{Addr: netip.MustParseAddr(addr), MTU: mtu})
	if err != nil {
		t.Fatalf("verbs.Open(%s): %v", addr, err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	cq, err := dev.CreateCQ(64, nil, 0)
	if err != nil {
		t.Fatalf("CreateCQ: %v", err)
	}
	return &host{dev: dev, pd: pd, cq: cq}
}

// qp creates a QP of type typ in RESET.
func (h *host) qp(t *testing.T, typ verbs.QPType) *verbs.QP {
	t.Helper()
	qp, err := h.pd.CreateQP(verbs.QPInitAttr{
		QPType: typ, SendCQ: h.cq, RecvCQ: h.cq,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1},
	})
	if err != nil {
		t.Fatalf("CreateQP(%v): %v", typ, err)
	}
	return qp
}

// gid returns the host's GID 1.
func (h *host) gid(t *testing.T) verbs.GID {
	t.Helper()
	g, err := h.dev.QueryGID(1, 1)
	if err != nil {
		t.Fatalf("QueryGID: %v", err)
	}
	return g
}

// query returns the QP's attributes.
func query(t *testing.T, qp *verbs.QP) verbs.QPAttr {
	t.Helper()
	attr, _, err := qp.Query(0)
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	return attr
}

// listen starts a listener on an ephemeral loopback port, closed at the
// end of the test.
func listen(t *testing.T, lc ListenConfig) *Listener {
	t.Helper()
	l, err := lc.Listen(context.Background(), "127.0.2.1:0")
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// passiveResult is the outcome of the passive side of a connection.
type passiveResult struct {
	req  *Request
	conn *Conn
	err  error // from Listener.Accept or Request.Accept
}

// acceptOne runs the passive side in a goroutine: it accepts one request
// and answers it with answer. The result arrives on the returned channel.
func acceptOne(ctx context.Context, l *Listener, answer func(*Request) (*Conn, error)) <-chan passiveResult {
	ch := make(chan passiveResult, 1)
	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			ch <- passiveResult{err: err}
			return
		}
		c, err := answer(req)
		ch <- passiveResult{req: req, conn: c, err: err}
	}()
	return ch
}

// acceptWith answers a request with Request.Accept(qp, p).
func acceptWith(ctx context.Context, qp *verbs.QP, p *Params) func(*Request) (*Conn, error) {
	return func(r *Request) (*Conn, error) { return r.Accept(ctx, qp, p) }
}

// rawPeer is a hand-driven side-channel peer: a test plays the protocol (or
// breaks it) byte by byte.
type rawPeer struct {
	t  *testing.T
	nc net.Conn
}

// dialRaw connects a raw peer to addr.
func dialRaw(t *testing.T, addr net.Addr) *rawPeer {
	t.Helper()
	nc, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatalf("dial %v: %v", addr, err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(testTimeout))
	return &rawPeer{t: t, nc: nc}
}

// rawServer accepts one connection on a new listener and passes it to
// serve in a goroutine; it returns the listener's address and a channel
// closed when serve returns.
func rawServer(t *testing.T, serve func(p *rawPeer)) (string, <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.2.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer ln.Close()
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(testTimeout))
		serve(&rawPeer{t: t, nc: nc})
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return ln.Addr().String(), done
}

// send writes raw bytes; errors are reported with Errorf because a raw
// server runs outside the test goroutine.
func (p *rawPeer) send(b []byte) {
	if _, err := p.nc.Write(b); err != nil {
		p.t.Errorf("raw peer write: %v", err)
	}
}

// sendMessage encodes and writes m.
func (p *rawPeer) sendMessage(m message) {
	b, err := m.encode()
	if err != nil {
		p.t.Errorf("encode %v: %v", m.typ, err)
		return
	}
	p.send(b)
}

// recv reads one message.
func (p *rawPeer) recv() (message, error) { return readMessage(p.nc) }

// expect reads one message and checks its type (and the reason of a REJ).
func (p *rawPeer) expect(typ msgType, reason RejectReason) message {
	m, err := p.recv()
	switch {
	case err != nil:
		p.t.Errorf("raw peer: reading %v: %v", typ, err)
	case m.typ != typ:
		p.t.Errorf("raw peer: got %v (%v %q), want %v", m.typ, m.reason, m.info, typ)
	case typ == msgREJ && m.reason != reason:
		p.t.Errorf("raw peer: got REJ %v (%q), want %v", m.reason, m.info, reason)
	}
	return m
}

// expectEOF checks that the other side closes the connection.
func (p *rawPeer) expectEOF() {
	if m, err := p.recv(); err == nil {
		p.t.Errorf("raw peer: got %v, want the connection closed", m.typ)
	}
}

// validREQ returns a well-formed REQ from a QP that does not exist.
func validREQ(gid verbs.GID) message {
	return message{
		typ: msgREQ, qpType: verbs.QPTypeRC, mtu: verbs.MTU1024,
		responderResources: 4, initiatorDepth: 4,
		qpn: 0x123456, psn: 0xABCDEF, gid: gid, udpPort: verbs.DefaultUDPPort,
		retryCount: 7, rnrRetryCount: 7, minRNRTimer: 12, timeout: 14,
		privateData: []byte("raw REQ"),
	}
}

// wantErr checks that err matches every target with errors.Is.
func wantErr(t *testing.T, what string, err error, targets ...error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %v", what, targets)
		return
	}
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Errorf("%s: error %q does not match %v", what, err, target)
		}
	}
}

// wantState checks a QP's state.
func wantState(t *testing.T, what string, qp *verbs.QP, want verbs.QPState) {
	t.Helper()
	if got := qp.State(); got != want {
		t.Errorf("%s: QP in %v, want %v", what, got, want)
	}
}
