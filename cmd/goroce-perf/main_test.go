package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/oob"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// Tests bind testkit's addresses of this process's own: other packages'
// tests (and other runs of these) bind theirs concurrently. Each test has
// its own pair of addresses, so the devices can all use the RoCEv2 port.
func loopAddrs(n int) string { return host(2*n+1) + "," + host(2*n+2) }

// loopback are the flags of a --loopback run on the addresses of loopAddrs(n):
// an ephemeral TCP port, and a QP timeout of 18 (1.07 s) rather than
// perftest's 14 (67 ms). Nothing is lost on loopback, so the timeout only
// bounds how long a receive goroutine may wait for a CPU; under -race on
// two loaded cores that exceeded 14's (retry_cnt+1) × 67 ms, and a run that
// is not about retries ended in RETRY_EXC_ERR (as rdmatest.DefaultLink).
func loopback(n int) []string {
	return []string{"--loopback", "--loopback-addrs", loopAddrs(n), "-p", "0", "-u", "18"}
}

// host is testkit's address number n, as a string.
func host(n int) string { return testkit.Addr(n).String() }

// runCmd runs the program with a deadline, so that a hang fails the test.
func runCmd(t *testing.T, timeout time.Duration, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, &out, &errb) }()
	select {
	case code = <-done:
	case <-time.After(timeout + 10*time.Second):
		t.Fatalf("goroce-perf %v did not return", args)
	}
	return code, out.String(), errb.String()
}

