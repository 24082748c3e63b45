//go:build (!linux && !windows) || (linux && goroce_portable)

package netio

import (
	"errors"
	"syscall"
)

// isAddrInUse reports whether err is a bind failing because the port is
// taken.
func isAddrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE)
}
