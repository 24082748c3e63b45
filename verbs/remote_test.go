package verbs_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/goroce/goroce/verbs"
)

// errField returns the Field of a *verbs.Error, failing the test for any
// other error or one that does not wrap ErrInvalidArgument.
func errField(t *testing.T, err error) string {
	t.Helper()
	var e *verbs.Error
	if !errors.As(err, &e) || !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("err = %v, want a *verbs.Error wrapping ErrInvalidArgument", err)
	}
	return e.Field
}

func TestRemoteRegionEncoding(t *testing.T) {
	r := verbs.RemoteRegion{Addr: 0x7f3a_2c00_0010, RKey: 0x1a2b3c, Length: 4096}
	b, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0, 0, 0x7f, 0x3a, 0x2c, 0, 0, 0x10, 0, 0x1a, 0x2b, 0x3c, 0, 0, 0x10, 0}
	if !bytes.Equal(b, want) || len(b) != verbs.RemoteRegionSize {
		t.Fatalf("MarshalBinary = % x, want % x", b, want)
	}
	// The append form extends what is there, as private data with a
	// header of the application's own would.
	ab, err := r.AppendBinary([]byte("hdr"))
	if err != nil || !bytes.Equal(ab, append([]byte("hdr"), want...)) {
		t.Fatalf("AppendBinary = % x, %v", ab, err)
	}
	var got verbs.RemoteRegion
	if err := got.UnmarshalBinary(b); err != nil || got != r {
		t.Fatalf("UnmarshalBinary = %+v, %v; want %+v", got, err, r)
	}
	// The largest region the encoding carries ends at 2^64 exactly.
	top := verbs.RemoteRegion{Addr: math.MaxUint64 - (math.MaxUint32 - 1), RKey: 1, Length: math.MaxUint32}
	tb, err := top.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := got.UnmarshalBinary(tb); err != nil || got != top {
		t.Fatalf("top region: %+v, %v", got, err)
	}
}

func TestRemoteRegionEncodingErrors(t *testing.T) {
	good, _ := verbs.RemoteRegion{Addr: 64, RKey: 7, Length: 8}.MarshalBinary()
	for n := range 2 * verbs.RemoteRegionSize {
		if n == verbs.RemoteRegionSize {
			continue
		}
		b := append(good, make([]byte, verbs.RemoteRegionSize)...)[:n]
		r := verbs.RemoteRegion{RKey: 99}
		err := r.UnmarshalBinary(b)
		if f := errField(t, err); f != "encoding" || r.RKey != 99 {
			t.Errorf("%d bytes: field %q, region %+v: want \"encoding\" and no change", n, f, r)
		}
	}
	zero := bytes.Clone(good)
	binary.BigEndian.PutUint32(zero[12:], 0)
	wrap := bytes.Clone(good)
	binary.BigEndian.PutUint64(wrap[0:], math.MaxUint64-6) // 8 bytes from 2^64-7
	for _, c := range []struct {
		name, field string
		b           []byte
	}{{"empty region", "Length", zero}, {"wrapping range", "Addr", wrap}} {
		var r verbs.RemoteRegion
		if f := errField(t, r.UnmarshalBinary(c.b)); f != c.field {
			t.Errorf("%s: field %q, want %q", c.name, f, c.field)
		}
	}
	for _, c := range []struct {
		name, field string
		r           verbs.RemoteRegion
	}{
		{"empty", "Length", verbs.RemoteRegion{Addr: 8}},
		{"4 GiB", "Length", verbs.RemoteRegion{Addr: 8, Length: 1 << 32}},
		{"wrapping", "Addr", verbs.RemoteRegion{Addr: math.MaxUint64, Length: 2}},
	} {
		b, err := c.r.MarshalBinary()
		if f := errField(t, err); f != c.field || b != nil {
			t.Errorf("MarshalBinary of %s region: field %q, bytes %x; want %q and none", c.name, f, b, c.field)
		}
	}
}

