package wire

import (
	"hash/crc32"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestCRCUpdate compares crcUpdate with hash/crc32 for every length up to
// a little over two MTUs, at every alignment of a cache line, from random
// starting values: a wrong fold constant or a mishandled tail fails it.
func TestCRCUpdate(t *testing.T) {
	if !hasFoldAVX512 {
		t.Log("no AVX-512 VPCLMULQDQ here: checking the generic path only")
	}
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 9000+64)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	n := 9000
	if testing.Short() {
		n = 4200
	}
	for l := 0; l <= n; l++ {
		off := l % 64
		p := buf[off : off+l]
		c := r.Uint32()
		if got, want := crcUpdate(c, p), crc32.Update(c, crc32.IEEETable, p); got != want {
			t.Fatalf("len %d offset %d: crcUpdate %#08x, hash/crc32 %#08x", l, off, got, want)
		}
	}
}

// TestCRCFoldConstants recomputes every fold constant crc_amd64.s defines
// (its DATA lines, read from the file) from the polynomial.
func TestCRCFoldConstants(t *testing.T) {
	src, err := os.ReadFile("crc_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	// DATA fold<bits><>+<0 for the low quadword, 8 for the high>(SB)/8, $<value>
	data := regexp.MustCompile(`(?m)^DATA fold(\d+)<>\+(0|8)\(SB\)/8, \$(0x[0-9a-f]+)$`)
	found := 0
	for _, m := range data.FindAllStringSubmatch(string(src), -1) {
		bits, _ := strconv.Atoi(m[1])
		got, err := strconv.ParseUint(m[3], 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		// The low quadword of a lane is multiplied by x^(D+32), the
		// high one by x^(D-32).
		want := crcFoldConstant(bits + 32)
		if m[2] == "8" {
			want = crcFoldConstant(bits - 32)
		}
		if got != want {
			t.Errorf("fold%d+%s = %#x, want %#x", bits, m[2], got, want)
		}
		found++
	}
	if found != 10 {
		t.Errorf("%d fold constants in crc_amd64.s, want 10 (5 distances, 2 each)", found)
	}
}

// crcFoldConstant is x^n mod P for the CRC-32 polynomial, bit-reflected
// and shifted left by one (the form a reflected carry-less fold uses).
func crcFoldConstant(n int) uint64 {
	const poly = 0x104C11DB7
	r := uint64(1)
	for range n {
		r <<= 1
		if r&(1<<32) != 0 {
			r ^= poly
		}
	}
	var rev uint64
	for i := range 32 {
		if r&(1<<i) != 0 {
			rev |= 1 << (31 - i)
		}
	}
	return rev << 1
}

func FuzzCRCUpdate(f *testing.F) {
	f.Add(uint32(0), make([]byte, 600))
	f.Add(uint32(0xFFFFFFFF), make([]byte, 4096+28))
	f.Add(uint32(0x2144DF1C), []byte("short"))
	f.Fuzz(func(t *testing.T, c uint32, p []byte) {
		if got, want := crcUpdate(c, p), crc32.Update(c, crc32.IEEETable, p); got != want {
			t.Fatalf("len %d: crcUpdate %#08x, hash/crc32 %#08x", len(p), got, want)
		}
	})
}

// BenchmarkCRCUpdate compares crcUpdate with hash/crc32 on a 4 KiB payload
// and a 1 KiB one.
func BenchmarkCRCUpdate(b *testing.B) {
	for _, size := range []int{1024, 4096} {
		p := make([]byte, size)
		var sink uint32
		b.Run("goroce/"+strconv.Itoa(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				sink = crcUpdate(sink, p)
			}
		})
		b.Run("hash-crc32/"+strconv.Itoa(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				sink = crc32.Update(sink, crc32.IEEETable, p)
			}
		})
	}
}

// TestCRCReduceConstants recomputes the final reduction's constants in
// crc_amd64.s (reduce64<> and barrett<>) from the polynomial.
func TestCRCReduceConstants(t *testing.T) {
	src, err := os.ReadFile("crc_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{
		"reduce64+0": crcFoldConstant(96),
		"reduce64+8": crcFoldConstant(64),
		"barrett+0":  reflect33(barrettQuotient()),
		"barrett+8":  reflect33(0x104C11DB7),
	}
	data := regexp.MustCompile(`(?m)^DATA (reduce64|barrett)<>\+(0|8)\(SB\)/8, \$(0x[0-9a-f]+)$`)
	found := 0
	for _, m := range data.FindAllStringSubmatch(string(src), -1) {
		name := m[1] + "+" + m[2]
		got, err := strconv.ParseUint(m[3], 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		if got != want[name] {
			t.Errorf("%s = %#x, want %#x", name, got, want[name])
		}
		found++
	}
	if found != len(want) {
		t.Errorf("%d reduction constants in crc_amd64.s, want %d", found, len(want))
	}
}

// barrettQuotient is floor(x^64 / P) for the CRC-32 polynomial P, a
// polynomial of degree 32, by long division.
func barrettQuotient() uint64 {
	const poly = 0x104C11DB7
	var q uint64
	hi, lo := uint64(1), uint64(0) // the dividend x^64, as 128 bits
	for d := 64; d >= 32; d-- {
		var bit uint64
		if d == 64 {
			bit = hi & 1
		} else {
			bit = lo >> d & 1
		}
		if bit == 0 {
			continue
		}
		q |= 1 << (d - 32)
		s := d - 32 // subtract P*x^s
		lo ^= poly << s
		if s > 0 {
			hi ^= poly >> (64 - s)
		}
	}
	return q
}

// reflect33 reverses the low 33 bits of v, a polynomial of degree 32.
func reflect33(v uint64) uint64 {
	var r uint64
	for i := range 33 {
		if v&(1<<i) != 0 {
			r |= 1 << (32 - i)
		}
	}
	return r
}
