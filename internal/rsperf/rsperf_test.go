package rsperf

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The sizes and counts as librdmacm's size_str and cnt_str print them.
func TestFormats(t *testing.T) {
	for n, want := range map[int64]string{64: "64", 192: "192", 1536: "1.5k", 6144: "6k", 65536: "64k",
		98304: "96k", 1 << 20: "1m", 3 << 19: "1.5m", 6 << 20: "6m", 12800000: "12m", 1 << 30: "1g"} {
		if got := SizeStr(n); got != want {
			t.Errorf("SizeStr(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int64]string{1: "1", 999: "999", 1000: "1k", 100000: "100k", 1000000: "1m", 2e9: "2b"} {
		if got := CntStr(n); got != want {
			t.Errorf("CntStr(%d) = %q, want %q", n, got, want)
		}
	}
	if LatencyName(1536) != "1.5k_lat" || BandwidthName(1<<20) != "1m_bw" {
		t.Errorf("names %q %q", LatencyName(1536), BandwidthName(1<<20))
	}
}

// show_perf's columns.
func TestLine(t *testing.T) {
	if Header != "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer\n" {
		t.Fatalf("header %q", Header)
	}
	got := Line("custom", 1000, 50, 2, 10*time.Millisecond)
	// 2 x 50 x 1000 x 2 = 200000 bytes in 10 ms: 0.16 Gb/s, 50 us per transfer.
	want := "custom    1000    50      2       195k        0.01s      0.16      50.00\n"
	if got != want {
		t.Fatalf("Line = %q\nwant   %q", got, want)
	}
	if !regexp.MustCompile(`^\S+ +\S+ +\S+ +\S+ +\S+ +\d+\.\d\ds +\d+\.\d\d +\d+\.\d\d\n$`).MatchString(got) {
		t.Fatalf("Line %q does not parse", got)
	}
}

// TestRunTable: latency tests on one connection, then bandwidth tests on
// a second; -S all adds the option-1 sizes; a failed test closes its
// connection and ends the run.
func TestRunTable(t *testing.T) {
	var log []string
	open := func() error { log = append(log, "open"); return nil }
	closeConn := func() error { log = append(log, "close"); return nil }
	record := func(x Test) error {
		log = append(log, fmt.Sprintf("%s %d %d %d", x.Name, x.Size, x.Count, x.Iterations))
		return nil
	}
	if err := RunTable(false, open, closeConn, record); err != nil {
		t.Fatal(err)
	}
	want := []string{"open", "64_lat 64 1 100000", "4k_lat 4096 1 10000", "64k_lat 65536 1 1000", "1m_lat 1048576 1 100", "close",
		"open", "64_bw 64 100000 1", "4k_bw 4096 10000 1", "64k_bw 65536 1000 1", "1m_bw 1048576 100 1", "close"}
	if strings.Join(log, "|") != strings.Join(want, "|") {
		t.Fatalf("ran\n%v\nwant\n%v", log, want)
	}
	log = nil
	if err := RunTable(true, open, closeConn, record); err != nil || len(log) != 2*(len(Sizes)+2) {
		t.Fatalf("-S all: %v, %d steps", err, len(log))
	}
	log = nil
	boom := errors.New("boom")
	err := RunTable(false, open, closeConn, func(x Test) error { log = append(log, x.Name); return boom })
	if !errors.Is(err, boom) || strings.Join(log, "|") != "open|64_lat|close" {
		t.Fatalf("after a failed test: %v, %v", err, log)
	}
}