func TestRemoteRegionBuilders(t *testing.T) {
	r := verbs.RemoteRegion{Addr: 0x1000, RKey: 0xabc, Length: 64}
	local := []verbs.SGE{{Addr: 0x9000, Length: 16, LKey: 5}, {Addr: 0xa000, Length: 16, LKey: 5}}

	wr, err := r.Read(32, local...)
	if err != nil || wr.Opcode != verbs.WRRDMARead || wr.RDMA != (verbs.RDMAParams{RemoteAddr: 0x1020, RKey: 0xabc}) ||
		&wr.SGList[0] != &local[0] || wr.SendFlags != 0 {
		t.Fatalf("Read(32) = %+v, %v", wr, err)
	}
	if wr, err = r.Write(0, local[0]); err != nil || wr.Opcode != verbs.WRRDMAWrite || wr.RDMA.RemoteAddr != 0x1000 {
		t.Fatalf("Write(0) = %+v, %v", wr, err)
	}
	if wr, err = r.WriteImm(64, 0xfeed); err != nil || wr.Opcode != verbs.WRRDMAWriteWithImm || wr.ImmData != 0xfeed ||
		wr.RDMA.RemoteAddr != 0x1040 {
		t.Fatalf("zero-length WriteImm at the end = %+v, %v", wr, err)
	}
	res := verbs.SGE{Addr: 0x9000, Length: 8, LKey: 5}
	if wr, err = r.CompareSwap(56, res, 1, 2); err != nil || wr.Opcode != verbs.WRAtomicCmpAndSwp ||
		wr.Atomic != (verbs.AtomicParams{RemoteAddr: 0x1038, RKey: 0xabc, CompareAdd: 1, Swap: 2}) || wr.SGList[0] != res {
		t.Fatalf("CompareSwap(56) = %+v, %v", wr, err)
	}
	if wr, err = r.FetchAdd(0, res, 3); err != nil || wr.Opcode != verbs.WRAtomicFetchAndAdd ||
		wr.Atomic != (verbs.AtomicParams{RemoteAddr: 0x1000, RKey: 0xabc, CompareAdd: 3}) {
		t.Fatalf("FetchAdd(0) = %+v, %v", wr, err)
	}

	bad := []struct {
		name, field string
		build       func() (verbs.SendWR, error)
	}{
		{"read past the end", "off", func() (verbs.SendWR, error) { return r.Read(48, local...) }},
		{"read at a negative offset", "off", func() (verbs.SendWR, error) { return r.Read(-1, local[0]) }},
		{"write past the end", "off", func() (verbs.SendWR, error) { return r.Write(65) }},
		{"write longer than the region", "off", func() (verbs.SendWR, error) {
			return r.Write(0, verbs.SGE{Length: 65})
		}},
		{"write with immediate past the end", "off", func() (verbs.SendWR, error) { return r.WriteImm(60, 1, local[0]) }},
		{"atomic past the end", "off", func() (verbs.SendWR, error) { return r.FetchAdd(64, res, 1) }},
		{"misaligned atomic", "off", func() (verbs.SendWR, error) { return r.CompareSwap(4, res, 0, 1) }},
		{"short atomic result", "result", func() (verbs.SendWR, error) {
			return r.FetchAdd(8, verbs.SGE{Length: 4}, 1)
		}},
	}
	for _, c := range bad {
		wr, err := c.build()
		if f := errField(t, err); f != c.field || wr.Opcode != 0 || wr.SGList != nil {
			t.Errorf("%s: field %q, wr %+v; want %q and an empty request", c.name, f, wr, c.field)
		}
	}
	// A region whose address is misaligned makes every offset of an
	// aligned-looking atomic misaligned: the check is on the address.
	odd := verbs.RemoteRegion{Addr: 0x1004, RKey: 1, Length: 64}
	if _, err := odd.FetchAdd(4, res, 1); err != nil {
		t.Errorf("FetchAdd at the aligned address 0x1008: %v", err)
	}
	if _, err := odd.FetchAdd(0, res, 1); errField(t, err) != "off" {
		t.Errorf("FetchAdd at 0x1004 accepted")
	}
}

func TestRemoteRegionSlice(t *testing.T) {
	r := verbs.RemoteRegion{Addr: 0x1000, RKey: 9, Length: 64}
	s, err := r.Slice(16, 48)
	if err != nil || s != (verbs.RemoteRegion{Addr: 0x1010, RKey: 9, Length: 48}) {
		t.Fatalf("Slice(16, 48) = %+v, %v", s, err)
	}
	for _, c := range []struct{ off, n int }{{16, 49}, {-1, 4}, {65, 0}, {0, 0}, {8, -1}} {
		if _, err := r.Slice(c.off, c.n); err == nil {
			t.Errorf("Slice(%d, %d) accepted", c.off, c.n)
		}
	}
	if got := r.String(); got != "[0x1000, +64) rkey 0x9" {
		t.Errorf("String = %q", got)
	}
}

// FuzzRemoteRegionUnmarshal feeds the decoder what a peer's private data
// may hold: it must never panic, must leave the region unchanged on error,
// and whatever it accepts must be a valid region that encodes back to the
// same bytes.
func FuzzRemoteRegionUnmarshal(f *testing.F) {
	for _, r := range []verbs.RemoteRegion{
		{Addr: 0x7f3a2c000000, RKey: 0x1a2b, Length: 1 << 20},
		{Addr: 0, RKey: 0, Length: 1},
		{Addr: math.MaxUint64 - (math.MaxUint32 - 1), RKey: math.MaxUint32, Length: math.MaxUint32},
	} {
		b, _ := r.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(make([]byte, verbs.RemoteRegionSize))
	f.Add(bytes.Repeat([]byte{0xff}, verbs.RemoteRegionSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		sentinel := verbs.RemoteRegion{Addr: 1, RKey: 2, Length: 3}
		r := sentinel
		if err := r.UnmarshalBinary(b); err != nil {
			if r != sentinel {
				t.Fatalf("failed decode changed the region: %+v", r)
			}
			var e *verbs.Error
			if !errors.As(err, &e) || e.Field == "" {
				t.Fatalf("error %v names no field", err)
			}
			return
		}
		if r.Length == 0 || r.Addr+(r.Length-1) < r.Addr {
			t.Fatalf("accepted an invalid region %+v from % x", r, b)
		}
		again, err := r.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("% x decodes to %+v, which encodes to % x (%v)", b, r, again, err)
		}
		// Every builder's bounds check holds for what was decoded.
		if _, err := r.Read(0, verbs.SGE{Length: uint32(min(r.Length, 1<<31))}); err != nil {
			t.Fatalf("Read of the whole decoded region %+v: %v", r, err)
		}
	})
}
