package cm

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// TestTimeoutSilentPeer: a Dial to an address where nothing answers ends
// with ErrTimeout (ETIMEDOUT) once the REQ's retransmissions run out,
// leaving nothing behind; a context that ends first wins.
func TestTimeoutSilentPeer(t *testing.T) {
	checkLeaks(t)
	a := newHost(t, 1)
	silent := netip.AddrPortFrom(testkit.Addr(99), 7174) // no device, no socket
	start := time.Now()
	_, err := Dial(testkit.Context(t), silent.String(), a.qp(t, verbs.QPTypeRC), &Params{CMResponseTimeout: 8, MaxCMRetries: 1})
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("Dial to a silent address: %v", err)
	}
	t.Logf("timed out after %v", time.Since(start))
	c := agentOf(t, a.dev).counters()
	if c.Sent[0] != 1 || c.Resent != 1 || c.Timeouts != 1 || records(a.dev) != 0 {
		t.Errorf("CM: %d REQ sent, %d resent, %d timeouts, %d records", c.Sent[0], c.Resent, c.Timeouts, records(a.dev))
	}

	short, cancel := context.WithTimeout(testkit.Context(t), 100*time.Millisecond)
	defer cancel()
	_, err = Dial(short, silent.String(), a.qp(t, verbs.QPTypeRC), nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial with a 100 ms context: %v", err)
	}
	if records(a.dev) != 0 {
		t.Errorf("%d records after the context ended", records(a.dev))
	}
}

// TestNoRoute: no route from the device's address to the peer's is
// ErrNoRoute (ENETUNREACH) before anything is sent.
func TestNoRoute(t *testing.T) {
	checkLeaks(t)
	a := newHost(t, 1)
	_, err := Dial(testkit.Context(t), "192.0.2.77:7174", a.qp(t, verbs.QPTypeRC), nil)
	if !errors.Is(err, ErrNoRoute) || !errors.Is(err, syscall.ENETUNREACH) {
		t.Fatalf("Dial from loopback to 192.0.2.77: %v", err)
	}
	if c := agentOf(t, a.dev).counters(); c.Sent[0] != 0 {
		t.Errorf("%d REQs sent", c.Sent[0])
	}
}

// TestNoDevice: binding an address no goroce device has is ErrNoDevice.
func TestNoDevice(t *testing.T) {
	checkLeaks(t)
	_, err := Listen(netip.AddrPortFrom(testkit.Addr(50), 7000).String())
	if !errors.Is(err, ErrNoDevice) || !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("Listen on an address without a device: %v", err)
	}
}
