package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

// The tests' devices: loopback addresses of this test process's own.
var addrs = []string{"-a", testkit.Addr(1).String(), "-b", testkit.Addr(2).String()}

func runBench(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, append(append([]string{}, addrs...), args...), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, &out)
	}
	return out.String()
}

func TestJSONResults(t *testing.T) {
	out := runBench(t, "-json", "-d", "20ms", "-n", "200", "-sizes", "4K,64K", "-reg-sizes", "64K,1M")
	type key struct {
		test string
		size int
	}
	seen := map[key]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		test, _ := r["test"].(string)
		size, _ := r["size"].(float64)
		seen[key{test, int(size)}] = true
		var positive []string
		switch test {
		case "write_bw", "read_bw", "send_bw":
			positive = []string{"depth", "messages", "bytes", "seconds", "mb_per_s", "gbit_per_s", "cpu_s_per_gb"}
			if r["verified"] != true {
				t.Errorf("%s: not verified", sc.Text())
			}
			if r["bytes"] != r["messages"].(float64)*size {
				t.Errorf("%s: bytes are not messages × size", sc.Text())
			}
		case "write_lat":
			positive = []string{"iters", "min_us", "p50_us", "p99_us", "p99_9_us", "max_us", "avg_us"}
			if r["iters"] != 200.0 {
				t.Errorf("%s: want 200 iterations", sc.Text())
			}
			prev := 0.0
			for _, q := range []string{"min_us", "p50_us", "p99_us", "p99_9_us", "max_us"} {
				v, _ := r[q].(float64)
				if v < prev {
					t.Errorf("%s: %s below the previous percentile", sc.Text(), q)
				}
				prev = v
			}
		case "reg_mr":
			positive = []string{"iters", "us_per_reg", "us_per_mib"}
		default:
			t.Errorf("unexpected result %s", sc.Text())
		}
		for _, f := range positive {
			if v, ok := r[f].(float64); !ok || !(v > 0) {
				t.Errorf("%s: %s is not a positive number", sc.Text(), f)
			}
		}
	}
	want := []key{
		{"write_bw", 4096}, {"write_bw", 65536}, {"read_bw", 4096}, {"read_bw", 65536},
		{"send_bw", 4096}, {"send_bw", 65536}, {"write_lat", 8}, {"reg_mr", 65536}, {"reg_mr", 1 << 20},
	}
	for _, k := range want {
		if !seen[k] {
			t.Errorf("no %s result for size %d", k.test, k.size)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("%d distinct results, want %d:\n%s", len(seen), len(want), out)
	}
}

