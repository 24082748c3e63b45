package verbs

import (
	crand "crypto/rand"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Memory keys.
//
// A key is 32 bits: code<<8 | key byte, where code is the image of a slot
// and an epoch under the device's secret permutation of 24-bit numbers
// (perm24):
//
//	code = perm(class<<20 | slot)   class = epoch (regions) or 12+epoch (windows)
//
// The receive path inverts the permutation (eight table loads) to find
// the slot, loads it without a lock and compares the whole key, so lookup
// stays O(1) and lock-free. Regions use classes 0..11, windows 12..15, so
// a key names at most one object and KeyIsMW is a range test on the class.
// Each table hands out its 2^20 slots (a region's or window's slot is held
// for its life) and keeps per slot a generation counter that advances at
// every handout and at Rereg; the generation selects the epoch (generation
// mod the table's epochs) and, through a secret permutation of bytes, the
// key byte. The lkey and rkey of a memory region are equal; a window's
// rkey keeps its code for the window's life and its low byte is the
// consumer key its binds choose (ibv_inc_rkey increments it), starting
// from the generation's byte at AllocMW.
//
// What this gives (the verbs package documentation, "Security", has the
// attacker's view): to whoever does not know the device's secret, the
// code of every live key is a value of a random permutation, so one key
// (or many) says nothing about another's code, and a guess of 32 bits
// names a live key with probability (live keys)/2^32. A region's key
// changes all 32 bits at each handout of its slot; the same key comes back
// only after 12 × 256 = 3072 handouts of that slot, each after at least
// keyReuseDelay other releases. A window's code comes back after 4
// handouts of its slot. Key 0 is never handed out. The split of the code
// between slot and epoch is a trade: 2^20 slots hold the million regions
// goroce-scale registers (rxe: 2^18 regions, 2^17 windows).
const (
	keySlotBits = 20
	keySlots    = 1 << keySlotBits
	mrEpochs    = 12 // classes 0..11
	mwEpochs    = 4  // classes 12..15
	mwClassBase = mrEpochs
)

// keySecret is a device's secret for its keys: the permutation of codes
// and the permutation of key bytes.
type keySecret struct {
	perm  *perm24
	bytes [256]uint8
	seed  uint64 // spreads the first generation and byte offset of each slot
}

func newKeySecret() *keySecret { return newKeySecretFrom(crand.Reader) }

// newKeySecretFrom draws a secret from r (see newPerm24From).
func newKeySecretFrom(r io.Reader) *keySecret {
	s := &keySecret{perm: newPerm24From(r)}
	var seed [32]byte
	if _, err := io.ReadFull(r, seed[:]); err != nil {
		panic("keySecret: " + err.Error())
	}
	rng := rand.New(rand.NewChaCha8(seed))
	for i := range s.bytes {
		s.bytes[i] = uint8(i)
	}
	rng.Shuffle(len(s.bytes), func(i, j int) { s.bytes[i], s.bytes[j] = s.bytes[j], s.bytes[i] })
	s.seed = rng.Uint64()
	return s
}

// code returns the code of key: its class and slot.
func (s *keySecret) code(key uint32) uint32 { return s.perm.decrypt(key >> 8) }

// codeIsMW reports whether a key's code lies in the memory windows'
// classes (0..15: which table, which epoch).
func codeIsMW(code uint32) bool { return code>>keySlotBits >= mwClassBase }

// isMW reports whether key lies in the memory windows' classes.
func (s *keySecret) isMW(key uint32) bool { return codeIsMW(s.code(key)) }

// slotHash is a per-slot pseudo-random value.
func (s *keySecret) slotHash(class0, slot uint32) uint64 {
	x := s.seed ^ (uint64(class0)<<32|uint64(slot))*0x9e3779b97f4a7c15
	x ^= x >> 31
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 29
	return x
}

// keyMemo remembers the code of the last key it was asked for: the inverse
// permutation costs tens of nanoseconds (dependent table loads), and the
// packets of a message resolve the same key one after the other.
type keyMemo struct {
	key, last uint32 // last is key's code
	set       bool
}

// code returns key's code under s.
func (m *keyMemo) code(s *keySecret, key uint32) uint32 {
	if !m.set || m.key != key {
		*m = keyMemo{key: key, last: s.code(key), set: true}
	}
	return m.last
}

// KeyIsMW reports whether key (an rkey of this device) falls in the
// memory-window classes rather than the memory-region ones. Only the
// device that issued a key can tell. On a hardware device (OpenHardware)
// the provider's keys have no such classes and it reports false.
func (d *Device) KeyIsMW(key uint32) bool { return d.hw == nil && d.keys.isMW(key) }

const (
	keyChunkShift = 12
	keyChunkSize  = 1 << keyChunkShift

	// keyReuseDelay is how many freed slots wait in the FIFO before the
	// oldest is handed out again. Until then fresh slots are used, so the
	// table stays about as large as the peak number of live objects plus
	// this delay, and a slot is reused only after at least this many
	// other releases.
	keyReuseDelay = 1024
)

// keyChunk is a block of consecutive slots. Chunks are allocated on first
// use and never freed, so a lookup that found a chunk can keep using it.
type keyChunk[T any] struct {
	slots [keyChunkSize]atomic.Pointer[T]
	gen   [keyChunkSize]uint16 // generation last handed out; guarded by keyTable.mu
}

// keyTable maps keys to objects. Allocation and freeing take a mutex;
// publication is an atomic store by the owner of the slot; lookup is
// lock-free and O(1): the inverse permutation, two atomic loads (chunk,
// slot) and a compare of the full key by the caller.
type keyTable[T any] struct {
	secret         *keySecret
	classBase      uint32 // first class of this table
	epochs         uint32 // classes of this table
	last           uint32 // highest slot the table hands out
	chunks         []atomic.Pointer[keyChunk[T]]
	mu             sync.Mutex
	fresh          uint32   // next never-used slot; last+1 when exhausted
	free           []uint32 // FIFO of freed slots
	freeHead       int
	reuseDelay     int
	generationsMax uint16 // epochs × 256: generations before a key recurs
}

func newKeyTable[T any](s *keySecret, classBase, epochs, slots uint32) *keyTable[T] {
	return &keyTable[T]{
		secret:         s,
		classBase:      classBase,
		epochs:         epochs,
		last:           slots - 1,
		chunks:         make([]atomic.Pointer[keyChunk[T]], (slots+keyChunkSize-1)>>keyChunkShift),
		reuseDelay:     keyReuseDelay,
		generationsMax: uint16(epochs * 256),
	}
}

// chunkFor returns the chunk holding slot and the offset in it, or nil if
// the slot is out of range or its chunk was never allocated.
func (t *keyTable[T]) chunkFor(slot uint32) (*keyChunk[T], uint32) {
	if slot > t.last {
		return nil, 0
	}
	return t.chunks[slot>>keyChunkShift].Load(), slot & (keyChunkSize - 1)
}

// slotOf returns the slot key names in this table, or false if its class
// is another table's.
func (t *keyTable[T]) slotOf(key uint32) (uint32, bool) { return t.slotOfCode(t.secret.code(key)) }

func (t *keyTable[T]) slotOfCode(code uint32) (uint32, bool) {
	if code>>keySlotBits-t.classBase >= t.epochs {
		return 0, false
	}
	return code & (keySlots - 1), true
}

// lookup returns the object in key's slot, or nil. The caller must compare
// the object's current key with key: the slot may hold another generation.
// It takes no lock.
func (t *keyTable[T]) lookup(key uint32) *T { return t.lookupCode(t.secret.code(key)) }

// lookupCode is lookup for a key whose code the caller already has.
func (t *keyTable[T]) lookupCode(code uint32) *T {
	slot, ok := t.slotOfCode(code)
	if !ok {
		return nil
	}
	c, off := t.chunkFor(slot)
	if c == nil {
		return nil
	}
	return c.slots[off].Load()
}

// alloc reserves a slot and returns it with its new key. The slot stays
// empty until publish. It reports false when every slot is in use.
func (t *keyTable[T]) alloc() (slot, key uint32, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case len(t.free)-t.freeHead > t.reuseDelay || t.fresh > t.last && len(t.free) > t.freeHead:
		slot = t.free[t.freeHead]
		t.freeHead++
		if t.freeHead > len(t.free)/2 {
			n := copy(t.free, t.free[t.freeHead:])
			t.free = t.free[:n]
			t.freeHead = 0
		}
	case t.fresh <= t.last:
		slot = t.fresh
		t.fresh++
		if t.chunks[slot>>keyChunkShift].Load() == nil {
			c := new(keyChunk[T])
			base := slot &^ (keyChunkSize - 1)
			for i := range c.gen {
				// The generation before the first handout: random
				// per slot, so first keys do not share an epoch.
				c.gen[i] = uint16(t.secret.slotHash(t.classBase, base+uint32(i)) % uint64(t.generationsMax))
			}
			t.chunks[slot>>keyChunkShift].Store(c)
		}
	default:
		return 0, 0, false
	}
	return slot, t.nextKeyLocked(slot), true
}

