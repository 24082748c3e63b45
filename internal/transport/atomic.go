package transport

import (
	"sync"
	"unsafe"
)

// atomicStripes is the number of locks an AtomicLocks holds. Atomics to
// different addresses rarely contend; 64 stripes keep the table small.
const atomicStripes = 64

// AtomicLocks serialises remote atomic operations on one device: IBTA only
// requires atomics to be atomic with respect to other atomics of the same
// HCA, so every QP of a device shares one AtomicLocks and takes the lock of
// the target's address stripe around the read-modify-write. The zero value
// is ready to use.
type AtomicLocks struct {
	stripes [atomicStripes]struct {
		sync.Mutex
		_ [64 - 8]byte // one stripe per cache line
	}
}

// lockFor returns the lock of the 8 bytes at b. It hashes the real memory
// address rather than the VA, so that two registrations of the same bytes
// share a lock.
func (l *AtomicLocks) lockFor(b []byte) *sync.Mutex {
	a := uintptr(unsafe.Pointer(unsafe.SliceData(b))) >> 3
	return &l.stripes[(a^a>>6)%atomicStripes].Mutex
}