// The tables, with sizes that are not multiples of the MTU and a small
// window.
func TestTables(t *testing.T) {
	out := runBench(t, "-d", "10ms", "-n", "50", "-mtu", "1024", "-depth", "3",
		"-sizes", "1,1000,5000", "-reg-sizes", "4K", "-tests", "read,send,lat,reg")
	num := `(\d+(?:\.\d+)?)`
	rows := map[string]*regexp.Regexp{
		"bw":  regexp.MustCompile(`^(read_bw|send_bw) +(\S+) +` + strings.Repeat(num+` +`, 4) + `ok$`),
		"lat": regexp.MustCompile(`^write_lat +8 +` + strings.Repeat(num+` *`, 6) + `$`),
		"reg": regexp.MustCompile(`^reg_mr +4KiB +` + strings.Repeat(num+` *`, 3) + `$`),
	}
	count := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		for kind, re := range rows {
			m := re.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			count[kind]++
			for _, f := range m[len(m)-strings.Count(re.String(), num):] {
				if v, err := strconv.ParseFloat(f, 64); err != nil || !(v > 0) {
					t.Errorf("line %q: %q is not a positive number", line, f)
				}
			}
		}
	}
	if count["bw"] != 6 || count["lat"] != 1 || count["reg"] != 1 {
		t.Errorf("rows found: %v, want 6 bw, 1 lat, 1 reg:\n%s", count, out)
	}
	for _, title := range []string{"path MTU 1024", "Bandwidth: 3 work requests outstanding", "Latency, µs", "Memory registration"} {
		if !strings.Contains(out, title) {
			t.Errorf("output lacks %q:\n%s", title, out)
		}
	}
	if strings.Contains(out, "write_bw") {
		t.Errorf("-tests left out write, but it ran:\n%s", out)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-a", "localhost"}, "-a"},
		{[]string{"-b", "1.2.3"}, "-b"},
		{[]string{"-a", testkit.Addr(1).String(), "-b", testkit.Addr(1).String()}, "must differ"},
		{[]string{"-mtu", "1500"}, "-mtu"},
		{[]string{"-mtu", "8192"}, "-mtu"},
		{[]string{"-sizes", "0"}, "-sizes"},
		{[]string{"-sizes", "4K,"}, "-sizes"},
		{[]string{"-sizes", "2G"}, "-sizes"},
		{[]string{"-reg-sizes", "-1"}, "-reg-sizes"},
		{[]string{"-depth", "0"}, "-depth"},
		{[]string{"-depth", "4097"}, "-depth"},
		{[]string{"-depth", "4096", "-sizes", "1M"}, "1 GiB"},
		{[]string{"-d", "0s"}, "-d"},
		{[]string{"-n", "0"}, "-n"},
		{[]string{"-tests", "write,atomic"}, "atomic"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"-bogus"}, "bogus"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			_, err := parseConfig(tc.args, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseConfig(%q) = %v, want an error mentioning %q", tc.args, err, tc.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	c, err := parseConfig(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.a.String() != "127.0.0.1" || c.b.String() != "127.0.0.2" || c.mtu.Bytes() != 4096 ||
		c.depth != 16 || c.duration != 2*time.Second || c.iters != 10000 || c.json ||
		len(c.sizes) != 2 || c.sizes[0] != 4096 || c.sizes[1] != 65536 || len(c.tests) != len(allTests) {
		t.Errorf("defaults: %+v", c)
	}
}

func TestParseSizes(t *testing.T) {
	tests := []struct {
		in   string
		want []int
	}{
		{"4096", []int{4096}},
		{"4K,64K", []int{4096, 65536}},
		{"1KiB, 2MiB ,3k", []int{1024, 2 << 20, 3072}},
		{"1M", []int{1 << 20}},
		{"1024M", []int{1 << 30}},
	}
	for _, tc := range tests {
		got, err := parseSizes(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("parseSizes(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "K", "1.5K", "-4", "0", "1025M", "4 K", "4G"} {
		if got, err := parseSizes(bad); err == nil {
			t.Errorf("parseSizes(%q) = %v, want an error", bad, got)
		}
	}
}

func TestPercentile(t *testing.T) {
	us := func(n int) []time.Duration {
		s := make([]time.Duration, n)
		for i := range s {
			s[i] = time.Duration(i+1) * time.Microsecond
		}
		return s
	}
	tests := []struct {
		n, num, den int
		want        time.Duration
	}{
		{1, 50, 100, 1 * time.Microsecond},
		{1, 999, 1000, 1 * time.Microsecond},
		{100, 50, 100, 50 * time.Microsecond},
		{100, 99, 100, 99 * time.Microsecond}, // not 100: exact ranks stay exact
		{100, 999, 1000, 100 * time.Microsecond},
		{1000, 999, 1000, 999 * time.Microsecond},
		{10, 99, 100, 10 * time.Microsecond},
		{2, 50, 100, 1 * time.Microsecond},
		{3, 50, 100, 2 * time.Microsecond},
	}
	for _, tc := range tests {
		if got := percentile(us(tc.n), tc.num, tc.den); got != tc.want {
			t.Errorf("percentile(1..%d µs, %d/%d) = %v, want %v", tc.n, tc.num, tc.den, got, tc.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	s := []time.Duration{5 * time.Microsecond, 1 * time.Microsecond, 3 * time.Microsecond, 2 * time.Microsecond, 4 * time.Microsecond}
	r := summarize(s)
	if r.Iters != 5 || r.Min != 1 || r.P50 != 3 || r.P99 != 5 || r.Max != 5 || r.Avg != 3 {
		t.Errorf("summarize = %+v", r)
	}
}

// Source slots whose indices differ by less than 256 differ in every byte,
// so a stale destination never passes the data check.
func TestPatternsDiffer(t *testing.T) {
	const n = 5000
	for _, r := range []int{0, 1, 16, 254, 4096} {
		a, b := make([]byte, n), make([]byte, n)
		pattern(a, r)
		for _, d := range []int{1, 2, 17, 255} {
			pattern(b, r+d)
			for j := range a {
				if a[j] == b[j] {
					t.Fatalf("slots %d and %d agree at byte %d", r, r+d, j)
				}
			}
		}
	}
}

func TestRecvCount(t *testing.T) {
	for _, depth := range []int{1, 2, 15, 16, 100, 511, 512, 4096} {
		for _, stride := range []int{1, 4096, 65536, 1 << 20, 16 << 20} {
			n := recvCount(depth, stride)
			if n%(depth+1) != 1 || n < 2*(depth+1)+1 {
				t.Errorf("recvCount(%d, %d) = %d: want 1 more than a multiple of %d, at least %d", depth, stride, n, depth+1, 2*(depth+1)+1)
			}
			if n > 2*(depth+1)+1 && n*stride > maxRecvMemory {
				t.Errorf("recvCount(%d, %d) = %d: more than the minimum, beyond %d bytes", depth, stride, n, maxRecvMemory)
			}
			if next := n + depth + 1; n < targetRecvs && next*stride <= maxRecvMemory {
				t.Errorf("recvCount(%d, %d) = %d: fewer than %d, though %d would fit", depth, stride, n, targetRecvs, next)
			}
		}
	}
}

func TestSig(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 1234.6: "1235", 98765: "98765", 9.876: "9.876", 0.25: "0.2500", 0.0008: "0.000800", 1e-9: "0.000000"} {
		if got := sig(v); got != want {
			t.Errorf("sig(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestSizeString(t *testing.T) {
	for n, want := range map[int]string{1: "1", 1000: "1000", 1024: "1KiB", 1536: "1536", 4096: "4KiB", 1 << 20: "1MiB", 3 << 20: "3MiB", 1<<20 + 1024: "1025KiB"} {
		if got := sizeString(n); got != want {
			t.Errorf("sizeString(%d) = %q, want %q", n, got, want)
		}
	}
}
