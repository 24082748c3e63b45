package nic

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

var socketSeq atomic.Int32

// freeUDPPort returns a UDP port free on 127.0.0.1 and 127.0.0.2 a moment
// ago, so that tests do not collide with devices on 4791.
func freeUDPPort(t *testing.T) uint16 {
	t.Helper()
	for range 20 {
		c1, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := c1.LocalAddr().(*net.UDPAddr).Port
		c2, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.2:%d", port))
		c1.Close()
		if err == nil {
			c2.Close()
			return uint16(port)
		}
	}
	t.Fatal("no free UDP port")
	return 0
}

// startServer runs a daemon with devices on 127.0.0.1 and 127.0.0.2 (goroce0,
// goroce1) on a port of its own, until the test ends.
func startServer(t *testing.T) *Server {
	t.Helper()
	socket := fmt.Sprintf("@goroce-nic-test-%d-%d", os.Getpid(), socketSeq.Add(1))
	srv, err := Listen(Config{
		Socket:  socket,
		Bind:    []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")},
		UDPPort: freeUDPPort(t),
		Logf:    t.Logf,
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
	deadline := time.Now().Add(20 * time.Second)
	for srv.Sessions() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions still open", srv.Sessions())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
