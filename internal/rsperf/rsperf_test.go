package rsperf

import (
	"regexp"
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
