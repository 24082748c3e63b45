//go:build linux && cgo && goroce_ibverbs

package rsocket

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// TestHardwareEcho runs an rsocket connection on a kernel RDMA device
// (GOROCE_RDMACM_ADDR, the device GOROCE_IBV_DEVICE or the first):
// Listen and Dial with the device, 4 MiB echoed back through a server
// that copies what it reads, a half close, and Close on both sides.
// test/hw/run.sh runs it on rxe0 in the VM.
func TestHardwareEcho(t *testing.T) {
	s := os.Getenv("GOROCE_RDMACM_ADDR")
	if s == "" {
		t.Skip("no kernel RDMA device address here (set GOROCE_RDMACM_ADDR, or run test/hw/run.sh)")
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("GOROCE_RDMACM_ADDR: %v", err)
	}
	dev, err := verbs.OpenHardware(os.Getenv("GOROCE_IBV_DEVICE"))
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	ctx := testkit.Context(t)

	if _, err := (&ListenConfig{Device: dev}).Listen(ctx, "rdma", ":0"); err == nil {
		t.Error("Listen on a kernel device without its address succeeded")
	}
	l, err := (&ListenConfig{Device: dev}).Listen(ctx, "rdma", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	served := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			served <- err
			return
		}
		_, err = io.Copy(c, c)
		if cerr := c.Close(); err == nil {
			err = cerr
		}
		served <- err
	}()

	c, err := (&Dialer{Device: dev}).DialContext(ctx, "rdma", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 4<<20)
	_, _ = rand.Read(want)
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(want)
		if err == nil {
			err = c.(*Conn).CloseWrite()
		}
		wrote <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("echoed %d bytes, want the %d written", len(got), len(want))
	}
	if err := <-served; err != nil {
		t.Fatalf("server: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Write after Close: %v", err)
	}
}
