package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests' devices: loopback addresses no other package's tests use.
const (
	serverAddr = "127.0.3.1"
	clientAddr = "127.0.3.2"
)

// lineWriter collects a command's output and reports each complete line.
type lineWriter struct {
	mu      sync.Mutex
	all     bytes.Buffer
	partial []byte
	lines   chan string
}

func newLineWriter() *lineWriter { return &lineWriter{lines: make(chan string, 100)} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		select {
		case w.lines <- string(w.partial[:i]):
		default:
		}
		w.partial = w.partial[i+1:]
	}
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}

// startServer runs the server on a free TCP port and returns its address
// and a channel that yields run's result.
func startServer(t *testing.T, ctx context.Context, extra ...string) (string, *lineWriter, <-chan error) {
	t.Helper()
	out := newLineWriter()
	done := make(chan error, 1)
	args := append([]string{"-server", "-addr", serverAddr, "-port", "0"}, extra...)
	go func() { done <- run(ctx, args, out) }()
	for {
		select {
		case line := <-out.lines:
			if rest, ok := strings.CutPrefix(line, "server: listening on "); ok {
				addr, _, _ := strings.Cut(rest, ";")
				return addr, out, done
			}
		case err := <-done:
			t.Fatalf("server ended before listening: %v\n%s", err, out)
		case <-ctx.Done():
			t.Fatalf("server not listening: %v\n%s", ctx.Err(), out)
		}
	}
}

func TestClientAndServer(t *testing.T) {
	long := strings.Repeat("0123456789abcdef", 700) // 11200 bytes: three 4 KiB packets
	tests := []struct {
		name       string
		serverArgs []string
		msg        string
		clientErr  string // substring of the client's error; "" for success
	}{
		{name: "short", msg: "hello over RDMA"},
		{name: "multi-packet", msg: long},
		{name: "too long for the server", serverArgs: []string{"-size", "16"}, msg: "twenty bytes message", clientErr: "outside the remote region of 16 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			addr, serverOut, serverDone := startServer(t, ctx, tc.serverArgs...)

			var clientOut bytes.Buffer
			err := run(ctx, []string{"-addr", clientAddr, "-connect", addr, "-msg", tc.msg}, &clientOut)
			if tc.clientErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.clientErr) {
					t.Fatalf("client error %v, want one containing %q", err, tc.clientErr)
				}
			} else if err != nil {
				t.Fatalf("client: %v\n%s", err, &clientOut)
			}
			// The client's departure ends the server.
			if err := <-serverDone; err != nil {
				t.Fatalf("server: %v\n%s", err, serverOut)
			}
			if tc.clientErr != "" {
				if !strings.Contains(serverOut.String(), "counter = 100,") {
					t.Errorf("the server's counter changed:\n%s", serverOut)
				}
				return
			}

			for _, want := range []string{
				fmt.Sprintf("client: RDMA WRITE of %d bytes", len(tc.msg)),
				fmt.Sprintf("client: RDMA READ of %d bytes matches", len(tc.msg)),
				"client: FETCH_AND_ADD +1: counter was 100, is now 101",
			} {
				if !strings.Contains(clientOut.String(), want) {
					t.Errorf("client output lacks %q:\n%s", want, &clientOut)
				}
			}
			// The server's memory changed without the server doing anything.
			want := fmt.Sprintf("server: client left; counter = 101, message = %q\n", tc.msg)
			if !strings.HasSuffix(serverOut.String(), want) {
				t.Errorf("server output does not end with %q:\n%s", want, serverOut)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no address", []string{"-server"}, "-addr"},
		{"bad address", []string{"-addr", "127.0.3.300"}, "-addr"},
		{"client without server", []string{"-addr", clientAddr}, "-connect"},
		{"empty message", []string{"-addr", clientAddr, "-connect", "127.0.3.1:1", "-msg", ""}, "-msg"},
		{"tiny buffer", []string{"-server", "-addr", serverAddr, "-size", "8"}, "-size"},
		{"stray argument", []string{"-addr", clientAddr, "extra"}, "unexpected argument"},
		{"unknown flag", []string{"-bogus"}, "bogus"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), tc.args, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run(%q) = %v, want an error mentioning %q", tc.args, err, tc.want)
			}
		})
	}
}

// A client whose server is not there fails instead of hanging.
func TestNoServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A listener that is closed again leaves a port nobody listens on.
	addr, _, done := startServer(t, ctx)
	var out bytes.Buffer
	if err := run(ctx, []string{"-addr", clientAddr, "-connect", addr}, &out); err != nil {
		t.Fatalf("first client: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Its device is closed too: the REQ meets silence, and the client
	// gives up after -timeout.
	err := run(ctx, []string{"-addr", clientAddr, "-connect", addr, "-timeout", "1s"}, &out)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("connecting to a server that left: %v", err)
	}
}
