package verbs

import (
	"math/bits"
	"testing"
)

type keyed struct{ key uint32 }

func TestPerm24(t *testing.T) {
	p := newPerm24()
	seen := make([]bool, 1<<24)
	for x := range uint32(1 << 24) {
		y := p.encrypt(x)
		if y >= 1<<24 || seen[y] {
			t.Fatalf("encrypt(%#x) = %#x: out of range or not a permutation", x, y)
		}
		seen[y] = true
		if p.decrypt(y) != x {
			t.Fatalf("decrypt(encrypt(%#x)) = %#x", x, p.decrypt(y))
		}
	}
	// Neighbours map far apart: over consecutive inputs, about half of
	// the 24 output bits differ (12 on average for a random permutation).
	var flips int
	const n = 4096
	for x := range uint32(n) {
		flips += bits.OnesCount32(p.encrypt(x) ^ p.encrypt(x+1))
	}
	if avg := float64(flips) / n; avg < 11 || avg > 13 {
		t.Errorf("consecutive inputs differ in %.2f output bits on average, want about 12", avg)
	}
	// Two devices draw different permutations.
	q := newPerm24()
	same := 0
	for x := range uint32(256) {
		if p.encrypt(x) == q.encrypt(x) {
			same++
		}
	}
	if same > 2 {
		t.Errorf("two permutations agree on %d of 256 inputs", same)
	}
}

func TestKeyTableAllocation(t *testing.T) {
	s := newKeySecret()
	tbl := newKeyTable[keyed](s, 0, mrEpochs, 5)
	tbl.reuseDelay = 2
	var got []uint32
	keys := map[uint32]uint32{}
	for range 5 {
		slot, key, ok := tbl.alloc()
		if !ok {
			t.Fatal("alloc failed with free slots")
		}
		if sl, ok := tbl.slotOf(key); !ok || sl != slot {
			t.Fatalf("key %#x does not name slot %d", key, slot)
		}
		if key == 0 || s.isMW(key) {
			t.Fatalf("key %#x: zero or a window's", key)
		}
		tbl.publish(slot, &keyed{key})
		got = append(got, slot)
		keys[slot] = key
	}
	for i, slot := range got {
		if slot != uint32(i) {
			t.Fatalf("fresh slots %v, want 0..4 in order", got)
		}
	}
	if _, _, ok := tbl.alloc(); ok {
		t.Fatal("alloc succeeded on a full table")
	}
	for _, key := range keys {
		if o := tbl.lookup(key); o == nil || o.key != key {
			t.Errorf("lookup(%#x) = %v", key, o)
		}
	}
	// Freed slots come back in FIFO order, each with a new key in all
	// of its bytes' worth: the code changes with the epoch.
	tbl.release(4)
	tbl.release(2)
	if tbl.lookup(keys[4]) != nil {
		t.Error("released slot still resolves")
	}
	slot, key, ok := tbl.alloc()
	if !ok || slot != 4 || key == keys[4] || key>>8 == keys[4]>>8 {
		t.Errorf("alloc after release = %d %#x %v, want slot 4 with a new code (was %#x)", slot, key, ok, keys[4])
	}
	slot, _, _ = tbl.alloc()
	if slot != 2 {
		t.Errorf("second reuse = %d, want 2", slot)
	}
	if k := tbl.rekey(3); k == keys[3] || k>>8 == keys[3]>>8 {
		t.Errorf("rekey(3) = %#x (was %#x)", k, keys[3])
	} else if sl, _ := tbl.slotOf(k); sl != 3 {
		t.Errorf("rekey(3) = %#x names slot %d", k, sl)
	}
}

func TestKeyTableReuseDelay(t *testing.T) {
	tbl := newKeyTable[keyed](newKeySecret(), 0, mrEpochs, 100)
	tbl.reuseDelay = 3
	for range 4 {
		slot, _, _ := tbl.alloc()
		tbl.release(slot)
	}
	// Four freed slots wait; more than reuseDelay, so the oldest (0) is
	// reused before a fresh one.
	if slot, _, _ := tbl.alloc(); slot != 0 {
		t.Errorf("alloc = %d, want the oldest freed slot 0", slot)
	}
	// Now three wait: a fresh slot is used.
	if slot, _, _ := tbl.alloc(); slot != 4 {
		t.Errorf("alloc = %d, want fresh slot 4", slot)
	}
}

