// Package rsperf is what librdmacm's rstream and riostream (rdma-core's
// librdmacm/examples) share and goroce-rstream and goroce-riostream print
// the same way: their table of test sizes, the counts their tests run,
// and their result line with common.c's size_str and cnt_str.
package rsperf

import (
	"fmt"
	"time"
)

// Sizes is the table of test sizes: those of option 1 run only with
// -S all.
var Sizes = []struct{ Size, Option int }{
	{1 << 6, 0},
	{1 << 7, 1}, {1<<7 + 1<<6, 1},
	{1 << 8, 1}, {1<<8 + 1<<7, 1},
	{1 << 9, 1}, {1<<9 + 1<<8, 1},
	{1 << 10, 1}, {1<<10 + 1<<9, 1},
	{1 << 11, 1}, {1<<11 + 1<<10, 1},
	{1 << 12, 0}, {1<<12 + 1<<11, 1},
	{1 << 13, 1}, {1<<13 + 1<<12, 1},
	{1 << 14, 1}, {1<<14 + 1<<13, 1},
	{1 << 15, 1}, {1<<15 + 1<<14, 1},
	{1 << 16, 0}, {1<<16 + 1<<15, 1},
	{1 << 17, 1}, {1<<17 + 1<<16, 1},
	{1 << 18, 1}, {1<<18 + 1<<17, 1},
	{1 << 19, 1}, {1<<19 + 1<<18, 1},
	{1 << 20, 0}, {1<<20 + 1<<19, 1},
	{1 << 21, 1}, {1<<21 + 1<<20, 1},
	{1 << 22, 1}, {1<<22 + 1<<21, 1},
}

// Header is the line printed before the results.
var Header = fmt.Sprintf("%-10s%-8s%-8s%-8s%-8s%8s %10s%13s\n", "name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer")

// Line is show_perf's result line: name, transfer size, transfers,
// iterations, total bytes (both ways), seconds, Gb/sec and microseconds
// per transfer.
func Line(name string, size, count, iterations int, d time.Duration) string {
	usec := float64(d.Microseconds())
	bytes := int64(iterations) * int64(count) * int64(size) * 2
	return fmt.Sprintf("%-10s%-8s%-8s%-8s%-8s%8.2fs%10.2f%11.2f\n", name, SizeStr(int64(size)),
		CntStr(int64(count)), CntStr(int64(iterations)), SizeStr(bytes),
		usec/1e6, float64(bytes*8)/(1000*usec), usec/float64(iterations)/float64(count*2))
}

// LatencyName and BandwidthName name the tests of one size as
// init_latency_test and init_bandwidth_test do.
func LatencyName(size int) string   { return fmt.Sprintf("%.4s_lat", SizeStr(int64(size))) }
func BandwidthName(size int) string { return fmt.Sprintf("%.4s_bw", SizeStr(int64(size))) }

// SizeStr is size_str: 1.5k, 64k, 3m, ...
func SizeStr(size int64) string {
	base, mag := int64(1), ""
	switch {
	case size >= 1<<30:
		base, mag = 1<<30, "g"
	case size >= 1<<20:
		base, mag = 1<<20, "m"
	case size >= 1<<10:
		base, mag = 1<<10, "k"
	}
	if size/base < 10 {
		if f := (size % base) * 10 / base; f != 0 {
			return fmt.Sprintf("%d.%d%s", size/base, f, mag)
		}
	}
	return fmt.Sprintf("%d%s", size/base, mag)
}

// CntStr is cnt_str: 100k, 1m, ...
func CntStr(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%db", n/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%dm", n/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%dk", n/1e3)
	}
	return fmt.Sprintf("%d", n)
}

// SizeToCount is size_to_count: the iterations of a latency test, the
// transfers of a bandwidth test.
func SizeToCount(size int) int {
	switch {
	case size >= 1<<20:
		return 100
	case size >= 1<<16:
		return 1000
	case size >= 1<<10:
		return 10000
	}
	return 100000
}

// Test is one test of a run: its name and what it moves.
type Test struct {
	Name                    string
	Size, Count, Iterations int
}

// LatencyTest and BandwidthTest are init_latency_test and
// init_bandwidth_test: a ping-pong of one transfer of size, repeated
// SizeToCount times, and SizeToCount transfers each way, once.
func LatencyTest(size int) Test { return Test{LatencyName(size), size, 1, SizeToCount(size)} }

func BandwidthTest(size int) Test { return Test{BandwidthName(size), size, SizeToCount(size), 1} }

// RunTable runs the default tests as rstream's and riostream's main do:
// a latency test per size on one connection, then a bandwidth test per
// size on a second; the sizes of option 1 only with all (-S all). A
// connection is made by open and ended by closeConn, also after a failed
// test (whose error is returned).
func RunTable(all bool, open, closeConn func() error, run func(Test) error) error {
	for _, test := range []func(int) Test{LatencyTest, BandwidthTest} {
		if err := open(); err != nil {
			return err
		}
		for _, s := range Sizes {
			if s.Option > 0 && !all {
				continue
			}
			if err := run(test(s.Size)); err != nil {
				_ = closeConn()
				return err
			}
		}
		if err := closeConn(); err != nil {
			return err
		}
	}
	return nil
}
