//go:build !(linux && cgo && goroce_ibverbs)

package verbs_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/goroce/goroce/verbs"
)

// TestOpenHardwareWithoutBackend: a build without the hardware backend
// says which tag it lacks.
func TestOpenHardwareWithoutBackend(t *testing.T) {
	d, err := verbs.OpenHardware("rxe0")
	if d != nil || !errors.Is(err, verbs.ErrNotSupported) || !strings.Contains(err.Error(), "goroce_ibverbs") {
		t.Fatalf("OpenHardware: %v, %v; want ErrNotSupported naming goroce_ibverbs", d, err)
	}
}

// TestHardwareDevicesWithoutBackend: listing needs the backend too.
func TestHardwareDevicesWithoutBackend(t *testing.T) {
	names, err := verbs.HardwareDevices()
	if names != nil || !errors.Is(err, verbs.ErrNotSupported) || !strings.Contains(err.Error(), "goroce_ibverbs") {
		t.Fatalf("HardwareDevices: %v, %v; want ErrNotSupported naming goroce_ibverbs", names, err)
	}
}
