//go:build linux

package nic

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/verbs"
)

// Errors of the daemon's own checks, with the errno the client receives.
var (
	errInval  = unix.EINVAL
	errNotSup = unix.EOPNOTSUPP
	errBusy   = unix.EBUSY
	errNoDev  = unix.ENODEV
)

// errno maps an error to the errno value libibverbs returns in its place:
// verbs' sentinels to what a provider returns for them, system errors to
// themselves.
func errno(err error) int32 {
	if err == nil {
		return 0
	}
	var e unix.Errno
	switch {
	case errors.Is(err, verbs.ErrNotSupported):
		return int32(unix.EOPNOTSUPP)
	case errors.Is(err, verbs.ErrNoMemory): // also ErrResourceLimit
		return int32(unix.ENOMEM)
	case errors.Is(err, verbs.ErrBusy):
		return int32(unix.EBUSY)
	case errors.Is(err, verbs.ErrInvalidArgument), errors.Is(err, verbs.ErrInvalidState),
		errors.Is(err, verbs.ErrClosed):
		return int32(unix.EINVAL)
	case errors.As(err, &e):
		return int32(e)
	}
	return int32(unix.EIO)
}
