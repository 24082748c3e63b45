package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/examples/internal/exampletest"
)

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
			addr, server := exampletest.StartServer(t, ctx, run, tc.serverArgs...)

			var clientOut bytes.Buffer
			err := run(ctx, []string{"-addr", exampletest.ClientAddr, "-connect", addr, "-msg", tc.msg}, &clientOut)
			if tc.clientErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.clientErr) {
					t.Fatalf("client error %v, want one containing %q", err, tc.clientErr)
				}
			} else if err != nil {
				t.Fatalf("client: %v\n%s", err, &clientOut)
			}
			// The client's departure ends the server.
			if err := server.Wait(); err != nil {
				t.Fatalf("server: %v\n%s", err, server)
			}
			if tc.clientErr != "" {
				if !strings.Contains(server.String(), "counter = 100,") {
					t.Errorf("the server's counter changed:\n%s", server)
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
			if !strings.HasSuffix(server.String(), want) {
				t.Errorf("server output does not end with %q:\n%s", want, server)
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
		{"client without server", []string{"-addr", exampletest.ClientAddr}, "-connect"},
		{"empty message", []string{"-addr", exampletest.ClientAddr, "-connect", exampletest.ServerAddr + ":1", "-msg", ""}, "-msg"},
		{"tiny buffer", []string{"-server", "-addr", exampletest.ServerAddr, "-size", "8"}, "-size"},
		{"stray argument", []string{"-addr", exampletest.ClientAddr, "extra"}, "unexpected argument"},
		{"unknown flag", []string{"-bogus"}, "bogus"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { exampletest.WantArgError(t, run, tc.args, tc.want) })
	}
}

// A client whose server is not there fails instead of hanging.
func TestNoServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A listener that is closed again leaves a port nobody listens on.
	addr, server := exampletest.StartServer(t, ctx, run)
	var out bytes.Buffer
	if err := run(ctx, []string{"-addr", exampletest.ClientAddr, "-connect", addr}, &out); err != nil {
		t.Fatalf("first client: %v", err)
	}
	if err := server.Wait(); err != nil {
		t.Fatal(err)
	}
	// Its device is closed too: the REQ meets silence, and the client
	// gives up after -timeout.
	err := run(ctx, []string{"-addr", exampletest.ClientAddr, "-connect", addr, "-timeout", "1s"}, &out)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("connecting to a server that left: %v", err)
	}
}