func TestLoopbackEveryTest(t *testing.T) {
	for i, tc := range []struct {
		test  string
		extra []string
		size  int
		sides []string // sides that print results
	}{
		{"write_bw", nil, defSizeBW, []string{"client", "server"}},
		{"read_bw", []string{"-q", "2"}, defSizeBW, []string{"client", "server"}},
		{"send_bw", []string{"-s", "3000", "-t", "16"}, 3000, []string{"client", "server"}},
		{"atomic_bw", nil, 8, []string{"client", "server"}},
		{"atomic_bw", []string{"-A", "CMP_AND_SWAP", "-q", "2"}, 8, []string{"client", "server"}},
		{"write_lat", []string{"-s", "100"}, 100, []string{"client", "server"}},
		{"read_lat", nil, defSizeLat, []string{"client"}},
		{"send_lat", []string{"-s", "5000"}, 5000, []string{"client", "server"}},
		{"atomic_lat", nil, 8, []string{"client"}},
		{"write_bw", []string{"-b", "-s", "10000"}, 10000, []string{"client", "server"}},
		{"read_bw", []string{"-b", "-q", "2", "-s", "5000"}, 5000, []string{"client", "server"}},
		{"send_bw", []string{"-b", "-q", "2", "-s", "7000"}, 7000, []string{"client", "server"}},
		{"atomic_bw", []string{"-b", "-A", "CMP_AND_SWAP"}, 8, []string{"client", "server"}},
		// CQ moderation (-Q) of large messages, with -n not a
		// multiple of it, and of a timed run, which ends each QP's
		// work with a signaled request (128, the TX depth, is no multiple
		// of 7: refilled 7 at a time, a QP's last request is unsignaled).
		{"write_bw", []string{"-Q", "7", "-s", "10000"}, 10000, []string{"client", "server"}},
		{"write_bw", []string{"-Q", "7", "-D", "1", "-q", "2"}, defSizeBW, []string{"client", "server"}},
		// Post lists (-l), also with a list longer than the room left.
		{"write_bw", []string{"-l", "16", "-s", "8"}, 8, []string{"client", "server"}},
		{"atomic_bw", []string{"-l", "5", "-A", "CMP_AND_SWAP", "-t", "12"}, 8, []string{"client", "server"}},
		{"send_bw", []string{"-l", "7", "-s", "100", "-q", "2"}, 100, []string{"client", "server"}},
		// Busy polling where one side waits at a time: the passive
		// server of write_bw, the client alone in read_lat.
		{"write_bw", []string{"--busy-poll", "-s", "4096"}, 4096, []string{"client", "server"}},
		{"read_lat", []string{"--busy-poll"}, defSizeLat, []string{"client"}},
		// Both sides spinning at once, which leaves no processor to
		// the devices' receive goroutines on two cores: the polls
		// receive the packets themselves (DeviceConfig.BusyPoll).
		{"write_lat", []string{"--busy-poll", "-s", "8"}, 8, []string{"client", "server"}},
		{"send_lat", []string{"--busy-poll"}, defSizeLat, []string{"client", "server"}},
	} {
		name := tc.test + strings.Join(tc.extra, "")
		t.Run(name, func(t *testing.T) {
			if raceEnabled && tc.test == "write_lat" {
				// ib_write_lat watches its buffer for the peer's
				// count while the device's receive goroutine stores
				// into it: the data race RDMA is built on, which the
				// detector rightly reports (verbs has no way to read
				// memory in step with the device's stores).
				t.Skip("write_lat polls memory the device writes; not race-clean")
			}
			iters := "200"
			if strings.HasSuffix(tc.test, "_lat") {
				iters = "50"
			}
			args := append(append([]string{tc.test}, loopback(i)...), "--json", "--check", "-n", iters)
			args = append(args, tc.extra...)
			code, out, errs := runCmd(t, 60*time.Second, args...)
			if code != 0 {
				t.Fatalf("exit %d, stderr: %s", code, errs)
			}
			lines := jsonLines(t, out)
			seen := map[string]bool{}
			passed := map[string]bool{}
			bidir := slices.Contains(tc.extra, "-b")
			for _, l := range lines {
				side, _ := l["side"].(string)
				seen[side] = true
				if l["test"] != tc.test || l["bytes"] != float64(tc.size) {
					t.Errorf("line %v: want test %s, %d bytes", l, tc.test, tc.size)
				}
				if n, _ := l["iterations"].(float64); n <= 0 {
					t.Errorf("line %v: no iterations", l)
				}
				fields := []string{"reg_usec_per_mib", "dereg_usec_per_mib", "reg_mib"}
				if strings.HasSuffix(tc.test, "_bw") {
					fields = append(fields, "bw_average", "msg_rate_mpps")
				} else {
					fields = append(fields, "t_min_usec", "t_max_usec", "t_typical_usec", "t_avg_usec",
						"p99_usec", "p99_9_usec", "p99_99_usec")
				}
				if tc.test != "send_bw" || side != "server" || bidir {
					if strings.HasSuffix(tc.test, "_bw") {
						fields = append(fields, "bw_peak")
					}
				}
				if l["remote_report"] != true && !(tc.test == "send_bw" && side == "server" && !bidir) {
					fields = append(fields, "p99_99_usec")
					if strings.HasSuffix(tc.test, "_bw") {
						fields = append(fields, "p50_usec")
						checkQPShares(t, side, l, slices.Contains(tc.extra, "-q"), bidir)
					}
				}
				for _, f := range fields {
					if v, ok := l[f].(float64); !ok || !(v > 0) {
						t.Errorf("%s side: %s = %v, want a positive number", side, f, l[f])
					}
				}
				if v, ok := l["cpu_sec_per_gb"].(float64); ok && v < 0 {
					t.Errorf("%s side: negative CPU %v", side, v)
				}
				switch l["check"] {
				case "passed":
					passed[side] = true
				case "peer":
				default:
					t.Errorf("%s side: check %v", side, l["check"])
				}
			}
			for _, s := range tc.sides {
				if !seen[s] {
					t.Errorf("no result from the %s; output:\n%s", s, out)
				}
			}
			if len(passed) == 0 || bidir && len(passed) != 2 {
				t.Errorf("validated by %v; output:\n%s", passed, out)
			}
		})
	}
}

func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	if len(lines) == 0 {
		t.Fatal("no JSON output")
	}
	return lines
}

