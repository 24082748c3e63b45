package psn

import (
	"fmt"
	"testing"
)

// edges are PSNs around the places where 24-bit arithmetic can go wrong: zero,
// the wrap, and the half-way point where the signed distance changes sign.
var edges = []PSN{0, 1, 2, 0x7FFFFE, 0x7FFFFF, 0x800000, 0x800001, 0xFFFFFD, 0xFFFFFE, 0xFFFFFF}

func TestAddNext(t *testing.T) {
	tests := []struct {
		p    PSN
		n    uint32
		want PSN
	}{
		{0, 0, 0},
		{0, 1, 1},
		{0xFFFFFF, 1, 0},
		{0xFFFFFF, 2, 1},
		{0xFFFFFE, 0x10, 0xE},
		{0x123456, Modulus, 0x123456},
		{0x123456, Modulus + 1, 0x123457},
		{0x800000, 0x800000, 0},
		{5, 0xFFFFFFFF, 4}, // -1 as a uint32
	}
	for _, tt := range tests {
		if got := tt.p.Add(tt.n); got != tt.want {
			t.Errorf("%v.Add(%#x) = %v, want %v", tt.p, tt.n, got, tt.want)
		}
		if tt.n == 1 {
			if got := tt.p.Next(); got != tt.want {
				t.Errorf("%v.Next() = %v, want %v", tt.p, got, tt.want)
			}
		}
	}
	if got := PSN(Mask).Next(); got != 0 {
		t.Errorf("0xFFFFFF+1 = %v, want 0", got)
	}
}

func TestSub(t *testing.T) {
	tests := []struct {
		p, q PSN
		want int32
	}{
		{0, 0, 0},
		{1, 0, 1},
		{0, 1, -1},
		{0, 0xFFFFFF, 1},  // across the wrap
		{0xFFFFFF, 0, -1}, // across the wrap
		{5, 0xFFFFFB, 10},
		{0xFFFFFB, 5, -10},
		{0x7FFFFF, 0, 0x7FFFFF},  // largest positive distance
		{0x800000, 0, -0x800000}, // half way: interpreted as behind
		{0, 0x800000, -0x800000},
		{0x1000123, 0x123, 0}, // high byte of an unmasked value is ignored
	}
	for _, tt := range tests {
		if got := tt.p.Sub(tt.q); got != tt.want {
			t.Errorf("%v.Sub(%v) = %d, want %d", tt.p, tt.q, got, tt.want)
		}
	}
}

// TestOrderProperties checks, for every pair of edge PSNs and a range of
// offsets, that Add, Sub and the comparisons agree with each other.
func TestOrderProperties(t *testing.T) {
	offsets := []uint32{0, 1, 2, 127, 128, 0x7FFFFF, 0x800000, 0x800001, 0xFFFFFF}
	for _, p := range edges {
		for _, n := range offsets {
			q := p.Add(n)
			d := int64(n)
			if d >= 1<<23 {
				d -= Modulus
			}
			if got := q.Sub(p); int64(got) != d {
				t.Errorf("(%v+%#x).Sub(%v) = %d, want %d", p, n, p, got, d)
			}
			if got := p.Sub(q); int64(got) != -d && !(d == -1<<23 && int64(got) == d) {
				t.Errorf("%v.Sub(%v+%#x) = %d, want %d", p, p, n, got, -d)
			}
			if q.Sub(p) == 0 != (q == p) {
				t.Errorf("Sub and == disagree for %v, %v", q, p)
			}
			wantCmp := 0
			switch {
			case d > 0:
				wantCmp = 1
			case d < 0:
				wantCmp = -1
			}
			if got := q.Compare(p); got != wantCmp {
				t.Errorf("%v.Compare(%v) = %d, want %d", q, p, got, wantCmp)
			}
			if got := q.LessThan(p); got != (wantCmp < 0) {
				t.Errorf("%v.LessThan(%v) = %v", q, p, got)
			}
			if got := q.LessThanEq(p); got != (wantCmp <= 0) {
				t.Errorf("%v.LessThanEq(%v) = %v", q, p, got)
			}
		}
	}
}

