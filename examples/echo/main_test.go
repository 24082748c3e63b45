package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/examples/internal/exampletest"
)

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
			addr, server := exampletest.StartServer(t, ctx, run, tc.serverArgs...)

			var clientOut bytes.Buffer
			err := run(ctx, append([]string{"-addr", exampletest.ClientAddr, "-connect", addr}, tc.clientArgs...), &clientOut)
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
		{"client without server", []string{"-addr", exampletest.ClientAddr}, "-connect"},
		{"no messages", []string{"-addr", exampletest.ClientAddr, "-connect", exampletest.ServerAddr + ":1", "-n", "0"}, "-n"},
		{"zero size", []string{"-server", "-addr", exampletest.ServerAddr, "-size", "0"}, "-size"},
		{"stray argument", []string{"-addr", exampletest.ClientAddr, "extra"}, "unexpected argument"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { exampletest.WantArgError(t, run, tc.args, tc.want) })
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
		if len(b) < 4 {
			if err == nil {
				t.Fatalf("%d bytes decoded as %d", len(b), n)
			}
			return
		}
		// The rest is the padding of the CM's fixed-size field.
		if err != nil || n < 0 || !bytes.Equal(encodeLimit(n), b[:4]) {
			t.Fatalf("%x decoded as %d, %v", b, n, err)
		}
	})
}
