package verbs

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Memory keys.
//
// An lkey or rkey is index<<8 | key8, as in rxe: the upper 24 bits select a
// slot of the device's key table and the low byte is a per-slot generation
// that changes every time the slot is handed out again (and on Rereg), so a
// stale key held by a peer stops matching as soon as its registration ends.
// The lkey and rkey of a memory region are equal. Index 0 is never used, so
// the key 0 is never valid.
//
// Memory regions use indices 1..0xEFFFFF and memory windows
// 0xF00000..0xFFFFFF (each range its own table), so KeyIsMW is a range test
// on the index. rxe stops at 0x40000 regions and 0x20000 windows; keys are
// opaque to peers, and a userspace device has no reason to cap a process
// at 256 K registrations (the table grows in 4096-slot chunks as used). A window's key byte is chosen by its binds (the consumer
// key of IBA 10.6.7.2), starting from the table's generation at AllocMW.
const (
	mrIndexMin = 0x000001
	mrIndexMax = 0xEFFFFF
	mwIndexMin = 0xF00000
	mwIndexMax = 0xFFFFFF
)

// KeyIsMW reports whether an rkey falls in the memory-window index range
// rather than the memory-region range.
func KeyIsMW(key uint32) bool {
	idx := key >> 8
	return idx >= mwIndexMin && idx <= mwIndexMax
}

// keyIndex returns the table index of a key.
func keyIndex(key uint32) uint32 { return key >> 8 }

const (
	keyChunkShift = 12
	keyChunkSize  = 1 << keyChunkShift

	// keyReuseDelay is how many freed indices wait in the FIFO before the
	// oldest is handed out again. Until then fresh indices are used, so
	// the table stays about as large as the peak number of live objects
	// plus this delay, and an index is reused only after at least this
	// many other deregistrations. Together with the 8-bit generation, a
	// stale key can only match again after 256 reuses of its slot.
	keyReuseDelay = 1024
)

// keyChunk is a block of consecutive slots. Chunks are allocated on first
// use and never freed, so a lookup that found a chunk can keep using it.
type keyChunk[T any] struct {
	slots [keyChunkSize]atomic.Pointer[T]
	gen   [keyChunkSize]uint8 // last key byte handed out; guarded by keyTable.mu
}

// keyTable maps keys to objects. Allocation and freeing take a mutex;
// publication is an atomic store by the owner of the index; lookup is
// lock-free and O(1): two atomic loads (chunk, slot) and a compare of the
// full key by the caller.
type keyTable[T any] struct {
	first, last uint32 // index range, inclusive
	chunks      []atomic.Pointer[keyChunk[T]]

	mu         sync.Mutex
	fresh      uint32   // next never-used index; last+1 when exhausted
	free       []uint32 // FIFO of freed indices
	freeHead   int
	reuseDelay int
	seed       uint64 // varies the initial key byte per table and slot
}

func newKeyTable[T any](first, last uint32) *keyTable[T] {
	n := (last - first + keyChunkSize) >> keyChunkShift
	return &keyTable[T]{
		first:      first,
		last:       last,
		chunks:     make([]atomic.Pointer[keyChunk[T]], n),
		fresh:      first,
		reuseDelay: keyReuseDelay,
		seed:       rand.Uint64(),
	}
}

// chunkFor returns the chunk holding index and the slot offset in it, or nil
// if the index is out of range or its chunk was never allocated.
func (t *keyTable[T]) chunkFor(index uint32) (*keyChunk[T], uint32) {
	if index < t.first || index > t.last {
		return nil, 0
	}
	off := index - t.first
	return t.chunks[off>>keyChunkShift].Load(), off & (keyChunkSize - 1)
}

// lookup returns the object in key's slot, or nil. The caller must compare
// the object's current key with key: the slot may hold a newer registration.
// It takes no lock.
func (t *keyTable[T]) lookup(key uint32) *T {
	c, off := t.chunkFor(keyIndex(key))
	if c == nil {
		return nil
	}
	return c.slots[off].Load()
}

// alloc reserves an index and returns it with its new key. The slot stays
// empty until publish. It reports false when every index is in use.
func (t *keyTable[T]) alloc() (index, key uint32, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case len(t.free)-t.freeHead > t.reuseDelay || t.fresh > t.last && len(t.free) > t.freeHead:
		index = t.free[t.freeHead]
		t.freeHead++
		if t.freeHead > len(t.free)/2 {
			n := copy(t.free, t.free[t.freeHead:])
			t.free = t.free[:n]
			t.freeHead = 0
		}
	case t.fresh <= t.last:
		index = t.fresh
		t.fresh++
		off := index - t.first
		if t.chunks[off>>keyChunkShift].Load() == nil {
			c := new(keyChunk[T])
			base := off &^ (keyChunkSize - 1)
			for i := range c.gen {
				c.gen[i] = t.initialKeyByte(t.first + base + uint32(i))
			}
			t.chunks[off>>keyChunkShift].Store(c)
		}
	default:
		return 0, 0, false
	}
	return index, t.nextKeyLocked(index), true
}

// initialKeyByte spreads the first key bytes of a table's slots, so keys are
// not guessable from their index alone.
func (t *keyTable[T]) initialKeyByte(index uint32) uint8 {
	x := t.seed ^ uint64(index)*0x9e3779b97f4a7c15
	x ^= x >> 31
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 29
	return uint8(x)
}

// nextKeyLocked advances index's generation and returns the resulting key.
func (t *keyTable[T]) nextKeyLocked(index uint32) uint32 {
	c, off := t.chunkFor(index)
	c.gen[off]++
	return index<<8 | uint32(c.gen[off])
}

// rekey gives an allocated index a new key (for Rereg).
func (t *keyTable[T]) rekey(index uint32) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nextKeyLocked(index)
}

// publish makes obj visible to lookup at index, replacing what was there.
func (t *keyTable[T]) publish(index uint32, obj *T) {
	c, off := t.chunkFor(index)
	c.slots[off].Store(obj)
}

// release empties index's slot and queues the index for reuse. Lookups
// already holding the old object keep it; new lookups find nothing.
func (t *keyTable[T]) release(index uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, off := t.chunkFor(index)
	c.slots[off].Store(nil)
	t.free = append(t.free, index)
}

// each calls fn for every published object (for Device.Close).
func (t *keyTable[T]) each(fn func(*T)) {
	for i := range t.chunks {
		c := t.chunks[i].Load()
		if c == nil {
			continue
		}
		for j := range c.slots {
			if obj := c.slots[j].Load(); obj != nil {
				fn(obj)
			}
		}
	}
}
