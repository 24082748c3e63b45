//go:build linux

package nic

import (
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

var socketSeq atomic.Int32

// startServer runs a daemon with devices on testkit.Addr(1) and Addr(2)
// (goroce0, goroce1), addresses of this test process's own, until the test
// ends.
func startServer(t *testing.T) *Server {
	t.Helper()
	socket := fmt.Sprintf("@goroce-nic-test-%d-%d", os.Getpid(), socketSeq.Add(1))
	srv, err := Listen(Config{
		Socket: socket,
		Bind:   []netip.Addr{testkit.Addr(1), testkit.Addr(2)},
		Logf:   t.Logf,
		// GOROCE_TEST_RECEIVE_QUEUES: the QPs' RecvFeeders then run on
		// several receive goroutines.
		ReceiveQueues: rdmatest.ReceiveQueues(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv
}

// waitNoSessions waits until the daemon has no client left: every session
// ended and cleaned up after its process.
func waitNoSessions(t *testing.T, srv *Server) {
	t.Helper()
	testkit.WaitFor(t, "the sessions to end", func() bool { return srv.Sessions() == 0 })
}
