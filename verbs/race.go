//go:build race

package verbs

import "sync/atomic"

// raceEpoch makes the ordering that the network gives RDMA memory visible
// to the race detector. A remote WRITE is placed by the target device's
// receive goroutine, and the initiator learns of it from an ACK that
// crossed a UDP socket: the happens-before edge runs through the kernel,
// where the detector cannot see it, so every test that reads memory after
// a completion would be reported as a race. Each transport call and each
// poll does a read-modify-write on one atomic, which the detector treats as
// synchronising, the same edge the syscalls give real builds.
var raceEpoch atomic.Uint64

// raceSync marks a point where memory handed to or taken from the device is
// synchronised. It compiles to nothing without -race.
func raceSync() { raceEpoch.Add(1) }
