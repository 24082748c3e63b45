//go:build !linux

package stats

import (
	"errors"
	"runtime"
)

// Endpoints fails outside Linux: devices serve their counters on abstract
// Unix sockets, which only Linux has (verbs opens no endpoint elsewhere).
func Endpoints() ([]string, error) {
	return nil, errors.New("stats: counters endpoints need Linux (abstract Unix sockets), not " + runtime.GOOS)
}
