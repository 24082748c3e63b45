package rsocket

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// A request that is not an rsocket's (no rs_conn_data version 1) is
// rejected, and the listener serves the next one.
func TestListenerRejectsOthers(t *testing.T) {
	testkit.CheckLeaks(t)
	addr := net.JoinHostPort(testkit.Addr(30).String(), strconv.Itoa(int(testkit.Port())))
	l, err := Listen("rdma", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	// A plain cm connection with rping-like private data.
	dev, release, err := acquireDevice(testkit.Addr(31), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	ep, err := newEndpoint(dev, &Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cm.Dial(testkit.Context(t), addr, ep.qp, &cm.Params{PrivateData: []byte("not an rsocket")})
	if !errors.Is(err, cm.ErrRejected) {
		t.Fatalf("dial with foreign private data: %v, want cm.ErrRejected", err)
	}
	if err := ep.destroy(); err != nil {
		t.Fatal(err)
	}
	if n := l.Refused(); n != 1 {
		t.Fatalf("Refused() = %d, want 1", n)
	}
	d := Dialer{LocalAddr: testkit.Addr(31)}
	c, err := d.DialContext(testkit.Context(t), "rdma", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.FailNow()
	}
	if _, err := c.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 2)
	if _, err := s.Read(b); err != nil || string(b) != "ok" {
		t.Fatalf("read %q, %v", b, err)
	}
	c.Close()
	s.Close()
}

func TestListenerClose(t *testing.T) {
	testkit.CheckLeaks(t)
	l, err := Listen("tcp", net.JoinHostPort(testkit.Addr(32).String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		errc <- err
	}()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	testkit.WantErr(t, <-errc, net.ErrClosed)
}

func TestDialErrors(t *testing.T) {
	testkit.CheckLeaks(t)
	d := Dialer{LocalAddr: testkit.Addr(33)}
	// Nobody listens: the peer's CM (its device held open here) refuses.
	_, release, err := acquireDevice(testkit.Addr(34), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	l, err := Listen("rdma", net.JoinHostPort(testkit.Addr(34).String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(Addr).Port()
	l.Close()
	_, err = d.DialContext(testkit.Context(t), "rdma", net.JoinHostPort(testkit.Addr(34).String(), strconv.Itoa(int(port))))
	testkit.WantErr(t, err, cm.ErrNoListener)
	_, err = d.DialContext(context.Background(), "udp", "127.0.0.1:1")
	var unknown net.UnknownNetworkError
	if !errors.As(err, &unknown) {
		t.Fatalf("dial udp: %v, want net.UnknownNetworkError", err)
	}
	d.Config.ReceiveBuffer = 100
	_, err = d.DialContext(context.Background(), "rdma", "127.0.0.1:1")
	testkit.WantErr(t, err, verbs.ErrInvalidArgument)
}
