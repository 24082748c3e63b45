package verbs

import (
	"slices"
	"testing"
)

type keyed struct{ key uint32 }

func TestKeyTableAllocation(t *testing.T) {
	tbl := newKeyTable[keyed](1, 5)
	tbl.reuseDelay = 2
	var got []uint32
	keys := map[uint32]uint32{}
	for range 5 {
		idx, key, ok := tbl.alloc()
		if !ok {
			t.Fatal("alloc failed with free indices")
		}
		if keyIndex(key) != idx {
			t.Fatalf("key %#x does not carry index %d", key, idx)
		}
		tbl.publish(idx, &keyed{key})
		got = append(got, idx)
		keys[idx] = key
	}
	if want := []uint32{1, 2, 3, 4, 5}; !slices.Equal(got, want) {
		t.Fatalf("fresh indices %v, want %v", got, want)
	}
	if _, _, ok := tbl.alloc(); ok {
		t.Fatal("alloc succeeded on a full table")
	}
	for _, key := range keys {
		if o := tbl.lookup(key); o == nil || o.key != key {
			t.Errorf("lookup(%#x) = %v", key, o)
		}
	}
	// Freed indices come back in FIFO order, each with a new key byte.
	tbl.release(4)
	tbl.release(2)
	if tbl.lookup(keys[4]) != nil {
		t.Error("released slot still resolves")
	}
	idx, key, ok := tbl.alloc()
	if !ok || idx != 4 || key == keys[4] {
		t.Errorf("alloc after release = %d %#x %v, want index 4 with a new key", idx, key, ok)
	}
	idx, _, _ = tbl.alloc()
	if idx != 2 {
		t.Errorf("second reuse = %d, want 2", idx)
	}
	if k := tbl.rekey(3); k == keys[3] || keyIndex(k) != 3 {
		t.Errorf("rekey(3) = %#x (was %#x)", k, keys[3])
	}
}

func TestKeyTableReuseDelay(t *testing.T) {
	tbl := newKeyTable[keyed](1, 100)
	tbl.reuseDelay = 3
	for range 4 {
		idx, _, _ := tbl.alloc()
		tbl.release(idx)
	}
	// Four freed indices wait; more than reuseDelay, so the oldest (1)
	// is reused before a fresh one.
	if idx, _, _ := tbl.alloc(); idx != 1 {
		t.Errorf("alloc = %d, want the oldest freed index 1", idx)
	}
	// Now three wait: a fresh index is used.
	if idx, _, _ := tbl.alloc(); idx != 5 {
		t.Errorf("alloc = %d, want fresh index 5", idx)
	}
}

func TestKeyTableLookupEdges(t *testing.T) {
	tbl := newKeyTable[keyed](mwIndexMin, mwIndexMax)
	for _, key := range []uint32{0, 0xff, mwIndexMin<<8 | 7, mwIndexMax<<8 | 0xff, (mwIndexMin - 1) << 8, 0xffffffff} {
		if tbl.lookup(key) != nil {
			t.Errorf("lookup(%#x) found something in an empty table", key)
		}
	}
	idx, key, _ := tbl.alloc()
	if idx != mwIndexMin || !KeyIsMW(key) {
		t.Errorf("first MW index %#x key %#x", idx, key)
	}
	// Chunks are allocated on demand: a key in a later chunk finds nothing.
	if tbl.lookup((mwIndexMin+keyChunkSize)<<8) != nil {
		t.Error("lookup in an unallocated chunk")
	}
}

func TestKeyIsMW(t *testing.T) {
	tests := []struct {
		key  uint32
		want bool
	}{
		{0, false}, {1<<8 | 5, false}, {mrIndexMax<<8 | 0xff, false},
		{mwIndexMin << 8, true}, {mwIndexMax<<8 | 0xff, true}, {(mwIndexMin - 1) << 8, false},
	}
	for _, tt := range tests {
		if got := KeyIsMW(tt.key); got != tt.want {
			t.Errorf("KeyIsMW(%#x) = %v, want %v", tt.key, got, tt.want)
		}
	}
}

func TestKeyInitialBytesVary(t *testing.T) {
	// The first key of consecutive slots is not a constant byte.
	tbl := newKeyTable[keyed](1, 64)
	bytes := map[uint8]bool{}
	for range 64 {
		_, key, _ := tbl.alloc()
		bytes[uint8(key)] = true
	}
	if len(bytes) < 16 {
		t.Errorf("only %d distinct key bytes over 64 slots", len(bytes))
	}
}
