package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// The tests run goroce-rping's server and client against each other in
// this process, each with a device on one of testkit's loopback addresses.

// startServer runs "goroce-rping -s -d" with args on testkit address a
// and waits until it listens.
func startServer(t *testing.T, ctx context.Context, a int, args ...string) (*testkit.Program, *bytes.Buffer) {
	t.Helper()
	var stderr syncBuffer
	args = append([]string{"-s", "-d", "-a", testkit.Addr(a).String(), "-p", strconv.Itoa(int(testkit.Port()))}, args...)
	p := testkit.Start(func(stdout io.Writer) error {
		if code := run(ctx, args, stdout, &stderr); code != 0 {
			return fmt.Errorf("server exit %d: %s", code, stderr.String())
		}
		return nil
	})
	p.Await(t, ctx, "rdma_listen on ")
	return p, &stderr.b
}

// client runs "goroce-rping -c" from testkit address b to a.
func client(ctx context.Context, a, b int, args ...string) (code int, stdout, stderr string) {
	args = append([]string{"-c", "-a", testkit.Addr(a).String(), "-I", testkit.Addr(b).String(),
		"-p", strconv.Itoa(int(testkit.Port()))}, args...)
	var out, errb bytes.Buffer
	code = run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// wantPing is rping's ping data for ping i of size bytes, spelled out
// independently of fillPing: the prefix, then letters from 'A'+i.
func wantPing(i, size int) string {
	var s strings.Builder
	fmt.Fprintf(&s, "rdma-ping-%d: ", i)
	letters := "ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz"
	for k := i % len(letters); s.Len() < size-1; k = (k + 1) % len(letters) {
		s.WriteByte(letters[k])
	}
	return s.String()
}

func TestPingSizes(t *testing.T) {
	for i, size := range []int{minSize, defaultSize, 5000, maxSize} { // 5000 and 65535: more than the 4096-byte MTU
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			ctx := testkit.Context(t)
			a, b := 10+2*i, 11+2*i
			srv, _ := startServer(t, ctx, a, "-v", "-S", strconv.Itoa(size))
			const count = 3
			code, out, errs := client(ctx, a, b, "-v", "-V", "-C", strconv.Itoa(count), "-S", strconv.Itoa(size))
			if code != 0 {
				t.Fatalf("client exit %d: %s", code, errs)
			}
			var want strings.Builder
			for p := range count {
				fmt.Fprintf(&want, "ping data: %s\n", wantPing(p, size))
			}
			if out != want.String() {
				t.Errorf("client output:\n%.300s\nwant:\n%.300s", out, want.String())
			}
			if err := srv.Wait(); err != nil {
				t.Fatal(err)
			}
			for p := range count {
				if line := fmt.Sprintf("server ping data: %s\n", wantPing(p, size)); !strings.Contains(srv.String(), line) {
					t.Errorf("server did not print %.80q", line)
				}
			}
		})
	}
}

// The minimum size holds the prefix and 12 letters: rping's own
// arithmetic, spelled out.
func TestMinimumPing(t *testing.T) {
	b := make([]byte, minSize)
	fillPing(b, 0, 'A')
	if got := string(cstring(b)); got != "rdma-ping-0: ABCDEFGHIJKL" {
		t.Errorf("ping 0 of %d bytes: %q", minSize, got)
	}
	b = make([]byte, 30)
	fillPing(b, 57, 'z')
	if got := string(cstring(b)); got != "rdma-ping-57: zABCDEFGHIJKLMN" {
		t.Errorf("ping 57: %q", got)
	}
}

// -P serves clients concurrently and ends only when interrupted.
func TestPersistentServer(t *testing.T) {
	ctx := testkit.Context(t)
	sctx, stop := context.WithCancel(ctx)
	srv, _ := startServer(t, sctx, 30, "-P", "-S", "100")
	var wg sync.WaitGroup
	for c := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, _, errs := client(ctx, 30, 31+c, "-V", "-C", "20", "-S", "100"); code != 0 {
				t.Errorf("client %d: exit %d: %s", c, code, errs)
			}
		}()
	}
	wg.Wait()
	stop()
	if err := srv.Wait(); err != nil {
		t.Fatal(err)
	}
}