// nextKeyLocked advances slot's generation and returns the resulting key,
// skipping the key 0.
func (t *keyTable[T]) nextKeyLocked(slot uint32) uint32 {
	c, off := t.chunkFor(slot)
	for {
		g := (c.gen[off] + 1) % t.generationsMax
		c.gen[off] = g
		if key := t.keyOf(slot, uint32(g)); key != 0 {
			return key
		}
	}
}

// keyOf is the key of slot at generation g.
func (t *keyTable[T]) keyOf(slot, g uint32) uint32 {
	s := t.secret
	class := t.classBase + g%t.epochs
	b := s.bytes[uint8(g/t.epochs)^uint8(s.slotHash(t.classBase+1<<8, slot))]
	return s.perm.encrypt(class<<keySlotBits|slot)<<8 | uint32(b)
}

// rekey gives an allocated slot a new key (for Rereg).
func (t *keyTable[T]) rekey(slot uint32) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nextKeyLocked(slot)
}

// publish makes obj visible to lookup at slot, replacing what was there.
func (t *keyTable[T]) publish(slot uint32, obj *T) {
	c, off := t.chunkFor(slot)
	c.slots[off].Store(obj)
}

// release empties slot and queues it for reuse. Lookups already holding
// the old object keep it; new lookups find nothing.
func (t *keyTable[T]) release(slot uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, off := t.chunkFor(slot)
	c.slots[off].Store(nil)
	t.free = append(t.free, slot)
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
