//go:build !(linux && cgo && goroce_ibverbs)

package tooldev

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/verbs"
)

// TestHardwareWithoutBackend: --hw in a build without the backend fails
// naming the tag, whether the device is named or found by address.
func TestHardwareWithoutBackend(t *testing.T) {
	if _, err := Open(true, "rxe0", verbs.DeviceConfig{}, nil); !errors.Is(err, verbs.ErrNotSupported) {
		t.Fatalf("Open: %v", err)
	}
	if _, err := OpenAddr(netip.MustParseAddr("10.99.0.2")); !errors.Is(err, verbs.ErrNotSupported) {
		t.Fatalf("OpenAddr: %v", err)
	}
}
