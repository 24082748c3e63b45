package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

// The tests' devices: loopback addresses of this test process's own.
var (
	serverAddr = testkit.Addr(1).String()
	clientAddr = testkit.Addr(2).String()
)

// startServer runs the server on a free TCP port and returns its address.
func startServer(t *testing.T, ctx context.Context, extra ...string) (string, *testkit.Program) {
	t.Helper()
	args := append([]string{"-server", "-addr", serverAddr, "-port", "0"}, extra...)
	p := testkit.Start(func(out io.Writer) error { return run(ctx, args, out) })
	addr, _, _ := strings.Cut(p.Await(t, ctx, "server: listening on "), ";")
	return addr, p
}

func TestEcho(t *testing.T) {
	tests := []struct {
		name       string
		serverArgs []string
		clientArgs []string
		messages   []string // the echoes the client must report, in order
		clientErr  string   // substring of the client's error; "" for success
	}{
		{name: "default", messages: []string{"ping #1", "ping #2", "ping #3", "ping #4", "ping #5"}},
		{name: "more than the server's slots", clientArgs: []string{"-n", "40", "-msg", "x"}},
		{name: "multi-packet", clientArgs: []string{"-n", "2", "-msg", strings.Repeat("m", 9000)}, serverArgs: []string{"-size", "10000"}},
		{name: "too long for the server", serverArgs: []string{"-size", "5"}, clientErr: "does not take messages of 7 bytes, only up to 5"},
	}
	rtt := regexp.MustCompile(`^client: echo of "(.*)" \((\d+) bytes\) in \S+$`)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			addr, server := startServer(t, ctx, tc.serverArgs...)

			var clientOut bytes.Buffer
			err := run(ctx, append([]string{"-addr", clientAddr, "-connect", addr}, tc.clientArgs...), &clientOut)
			if tc.clientErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.clientErr) {
					t.Fatalf("client error %v, want one containing %q", err, tc.clientErr)
				}
			} else if err != nil {
				t.Fatalf("client: %v\n%s", err, &clientOut)
			}
			if err := server.Wait(); err != nil {
				t.Fatalf("server: %v\n%s", err, server)
			}
			if tc.clientErr != "" {
				return
			}

			var echoes []string
			for _, line := range strings.Split(clientOut.String(), "\n") {
				if m := rtt.FindStringSubmatch(line); m != nil {
					if m[2] != fmt.Sprint(len(m[1])) {
						t.Errorf("line %q: wrong length", line)
					}
					echoes = append(echoes, m[1])
				}
			}
			n := len(echoes)
			if tc.messages != nil && strings.Join(echoes, ",") != strings.Join(tc.messages, ",") {
				t.Errorf("echoes %q, want %q", echoes, tc.messages)
			}
			if !strings.Contains(clientOut.String(), fmt.Sprintf("client: %d echoes intact; round trip min ", n)) {
				t.Errorf("client output lacks the summary of %d echoes:\n%s", n, &clientOut)
			}
			if want := fmt.Sprintf("server: client left after %d messages", n); !strings.Contains(server.String(), want) {
				t.Errorf("server output lacks %q:\n%s", want, server)
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
		{"client without server", []string{"-addr", clientAddr}, "-connect"},
		{"no messages", []string{"-addr", clientAddr, "-connect", serverAddr + ":1", "-n", "0"}, "-n"},
		{"zero size", []string{"-server", "-addr", serverAddr, "-size", "0"}, "-size"},
		{"stray argument", []string{"-addr", clientAddr, "extra"}, "unexpected argument"},
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

// The server's private data arrives from the network: any bytes must give
// a limit or an error, and a limit must encode back to the same bytes.
func FuzzDecodeLimit(f *testing.F) {
	f.Add(encodeLimit(4096))
	f.Add([]byte{})
	f.Add([]byte{1, 2, 3, 4, 5})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := decodeLimit(b)
		if len(b) != 4 {
			if err == nil {
				t.Fatalf("%d bytes decoded as %d", len(b), n)
			}
			return
		}
		if err != nil || n < 0 || !bytes.Equal(encodeLimit(n), b) {
			t.Fatalf("%x decoded as %d, %v", b, n, err)
		}
	})
}
