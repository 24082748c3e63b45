// Package pcaptest reads capture files for the tests of the packages that
// decode what they hold (wire, mad, goroce-dump): the frames of a file, as
// internal/pcap decodes them. The files themselves are testkit.Captures.
package pcaptest

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/goroce/goroce/internal/pcap"
)

// Frame is one record of a capture file that decodes to a UDP datagram.
type Frame struct {
	File   string // the file's base name
	Number int    // 1-based, as tshark numbers frames
	Record pcap.Record
	pcap.Frame
}

// Frames returns the records of the capture file at path that decode to
// UDP datagrams (others, such as ARP or ICMP, are left out), failing the
// test if the file cannot be read.
func Frames(t testing.TB, path string) []Frame {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := pcap.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []Frame
	for n := 1; ; n++ {
		rec, err := r.ReadPacket(nil)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: frame %d: %v", path, n, err)
		}
		fr, err := pcap.DecodeFrame(r.LinkType(), rec.Data)
		if err != nil {
			continue
		}
		out = append(out, Frame{File: filepath.Base(path), Number: n, Record: rec, Frame: fr})
	}
}
