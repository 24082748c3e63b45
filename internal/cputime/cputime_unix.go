//go:build !windows

package cputime

import (
	"syscall"
	"time"
)

// Process returns the user plus system CPU time the process has used
// (getrusage RUSAGE_SELF), or 0 when the system does not say.
func Process() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