// TestLoopbackAll runs -a: one line per size from 2 to 8 MiB.
func TestLoopbackAll(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 2×16 MiB per size")
	}
	plot := filepath.Join(t.TempDir(), "send_bw.svg")
	code, out, errs := runCmd(t, 120*time.Second, append([]string{"send_bw", "-a", "-n", "4", "-t", "4",
		"--json", "--check", "--plot", plot}, loopback(20)...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	checkPlot(t, plot, 1+6) // the bandwidth, and the CDFs of six of the sizes
	sizes := map[string][]float64{}
	for _, l := range jsonLines(t, out) {
		sizes[l["side"].(string)] = append(sizes[l["side"].(string)], l["bytes"].(float64))
	}
	for _, side := range []string{"client", "server"} {
		got := sizes[side]
		if len(got) != runAllMaxPow {
			t.Fatalf("%s: %d sizes, want %d", side, len(got), runAllMaxPow)
		}
		for i, s := range got {
			if s != float64(int(1)<<(i+1)) {
				t.Errorf("%s: size %d is %v", side, i, s)
			}
		}
	}
}

// checkPlot checks that the plot is well-formed XML with the curves.
func checkPlot(t *testing.T, path string, curves int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	polylines := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("plot: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			polylines++
		}
	}
	if polylines != curves {
		t.Errorf("plot has %d curves, want %d", polylines, curves)
	}
}

