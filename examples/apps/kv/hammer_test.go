//go:build !race

// The race detector reports the server's stores racing the device's
// reads of the same bytes, which is the point here: this test runs in the
// build without -race (scripts/test.sh runs it so).

package kv

import (
	"encoding/binary"
	"sync"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

// stamp fills p with words that name (key, version) and their position,
// so that a value mixing two versions is told apart.
func stamp(p []byte, key int, v uint64) {
	for i := 0; i+8 <= len(p); i += 8 {
		binary.NativeEndian.PutUint64(p[i:], (uint64(key)<<48|v)*0x9E3779B97F4A7C15+uint64(i))
	}
}

// stampOK reports whether p is one whole version of key's value.
func stampOK(p []byte, key int) bool {
	if len(p) < 8 {
		return false
	}
	x := binary.NativeEndian.Uint64(p) // word 0 gives the version away
	for i := 8; i+8 <= len(p); i += 8 {
		if binary.NativeEndian.Uint64(p[i:]) != x+uint64(i) {
			return false
		}
	}
	return true
}

// TestGetRacingPuts has the server's goroutine rewrite a few keys without
// pause while the client GETs them by READ: every value a GET returns must
// be one whole version, torn READs being detected and read again.
func TestGetRacingPuts(t *testing.T) {
	srv, c := rdmaPair(t, 1024)
	ctx := testkit.Context(t)
	keys := [][]byte{[]byte("a"), []byte("b"), []byte("c")}
	val := make([]byte, 1024)
	for i, k := range keys {
		stamp(val, i, 0)
		if err := c.Put(ctx, k, val); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		p := make([]byte, 1024)
		for v := uint64(1); ; v++ {
			select {
			case <-stop:
				return
			default:
			}
			i := int(v) % len(keys)
			stamp(p, i, v)
			if err := srv.t.Put(keys[i], p); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var got []byte
	var err error
	for n := range 3000 {
		i := n % len(keys)
		if got, err = c.Get(ctx, keys[i], got); err != nil {
			t.Fatalf("Get %s: %v", keys[i], err)
		}
		if len(got) != 1024 || !stampOK(got, i) {
			t.Fatalf("GET %d of %s returned a mixture of versions", n, keys[i])
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("3000 GETs racing the writer: %d torn READs detected and read again", c.TornReads())
}
