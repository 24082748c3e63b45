//go:build !goroce_faults

package netio

import (
	"context"
	"net/netip"
	"time"
)

const faultsBuilt = false

// faultTap is never made in a binary built without the goroce_faults tag:
// newFaultTap refuses any Faults, so Conn.faults stays nil and the methods
// below, which exist for the receive loop to compile, are never called.
type faultTap struct{}

func newFaultTap(f *Faults, _ int) (*faultTap, error) {
	if f != nil {
		return nil, ErrFaultsNotBuilt
	}
	return nil, nil
}

func (*faultTap) now() time.Duration { return 0 }

func (*faultTap) admit(*Conn, *receiver, Handler, []byte, netip.AddrPort, netip.AddrPort, ECN, *rxTally, time.Duration) {
}

func (*faultTap) release(*Conn, *receiver, Handler, *rxTally, time.Duration) bool { return true }

func (*faultTap) disarm() {}

func (*faultTap) arm(context.Context, *Conn) error { return nil }
