package pcap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

// captureFiles are the real rxe captures (testkit.Captures), recorded
// with tcpdump.
func captureFiles(t *testing.T) []string { return testkit.Captures(t) }

// TestReadCaptures reads every rxe capture and decodes every frame. The
// record and RoCEv2 counts were taken with tshark; a RoCEv2 frame is one
// whose outer UDP destination port is 4791 (vm_to_host_unanswered also has
// ICMP errors quoting such datagrams, which must not count). Each RoCEv2
// packet's ICRC is recomputed from the decoded IPHeader and UDPHeader, which
// proves they are exactly the bytes the ICRC covers.
func TestReadCaptures(t *testing.T) {
	want := map[string]struct{ records, roce, badICRC int }{
		"atomic_cswap.pcap":          {56, 16, 0},
		"atomic_fadd.pcap":           {55, 16, 0},
		"host_crafted_probe.pcap":    {9, 9, 6}, // 3 deliberately bad + 3 with a kernel-chosen IP id
		"rc_pingpong.pcap":           {35, 24, 0},
		"read_bw.pcap":               {81, 40, 0},
		"rping.pcap":                 {41, 41, 0},
		"send_bw.pcap":               {71, 40, 0},
		"send_lat.pcap":              {61, 32, 0},
		"uc_pingpong.pcap":           {27, 16, 0},
		"ud_pingpong.pcap":           {20, 8, 0},
		"vm_to_host_unanswered.pcap": {94, 73, 0},
		"write_bw.pcap":              {79, 40, 0},
		"write_bw_rdmacm.pcap":       {114, 114, 0},
		"write_lat.pcap":             {57, 32, 0},
	}
	for _, path := range captureFiles(t) {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			r, err := NewReader(f)
			if err != nil {
				t.Fatal(err)
			}
			if r.LinkType() != LinkTypeEthernet || r.SnapLen() != 262144 || r.Nanosecond() || r.BigEndian() {
				t.Errorf("header: link type %v snaplen %d nano %v big-endian %v", r.LinkType(), r.SnapLen(), r.Nanosecond(), r.BigEndian())
			}
			if major, minor := r.Version(); major != 2 || minor != 4 {
				t.Errorf("version %d.%d", major, minor)
			}
			var records, roce, bad int
			var last time.Time
			for {
				rec, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("record %d: %v", records+1, err)
				}
				records++
				if rec.Truncated() || rec.CaptureLength() != rec.OriginalLength {
					t.Errorf("record %d truncated: %d of %d bytes", records, rec.CaptureLength(), rec.OriginalLength)
				}
				if rec.Timestamp.Before(last) || rec.Timestamp.Year() < 2024 {
					t.Errorf("record %d: timestamp %v after %v", records, rec.Timestamp, last)
				}
				last = rec.Timestamp
				fr, err := DecodeFrame(r.LinkType(), rec.Data)
				if errors.Is(err, ErrNotUDP) || errors.Is(err, ErrNotIP) {
					continue
				}
				if err != nil {
					t.Fatalf("record %d: %v", records, err)
				}
				if fr.DstPort != 4791 {
					continue
				}
				roce++
				if !testICRCOK(fr) {
					bad++
				}
			}
			w, ok := want[name]
			if !ok {
				t.Logf("%s: %d records, %d RoCEv2 (no expectations recorded)", name, records, roce)
				return
			}
			if records != w.records || roce != w.roce || bad != w.badICRC {
				t.Errorf("%d records, %d RoCEv2, %d bad ICRC; want %d, %d, %d", records, roce, bad, w.records, w.roce, w.badICRC)
			}
		})
	}
}

// testICRCOK recomputes a RoCEv2 ICRC over IPv4 the way roce-facts.md
// section 2.2 describes, independently of internal/wire.
func testICRCOK(f Frame) bool {
	p := f.UDPPayload
	if len(p) < 16 || f.IPVersion != 4 {
		return false
	}
	ip := bytes.Clone(f.IPHeader)
	ip[1], ip[8], ip[10], ip[11] = 0xff, 0xff, 0xff, 0xff
	udp := bytes.Clone(f.UDPHeader)
	udp[6], udp[7] = 0xff, 0xff
	bth := bytes.Clone(p[:12])
	bth[4] = 0xff
	crc := crc32.ChecksumIEEE(bytes.Repeat([]byte{0xff}, 8))
	for _, b := range [][]byte{ip, udp, bth, p[12 : len(p)-4]} {
		crc = crc32.Update(crc, crc32.IEEETable, b)
	}
	return crc == binary.LittleEndian.Uint32(p[len(p)-4:])
}

