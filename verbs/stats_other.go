//go:build !linux

package verbs

import (
	"errors"
	"runtime"
)

// startStatsEndpoint fails outside Linux: the endpoint is a socket in
// Linux's abstract namespace, found through /proc/net/unix, neither of
// which other systems have. The device works the same without it;
// Device.Counters and Device.Stats still give its counters in process.
func startStatsEndpoint(*Device) (*statsEndpoint, error) {
	return nil, errors.New("verbs: no counters endpoint on " + runtime.GOOS + " (abstract Unix sockets are Linux's)")
}
