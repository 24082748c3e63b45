package verbs

import (
	"errors"
	"net/netip"
	"syscall"
)

// bindError explains why Open could not bind the device's UDP socket on
// at, and what to change.
func bindError(op string, at netip.AddrPort, err error) error {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return errorf(op, "Port", ErrBusy,
			"UDP %v is in use (another goroce device, rxe, or another program): open the device on another address (DeviceConfig.Addr, e.g. another 127.0.0.x on loopback), or on another port with DeviceConfig.Port if its peers are goroce devices only (RoCE peers always send to %d)",
			at, DefaultUDPPort)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return errorf(op, "Addr", ErrInvalidArgument, "%v is not an address of this machine: use one of its interfaces' addresses (%v)", at.Addr(), err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return errorf(op, "Port", ErrInvalidArgument, "not allowed to bind UDP %v: %v", at, err)
	}
	return errorf(op, "Addr", ErrInvalidArgument, "cannot bind UDP %v: %v", at, err)
}
