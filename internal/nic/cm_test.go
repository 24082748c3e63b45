//go:build linux

package nic

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

// TestCMHarness runs test/libgoroce/cmharness.c: librdmacm's errors,
// private data both ways, a rejection, a pollable non-blocking channel,
// and fork, against the daemon's connection manager.
func TestCMHarness(t *testing.T) {
	lib, harness := buildC(t)
	cmharness := filepath.Join(filepath.Dir(harness), "cmharness")
	srv := startServer(t)
	for i, mode := range []string{"errors", "connect", "fork"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			port := fmt.Sprint(7400 + os.Getpid()%1000*8 + i*2)
			out, err := program(ctx, lib, srv, cmharness, mode, port, testkit.Addr(1).String(),
				testkit.Addr(2).String()).CombinedOutput()
			if err != nil || !strings.Contains(string(out), mode+": ok") {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
	waitNoSessions(t, srv)
}

// TestCMTools runs rdmacm-utils' programs, server on goroce0 and client on
// goroce1: the client starts when the server's libgoroce logs its
// rdma_listen.
func TestCMTools(t *testing.T) {
	lib, _ := buildC(t)
	if _, err := exec.LookPath("rping"); err != nil {
		t.Skip("rdmacm-utils not installed")
	}
	srv := startServer(t)
	s, c := testkit.Addr(1).String(), testkit.Addr(2).String()
	port := func(i int) string { return fmt.Sprint(7000 + os.Getpid()%1000*8 + i) }
	for _, tc := range []struct {
		name           string
		server, client []string
		want           string
	}{
		{"rping", []string{"rping", "-s", "-a", s, "-p", port(0), "-C", "10", "-V"},
			[]string{"rping", "-c", "-a", s, "-I", c, "-p", port(0), "-C", "10", "-V", "-v"}, "ping data: rdma-ping-9"},
		{"ucmatose", []string{"ucmatose", "-b", s, "-p", port(1), "-c", "4", "-C", "10"},
			[]string{"ucmatose", "-s", s, "-b", c, "-p", port(1), "-c", "4", "-C", "10"}, "return status 0"},
		{"udaddy", []string{"udaddy", "-b", s, "-c", "2", "-C", "10"},
			[]string{"udaddy", "-s", s, "-b", c, "-c", "2", "-C", "10"}, "return status 0"},
		{"rdma_server", []string{"rdma_server", "-s", s, "-p", port(3)},
			[]string{"rdma_client", "-s", s, "-p", port(3)}, "rdma_client: end 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			server := program(ctx, lib, srv, tc.server...)
			sout := &syncBuffer{}
			server.Stdout, server.Stderr = sout, sout
			if err := server.Start(); err != nil {
				t.Fatal(err)
			}
			for !strings.Contains(sout.String(), "libgoroce: rdma_listen on port") {
				if ctx.Err() != nil {
					server.Wait()
					t.Fatalf("the server never listened:\n%s", sout.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			cout, cerr := program(ctx, lib, srv, tc.client...).CombinedOutput()
			serr := server.Wait()
			if cerr != nil || serr != nil || !strings.Contains(string(cout), tc.want) {
				t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, cout, serr, sout.String())
			}
		})
	}
	waitNoSessions(t, srv)
}

// syncBuffer is a bytes.Buffer a program writes while the test reads it.
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
