//go:build !goroce_faults

package netio

import (
	"errors"
	"testing"
)

// TestFaultsNotBuilt checks that a binary built without the goroce_faults
// tag refuses to inject faults, whatever the Faults say.
func TestFaultsNotBuilt(t *testing.T) {
	for _, f := range []*Faults{{}, {Seed: 1, Drop: 0.5}} {
		c, err := Open(Config{Addr: addrA, Port: 24798, Faults: f})
		if err == nil {
			c.Close()
		}
		if !errors.Is(err, ErrFaultsNotBuilt) {
			t.Errorf("Open with Faults %+v = %v, want ErrFaultsNotBuilt", *f, err)
		}
	}
	if FaultInjectionBuilt {
		t.Error("FaultInjectionBuilt is true without the goroce_faults tag")
	}
}
