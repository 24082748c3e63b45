package pcap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"testing"
)

// FuzzReader feeds arbitrary file contents to the Reader. It must never
// panic or return a record larger than the bound, must fail only with the
// documented errors, and every file it reads must survive a round trip
// through the Writer.
func FuzzReader(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrPcapNG) && !errors.Is(err, ErrNotPcap) {
				t.Fatalf("NewReader: undocumented error %v", err)
			}
			return
		}
		var recs []Record
		for {
			rec, err := r.Next()
			if err != nil {
				if err != io.EOF && !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrBadLength) {
					t.Fatalf("Next: undocumented error %v", err)
				}
				break
			}
			if len(rec.Data) > MaxSnapLen || len(rec.Data) > len(data) {
				t.Fatalf("record of %d bytes from a %d-byte file", len(rec.Data), len(data))
			}
			if frame, err := DecodeFrame(r.LinkType(), rec.Data); err == nil {
				checkFrame(t, rec.Data, frame)
			}
			rec.Data = bytes.Clone(rec.Data)
			recs = append(recs, rec)
		}

		var out bytes.Buffer
		newW := NewWriter
		if r.Nanosecond() {
			newW = NewNanosecondWriter
		}
		w, err := newW(&out, r.LinkType(), 0)
		if err != nil {
			t.Fatal(err)
		}
		written := recs[:0]
		for _, rec := range recs {
			err := w.WriteRecord(rec)
			// A microsecond field above 999999 can carry a timestamp
			// past the last second the format can hold.
			if rec.Timestamp.Unix() > math.MaxUint32 {
				if !errors.Is(err, ErrTimestampRange) {
					t.Fatalf("WriteRecord(%v): %v, want ErrTimestampRange", rec.Timestamp, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("WriteRecord(%v): %v", rec.Timestamp, err)
			}
			written = append(written, rec)
		}
		r2, err := NewReader(&out)
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range written {
			got, err := r2.Next()
			if err != nil {
				t.Fatalf("re-read record %d: %v", i, err)
			}
			if !got.Timestamp.Equal(want.Timestamp) || !bytes.Equal(got.Data, want.Data) ||
				got.OriginalLength != max(want.OriginalLength, len(want.Data)) {
				t.Fatalf("record %d changed in the round trip: %v %d/%d, want %v %d/%d", i,
					got.Timestamp, len(got.Data), got.OriginalLength, want.Timestamp, len(want.Data), want.OriginalLength)
			}
		}
		if _, err := r2.Next(); err != io.EOF {
			t.Fatalf("round trip: extra data: %v", err)
		}
	})
}

// FuzzDecodeFrame feeds arbitrary frames of arbitrary link types to
// DecodeFrame: no panic, only documented errors, and a successful decode
// must describe the bytes consistently.
func FuzzDecodeFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, linkType uint32, data []byte) {
		frame, err := DecodeFrame(LinkType(linkType), data)
		if err != nil {
			for _, e := range []error{ErrUnsupportedLinkType, ErrNotIP, ErrNotUDP, ErrFragment, ErrMalformed, ErrTruncated} {
				if errors.Is(err, e) {
					return
				}
			}
			t.Fatalf("undocumented error %v", err)
		}
		checkFrame(t, data, frame)
	})
}

// checkFrame checks the invariants of a successfully decoded frame.
func checkFrame(t *testing.T, data []byte, f Frame) {
	t.Helper()
	switch f.IPVersion {
	case 4:
		if !f.Src.Is4() || !f.Dst.Is4() || len(f.IPHeader) < ipv4MinHeaderLen || len(f.IPHeader) != int(f.IPHeader[0]&0xf)*4 {
			t.Fatalf("IPv4 frame: src %v dst %v header %d bytes", f.Src, f.Dst, len(f.IPHeader))
		}
	case 6:
		if !f.Src.Is6() || !f.Dst.Is6() || len(f.IPHeader) != ipv6HeaderLen {
			t.Fatalf("IPv6 frame: src %v dst %v header %d bytes", f.Src, f.Dst, len(f.IPHeader))
		}
	default:
		t.Fatalf("IP version %d", f.IPVersion)
	}
	if f.Protocol != ProtocolUDP || len(f.UDPHeader) != udpHeaderLen {
		t.Fatalf("protocol %d, UDP header %d bytes", f.Protocol, len(f.UDPHeader))
	}
	if binary.BigEndian.Uint16(f.UDPHeader[0:]) != f.SrcPort || binary.BigEndian.Uint16(f.UDPHeader[2:]) != f.DstPort ||
		int(binary.BigEndian.Uint16(f.UDPHeader[4:])) != udpHeaderLen+len(f.UDPPayload) {
		t.Fatalf("UDP fields disagree with the header % x (payload %d bytes)", f.UDPHeader, len(f.UDPPayload))
	}
	for _, s := range [][]byte{f.LinkHeader, f.IPHeader, f.IPv6ExtHeaders, f.IPPacket, f.UDPHeader, f.UDPPayload} {
		if !within(data, s) {
			t.Fatal("a Frame field is not a subslice of the frame")
		}
	}
	if len(f.IPPacket) < len(f.IPHeader)+len(f.IPv6ExtHeaders)+len(f.UDPHeader)+len(f.UDPPayload) ||
		(len(f.IPPacket) > 0 && &f.IPPacket[0] != &f.IPHeader[0]) {
		t.Fatal("IPPacket does not hold the IP header and the UDP datagram")
	}
}
