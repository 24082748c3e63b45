package grpcecho

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/rsocket"
)

// over runs the server on an rsocket listener on loopback and returns a
// client dialing it over rsocket.
func over(t *testing.T) *Client {
	t.Helper()
	lc := rsocket.ListenConfig{}
	l, err := lc.Listen(testkit.Context(t), "rdma", netip.AddrPortFrom(testkit.Addr(1), testkit.Port()).String())
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer()
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	d := rsocket.Dialer{LocalAddr: testkit.Addr(2)}
	c, err := Dial(l.Addr().String(), func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "rdma", addr)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		s.Stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return c
}

func payload(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestUnaryOverRsocket(t *testing.T) {
	c := over(t)
	ctx := testkit.Context(t)
	r := rand.New(rand.NewPCG(1, 2))
	var resp []byte
	for _, n := range []int{0, 1, 1000, 64 << 10, 1 << 20} {
		req := payload(r, n)
		var err error
		if resp, err = c.Unary(ctx, req, resp); err != nil {
			t.Fatalf("Unary of %d bytes: %v", n, err)
		}
		if !bytes.Equal(resp, req) {
			t.Fatalf("Unary of %d bytes echoed %d different bytes", n, len(resp))
		}
	}
}

func TestStreamOverRsocket(t *testing.T) {
	c := over(t)
	ctx := testkit.Context(t)
	s, err := c.Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	sent := make(chan [][]byte, 1)
	go func() { // send all, while the main goroutine receives
		var msgs [][]byte
		for i := range 50 {
			m := payload(r, 1+i*997)
			msgs = append(msgs, m)
			if err := s.Send(m); err != nil {
				t.Error(err)
				break
			}
		}
		s.CloseSend()
		sent <- msgs
	}()
	var got [][]byte
	for {
		m, err := s.Recv(nil)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	msgs := <-sent
	if len(got) != len(msgs) {
		t.Fatalf("%d messages echoed, %d sent", len(got), len(msgs))
	}
	for i := range msgs {
		if !bytes.Equal(got[i], msgs[i]) {
			t.Fatalf("message %d (%d bytes) echoed as %d different bytes", i, len(msgs[i]), len(got[i]))
		}
	}
}