// TestKeyGenerationsNeverRepeatSoon: a slot handed out again and again
// gets epochs × 256 distinct keys before the first comes back.
func TestKeyGenerationsNeverRepeatSoon(t *testing.T) {
	for _, tc := range []struct {
		name            string
		classBase, reps uint32
	}{{"regions", 0, mrEpochs}, {"windows", mwClassBase, mwEpochs}} {
		s := newKeySecret()
		tbl := newKeyTable[keyed](s, tc.classBase, tc.reps, 1)
		tbl.reuseDelay = 0
		seen := map[uint32]int{}
		codes := map[uint32]bool{}
		n := int(tc.reps) * 256
		for i := range n {
			slot, key, ok := tbl.alloc()
			if !ok || slot != 0 {
				t.Fatalf("%s: alloc %d: %d %v", tc.name, i, slot, ok)
			}
			if j, dup := seen[key]; dup {
				t.Fatalf("%s: key %#x handed out at %d and again at %d", tc.name, key, j, i)
			}
			if s.isMW(key) != (tc.classBase == mwClassBase) {
				t.Fatalf("%s: key %#x in the other table's classes", tc.name, key)
			}
			seen[key] = i
			codes[key>>8] = true
			tbl.release(slot)
		}
		if len(codes) != int(tc.reps) {
			t.Errorf("%s: %d codes over %d handouts, want %d", tc.name, len(codes), n, tc.reps)
		}
		// The cycle is complete: the next handout repeats the first key
		// (the key 0, never handed out, aside).
		if _, key, _ := tbl.alloc(); seen[key] != 0 && len(seen) == n {
			t.Errorf("%s: handout %d gave %#x, want the first key again", tc.name, n, key)
		}
	}
}

func TestKeyTableLookupEdges(t *testing.T) {
	s := newKeySecret()
	mrs := newKeyTable[keyed](s, 0, mrEpochs, keySlots)
	mws := newKeyTable[keyed](s, mwClassBase, mwEpochs, keySlots)
	for _, key := range []uint32{0, 0xff, 0x100, 0xffffff00, 0xffffffff} {
		if mrs.lookup(key) != nil || mws.lookup(key) != nil {
			t.Errorf("lookup(%#x) found something in an empty table", key)
		}
	}
	_, mwKey, _ := mws.alloc()
	_, mrKey, _ := mrs.alloc()
	if !s.isMW(mwKey) || s.isMW(mrKey) {
		t.Errorf("isMW: window key %#x %v, region key %#x %v", mwKey, s.isMW(mwKey), mrKey, s.isMW(mrKey))
	}
	// A key of one table is no slot of the other.
	if _, ok := mrs.slotOf(mwKey); ok {
		t.Error("a window key names a region slot")
	}
	if _, ok := mws.slotOf(mrKey); ok {
		t.Error("a region key names a window slot")
	}
	// Chunks are allocated on demand: a key naming a slot in a later
	// chunk finds nothing.
	if mrs.lookup(mrs.keyOf(keyChunkSize+5, 0)) != nil {
		t.Error("lookup in an unallocated chunk")
	}
}

// TestKeysSpread: keys handed out one after the other share no structure
// an attacker could enumerate from one of them: their codes are spread over
// the 24-bit space (ReDMArk guessed neighbours of a seen key within 2^16).
func TestKeysSpread(t *testing.T) {
	s := newKeySecret()
	tbl := newKeyTable[keyed](s, 0, mrEpochs, keySlots)
	const n = 4096
	var near, sameTop int
	prev := uint32(0)
	bytesSeen := map[uint8]bool{}
	for i := range n {
		_, key, _ := tbl.alloc()
		bytesSeen[uint8(key)] = true
		if i > 0 {
			d := int64(key) - int64(prev)
			if d > -1<<16 && d < 1<<16 {
				near++
			}
			if key>>24 == prev>>24 {
				sameTop++
			}
		}
		prev = key
	}
	// For uniform keys: near ≈ n × 2^17/2^32 ≈ 0.1, sameTop ≈ n/256 = 16.
	if near > 3 || sameTop > 40 {
		t.Errorf("of %d consecutive keys, %d within 2^16 of the previous and %d sharing its top byte", n, near, sameTop)
	}
	if len(bytesSeen) < 200 {
		t.Errorf("only %d distinct key bytes over %d keys", len(bytesSeen), n)
	}
}

// BenchmarkKeyLookup is the receive path's resolution of an rkey: the
// inverse permutation, two atomic loads and the key compare.
func BenchmarkKeyLookup(b *testing.B) {
	tbl := newKeyTable[keyed](newKeySecret(), 0, mrEpochs, keySlots)
	keys := make([]uint32, 64)
	for i := range keys {
		slot, key, _ := tbl.alloc()
		tbl.publish(slot, &keyed{key})
		keys[i] = key
	}
	b.ResetTimer()
	var hits int
	for i := range b.N {
		k := keys[i&63]
		if o := tbl.lookup(k); o != nil && o.key == k {
			hits++
		}
	}
	if hits != b.N {
		b.Fatal("lookups missed")
	}
}