// The table is perftest's, byte for byte where it overlaps: these lines
// are from the reference logs of perftest 6.06 (rxe-vm/captures).
func TestTableMatchesPerftest(t *testing.T) {
	// perftest prints each GID byte in decimal, two digits at least.
	b := testkit.Addr(1).As4()
	gidRE := fmt.Sprintf(`^ GID: 00:00:00:00:00:00:00:00:00:00:255:255:%02d:%02d:%02d:\d+$`, b[0], b[1], b[2])
	for i, tc := range []struct {
		test    string
		header  string
		lineRE  string
		banner  []string
		addrRE  string
		extraRE string
	}{
		{
			test:   "write_bw",
			header: " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]",
			lineRE: `^ 4096       300              \d+\.\d\d\s+\d+\.\d\d *\t\t   \d+\.\d{6}$`,
			banner: []string{"                    RDMA_Write BW Test", " Dual-port       : OFF\t\tDevice         : goroce0",
				" Number of qps   : 1\t\tTransport type : IB", " Connection type : RC\t\tUsing SRQ      : OFF",
				" TX depth        : 128", " CQ Moderation   : 100", " Mtu             : 1024[B]", " GID index       : 1",
				" Max inline data : 0[B]", " rdma_cm QPs\t : OFF", " Data ex. method : Ethernet"},
			addrRE: `^ local address: LID 0000 QPN 0x[0-9a-f]{4,6} PSN 0x[0-9a-f]{6} RKey 0x[0-9a-f]{6,8} VAddr 0x[0-9a-f]{14}$`,
		},
		{
			test:   "send_lat",
			header: " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ",
			lineRE: `^ 4096    300          \d+\.\d\d\s+\d+\.\d\d\s+\d+\.\d\d\s+\t\s+\d+\.\d\d\s+\t\d+\.\d\d\s*\t\t\d+\.\d\d\s*\t\t\d+\.\d\d *$`,
			banner: []string{"                    Send Latency Test", " TX depth        : 1", " Mtu             : 1024[B]"},
			addrRE: `^ local address: LID 0000 QPN 0x[0-9a-f]{4,6} PSN 0x[0-9a-f]{6}$`,
		},
	} {
		t.Run(tc.test, func(t *testing.T) {
			code, out, errs := runCmd(t, 60*time.Second, append([]string{tc.test, "-s", "4096", "-n", "300", "-m", "1024"},
				loopback(30+i)...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			client, _, _ := strings.Cut(out, "\n server side:\n")
			lines := strings.Split(client, "\n")
			has := func(want string) bool {
				for _, l := range lines {
					if l == want {
						return true
					}
				}
				return false
			}
			for _, want := range append(tc.banner, tc.header, strings.TrimSuffix(resultLine, "\n")) {
				if !has(want) {
					t.Errorf("no line %q in\n%s", want, client)
				}
			}
			for _, re := range []string{tc.lineRE, tc.addrRE, gidRE,
				`^ MR \d+\.\d\d MiB: reg \d+\.\d usec \(\d+\.\d\d usec/MiB\), dereg \d+\.\d usec \(\d+\.\d\d usec/MiB\)$`} {
				rx := regexp.MustCompile(re)
				found := false
				for _, l := range lines {
					found = found || rx.MatchString(l)
				}
				if !found {
					t.Errorf("no line matching %q in\n%s", re, client)
				}
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	// A TCP port with nothing listening: bind one, note it, close it.
	ln, err := net.Listen("tcp", host(100)+":0")
	if err != nil {
		t.Fatal(err)
	}
	deadPort := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()

	// A peer that answers the version exchange with garbage.
	garbage, err := net.Listen("tcp", host(101)+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer garbage.Close()
	go func() {
		for {
			c, err := garbage.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	garbagePort := strconv.Itoa(garbage.Addr().(*net.TCPAddr).Port)

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unreachable server", []string{"write_bw", "--bind", host(102), "-p", deadPort, host(100)}, 1, "cannot connect to the server"},
		{"garbage peer", []string{"write_bw", "--bind", host(103), "-p", garbagePort, host(101)}, 1, "version"},
		{"size over the device limit", []string{"write_bw", "--bind", host(104), "-s", "4294967296", "-p", garbagePort, host(101)}, 1, "max_msg_sz"},
		// Without --bind the device takes the TCP connection's source,
		// 127.0.0.1 here, which a goroce-nic daemon may hold on 4791: a
		// UDP port of this process's own.
		{"size over the device limit, no bind", []string{"read_bw", "-s", "4294967296", "--udp-port", strconv.Itoa(int(testkit.Port())), "-p", garbagePort, host(101)}, 1, "max_msg_sz"},
		{"unknown test", []string{"write_fast"}, 2, "unknown test"},
		{"no test", nil, 2, "missing TEST"},
		{"UD write", []string{"write_bw", "-c", "UD"}, 2, "UD connection only possible in SEND verb"},
		{"UC read", []string{"read_lat", "-c", "UC"}, 2, "UC connection not possible in READ/ATOMIC verbs"},
		{"UC atomic", []string{"atomic_bw", "-c", "uc"}, 2, "UC connection not possible in READ/ATOMIC verbs"},
		{"XRC", []string{"send_bw", "-c", "XRC"}, 2, "only RC, UC and UD"},
		{"connection type", []string{"send_bw", "-c", "TCP"}, 2, "unknown connection type"},
		{"UD size above the MTU", []string{"send_bw", "-c", "UD", "-s", "4097", "--loopback", "--loopback-addrs", host(105) + "," + host(106), "-p", "0"}, 1, "cannot be larger than the MTU (4096)"},
		{"atomic size", []string{"atomic_bw", "-s", "16"}, 2, "8 bytes"},
		{"bad MTU", []string{"write_bw", "-m", "1500"}, 2, "-m 1500"},
		{"two hosts", []string{"write_bw", "a", "b"}, 2, "unexpected argument"},
		{"bad flag", []string{"read_lat", "--nope"}, 2, "flag provided but not defined"},
		{"lat iterations", []string{"send_lat", "-n", "3"}, 2, "at least 5"},
		{"bidirectional latency", []string{"write_lat", "-b"}, 2, "bandwidth tests"},
		{"GID index 0", []string{"write_bw", "-x", "0"}, 2, "GID index 1 only"},
		{"QP timeout", []string{"write_bw", "-u", "32"}, 2, "-u 32"},
		{"negative QP timeout", []string{"write_bw", "--qp-timeout", "-1"}, 2, "5-bit code"},
		{"plot format", []string{"write_bw", "-a", "--plot", "x.pdf"}, 2, "want a .svg or .png file"},
		{"plot reference without plot", []string{"write_lat", "--plot-ref", "udp=x.txt"}, 2, "needs --plot"},
		{"plot reference without label", []string{"write_lat", "--plot", "x.svg", "--plot-ref", "x.txt"}, 2, "LABEL=FILE"},
		{"plot reference missing", []string{"write_lat", "--plot", "x.svg", "--plot-ref", "udp=/nonexistent/x.txt"}, 2, "no such file"},
		{"duration of a send test", []string{"send_bw", "-D", "2"}, 2, "use -n"},
		{"no completions", []string{"write_bw", "-Q", "0"}, 2, "-Q 0: at least one work request per completion"},
		{"goroce-only flag on a kernel device", []string{"write_bw", "--hw", "-d", "rxe0", "--udp-port", "5000"}, 2, "--udp-port: goroce devices only, not with --hw"},
		{"counters of a kernel device", []string{"write_bw", "--hw", "--counters"}, 2, "--counters: goroce devices only"},
		{"GID index on a kernel device", []string{"write_bw", "--hw", "-x", "-2"}, 2, "-x -2: not a GID index"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCmd(t, 30*time.Second, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.code, errs)
			}
			if tc.code == 1 && strings.Count(strings.TrimSpace(errs), "\n") != 0 {
				t.Errorf("error is more than one line: %q", errs)
			}
			if !strings.Contains(errs, tc.want) {
				t.Errorf("stderr %q does not say %q", errs, tc.want)
			}
			if tc.code == 1 && strings.Contains(out, "#bytes") {
				t.Errorf("a result table after an error:\n%s", out)
			}
		})
	}
}

// A server must not hang on a client that sends garbage.
func TestServerRejectsGarbageClient(t *testing.T) {
	ln, err := net.Listen("tcp", host(110)+":0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	done := make(chan struct{})
	var code int
	var errs string
	go func() {
		defer close(done)
		code, _, errs = runCmd(t, 30*time.Second, "read_bw", "--bind", host(110), "-p", port)
	}()
	var c net.Conn
	for range 100 {
		if c, err = net.Dial("tcp", host(110)+":"+port); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write(bytes.Repeat([]byte{0xff}, 64))
	c.Close()
	<-done
	if code != 1 || !strings.Contains(errs, "goroce-perf:") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Errorf("exit %d, stderr %q: want one error line and exit 1", code, errs)
	}
}

func TestLatResult(t *testing.T) {
	cfg := &config{test: tests[3]} // read_lat: full round trips
	at := func(us ...int) []stamp {
		var ts []stamp
		for _, u := range us {
			ts = append(ts, stamp(time.Duration(u)*time.Microsecond))
		}
		return ts
	}
	for _, tc := range []struct {
		name   string
		posted []stamp
		rtt    float64
		min    float64
		max    float64
		typ    float64
		avg    float64
	}{
		// deltas 10,20,30,40,1000,2000: the two largest are dropped,
		// median of 4 values is the mean of the middle two.
		{"tail dropped", at(0, 10, 30, 60, 100, 1100, 3100), 1, 10, 1000, 25, 25},
		// deltas 5,5,5,50,60 → 5,5,5 kept.
		{"odd count", at(0, 5, 10, 15, 65, 125), 1, 5, 50, 5, 5},
		{"half round trip", at(0, 10, 30, 60, 100, 1100, 3100), 2, 5, 500, 12.5, 12.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := latResult(cfg, 2, tc.posted, tc.rtt)
			if r.tMin != tc.min || r.tMax != tc.max || r.tTyp != tc.typ || r.tAvg != tc.avg {
				t.Errorf("min %v max %v typical %v avg %v; want %v %v %v %v", r.tMin, r.tMax, r.tTyp, r.tAvg,
					tc.min, tc.max, tc.typ, tc.avg)
			}
		})
	}
}

func TestBWResult(t *testing.T) {
	cfg := &config{test: tests[0], txDepth: 1, iters: 4}
	us := func(u int) stamp { return stamp(time.Duration(u) * time.Microsecond) }
	// Four 1 MiB messages, one at a time: 1 ms, 1 ms, 2 ms, 4 ms.
	posted := []stamp{us(0), us(1000), us(2000), us(4000)}
	done := []stamp{us(1000), us(2000), us(4000), us(8000)}
	r := bwResult(cfg, 1<<20, posted, done)
	// Average: 4 MiB in 8 ms = 500 MiB/s; peak: 1 MiB in 1 ms = 1000 MiB/s.
	if d := r.bwAvg - 500; d > 1e-6 || d < -1e-6 {
		t.Errorf("average %v, want 500", r.bwAvg)
	}
	if d := r.bwPeak - 1000; d > 1e-6 || d < -1e-6 {
		t.Errorf("peak %v, want 1000", r.bwPeak)
	}
	if d := r.msgRate - 0.0005; d > 1e-12 || d < -1e-12 {
		t.Errorf("message rate %v, want 0.0005", r.msgRate)
	}
	if r.p9999 != 4000 {
		t.Errorf("p99.99 %v, want 4000", r.p9999)
	}
}

func TestCHex(t *testing.T) {
	// From write_bw.log: "LID 0000 QPN 0x0028 PSN 0x4b7ae6 RKey 0x001ed4 VAddr 0x00558b68537000".
	d := oob.Dest{QPN: 0x28, PSN: 0x4b7ae6, RKey: 0x1ed4, VAddr: 0x558b68537000}
	var b bytes.Buffer
	s := &side{cfg: &config{test: tests[0]}, out: &b}
	s.printDest("local", d)
	want := " local address: LID 0000 QPN 0x0028 PSN 0x4b7ae6 RKey 0x001ed4 VAddr 0x00558b68537000\n" +
		" GID: 00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}

// referenceServer is the passive server of a perftest bandwidth test or of
// ib_read_lat/ib_atomic_lat, written against internal/oob's own rendering
// of perftest's sequence (PerftestConn.Run) rather than goroce-perf's: the
// client must go through the same steps as a real perftest server expects.
func referenceServer(ctx context.Context, kind oob.PerftestKind, addr string, ln net.Listener) (oob.PerftestResult, error) {
	nc, err := ln.Accept()
	if err != nil {
		return oob.PerftestResult{}, err
	}
	return referencePeer(ctx, kind, oob.Server, addr, nc, 0, 0, false)
}

// referencePeer is a perftest peer built on oob.PerftestConn.Run; as a
// client it sends iters messages of size bytes (RDMA WRITE or SEND), with
// goroce-perf's --check pattern if withPattern.
func referencePeer(ctx context.Context, kind oob.PerftestKind, role oob.Role, addr string, nc net.Conn, size, iters int,
	withPattern bool) (oob.PerftestResult, error) {
	pc, err := oob.NewPerftestConn(nc, oob.PerftestConfig{Role: role})
	if err != nil {
		return oob.PerftestResult{}, err
	}
	dev, err := verbs.Open(verbs.DeviceConfig{Addr: netip.MustParseAddr(addr)})
	if err != nil {
		return oob.PerftestResult{}, err
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		return oob.PerftestResult{}, err
	}
	mr, err := pd.RegMR(make([]byte, 1<<20), qpAccess)
	if err != nil {
		return oob.PerftestResult{}, err
	}
	cq, err := dev.CreateCQ(16, nil, 0)
	if err != nil {
		return oob.PerftestResult{}, err
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return oob.PerftestResult{}, err
	}
	const psn = 0xabcdef
	if withPattern {
		fillPattern(mr.Buf()[:size], psn)
	}
	plan := oob.PerftestPlan{
		Kind: kind, SysData: oob.SysData{CycleBuffer: 4096, CacheLineSize: 64}, MTU: verbs.MTU1024,
		Init: func(context.Context, oob.PerftestAgreement) ([]oob.Dest, error) {
			if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: qpAccess},
				verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
				return nil, err
			}
			gid, err := dev.QueryGID(1, 1)
			return []oob.Dest{{OutReads: 16, QPN: qp.QPN(), PSN: psn, RKey: mr.RKey(), VAddr: mr.IOVA(), GID: gid}}, err
		},
		Connect: func(_ context.Context, remote []oob.Dest) error {
			r := remote[0]
			if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPNum: r.QPN,
				RQPSN: r.PSN, MaxDestRdAtomic: 16, MinRNRTimer: 12,
				AHAttr: verbs.AddressVector{DGID: verbs.GID(r.GID), SGIDIndex: 1, HopLimit: 64, IsGlobal: true, PortNum: 1}},
				verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
					verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
				return err
			}
			return qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: psn, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
				MaxRdAtomic: 16}, verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|
				verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic)
		},
	}
	var remote oob.Dest
	connect := plan.Connect
	plan.Connect = func(ctx context.Context, r []oob.Dest) error {
		remote = r[0]
		return connect(ctx, r)
	}
	if role == oob.Client {
		plan.Traffic = func(ctx context.Context) (oob.BWReport, error) {
			start := time.Now()
			wr := verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(0, size)}}
			if kind == oob.WriteBW {
				wr.Opcode = verbs.WRRDMAWrite
				wr.RDMA = verbs.RDMAParams{RemoteAddr: remote.VAddr, RKey: remote.RKey}
			}
			wc := make([]verbs.WorkCompletion, 1)
			for k := range iters {
				wr.WRID = uint64(k)
				if err := qp.PostSend(&wr); err != nil {
					return oob.BWReport{}, err
				}
				for {
					n, err := cq.Poll(wc)
					if err != nil {
						return oob.BWReport{}, err
					}
					if n == 1 {
						if wc[0].Status != verbs.WCSuccess {
							return oob.BWReport{}, fmt.Errorf("completion %v", wc[0].Status)
						}
						break
					}
					if ctx.Err() != nil {
						return oob.BWReport{}, ctx.Err()
					}
					time.Sleep(time.Microsecond)
				}
			}
			secs := time.Since(start).Seconds()
			return oob.BWReport{Size: uint64(size), Iters: uint64(iters), BWPeak: 1, BWAvg: float64(size*iters) / secs / (1 << 20),
				MsgRateAvg: float64(iters) / secs / 1e6}, nil
		}
	}
	return pc.Run(ctx, plan)
}

