//go:build linux && cgo && goroce_ibverbs

package verbs

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
)

// TestHardwareErrorText: a libibverbs errno picks the sentinel, and a
// reason whose errno says what the sentinel says is not said twice.
func TestHardwareErrorText(t *testing.T) {
	for _, c := range []struct {
		errno    syscall.Errno
		sentinel error
		want     string
	}{
		{syscall.EINVAL, ErrInvalidArgument, "verbs: RegMR: ibverbs: ibv_reg_mr: invalid argument"},
		{syscall.ENOMEM, ErrNoMemory, "verbs: RegMR: ibverbs: ibv_reg_mr: cannot allocate memory"},
		{syscall.EOPNOTSUPP, ErrNotSupported, "verbs: RegMR: ibverbs: ibv_reg_mr: operation not supported"},
		{syscall.EBUSY, ErrBusy, "verbs: RegMR: ibverbs: ibv_reg_mr: device or resource busy: resource busy"},
		{syscall.ENOENT, ErrInvalidArgument, "verbs: RegMR: ibverbs: ibv_reg_mr: no such file or directory: invalid argument"},
	} {
		err := hwError("RegMR", fmt.Errorf("ibverbs: ibv_reg_mr: %w", c.errno))
		if !errors.Is(err, c.sentinel) || err.Error() != c.want {
			t.Errorf("%v: %q, want %q matching %v", c.errno, err, c.want, c.sentinel)
		}
	}
}
