//go:build !goroce_faults

package verbs

import "testing"

// TestOpenFaultsNotBuilt checks that a binary built without the
// goroce_faults tag refuses fault injection.
func TestOpenFaultsNotBuilt(t *testing.T) {
	for _, f := range []*Faults{{}, {Seed: 3, Drop: 0.1, Jitter: 1000}} {
		d, err := Open(DeviceConfig{Addr: mustAddr("127.0.1.19"), FaultInjection: f})
		if err == nil {
			d.Close()
		}
		wantErr(t, err, ErrInvalidArgument, "FaultInjection")
	}
	if FaultInjectionBuilt {
		t.Error("FaultInjectionBuilt is true without the goroce_faults tag")
	}
}
