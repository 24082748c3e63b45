package main

import (
	"bufio"
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/pcap"
)

// FuzzDumpFrame dumps a capture of one arbitrary frame of an arbitrary link
// type, verbosely and with --check. Whatever the bytes, the dump must not
// panic, must count the frame exactly once, and must print one summary line
// for a RoCEv2 packet and nothing for another frame.
func FuzzDumpFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, linkType uint16, frame []byte) {
		var file bytes.Buffer
		w, err := pcap.NewWriter(&file, pcap.LinkType(linkType), 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WritePacket(time.Unix(1, 0), frame); err != nil {
			t.Fatal(err)
		}
		for _, mtu := range []int{0, 1024} {
			var out bytes.Buffer
			bw := bufio.NewWriter(&out)
			var st stats
			opt := &options{verbose: true, check: true, port: 4791, mtu: mtu}
			err := dumpStream(bytes.NewReader(file.Bytes()), opt, bw, &st)
			bw.Flush()
			if err != nil {
				if !errors.Is(err, pcap.ErrUnsupportedLinkType) {
					t.Fatalf("dump: %v", err)
				}
				return
			}
			if st.roce+st.other != 1 || st.filtered != 0 {
				t.Fatalf("frame counted as %+v", st)
			}
			first, _, _ := strings.Cut(out.String(), "\n")
			if (st.roce == 1) != strings.HasPrefix(first, "    1 ") {
				t.Fatalf("RoCEv2 %v but output %q", st.roce == 1, out.String())
			}
			if st.roce == 1 && !strings.Contains(first, "malformed: ") && !strings.Contains(first, "icrc=") {
				t.Fatalf("a well-formed packet without ICRC status: %q", first)
			}
		}
	})
}
