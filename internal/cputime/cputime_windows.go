package cputime

import (
	"time"

	"golang.org/x/sys/windows"
)

// Process returns the user plus kernel CPU time the process has used
// (GetProcessTimes), or 0 when the system does not say.
func Process() time.Duration {
	var creation, exit, kernel, user windows.Filetime
	if windows.GetProcessTimes(windows.CurrentProcess(), &creation, &exit, &kernel, &user) != nil {
		return 0
	}
	// FILETIME counts 100-nanosecond intervals.
	ticks := func(f windows.Filetime) int64 { return int64(f.HighDateTime)<<32 | int64(f.LowDateTime) }
	return time.Duration((ticks(kernel) + ticks(user)) * 100)
}
