package httpblob

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/rsocket"
)

func TestOverRsocket(t *testing.T) {
	ctx := testkit.Context(t)
	lc := rsocket.ListenConfig{}
	l, err := lc.Listen(ctx, "rdma", netip.AddrPortFrom(testkit.Addr(1), testkit.Port()).String())
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer()
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	d := rsocket.Dialer{LocalAddr: testkit.Addr(2)}
	c := NewClient(d.DialContext, 2)
	addr := l.Addr().String()

	var buf []byte
	for _, n := range []int{0, 1, 4096, 1<<20 + 12345} {
		if buf, err = Get(ctx, c, addr, n, buf, true); err != nil {
			t.Fatal(err)
		}
	}
	body := bytes.Repeat([]byte("rdma "), 30000)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/echo", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("POST /echo of %d bytes: %d bytes back, %v", len(body), len(got), err)
	}
	if _, err := Get(ctx, c, addr, MaxBlob+1, nil, true); err == nil {
		t.Fatal("GET of more than MaxBlob succeeded")
	}

	c.CloseIdleConnections()
	if err := s.Close(); err != nil {
		t.Error(err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
}
