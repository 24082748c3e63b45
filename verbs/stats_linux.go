package verbs

import (
	"fmt"
	"net"
	"os"
	"sync/atomic"
)

// The counters endpoint's part that is Linux's: a socket in the abstract
// namespace, which internal/stats finds in /proc/net/unix.

// statsSeq numbers the devices of this process, so that two devices with
// the same name get distinct endpoints.
var statsSeq atomic.Uint64

// startStatsEndpoint listens on the device's abstract socket. Failure is
// not fatal to the device (a sandbox may forbid Unix sockets): Open goes
// on without an endpoint.
func startStatsEndpoint(d *Device) (*statsEndpoint, error) {
	name := fmt.Sprintf("%s%d/%d/%s", StatsSocketPrefix, os.Getpid(), statsSeq.Add(1), d.name)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return nil, err
	}
	e := &statsEndpoint{ln: ln, name: name}
	e.wg.Add(1)
	go e.serve(d)
	return e, nil
}