func TestCompareAcrossWrap(t *testing.T) {
	// Every PSN within 1000 before the wrap is less than every PSN within
	// 1000 after it, and the relation is antisymmetric.
	for i := uint32(0); i < 1000; i += 7 {
		before := PSN(Mask - i)
		for j := uint32(0); j < 1000; j += 11 {
			after := PSN(j)
			if !before.LessThan(after) || after.LessThan(before) || after.LessThanEq(before) {
				t.Fatalf("ordering of %v and %v is wrong", before, after)
			}
			if before.Compare(after) != -1 || after.Compare(before) != 1 {
				t.Fatalf("Compare(%v, %v) is wrong", before, after)
			}
		}
	}
}

func TestInWindow(t *testing.T) {
	tests := []struct {
		p, first PSN
		size     uint32
		want     bool
	}{
		{0, 0, 0, false},
		{0, 0, 1, true},
		{1, 0, 1, false},
		{0xFFFFFF, 0xFFFFFF, 1, true},
		{0, 0xFFFFFF, 1, false},
		{0, 0xFFFFFF, 2, true}, // window spans the wrap
		{1, 0xFFFFFF, 2, false},
		{0xFFFFFE, 0xFFFFFF, 2, false},
		{0x7F, 0xFFFFC0, 128, false},
		{0x3F, 0xFFFFC0, 128, true},
		{0xFFFFBF, 0xFFFFC0, 128, false},
		{0x123456, 0x123457, Modulus, true}, // the whole space
		{0x123456, 0x123457, Modulus - 1, false},
		{0x1000005, 0x2000000, 10, true}, // unmasked inputs
	}
	for _, tt := range tests {
		if got := tt.p.InWindow(tt.first, tt.size); got != tt.want {
			t.Errorf("%v.InWindow(%v, %d) = %v, want %v", tt.p, tt.first, tt.size, got, tt.want)
		}
	}
}

// TestInWindowMatchesSub checks InWindow against a definition by Sub for
// windows smaller than half the space.
func TestInWindowMatchesSub(t *testing.T) {
	for _, first := range edges {
		for _, size := range []uint32{0, 1, 2, 128, 0x7FFFFF} {
			for _, p := range edges {
				for _, delta := range []int32{-2, -1, 0, 1, 2} {
					q := p.Add(uint32(delta))
					d := q.Sub(first)
					want := d >= 0 && uint32(d) < size
					if got := q.InWindow(first, size); got != want {
						t.Errorf("%v.InWindow(%v, %d) = %v, want %v", q, first, size, got, want)
					}
				}
			}
		}
	}
}

func TestString(t *testing.T) {
	tests := []struct {
		p    PSN
		want string
	}{
		{0, "0x000000"},
		{0xce973c, "0xce973c"},
		{0xFFFFFF, "0xffffff"},
		{0x1000001, "0x000001"},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("PSN(%#x).String() = %q, want %q", uint32(tt.p), got, tt.want)
		}
		if got := fmt.Sprint(tt.p); got != tt.want {
			t.Errorf("fmt.Sprint(PSN(%#x)) = %q, want %q", uint32(tt.p), got, tt.want)
		}
	}
}

func TestMaskedResults(t *testing.T) {
	for _, p := range edges {
		for _, n := range []uint32{0, 1, Mask, Modulus, 0xFFFFFFFF} {
			if got := (p | 0xAB000000).Add(n); got&^Mask != 0 {
				t.Errorf("Add left high bits: %#x", uint32(got))
			}
		}
		if got := (p | 0xAB000000).Next(); got&^Mask != 0 {
			t.Errorf("Next left high bits: %#x", uint32(got))
		}
	}
}
