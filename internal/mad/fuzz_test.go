package mad

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to the parser. It must never panic; a
// MAD it accepts must re-encode without error to itself with exactly the
// reserved bits cleared, and that must parse to the same values. The
// seeds in testdata/fuzz/FuzzDecode are the captured MADs of rping.pcap
// and write_bw_rdmacm.pcap and the crafted ones of every message.
func FuzzDecode(f *testing.F) {
	for _, m := range craftedMADs(f) {
		f.Add(m)
	}
	f.Fuzz(func(t *testing.T, mad []byte) {
		h, m, err := Decode(mad)
		if err != nil {
			if m != nil {
				t.Fatal("message with an error")
			}
			return
		}
		out, err := AppendMAD(nil, &h, m)
		if err != nil {
			t.Fatalf("re-encoding a parsed %v: %v", h.AttrID, err)
		}
		checkReserved(t, h.AttrID, mad, out)
		h2, m2, err := Decode(out)
		if err != nil {
			t.Fatalf("re-parsing: %v", err)
		}
		if h2 != h || !reflect.DeepEqual(m2, m) {
			t.Fatalf("%v: parse, encode, parse changed the values:\n%+v\n%+v", h.AttrID, m, m2)
		}
	})
}

// FuzzCMAHeader: never panics; an accepted header re-encodes and parses
// to the same values.
func FuzzCMAHeader(f *testing.F) {
	f.Add([]byte{0, 0x40, 0xd5, 0x19, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 99, 0, 2,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 99, 0, 3})
	f.Fuzz(func(t *testing.T, pd []byte) {
		h, err := ParseCMAHeader(pd)
		if err != nil {
			return
		}
		b, err := h.Append(nil)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", h, err)
		}
		h2, err := ParseCMAHeader(b)
		if err != nil || h2 != h {
			t.Fatalf("%+v became %+v (%v)", h, h2, err)
		}
	})
}

// TestFuzzSeeds keeps the seed corpus: with -update it writes the
// captured and crafted MADs to testdata/fuzz/FuzzDecode; without, it
// checks that every captured MAD has its seed file.
func TestFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	seeds := map[string][]byte{}
	for i, m := range craftedMADs(t) {
		seeds[fmt.Sprintf("crafted-%02d", i)] = m
	}
	if haveCaptures() {
		for _, fm := range captureMADs(t) {
			seeds[fmt.Sprintf("%s-%d", strings.TrimSuffix(fm.file, ".pcap"), fm.frame)] = fm.mad
		}
	}
	for name, m := range seeds {
		path := filepath.Join(dir, name)
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", m)
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("seed %s missing or stale (%v); rerun with -update", path, err)
		}
	}
}
