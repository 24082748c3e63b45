// Package kv is a key-value store served two ways: over RDMA, where a GET
// is one-sided (the client READs the server's registered hash table; the
// server's goroutines do nothing), and over TCP, where the server's
// goroutine looks the key up and answers. PUTs are two-sided on both: a
// message the server's goroutine applies to the table.
//
// # The table
//
// A power-of-two number of fixed-size slots in one 8-byte aligned buffer
// (registered with REMOTE_READ on the RDMA server). A key hashes (FNV-1a)
// to a slot; collisions probe the following slots, at most MaxProbe, and
// an empty slot ends a search. There is no DELETE, so a key once stored
// stays in its slot and a probe sequence never has holes. Each slot:
//
//	[0, 8)             version: even when stable, odd while the server writes
//	[8, 9)             key length (0: empty)
//	[12, 16)           value length
//	[16, 16+KeyMax)    key, zero-padded
//	[48, 48+V)         value, V = the table's value capacity rounded up to 8
//	[48+V, 56+V)       check: CRC-64 (ECMA) of the version and bytes [8, 48+V)
//
// Words are in the server's byte order (the client must share it: both
// ends of the examples are the same program on the same kind of machine).
//
// # Why a GET is consistent
//
// An RDMA READ of bytes the server's CPU is writing may return any mixture
// of old and new bytes (README, "Memory consistency of one-sided
// operations"): not even an aligned word is read whole. The server writes
// a slot as a seqlock writer does, with atomic stores ordering the steps:
// version odd, the fields, the check of the next even version, the version
// even. The client reads the whole slot in one READ and accepts it only if
// the version is even and the check matches the version and the bytes
// read with it; otherwise (a torn read) it READs the slot again. A mixture
// that passes the check needs a CRC-64 collision (2^-64). A reader never
// blocks the writer, and a writer never waits for readers.
package kv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc64"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"unsafe"
)

// KeyMax is the longest key, MaxProbe the longest probe sequence.
const (
	KeyMax   = 32
	MaxProbe = 8

	offVersion = 0
	offKeyLen  = 8
	offValLen  = 12
	offKey     = 16
	offValue   = offKey + KeyMax
)

// Errors of Put and Get.
var (
	ErrNotFound = errors.New("kv: key not found")
	ErrFull     = errors.New("kv: no free slot within MaxProbe of the key's")
	ErrTooLarge = errors.New("kv: key or value too large")
)

var crcTable = crc64.MakeTable(crc64.ECMA)

// Geometry is a table's shape, which a client needs to find a key's slot:
// the RDMA server sends it in the connection's private data.
type Geometry struct {
	Slots    int // a power of two
	ValueMax int // value capacity, a multiple of 8
}

// SlotSize is the size of one slot in bytes.
func (g Geometry) SlotSize() int { return offValue + g.ValueMax + 8 }

// check validates a geometry received from a peer.
func (g Geometry) check() error {
	if g.Slots <= 0 || g.Slots&(g.Slots-1) != 0 || g.Slots > 1<<26 || g.ValueMax <= 0 || g.ValueMax%8 != 0 || g.ValueMax > 1<<20 {
		return fmt.Errorf("kv: bad table geometry %+v", g)
	}
	return nil
}

// Home is the slot a key hashes to.
func (g Geometry) Home(key []byte) int {
	h := fnv.New64a()
	h.Write(key)
	return int(h.Sum64() & uint64(g.Slots-1))
}

// Table is the server's hash table. Writers (Put) serialize on a mutex;
// readers (Get here, or a client's READ) never lock.
type Table struct {
	Geometry
	buf []byte
	mu  sync.Mutex
}

