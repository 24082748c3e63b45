//go:build linux && cgo && goroce_ibverbs

package cm

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// TestHardwareUDNotSupported: on a kernel RDMA device, DialUD from a UD
// QP and a UD listener on the device's address return ErrNotSupported
// saying why, instead of a goroce error about a device they never looked
// for.
func TestHardwareUDNotSupported(t *testing.T) {
	l, name := hwListenTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Timeout)
	defer cancel()
	e := rdmatest.NewEnd(t, rdmatest.EndOptions{Type: verbs.QPTypeUD, Open: func(verbs.DeviceConfig) (*verbs.Device, error) {
		return verbs.OpenHardware(name)
	}})
	_, err := DialUD(ctx, l.Addr().String(), e.QP, nil)
	if !errors.Is(err, verbs.ErrNotSupported) || !strings.Contains(err.Error(), "librdmacm") {
		t.Fatalf("DialUD from a UD QP of %s: %v, want ErrNotSupported naming librdmacm", name, err)
	}
	if s := e.QP.State(); s != verbs.QPStateReset {
		t.Fatalf("the refused DialUD left the QP in %v", s)
	}
	ul, err := ListenConfig{PortSpace: PortSpaceUDP}.Listen(ctx, netip.AddrPortFrom(l.Addr().Addr(), 0).String())
	if err == nil {
		_ = ul.Close()
	}
	if !errors.Is(err, verbs.ErrNotSupported) || !strings.Contains(err.Error(), "librdmacm") {
		t.Fatalf("UD listener on %v: %v, want ErrNotSupported naming librdmacm", l.Addr().Addr(), err)
	}
}
