package pcap

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"
)

// TestWriterRoundTrip writes frames of every supported link type with the
// Writer, reads them back with the Reader and decodes them.
func TestWriterRoundTrip(t *testing.T) {
	ts := time.Date(2026, 11, 29, 16, 32, 3, 669598123, time.UTC)
	for _, nano := range []bool{false, true} {
		for _, tc := range frameCases() {
			t.Run(fmt.Sprintf("%s/nano=%v", tc.name, nano), func(t *testing.T) {
				var file bytes.Buffer
				newW := NewWriter
				if nano {
					newW = NewNanosecondWriter
				}
				w, err := newW(&file, tc.linkType, 0)
				if err != nil {
					t.Fatal(err)
				}
				for i := range 3 {
					if err := w.WritePacket(ts.Add(time.Duration(i)*time.Millisecond), tc.data); err != nil {
						t.Fatal(err)
					}
				}
				r, err := NewReader(&file)
				if err != nil {
					t.Fatal(err)
				}
				if r.LinkType() != tc.linkType || r.Nanosecond() != nano || r.SnapLen() != MaxSnapLen {
					t.Errorf("link type %v nano %v snaplen %d", r.LinkType(), r.Nanosecond(), r.SnapLen())
				}
				wantTS := ts
				if !nano {
					wantTS = ts.Truncate(time.Microsecond)
				}
				for i := range 3 {
					rec, err := r.Next()
					if err != nil {
						t.Fatal(err)
					}
					if want := wantTS.Add(time.Duration(i) * time.Millisecond); !rec.Timestamp.Equal(want) {
						t.Errorf("record %d timestamp %v, want %v", i, rec.Timestamp, want)
					}
					if !bytes.Equal(rec.Data, tc.data) || rec.OriginalLength != len(tc.data) {
						t.Errorf("record %d: data or length changed (%d/%d bytes)", i, len(rec.Data), rec.OriginalLength)
					}
					f, err := DecodeFrame(r.LinkType(), rec.Data)
					if err != nil {
						t.Fatalf("decode record %d: %v", i, err)
					}
					if f.Src.String() != tc.src || f.DstPort != 4791 || !bytes.Equal(f.UDPPayload, roceLike) {
						t.Errorf("decoded %v:%d payload % x", f.Src, f.DstPort, f.UDPPayload)
					}
				}
				if _, err := r.Next(); err != io.EOF {
					t.Errorf("after 3 records: %v, want io.EOF", err)
				}
			})
		}
	}
}

func TestWriterSnapLen(t *testing.T) {
	var file bytes.Buffer
	w, err := NewWriter(&file, LinkTypeEthernet, 60)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{0xab}, 100)
	ts := time.Unix(1, 0)
	if err := w.WritePacket(ts, data); err != nil {
		t.Fatal(err)
	}
	// WriteRecord keeps an original length larger than the data.
	if err := w.WriteRecord(Record{Timestamp: ts, OriginalLength: 1500, Data: data[:40]}); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(&file)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct{ capLen, origLen int }{{60, 100}, {40, 1500}} {
		rec, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if rec.CaptureLength() != want.capLen || rec.OriginalLength != want.origLen || !rec.Truncated() {
			t.Errorf("record %d/%d bytes, want %d/%d", rec.CaptureLength(), rec.OriginalLength, want.capLen, want.origLen)
		}
	}
}

func TestWriterRejects(t *testing.T) {
	if _, err := NewWriter(io.Discard, LinkTypeEthernet, MaxSnapLen+1); err == nil {
		t.Error("snapshot length above MaxSnapLen accepted")
	}
	if _, err := NewWriter(io.Discard, LinkType(0x10001), 0); err == nil {
		t.Error("link type above 16 bits accepted")
	}
	w, err := NewWriter(io.Discard, LinkTypeEthernet, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range []time.Time{
		time.Unix(-1, 0),
		time.Unix(1<<32, 0),
		{},
	} {
		if err := w.WritePacket(ts, []byte{1}); !errors.Is(err, ErrTimestampRange) {
			t.Errorf("timestamp %v: err = %v, want ErrTimestampRange", ts, err)
		}
	}
	if err := w.WritePacket(time.Unix(1<<32-1, 999999999), []byte{1}); err != nil {
		t.Errorf("last representable second: %v", err)
	}
}

// failAfter accepts n writes, then fails.
type failAfter struct{ n int }

var errDiskFull = errors.New("disk full")

func (f *failAfter) Write(b []byte) (int, error) {
	if f.n == 0 {
		return 0, errDiskFull
	}
	f.n--
	return len(b), nil
}

func TestWriterErrorsAreSticky(t *testing.T) {
	if _, err := NewWriter(&failAfter{0}, LinkTypeEthernet, 0); !errors.Is(err, errDiskFull) {
		t.Fatalf("header write error: %v", err)
	}
	// Header, then record 1 header and data, then record 2's header fails.
	fw := &failAfter{4}
	w, err := NewWriter(fw, LinkTypeEthernet, 0)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1, 0)
	if err := w.WritePacket(ts, []byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacket(ts, []byte{2}); !errors.Is(err, errDiskFull) {
		t.Fatalf("second packet: %v", err)
	}
	fw.n = 100 // the disk has room again, but the file is already broken
	if err := w.WritePacket(ts, []byte{3}); !errors.Is(err, errDiskFull) {
		t.Fatalf("after a failure: %v, want the first error again", err)
	}
}

// TestWritePacketDoesNotAllocate holds WritePacket to its contract with the
// netio capture tap.
func TestWritePacketDoesNotAllocate(t *testing.T) {
	w, err := NewNanosecondWriter(io.Discard, LinkTypeRaw, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 1082)
	ts := time.Now()
	allocs := testing.AllocsPerRun(100, func() {
		if err := w.WritePacket(ts, data); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("WritePacket allocates %v times per packet", allocs)
	}
}

// TestWriterConcurrent writes from several goroutines and checks every
// record comes back whole: header and data never interleave. Run with -race.
func TestWriterConcurrent(t *testing.T) {
	var file bytes.Buffer
	w, err := NewWriter(&file, LinkTypeRaw, 0)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 4, 50
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			data := bytes.Repeat([]byte{byte(g)}, 100+g)
			for range each {
				if err := w.WritePacket(time.Unix(int64(g), 0), data); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	r, err := NewReader(&file)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, writers)
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		g := int(rec.Timestamp.Unix())
		if g >= writers || len(rec.Data) != 100+g || !bytes.Equal(rec.Data, bytes.Repeat([]byte{byte(g)}, 100+g)) {
			t.Fatalf("record from writer %d mangled: %d bytes", g, len(rec.Data))
		}
		counts[g]++
	}
	for g, n := range counts {
		if n != each {
			t.Errorf("writer %d: %d records, want %d", g, n, each)
		}
	}
}