// TestReadTruncatedAtEveryByte cuts a real capture at every length and
// checks the Reader reports io.EOF exactly at record boundaries and
// ErrTruncated everywhere else, never panicking.
func TestReadTruncatedAtEveryByte(t *testing.T) {
	files := captureFiles(t)
	path := files[0]
	for _, f := range files {
		if filepath.Base(f) == "write_lat.pcap" {
			path = f
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Record boundaries from a full read.
	boundary := map[int]int{} // offset → records before it
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; ; n++ {
		boundary[int(r.Offset())] = n
		if _, err := r.Next(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	for cut := range len(data) {
		r, err := NewReader(bytes.NewReader(data[:cut]))
		if cut < fileHeaderLen {
			if !errors.Is(err, ErrTruncated) {
				t.Fatalf("cut at %d: NewReader err = %v, want ErrTruncated", cut, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("cut at %d: NewReader: %v", cut, err)
		}
		n := 0
		for {
			_, err = r.Next()
			if err != nil {
				break
			}
			n++
		}
		want, atBoundary := boundary[cut]
		switch {
		case atBoundary && (err != io.EOF || n != want):
			t.Fatalf("cut at record boundary %d: %d records then %v, want %d then EOF", cut, n, err, want)
		case !atBoundary && !errors.Is(err, ErrTruncated):
			t.Fatalf("cut at %d: %d records then %v, want ErrTruncated", cut, n, err)
		}
		// The error is sticky: the stream cannot be resynchronised.
		if _, again := r.Next(); again != err {
			t.Fatalf("cut at %d: second error %v after %v", cut, again, err)
		}
	}
}

// pcapFile builds a pcap file header plus records by hand, independently of
// Writer, in the given byte order and resolution.
func pcapFile(order binary.AppendByteOrder, nano bool, snapLen uint32, linkType uint32, recs ...[]byte) []byte {
	magic := uint32(0xa1b2c3d4)
	if nano {
		magic = 0xa1b23c4d
	}
	b := order.AppendUint32(nil, magic)
	b = order.AppendUint16(b, 2)
	b = order.AppendUint16(b, 4)
	b = append(b, make([]byte, 8)...)
	b = order.AppendUint32(b, snapLen)
	b = order.AppendUint32(b, linkType)
	for i, d := range recs {
		b = order.AppendUint32(b, 1700000000+uint32(i))
		b = order.AppendUint32(b, 123456)
		b = order.AppendUint32(b, uint32(len(d)))
		b = order.AppendUint32(b, uint32(len(d))+10)
		b = append(b, d...)
	}
	return b
}

func TestNewReaderFormats(t *testing.T) {
	frame := []byte("0123456789abcdef")
	tests := []struct {
		name      string
		file      []byte
		bigEndian bool
		nano      bool
		fraction  time.Duration
	}{
		{"little-endian microseconds", pcapFile(binary.LittleEndian, false, 65535, 1, frame), false, false, 123456 * time.Microsecond},
		{"big-endian microseconds", pcapFile(binary.BigEndian, false, 65535, 1, frame), true, false, 123456 * time.Microsecond},
		{"little-endian nanoseconds", pcapFile(binary.LittleEndian, true, 65535, 1, frame), false, true, 123456 * time.Nanosecond},
		{"big-endian nanoseconds", pcapFile(binary.BigEndian, true, 65535, 1, frame), true, true, 123456 * time.Nanosecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// iotest-style: a reader that is not an io.ByteReader gets
			// buffered; both paths must behave the same.
			for _, src := range []io.Reader{bytes.NewReader(tc.file), struct{ io.Reader }{bytes.NewReader(tc.file)}} {
				r, err := NewReader(src)
				if err != nil {
					t.Fatal(err)
				}
				if r.BigEndian() != tc.bigEndian || r.Nanosecond() != tc.nano || r.SnapLen() != 65535 || r.LinkType() != LinkTypeEthernet {
					t.Errorf("big-endian %v nano %v snaplen %d link type %v", r.BigEndian(), r.Nanosecond(), r.SnapLen(), r.LinkType())
				}
				rec, err := r.Next()
				if err != nil {
					t.Fatal(err)
				}
				wantTS := time.Unix(1700000000, 0).Add(tc.fraction).UTC()
				if !rec.Timestamp.Equal(wantTS) || !bytes.Equal(rec.Data, frame) || rec.OriginalLength != len(frame)+10 || !rec.Truncated() {
					t.Errorf("record %v %q orig %d; want %v %q %d", rec.Timestamp, rec.Data, rec.OriginalLength, wantTS, frame, len(frame)+10)
				}
				if _, err := r.Next(); err != io.EOF {
					t.Errorf("after last record: %v, want io.EOF", err)
				}
			}
		})
	}
}

func TestNewReaderRejects(t *testing.T) {
	good := pcapFile(binary.LittleEndian, false, 65535, 1)
	mod := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	pcapng := []byte{0x0a, 0x0d, 0x0d, 0x0a, 0x1c, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a}
	tests := []struct {
		name string
		file []byte
		want error
		msg  string
	}{
		{"empty", nil, ErrTruncated, "empty file"},
		{"two bytes", []byte{0xd4, 0xc3}, ErrTruncated, "2 of 24"},
		{"short header", good[:20], ErrTruncated, "20 of 24"},
		{"pcapng", pcapng, ErrPcapNG, "pcapng"},
		{"pcapng magic only", pcapng[:4], ErrPcapNG, "editcap"},
		{"modified pcap", mod(func(b []byte) { binary.LittleEndian.PutUint32(b, 0xa1b2cd34) }), ErrNotPcap, "Kuznetzov"},
		{"text", []byte("GET / HTTP/1.1\r\n\r\n......"), ErrNotPcap, "magic"},
		{"version 1", mod(func(b []byte) { b[4] = 1 }), ErrNotPcap, "version 1.4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(tc.file))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tc.want, tc.msg)
			}
		})
	}
}

func TestReadBadLengths(t *testing.T) {
	rec := make([]byte, 100)
	tests := []struct {
		name    string
		snapLen uint32
		capLen  uint32
		want    error
	}{
		{"caplen above snaplen", 64, 100, ErrBadLength},
		{"caplen equal snaplen", 100, 100, nil},
		{"snaplen 0 means no limit", 0, 100, nil},
		{"caplen above MaxSnapLen with snaplen 0", 0, MaxSnapLen + 1, ErrBadLength},
		{"caplen above MaxSnapLen with huge snaplen", 1 << 31, 1 << 30, ErrBadLength},
		{"caplen 0xffffffff", 65535, 0xffffffff, ErrBadLength},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := pcapFile(binary.LittleEndian, false, tc.snapLen, 1, rec)
			binary.LittleEndian.PutUint32(b[fileHeaderLen+8:], tc.capLen)
			r, err := NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.Next()
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if tc.want != nil && !strings.Contains(err.Error(), "record 1 at offset 24") {
				t.Errorf("error %q does not locate the record", err)
			}
		})
	}
}

func TestReadPacketReusesBuffer(t *testing.T) {
	frames := [][]byte{make([]byte, 60), make([]byte, 1082), make([]byte, 62)}
	file := pcapFile(binary.LittleEndian, false, 0, 1, frames...)
	r, err := NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	rec, err := r.ReadPacket(buf)
	if err != nil || &rec.Data[0] != &buf[0] || len(rec.Data) != 60 {
		t.Fatalf("first record did not reuse the buffer (err %v)", err)
	}
	rec, err = r.ReadPacket(buf)
	if err != nil || len(rec.Data) != 1082 || &rec.Data[0] == &buf[0] {
		t.Fatalf("second record: len %d, err %v; want a new 1082-byte buffer", len(rec.Data), err)
	}
	grown := rec.Data
	rec, err = r.ReadPacket(grown)
	if err != nil || &rec.Data[0] != &grown[0] || len(rec.Data) != 62 {
		t.Fatalf("third record did not reuse the grown buffer (err %v)", err)
	}
}

// TestNextDoesNotAllocate checks the steady state of Next: once its buffer
// has grown to the largest record, reading costs no allocation.
func TestNextDoesNotAllocate(t *testing.T) {
	frames := make([][]byte, 500)
	for i := range frames {
		frames[i] = make([]byte, 60+i%1000)
	}
	file := pcapFile(binary.LittleEndian, false, 0, 1, frames...)
	r, err := NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	r.buf = make([]byte, 0, 2048) // as if a large record had been read
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Next allocates %v times per record", allocs)
	}
}