// A client bigger than the server's buffer is refused by the server, as
// rping's READ would fail.
func TestClientLargerThanServer(t *testing.T) {
	ctx := testkit.Context(t)
	srv, _ := startServer(t, ctx, 40, "-S", "64")
	code, _, _ := client(ctx, 40, 41, "-V", "-C", "2", "-S", "128")
	err := srv.Wait()
	if err == nil || !strings.Contains(err.Error(), "more than this server's -S 64") {
		t.Errorf("server: %v", err)
	}
	if code != 0 {
		// rping's client ends quietly when the server leaves.
		t.Errorf("client exit %d", code)
	}
}

func TestNoListener(t *testing.T) {
	ctx := testkit.Context(t)
	// A device on the server's address answers, with nobody listening.
	srv, _ := startServer(t, ctx, 42, "-p", "1") // listens on port 1, not testkit.Port()
	code, _, errs := client(ctx, 42, 43, "-C", "1")
	if code != 1 || !strings.Contains(errs, "invalid service ID") {
		t.Errorf("exit %d: %s", code, errs)
	}
	// Let the server go: a client on its port.
	args := []string{"-c", "-a", testkit.Addr(42).String(), "-I", testkit.Addr(43).String(), "-p", "1", "-C", "1"}
	if code := run(ctx, args, io.Discard, io.Discard); code != 0 {
		t.Errorf("client on port 1: exit %d", code)
	}
	if err := srv.Wait(); err != nil {
		t.Fatal(err)
	}
}

func TestBadCommandLines(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-a", "127.0.0.1"}, "one of -s"},
		{[]string{"-s", "-c", "-a", "127.0.0.1"}, "one of -s"},
		{[]string{"-s"}, "-a ADDR"},
		{[]string{"-c", "-a", "127.0.0.1", "-S", "25"}, "invalid size 25 (valid range is 26 to 65536)"},
		{[]string{"-c", "-a", "127.0.0.1", "-S", "65536"}, "invalid size 65536"},
		{[]string{"-c", "-a", "127.0.0.1", "-C", "-1"}, "invalid count -1"},
		{[]string{"-c", "-a", "nowhere"}, "-a:"},
	} {
		var errb bytes.Buffer
		if code := run(context.Background(), c.args, io.Discard, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q: exit %d, %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

// -V compares what came back with what was sent: a server that echoes one
// flipped bit fails the client with rping's "data mismatch".
func TestValidateCatchesCorruption(t *testing.T) {
	ctx := testkit.Context(t)
	a, b := 50, 51
	dev, err := verbs.Open(verbs.DeviceConfig{Addr: testkit.Addr(a)})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	l, err := cm.Listen(net.JoinHostPort(testkit.Addr(a).String(), strconv.Itoa(int(testkit.Port()))))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srvErr := make(chan error, 1)
	go func() {
		srvErr <- func() error {
			req, err := l.Accept(ctx)
			if err != nil {
				return err
			}
			e, err := newEndpoint(pd, defaultSize, false, &logger{out: io.Discard, err: io.Discard})
			if err != nil {
				return err
			}
			defer e.destroy()
			if e.conn, err = req.Accept(ctx, e.qp, nil); err != nil {
				return err
			}
			src, err := e.expect(ctx, verbs.WCRecv, "RDMA_READ_ADV")
			if err == nil {
				err = e.rdma(verbs.WRRDMARead, src, int(src.size))
			}
			if err == nil {
				_, err = e.expect(ctx, verbs.WCRDMARead, "RDMA_READ_COMPLETE")
			}
			if err != nil {
				return err
			}
			e.rdmaMR.Buf()[20] ^= 1 // a letter of the ping, not its NUL
			if err := e.send(); err != nil {
				return err
			}
			dst, err := e.expect(ctx, verbs.WCRecv, "RDMA_WRITE_ADV")
			if err == nil {
				err = e.rdma(verbs.WRRDMAWrite, dst, int(dst.size))
			}
			if err == nil {
				_, err = e.expect(ctx, verbs.WCRDMAWrite, "RDMA_WRITE_COMPLETE")
			}
			if err == nil {
				err = e.send()
			}
			if err == nil {
				<-e.conn.Done() // until the client leaves
			}
			return err
		}()
	}()
	code, _, errs := client(ctx, a, b, "-V", "-C", "3")
	if code != 1 || !strings.Contains(errs, "data mismatch") {
		t.Errorf("exit %d: %s", code, errs)
	}
	if err := <-srvErr; err != nil {
		t.Fatal(err)
	}
}