func TestServerAgainstReferenceClient(t *testing.T) {
	for i, tc := range []struct {
		test    string
		kind    oob.PerftestKind
		pattern bool // the client sends the data --check expects
	}{
		{"write_bw", oob.WriteBW, true},
		{"send_bw", oob.SendBW, true},
		{"write_bw", oob.WriteBW, false},
		{"send_bw", oob.SendBW, false},
	} {
		t.Run(fmt.Sprintf("%s/pattern=%v", tc.test, tc.pattern), func(t *testing.T) {
			srv, cli := host(141+2*i), host(142+2*i)
			ln, err := net.Listen("tcp", srv+":0")
			if err != nil {
				t.Fatal(err)
			}
			port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
			ln.Close()
			type outcome struct {
				code      int
				out, errs string
			}
			done := make(chan outcome, 1)
			go func() {
				code, out, errs := runCmd(t, 60*time.Second, tc.test, "--bind", srv, "-p", port, "-n", "30", "-s", "3000",
					"-m", "1024", "--json", "--check")
				done <- outcome{code, out, errs}
			}()
			var nc net.Conn
			for range 200 {
				if nc, err = net.Dial("tcp", srv+":"+port); err == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err = referencePeer(ctx, tc.kind, oob.Client, cli, nc, 3000, 30, tc.pattern)
			o := <-done
			if !tc.pattern {
				// The server finds other bytes than the pattern.
				if o.code != 1 || !strings.Contains(o.errs, "check: byte 0 is") {
					t.Errorf("server: exit %d, %q; want a failed check", o.code, o.errs)
				}
				return
			}
			if err != nil {
				t.Fatalf("reference client: %v (server: exit %d, %s)", err, o.code, o.errs)
			}
			if o.code != 0 {
				t.Fatalf("server: exit %d: %s", o.code, o.errs)
			}
			l := jsonLines(t, o.out)
			if len(l) != 1 || l[0]["side"] != "server" || l[0]["bytes"] != 3000.0 || l[0]["iterations"] != 30.0 {
				t.Errorf("server output %v", l)
			}
		})
	}
}

func TestClientAgainstReferenceServer(t *testing.T) {
	for i, tc := range []struct {
		test string
		kind oob.PerftestKind
	}{
		{"write_bw", oob.WriteBW},
		{"read_bw", oob.ReadBW},
		{"atomic_bw", oob.AtomicBW},
		{"read_lat", oob.ReadLat},
		{"atomic_lat", oob.AtomicLat},
	} {
		t.Run(tc.test, func(t *testing.T) {
			srv, cli := host(121+2*i), host(122+2*i)
			ln, err := net.Listen("tcp", srv+":0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			type outcome struct {
				res oob.PerftestResult
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := referenceServer(ctx, tc.kind, srv, ln)
				done <- outcome{res, err}
			}()
			port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
			code, out, errs := runCmd(t, 60*time.Second, tc.test, "--bind", cli, "-p", port, "-n", "40", "-s", "8",
				"-m", "1024", "--json", srv)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			o := <-done
			if o.err != nil {
				t.Fatalf("reference server: %v", o.err)
			}
			if o.res.RemoteVersion != oob.DefaultPerftestVersion || o.res.MTU != verbs.MTU1024 {
				t.Errorf("reference server agreed on %+v", o.res.PerftestAgreement)
			}
			if strings.HasSuffix(tc.test, "_bw") {
				if !o.res.HasReport || o.res.Report.Iters != 40 || o.res.Report.Size != 8 || !(o.res.Report.BWAvg > 0) {
					t.Errorf("report the server got: %+v", o.res.Report)
				}
			}
			if l := jsonLines(t, out); len(l) != 1 || l[0]["side"] != "client" {
				t.Errorf("client output %v", l)
			}
		})
	}
}

// TestCounters: --counters prints each side's device counters after its
// report, all of them in verbs.Counters.Each's order, and the traffic shows
// in them; with --json as one object per side.
func TestCounters(t *testing.T) {
	var names []string
	verbs.Counters{}.Each(func(name string, _ uint64) { names = append(names, name) })
	t.Run("text", func(t *testing.T) {
		code, out, errs := runCmd(t, 60*time.Second, append([]string{"write_bw", "-s", "4096", "-n", "20", "--counters"},
			loopback(50)...)...)
		if code != 0 || errs != "" {
			t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errs, out)
		}
		lines := strings.Split(out, "\n")
		var sides int
		for i, l := range lines {
			if !strings.HasSuffix(l, "device counters:") {
				continue
			}
			sides++
			if len(lines) < i+1+len(names) {
				t.Fatalf("counters cut short:\n%s", out)
			}
			values := map[string]uint64{}
			for j, name := range names {
				f := strings.Fields(lines[i+1+j])
				if len(f) != 2 || f[0] != name {
					t.Fatalf("line %q, want counter %s:\n%s", lines[i+1+j], name, out)
				}
				v, err := strconv.ParseUint(f[1], 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				values[name] = v
			}
			// 20 WRITEs of 4 pages each way, acknowledged: both sides sent
			// and received packets.
			if values["sent_pkts"] == 0 || values["rcvd_pkts"] == 0 {
				t.Errorf("%s: sent_pkts %d, rcvd_pkts %d, want both > 0", l, values["sent_pkts"], values["rcvd_pkts"])
			}
		}
		if sides != 2 {
			t.Fatalf("%d counter blocks, want 2 (client and server):\n%s", sides, out)
		}
	})
	t.Run("json", func(t *testing.T) {
		code, out, errs := runCmd(t, 60*time.Second, append([]string{"send_bw", "-s", "1000", "-n", "10", "--counters", "--json"},
			loopback(51)...)...)
		if code != 0 || errs != "" {
			t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errs, out)
		}
		var sides []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var o struct {
				Side     string            `json:"side"`
				Counters map[string]uint64 `json:"counters"`
			}
			if err := json.Unmarshal([]byte(l), &o); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			if o.Counters == nil {
				continue // a result line
			}
			sides = append(sides, o.Side)
			if len(o.Counters) != len(names) || o.Counters["sent_pkts"] == 0 || o.Counters["rcvd_pkts"] == 0 {
				t.Errorf("%s counters %v: want all %d, sent_pkts and rcvd_pkts > 0", o.Side, o.Counters, len(names))
			}
		}
		if len(sides) != 2 {
			t.Fatalf("counters of %q, want client and server:\n%s", sides, out)
		}
	})
}

// checkQPShares checks a bandwidth result's qp_bw_average: with several
// QPs (multi) one positive number per QP summing to bw_average (with -b,
// bidir, to this side's direction only, which bw_average does not show),
// else absent.
func checkQPShares(t *testing.T, side string, l map[string]any, multi, bidir bool) {
	t.Helper()
	raw, ok := l["qp_bw_average"].([]any)
	if !multi {
		if ok {
			t.Errorf("%s side: qp_bw_average %v with one QP", side, raw)
		}
		return
	}
	if len(raw) != 2 {
		t.Errorf("%s side: qp_bw_average = %v, want 2 numbers (-q 2)", side, l["qp_bw_average"])
		return
	}
	sum := 0.0
	for _, v := range raw {
		f, _ := v.(float64)
		if !(f > 0) {
			t.Errorf("%s side: qp_bw_average = %v, want positive numbers", side, raw)
		}
		sum += f
	}
	if bw, _ := l["bw_average"].(float64); !bidir && math.Abs(sum-bw) > 1e-6*bw {
		t.Errorf("%s side: qp_bw_average sums to %v, bw_average %v", side, sum, bw)
	}
}
