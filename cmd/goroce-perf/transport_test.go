package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestLoopbackUCUD runs every test perftest allows over UC and UD between
// two goroce devices, with --check: the bytes arrive (after the GRH with
// UD), the receive counts match, and the banner names the connection type.
// UD sizes stop at the path MTU (4096 on loopback): the default size
// becomes it and -a stops there.
func TestLoopbackUCUD(t *testing.T) {
	for i, tc := range []struct {
		test  string
		extra []string
		sizes []int // the result rows' sizes
	}{
		{"write_bw", []string{"-c", "UC", "-s", "10000"}, []int{10000}},
		{"write_bw", []string{"-c", "UC", "-b", "-q", "2", "-s", "3000"}, []int{3000}},
		{"send_bw", []string{"-c", "UC", "-s", "5000", "-t", "16"}, []int{5000}},
		{"send_bw", []string{"-c", "UC", "-b", "-s", "100"}, []int{100}},
		{"write_lat", []string{"-c", "UC", "-s", "3000"}, []int{3000}},
		{"send_lat", []string{"-c", "UC", "-s", "2000"}, []int{2000}},
		{"send_bw", []string{"-c", "UD"}, []int{4096}},
		{"send_bw", []string{"-c", "UD", "-s", "1000", "-q", "3"}, []int{1000}},
		{"send_bw", []string{"-c", "UD", "-b", "-s", "64"}, []int{64}},
		{"send_bw", []string{"-c", "UD", "-a", "-m", "1024"}, []int{2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}},
		{"send_lat", []string{"-c", "UD", "-s", "4096"}, []int{4096}},
		{"send_lat", []string{"-c", "UD"}, []int{defSizeLat}},
	} {
		t.Run(tc.test+strings.Join(tc.extra, ""), func(t *testing.T) {
			if raceEnabled && tc.test == "write_lat" {
				t.Skip("write_lat polls memory the device writes; not race-clean")
			}
			iters := "100"
			if strings.HasSuffix(tc.test, "_lat") {
				iters = "20"
			}
			args := append(append([]string{tc.test}, loopback(60+i)...), "--check", "-n", iters)
			args = append(args, tc.extra...)
			code, out, errs := runCmd(t, 60*time.Second, args...)
			if code != 0 {
				t.Fatalf("exit %d, stderr: %s\n%s", code, errs, out)
			}
			conn := tc.extra[1]
			if n := strings.Count(out, " Connection type : "+conn+"\t"); n != 2 {
				t.Errorf("%d banners say connection type %s, want 2:\n%s", n, conn, out)
			}
			// One row per size on each side that reports: perftest's
			// rows have 5 (bandwidth) or more (latency) fields, the
			// first two the size and the iterations.
			var rows []int
			for _, l := range strings.Split(out, "\n") {
				f := strings.Fields(l)
				var size, n int
				if len(f) >= 5 {
					if _, err := fmt.Sscan(f[0], &size); err != nil {
						continue
					}
					if _, err := fmt.Sscan(f[1], &n); err == nil && n > 0 {
						rows = append(rows, size)
					}
				}
			}
			var want []int
			sides := 2
			if strings.HasSuffix(tc.test, "_lat") && tc.test != "write_lat" && tc.test != "send_lat" {
				sides = 1
			}
			for range sides {
				want = append(want, tc.sizes...)
			}
			if fmt.Sprint(rows) != fmt.Sprint(want) {
				t.Errorf("result rows of sizes %v, want %v:\n%s", rows, want, out)
			}
		})
	}
}
