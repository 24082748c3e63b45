package verbs

import (
	"context"
	"sync"
	"sync/atomic"
)

// A NIC stores RDMA WRITEs and atomics into memory without telling the
// target's CPU: applications that must notice (perftest's write_lat, a
// one-sided mailbox) spin on a flag byte. In Go a spin holds a processor
// that the device's receive goroutine may need, and sleeping between looks
// costs the timer's granularity; so a region counts the remote stores into
// it, and a goroutine can park until the count moves.

// remoteWrites counts the remote stores into a region. What waiting
// needs is allocated by the first waiter: most regions are never waited
// on, and a device holds millions of them.
type remoteWrites struct {
	count   atomic.Uint64
	waiters atomic.Pointer[writeWaiters]
}

// writeWaiters holds the goroutines waiting for a region's next store.
type writeWaiters struct {
	waiting atomic.Int32 // goroutines parked in WaitRemoteWrite
	mu      sync.Mutex
	wake    chan struct{} // capacity 1
}

// note counts one store. It costs an atomic add and a load and, only while
// a goroutine waits, a non-blocking send.
func (w *remoteWrites) note() { w.noteN(1) }

// noteN counts n stores at once (a receive batch's, qpMemory.storeInBatch),
// and wakes a waiter once.
func (w *remoteWrites) noteN(n uint64) {
	w.count.Add(n)
	if ww := w.waiters.Load(); ww != nil && ww.waiting.Load() > 0 {
		ww.signal()
	}
}

// waitersFor returns the region's waiters, made on first use.
func (w *remoteWrites) waitersFor() *writeWaiters {
	if ww := w.waiters.Load(); ww != nil {
		return ww
	}
	w.waiters.CompareAndSwap(nil, &writeWaiters{wake: make(chan struct{}, 1)})
	return w.waiters.Load()
}

func (ww *writeWaiters) signal() {
	ww.mu.Lock()
	select {
	case ww.wake <- struct{}{}:
	default:
	}
	ww.mu.Unlock()
}

// RemoteWrites returns how many remote stores the device has made into the
// region so far: one per RDMA WRITE packet (its payload is in memory when it
// is counted), atomic and ATOMIC_WRITE, through the region's rkey or a
// memory window bound to it. A goroce extension, with no libibverbs
// counterpart. Bytes stored before the count was taken are visible to the
// caller after it reads a count that includes them (the count is the
// point where the device publishes its stores, as CQ.Poll is).
func (mr *MR) RemoteWrites() uint64 { return mr.writes.count.Load() }

// WaitRemoteWrite blocks until RemoteWrites differs from seen and returns
// the new count; it returns at once if it already differs. It parks the
// goroutine, woken by the device when it stores into the region, so the
// wait takes no processor and no timer. It returns ctx.Err() when ctx ends
// first. Several goroutines may wait; each store wakes at least one, and
// a woken waiter wakes the next. Deregistering the region does not wake
// waiters: their ctx must.
func (mr *MR) WaitRemoteWrite(ctx context.Context, seen uint64) (uint64, error) {
	if mr.hw != nil {
		return 0, hwUnsupported("WaitRemoteWrite", "mr", "counting remote writes")
	}
	w := &mr.writes
	if c := w.count.Load(); c != seen {
		return c, nil
	}
	ww := w.waitersFor()
	ww.waiting.Add(1)
	defer func() {
		if ww.waiting.Add(-1) > 0 {
			ww.signal() // another waiter may need the token taken here
		}
	}()
	for {
		// Registered as waiting before this load: a store after it
		// sees the waiter and signals.
		if c := w.count.Load(); c != seen {
			return c, nil
		}
		select {
		case <-ww.wake:
		case <-ctx.Done():
			if c := w.count.Load(); c != seen {
				return c, nil
			}
			return seen, ctx.Err()
		}
	}
}
