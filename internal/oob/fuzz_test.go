package oob

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
)

// Seeds beyond the committed corpus (testdata/fuzz), which holds the real
// lines from the captures.
func FuzzParseKeyLine(f *testing.F) {
	for _, kf := range []KeyFormat{KeyFormatGID, KeyFormatLID, KeyFormatGIDDataValidation, KeyFormatLIDDataValidation,
		KeyFormatRDMACM, KeyFormatRDMACMDataValidation} {
		f.Add(AppendKeyLine(nil, testDest, kf), uint8(kf))
	}
	f.Fuzz(func(t *testing.T, line []byte, format uint8) {
		kf := KeyFormat(format % 7) // 6 is not a format
		d, err := ParseKeyLine(line, kf)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("multi-line error %q", err)
			}
			if d != (Dest{}) {
				t.Fatalf("error %v with %+v", err, d)
			}
			return
		}
		// Accepted lines are exactly what perftest writes, up to the case
		// of the hex digits (and the binary formats' padding, ignored).
		if kf.binary() {
			line = bytes.Clone(line)
			copy(line[keyBinPad:keyBinPad+4], []byte{0, 0, 0, 0})
		}
		if re := AppendKeyLine(nil, d, kf); !bytes.EqualFold(re, line) {
			t.Fatalf("accepted %q, which re-encodes as %q", line, re)
		}
	})
}

func FuzzParsePingpongDest(f *testing.F) {
	f.Add(AppendPingpongDest(nil, testPingpongDest))
	f.Fuzz(func(t *testing.T, msg []byte) {
		d, err := ParsePingpongDest(msg)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if re := AppendPingpongDest(nil, d); !bytes.EqualFold(re, msg) {
			t.Fatalf("accepted %q, which re-encodes as %q", msg, re)
		}
	})
}

func FuzzParseBWReport(f *testing.F) {
	f.Add(AppendBWReport(nil, BWReport{Size: 4096, Iters: 8, BWPeak: 3.2, BWAvg: 3.13, MsgRateAvg: 0.0008}, BWReportLayout{}), false, false)
	f.Add(AppendBWReport(nil, BWReport{Size: 65536, Iters: 5000, BWAvgP2: 1}, BWReportLayout{Iters32: true, PerPort: true}), true, true)
	f.Fuzz(func(t *testing.T, b []byte, iters32, perPort bool) {
		l := BWReportLayout{Iters32: iters32, PerPort: perPort}
		r, err := ParseBWReport(b, l)
		if err != nil {
			if len(b) == l.Size() || !errors.Is(err, ErrMalformed) {
				t.Fatalf("refused %d bytes (size %d): %v", len(b), l.Size(), err)
			}
			return
		}
		// Every bit pattern is a report, NaNs included.
		if re := AppendBWReport(nil, r, l); !bytes.Equal(re, b) {
			t.Fatalf("%x re-encodes as %x", b, re)
		}
	})
}

func FuzzParseVersionBlock(f *testing.F) {
	f.Add(appendVersionBlock(nil, "6.06"))
	f.Add([]byte("6.29\x00junk after NUL"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, v, err := parseVersionBlock(b)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if len(b) != perftestVersionSize || !bytes.HasPrefix(b, append([]byte(s), 0)) || s == "" {
			t.Fatalf("accepted %q as %q", b, s)
		}
		if v < 0 || math.IsNaN(v) {
			t.Fatalf("%q parsed as %v", s, v)
		}
	})
}

func FuzzParseMTUBlock(f *testing.F) {
	f.Add([]byte("3\x00"))
	f.Add([]byte("5\x00\xde\xad"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseMTUBlock(b)
		if err != nil {
			return
		}
		if !m.Valid() || !bytes.Equal(appendMTUBlock(nil, m, 2), b[:2]) {
			t.Fatalf("accepted %q as %v", b, m)
		}
	})
}

