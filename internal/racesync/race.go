//go:build race

// Package racesync makes the ordering that the network gives RDMA memory
// visible to the race detector.
//
// A remote WRITE is placed by the target device's receive goroutine, and
// the initiator learns of it from an ACK that crossed a UDP socket; a
// payload sent from registered memory is read (for its ICRC) by the
// sender's goroutine, and the application may reuse the memory once the
// peer's answer arrives. The happens-before edges run through the kernel,
// where the detector cannot see them, so every test that touches memory
// after a completion would be reported as a race. Sync does a
// read-modify-write on one atomic, which the detector treats as
// synchronising: called at each point where memory is handed to or taken
// from the device (each transport call, each poll, before each send), it
// gives the detector the edge the system calls give real builds. Without
// -race it compiles to nothing.
package racesync

import "sync/atomic"

var epoch atomic.Uint64

// Sync marks a point where memory handed to or taken from the device is
// synchronised.
func Sync() { epoch.Add(1) }