// NewTable returns an empty table of at least slots slots (rounded up to a
// power of two) holding values of up to valueMax bytes.
func NewTable(slots, valueMax int) (*Table, error) {
	g := Geometry{Slots: 1, ValueMax: (valueMax + 7) &^ 7}
	for g.Slots < slots {
		g.Slots *= 2
	}
	if err := g.check(); err != nil {
		return nil, err
	}
	words := make([]uint64, g.Slots*g.SlotSize()/8) // 8-byte aligned
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	t := &Table{Geometry: g, buf: buf}
	for i := range g.Slots { // version 0, empty, with its check: a valid empty slot
		s := t.slot(i)
		binary.NativeEndian.PutUint64(s[len(s)-8:], slotCheck(0, s))
	}
	return t, nil
}

// Memory is the table's buffer, to register for remote READs.
func (t *Table) Memory() []byte { return t.buf }

func (t *Table) slot(i int) []byte {
	n := t.SlotSize()
	return t.buf[i*n : (i+1)*n]
}

// word is the aligned word at b[0], for the writer's ordered stores.
func word(b []byte) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&b[0])) }

// slotCheck is the check word of a slot whose version is v.
func slotCheck(v uint64, s []byte) uint64 {
	var vb [8]byte
	binary.NativeEndian.PutUint64(vb[:], v)
	return crc64.Update(crc64.Update(0, crcTable, vb[:]), crcTable, s[offKeyLen:len(s)-8])
}

// Put stores value under key, in the key's slot or the first empty one of
// its probe sequence.
func (t *Table) Put(key, value []byte) error {
	if len(key) == 0 || len(key) > KeyMax || len(value) > t.ValueMax {
		return ErrTooLarge
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	home := t.Home(key)
	for p := range MaxProbe {
		s := t.slot((home + p) & (t.Slots - 1))
		klen := int(s[offKeyLen])
		if klen != 0 && string(s[offKey:offKey+klen]) != string(key) {
			continue
		}
		v := word(s).Load()
		word(s).Store(v + 1) // odd: a reader that sees it retries
		s[offKeyLen] = byte(len(key))
		binary.NativeEndian.PutUint32(s[offValLen:], uint32(len(value)))
		copy(s[offKey:offKey+KeyMax], key)
		copy(s[offValue:], value)
		clear(s[offValue+len(value) : len(s)-8])
		word(s[len(s)-8:]).Store(slotCheck(v+2, s))
		word(s).Store(v + 2)
		return nil
	}
	return ErrFull
}

// Get appends to dst[:0] the value stored under key, decoding the slots
// as a remote client does (so the TCP server's GET pays the check a
// client pays), under the writers' lock.
func (t *Table) Get(key []byte, dst []byte) ([]byte, error) {
	home := t.Home(key)
	for p := range MaxProbe {
		s := t.slot((home + p) & (t.Slots - 1))
		t.mu.Lock() // the server's own reads share the writers' lock: never torn
		val, st := lookup(s, key)
		if st == slotHit {
			dst = append(dst[:0], val...)
		}
		t.mu.Unlock()
		switch st {
		case slotHit:
			return dst, nil
		case slotEmpty:
			return dst, ErrNotFound
		}
	}
	return dst, ErrNotFound
}

// slotState is what one read of a slot found.
type slotState int

const (
	slotHit   slotState = iota // the key, consistent
	slotEmpty                  // an empty slot: the key is not stored
	slotOther                  // another key: probe the next slot
	slotTorn                   // odd version or check mismatch: read again
)

// lookup decodes a slot's bytes as read (by a READ, or locally) and
// returns the value (aliasing s) if it holds key.
func lookup(s []byte, key []byte) ([]byte, slotState) {
	v := binary.NativeEndian.Uint64(s[offVersion:])
	if v%2 == 1 || binary.NativeEndian.Uint64(s[len(s)-8:]) != slotCheck(v, s) {
		return nil, slotTorn
	}
	klen := int(s[offKeyLen])
	vlen := int(binary.NativeEndian.Uint32(s[offValLen:]))
	switch {
	case klen == 0:
		return nil, slotEmpty
	case klen > KeyMax || vlen > len(s)-8-offValue:
		return nil, slotTorn // a check collision would be needed: treat as torn
	case string(s[offKey:offKey+klen]) != string(key):
		return nil, slotOther
	}
	return s[offValue : offValue+vlen], slotHit
}
