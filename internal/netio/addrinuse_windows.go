package netio

import (
	"errors"

	"golang.org/x/sys/windows"
)

// isAddrInUse reports whether err is a bind failing because the port is
// taken (WSAEADDRINUSE).
func isAddrInUse(err error) bool {
	return errors.Is(err, windows.WSAEADDRINUSE)
}