// FuzzPerftestPeerStream plays arbitrary bytes as a peer's side of a whole
// ib_write_bw exchange against both our roles: whatever the bytes, Run
// must return (an error or success) without panicking or hanging.
func FuzzPerftestPeerStream(f *testing.F) {
	// A complete, valid stream from a 6.06 peer (the same for both
	// roles), and a few cut or damaged ones.
	line := AppendKeyLine(nil, testDest, KeyFormatGID)
	valid := versionPrefix()
	for i := 0; i < 3; i++ {
		valid = append(valid, line...)
	}
	valid = append(valid, AppendBWReport(nil, BWReport{Size: 4096, Iters: 8}, BWReportLayout{})...)
	valid = append(valid, line...)
	valid = append(valid, doneMsg...)
	f.Add(valid, false)
	f.Add(valid, true)
	f.Add(valid[:100], false)
	f.Add(append(appendVersionBlock(nil, "6.29"), valid[16:]...), true)
	f.Fuzz(func(t *testing.T, stream []byte, server bool) {
		ours, theirs := net.Pipe()
		defer ours.Close()
		go func() {
			defer theirs.Close()
			go func() { // drain what we write
				var b [256]byte
				for {
					if _, err := theirs.Read(b[:]); err != nil {
						return
					}
				}
			}()
			theirs.Write(stream)
		}()
		role := Client
		if server {
			role = Server
		}
		c, err := NewPerftestConn(ours, PerftestConfig{Role: role})
		if err != nil {
			t.Fatal(err)
		}
		// net.Pipe is unbuffered: a peer that runs out of bytes closes,
		// so the deadline only guards against a bug.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = c.Run(ctx, PerftestPlan{
			Kind: WriteBW, SysData: SysData{4096, 64}, MTU: ibv.MTU1024,
			Init:    func(context.Context, PerftestAgreement) ([]Dest, error) { return []Dest{testDest}, nil },
			Connect: func(context.Context, []Dest) error { return nil },
		})
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("hung on %q", stream)
		}
		if err != nil && strings.ContainsAny(err.Error(), "\n\r") {
			t.Fatalf("multi-line error %q", err)
		}
	})
}

// FuzzPingpongSRQPeerStream plays arbitrary bytes as the peer's side of
// ibv_srq_pingpong's exchange against both our roles: whatever the bytes,
// the exchange returns without panicking or hanging, and what it accepts
// is PingpongSRQMaxQP Dests that re-encode as the stream's first messages.
func FuzzPingpongSRQPeerStream(f *testing.F) {
	var valid []byte
	for i := range PingpongSRQMaxQP {
		var d PingpongDest
		if i < 4 {
			d = testPingpongDest
			d.QPN += uint32(i)
		}
		valid = AppendPingpongDest(valid, d)
	}
	f.Add(append(valid, doneMsg...), false)
	f.Add(append(valid, doneMsg...), true)
	f.Add(valid[:3*PingpongMsgSize+7], true)
	f.Fuzz(func(t *testing.T, stream []byte, server bool) {
		ours, theirs := net.Pipe()
		defer ours.Close()
		go func() {
			defer theirs.Close()
			go func() { // drain what we write
				var b [4096]byte
				for {
					if _, err := theirs.Read(b[:]); err != nil {
						return
					}
				}
			}()
			theirs.Write(stream)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		local := []PingpongDest{testPingpongDest}
		var got []PingpongDest
		var err error
		if server {
			got, err = PingpongSRQServer(ctx, ours, local, func(context.Context, []PingpongDest) error { return nil })
		} else {
			got, err = PingpongSRQClient(ctx, ours, local)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("hung on %q", stream)
		}
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if len(got) != PingpongSRQMaxQP {
			t.Fatalf("%d Dests", len(got))
		}
		var re []byte
		for _, d := range got {
			re = AppendPingpongDest(re, d)
		}
		if !bytes.EqualFold(re, stream[:len(re)]) {
			t.Fatalf("accepted %q, which re-encodes as %q", stream[:len(re)], re)
		}
	})
}
