package rsocket

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// The tests connect goroce to goroce in this process: a listener on one
// of testkit's loopback addresses, a dialer on another, each with a
// device this package opens.

// pair listens on address a, dials it from b and returns both ends.
func pair(t testing.TB, a, b int, cfg Config) (client, server *Conn) {
	t.Helper()
	lc := ListenConfig{Config: cfg}
	l, err := lc.Listen(context.Background(), "rdma", net.JoinHostPort(testkit.Addr(a).String(), strconv.Itoa(int(testkit.Port()))))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		ch <- res{c, err}
	}()
	d := Dialer{LocalAddr: testkit.Addr(b), Config: cfg}
	cc, err := d.DialContext(testkit.Context(t), "rdma", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { cc.Close(); r.c.Close() })
	return cc.(*Conn), r.c.(*Conn)
}

// pattern is n bytes no two transfers share by accident.
func pattern(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// echo serves c: everything read is written back, until EOF, then
// CloseWrite.
func echo(c *Conn) error {
	if _, err := io.Copy(c, c); err != nil {
		return err
	}
	return c.CloseWrite()
}

func TestEchoSizes(t *testing.T) {
	testkit.CheckLeaks(t)
	cfg := Config{SendBuffer: 64 << 10, ReceiveBuffer: 64 << 10} // small: every size crosses buffer wraps
	client, server := pair(t, 1, 2, cfg)
	done := make(chan error, 1)
	go func() { done <- echo(server) }()
	sizes := []int{1, 2, 63, 64, 65, 2047, 2048, 2049, 4096, 32<<10 - 1, 32 << 10, 32<<10 + 1, 65535, 65536, 65537, 100003, 1 << 20, 3<<20 + 17}
	for i, n := range sizes {
		want := pattern(uint64(i), n)
		errc := make(chan error, 1)
		go func() {
			_, err := client.Write(want)
			errc <- err
		}()
		got := make([]byte, n)
		if _, err := io.ReadFull(client, got); err != nil {
			t.Fatalf("size %d: read: %v", n, err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("size %d: write: %v", n, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("size %d: data differ at byte %d", n, firstDiff(got, want))
		}
	}
	if err := client.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if n, err := client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("read after the peer's CloseWrite: %d, %v; want 0, EOF", n, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Both sides write and read at once, each direction more than the buffers
// hold: neither may wait for the other's reads to send credits.
func TestConcurrentReadWrite(t *testing.T) {
	testkit.CheckLeaks(t)
	client, server := pair(t, 3, 4, Config{})
	const n = 4 << 20
	a, b := pattern(10, n), pattern(11, n)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for _, x := range []struct {
		c         *Conn
		out, want []byte
	}{{client, a, b}, {server, b, a}} {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for off := 0; off < n; {
				k := min(n-off, 1+int(uint(off*7919)%200000))
				if _, err := x.c.Write(x.out[off : off+k]); err != nil {
					errs <- err
					return
				}
				off += k
			}
		}()
		go func() {
			defer wg.Done()
			got := make([]byte, n)
			if _, err := io.ReadFull(x.c, got); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(got, x.want) {
				errs <- errors.New("data differ")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestDeadlines(t *testing.T) {
	testkit.CheckLeaks(t)
	client, server := pair(t, 5, 6, Config{})
	// A deadline already past fails at once.
	client.SetReadDeadline(time.Now().Add(-time.Second))
	_, err := client.Read(make([]byte, 1))
	testkit.WantErr(t, err, os.ErrDeadlineExceeded)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%v: not a net.Error with Timeout", err)
	}
	// A deadline set while Read waits ends it.
	client.SetReadDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() {
		_, err := client.Read(make([]byte, 1))
		errc <- err
	}()
	client.SetReadDeadline(time.Now().Add(time.Millisecond))
	testkit.WantErr(t, <-errc, os.ErrDeadlineExceeded)
	// The connection still works after.
	client.SetReadDeadline(time.Time{})
	if _, err := server.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(client, b); err != nil || b[0] != 'x' {
		t.Fatalf("read after a timeout: %q, %v", b, err)
	}
	// A writer blocked on a peer that does not read times out.
	server.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	big := make([]byte, 8<<20)
	n, err := server.Write(big)
	testkit.WantErr(t, err, os.ErrDeadlineExceeded)
	if n >= len(big) {
		t.Fatalf("wrote %d bytes to a peer that reads nothing", n)
	}
}

// Close with data not read: the peer reads what it got, then EOF; both
// ends release everything.
func TestCloseUnread(t *testing.T) {
	testkit.CheckLeaks(t)
	client, server := pair(t, 7, 8, Config{})
	if _, err := client.Write(pattern(1, 100000)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(server, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := server.Read(make([]byte, 1))
	testkit.WantErr(t, err, net.ErrClosed)
	if _, err := io.ReadAll(client); err != nil {
		t.Fatalf("reading from a peer that closed: %v", err)
	}
	_, err = client.Write([]byte("late"))
	if err == nil {
		t.Fatal("write to a closed peer succeeded")
	}
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
}

// Close ends a Read and a Write blocked on the same connection.
func TestCloseUnblocks(t *testing.T) {
	testkit.CheckLeaks(t)
	client, _ := pair(t, 9, 10, Config{})
	errc := make(chan error, 2)
	go func() {
		_, err := client.Read(make([]byte, 1))
		errc <- err
	}()
	go func() {
		_, err := client.Write(make([]byte, 8<<20)) // more than the peer, which reads nothing, takes
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond) // let both block; the test holds without it
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		testkit.WantErr(t, <-errc, net.ErrClosed)
	}
}

// The peer's device closes under its connection: no RS_CTRL_DISCONNECT,
// only the CM's DREQ. A Write fails (connection reset), and a blocked
// Read fails with it rather than hang or report a clean EOF.
func TestPeerDeviceCloses(t *testing.T) {
	client, server := pair(t, 11, 12, Config{})
	errc := make(chan error, 1)
	go func() {
		_, err := client.Read(make([]byte, 1))
		errc <- err
	}()
	if err := server.ep.dev.Close(); err != nil {
		t.Fatal(err)
	}
	var err error
	for err == nil {
		_, err = client.Write(make([]byte, 64<<10))
	}
	if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) {
		t.Fatalf("write: %v, want the transport's failure", err)
	}
	t.Logf("write: %v", err)
	select {
	case rerr := <-errc:
		if rerr == nil || rerr == io.EOF {
			t.Fatalf("read: %v, want an error", rerr)
		}
	case <-time.After(testkit.Timeout):
		t.Fatal("read still blocked after the write failed")
	}
}

// WriteTo hands the data to a writer straight from the receive buffer,
// across its wrap, until the peer's CloseWrite.
func TestWriteTo(t *testing.T) {
	testkit.CheckLeaks(t)
	client, server := pair(t, 13, 14, Config{ReceiveBuffer: 16 << 10})
	want := pattern(3, 1<<20+5)
	go func() {
		if _, err := client.Write(want); err == nil {
			_ = client.CloseWrite()
		}
	}()
	var got bytes.Buffer
	n, err := server.WriteTo(&got)
	if err != nil || n != int64(len(want)) || !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("WriteTo: %d, %v; data equal: %v", n, err, bytes.Equal(got.Bytes(), want))
	}
}

// ReadFrom reads into the send buffer, across its wrap, one message per
// Read of its source.
func TestReadFrom(t *testing.T) {
	testkit.CheckLeaks(t)
	client, server := pair(t, 15, 16, Config{SendBuffer: 16 << 10})
	want := pattern(4, 1<<20+7)
	errc := make(chan error, 1)
	go func() {
		// A reader that is not an io.WriterTo, of odd-sized reads.
		n, err := client.ReadFrom(io.LimitReader(iotestOdd{bytes.NewReader(want)}, int64(len(want))))
		if err == nil && n != int64(len(want)) {
			err = errors.New("short ReadFrom")
		}
		if err == nil {
			err = client.CloseWrite()
		}
		errc <- err
	}()
	got, err := io.ReadAll(server)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, %v; equal: %v", len(got), err, bytes.Equal(got, want))
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// iotestOdd reads at most 3001 bytes at a time.
type iotestOdd struct{ r io.Reader }

func (o iotestOdd) Read(p []byte) (int, error) { return o.r.Read(p[:min(len(p), 3001)]) }

// Close does not wait for the source of a ReadFrom in progress: ReadFrom
// then returns when its source ends (nil) or at its next message
// (net.ErrClosed).
func TestCloseDuringReadFrom(t *testing.T) {
	testkit.CheckLeaks(t)
	client, _ := pair(t, 17, 18, Config{})
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		_, err := client.ReadFrom(pr)
		errc <- err
	}()
	if _, err := pw.Write([]byte("first")); err != nil { // ReadFrom is reading now
		t.Fatal(err)
	}
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-errc; err != nil && !errors.Is(err, net.ErrClosed) {
		t.Fatalf("ReadFrom: %v, want nil or net.ErrClosed", err)
	}
}

// The peer's QP vanishes without a word (no RS_CTRL_DISCONNECT, no DREQ):
// a Write fails when the transport's retries run out, and a blocked Read
// fails with it, rather than hang.
func TestPeerVanishes(t *testing.T) {
	client, server := pair(t, 19, 20, Config{})
	errc := make(chan error, 1)
	go func() {
		_, err := client.Read(make([]byte, 1))
		errc <- err
	}()
	if err := server.ep.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	var err error
	for err == nil {
		_, err = client.Write(make([]byte, 64<<10))
	}
	testkit.WantErr(t, err, verbs.ErrRetryExceeded)
	select {
	case rerr := <-errc:
		testkit.WantErr(t, rerr, verbs.ErrRetryExceeded)
	case <-time.After(testkit.Timeout):
		t.Fatal("read still blocked after the write failed")
	}
}
