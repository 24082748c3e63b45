package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

// capture returns the path of the real rxe capture name (testkit.Captures,
// recorded with tcpdump, with the logs of the tools that produced it), or
// skips the test.
func capture(t *testing.T, name string) string {
	t.Helper()
	return testkit.Captures(t, name)[0]
}

// dump runs the command and returns its exit status, stdout and stderr.
func dump(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// captureCounts are the frames of each capture, counted with tshark: RoCEv2
// packets (UDP to 4791, ICMP errors quoting one excluded) and all records.
// host_crafted_probe holds 6 packets made with a bad ICRC on purpose (see
// craft_probe.py): 3 with a flipped CRC bit, 3 sent by a connected socket
// whose IP id the sender did not predict.
var captureCounts = map[string]struct{ roce, records, badICRC int }{
	"atomic_cswap.pcap":          {16, 56, 0},
	"atomic_fadd.pcap":           {16, 55, 0},
	"host_crafted_probe.pcap":    {9, 9, 6},
	"rc_pingpong.pcap":           {24, 35, 0},
	"read_bw.pcap":               {40, 81, 0},
	"rping.pcap":                 {41, 41, 0},
	"send_bw.pcap":               {40, 71, 0},
	"send_lat.pcap":              {32, 61, 0},
	"uc_pingpong.pcap":           {16, 27, 0},
	"ud_pingpong.pcap":           {8, 20, 0},
	"vm_to_host_unanswered.pcap": {73, 94, 0},
	"write_bw.pcap":              {40, 79, 0},
	"write_bw_rdmacm.pcap":       {114, 114, 0},
	"write_lat.pcap":             {32, 57, 0},
}

// TestCheckCaptures runs --check over every capture: every RoCEv2 packet
// parses, every ICRC is right except the deliberately bad ones, and the
// summary counts match tshark's.
func TestCheckCaptures(t *testing.T) {
	for _, path := range testkit.Captures(t) {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			code, out, stderr := dump(t, "--check", path)
			want, known := captureCounts[name]
			if !known {
				// A capture added later: it must at least parse cleanly.
				if code != exitOK {
					t.Fatalf("exit %d\n%s%s", code, out, stderr)
				}
				return
			}
			verdict, wantCode := "OK", exitOK
			if want.badICRC > 0 {
				verdict, wantCode = "FAIL", exitCheckFail
			}
			summary := fmt.Sprintf("check: %d RoCEv2 packets, 0 malformed, %d bad ICRC, %d other frames skipped: %s\n",
				want.roce, want.badICRC, want.records-want.roce, verdict)
			if code != wantCode || !strings.HasSuffix(out, summary) || stderr != "" {
				t.Fatalf("exit %d, want %d; output ends %q, want %q; stderr %q", code, wantCode, lastLine(out), summary, stderr)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if got := len(lines) - 1; got != want.roce {
				t.Errorf("%d packet lines, want %d", got, want.roce)
			}
			if strings.Contains(out, "malformed:") {
				t.Errorf("malformed packets:\n%s", grep(out, "malformed:"))
			}
			if n := strings.Count(out, "icrc=ok"); n != want.roce-want.badICRC {
				t.Errorf("%d packets with icrc=ok, want %d", n, want.roce-want.badICRC)
			}
		})
	}
}

func TestCheckSeveralFiles(t *testing.T) {
	a, b := capture(t, "write_bw.pcap"), capture(t, "read_bw.pcap")
	code, out, _ := dump(t, "--check", a, b)
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"==> " + a + " <==\n", "==> " + b + " <==\n",
		"check: 80 RoCEv2 packets, 0 malformed, 0 bad ICRC, 80 other frames skipped: OK\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// One bad file makes the whole check fail.
	code, out, _ = dump(t, "--check", a, capture(t, "host_crafted_probe.pcap"))
	if code != exitCheckFail || !strings.HasSuffix(out, "6 bad ICRC, 39 other frames skipped: FAIL\n") {
		t.Fatalf("exit %d, summary %q", code, lastLine(out))
	}
}

// TestGoldenLines pins the one-line format on packets of each kind, checked
// field by field against tshark's decoding of the same frames.
func TestGoldenLines(t *testing.T) {
	tests := []struct {
		capture string
		line    string
	}{
		{"write_bw.pcap", "   20    1.080996  10.99.0.2:49952       → 10.99.0.3        RC RDMA_WRITE_FIRST          qpn=0x000014 psn=0x4b7ae6 ---  pay=1024  va=0x561cb6110000 rkey=0x0000054c dlen=4096  icrc=ok"},
		{"write_bw.pcap", "   23    1.081380  10.99.0.2:49952       → 10.99.0.3        RC RDMA_WRITE_LAST           qpn=0x000014 psn=0x4b7ae9 A--  pay=1024  icrc=ok"},
		{"write_bw.pcap", "   32    1.082256  10.99.0.3:49952       → 10.99.0.2        RC ACKNOWLEDGE               qpn=0x000028 psn=0x4b7ae9 ---  pay=0     aeth=ACK msn=1  icrc=ok"},
		{"read_bw.pcap", "   21    0.063444  10.99.0.3:50013       → 10.99.0.2        RC RDMA_READ_RESPONSE_FIRST  qpn=0x000029 psn=0x91248e ---  pay=1024  aeth=ACK msn=1  icrc=ok"},
		{"read_bw.pcap", "   22    0.063633  10.99.0.3:50013       → 10.99.0.2        RC RDMA_READ_RESPONSE_MIDDLE qpn=0x000029 psn=0x91248f ---  pay=1024  icrc=ok"},
		{"atomic_fadd.pcap", "   20    0.039430  10.99.0.2:50141       → 10.99.0.3        RC FETCH_ADD                 qpn=0x000017 psn=0x436126 A--  pay=0     va=0x5645a75a9000 rkey=0x000008a6 add=1  icrc=ok"},
		{"atomic_cswap.pcap", "   20    0.109993  10.99.0.2:50208       → 10.99.0.3        RC COMPARE_SWAP              qpn=0x000018 psn=0x385d50 A--  pay=0     va=0x5605309fd000 rkey=0x00000989 swap=0x0 cmp=0x0  icrc=ok"},
		{"atomic_cswap.pcap", "   28    0.110694  10.99.0.3:50208       → 10.99.0.2        RC ATOMIC_ACKNOWLEDGE        qpn=0x00002c psn=0x385d50 ---  pay=0     aeth=ACK msn=1 orig=0xe9e7e313e186f85c  icrc=ok"},
		{"ud_pingpong.pcap", "   12    0.019404  10.99.0.2:63843       → 10.99.0.3        UD SEND_ONLY                 qpn=0x000013 psn=0x5ba528 ---  pay=512   qkey=0x11111111 srcqp=0x000027  icrc=ok"},
		{"uc_pingpong.pcap", "   10    0.024808  10.99.0.2:49836       → 10.99.0.3        UC SEND_FIRST                qpn=0x000012 psn=0x9c030d ---  pay=1024  icrc=ok"},
		{"write_bw_rdmacm.pcap", "    1    0.000000  10.99.0.2:55410       → 10.99.0.3        UD SEND_ONLY                 qpn=0x000001 psn=0x000005 A--  pay=256   qkey=0x80010000 srcqp=0x000001  mad=CM_REQ lcid=0x013d5972 svc=TCP:18515 qpn=0x00002f psn=0x61346f cma=10.99.0.2:35951→10.99.0.3 pdata=0  icrc=ok"},
		{"rping.pcap", "    6    0.025480  10.99.0.3:59946       → 10.99.0.2        RC RDMA_READ_REQUEST         qpn=0x000031 psn=0x0337dc A--  pay=0     va=0x55faef322fa0 rkey=0x00002a57 dlen=64  icrc=ok"},
		{"host_crafted_probe.pcap", "    4    2.069038  10.99.0.1:53943       → 10.99.0.2        UD SEND_ONLY                 qpn=0x000001 psn=0x000000 ---  pay=256   qkey=0x80010000 srcqp=0x000001  mad=class0x01/attr0x0000  icrc=BAD(got 0xdf0621cd, want 0xdf0621cc)"},
	}
	outputs := map[string]string{}
	for _, tc := range tests {
		out, ok := outputs[tc.capture]
		if !ok {
			_, out, _ = dump(t, capture(t, tc.capture))
			outputs[tc.capture] = out
		}
		if !strings.Contains(out, tc.line+"\n") {
			index := strings.Fields(tc.line)[0]
			t.Errorf("%s: want line\n%s\ngot\n%s", tc.capture, tc.line, grep(out, "^ *"+index+" "))
		}
	}
}

func TestVerbose(t *testing.T) {
	_, out, _ := dump(t, "-v", "--qpn", "0x2c", capture(t, "atomic_cswap.pcap"))
	want := `   28    0.110694  10.99.0.3:50208       → 10.99.0.2        RC ATOMIC_ACKNOWLEDGE        qpn=0x00002c psn=0x385d50 ---  pay=0     aeth=ACK msn=1 orig=0xe9e7e313e186f85c  icrc=ok
        ETH   52:54:00:99:00:03 → 52:54:00:99:00:02 type=0x0800
        IPv4  10.99.0.3 → 10.99.0.2 hdr=20 tos=0x00 len=56 id=0x5c7a df=1 mf=0 frag=0 ttl=64 proto=17 csum=0xc970
        UDP   50208 → 4791 len=36 csum=0x0000
        BTH   opcode=0x12(RC ATOMIC_ACKNOWLEDGE) se=0 m=0 pad=0 tver=0 pkey=0xffff fecn=0 becn=0 resv6=0x00 destqp=0x00002c ackreq=0 resv7=0x00 psn=0x385d50
        AETH  syndrome=0x1f(ACK credits=31) msn=1
        AtomicAckETH orig=0xe9e7e313e186f85c
        ICRC  `
	if !strings.HasPrefix(out, want) {
		t.Fatalf("verbose output starts\n%s\nwant\n%s", head(out, 9), want)
	}
	// Every header of every packet: the payload preview and the MAD of a
	// CM packet.
	_, out, _ = dump(t, "-v", capture(t, "write_bw_rdmacm.pcap"))
	for _, want := range []string{
		"        DETH  qkey=0x80010000 resv8=0x00 srcqp=0x000001\n",
		"        MAD   base=1 class=0x07(CM) classver=2 method=0x03 status=0x0000 tid=0x0000000272593d01 attr=0x0010(REQ) attrmod=0x00000000\n",
		"        PAY   256 bytes 01 07 02 03 00 00 00 00 00 00 00 02 72 59 3d 01 00 10 00 00 00 00 00 00 01 3d 59 72 00 00 00 00 ...\n",
		"        RETH  va=0x000055db65e5a000 rkey=0x00000df1 dmalen=4096\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("verbose output lacks\n%s", want)
		}
	}
}

func TestQPNFilter(t *testing.T) {
	path := capture(t, "write_bw.pcap")
	tests := []struct {
		args     []string
		packets  int
		filtered int
	}{
		{[]string{"--qpn", "0x14"}, 32, 8},
		{[]string{"--qpn=40"}, 8, 32},
		{[]string{"--qpn", "0x14,0x28"}, 40, 0},
		{[]string{"--qpn", "0x14", "--qpn", "0x28"}, 40, 0},
		{[]string{"--qpn", "0x99"}, 0, 40},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, _ := dump(t, append(tc.args, "--check", path)...)
			if code != exitOK {
				t.Fatalf("exit %d", code)
			}
			summary := fmt.Sprintf("check: %d RoCEv2 packets, 0 malformed, 0 bad ICRC, 39 other frames skipped, %d filtered out by --qpn: OK\n", tc.packets, tc.filtered)
			if !strings.HasSuffix(out, summary) {
				t.Fatalf("summary %q, want %q", lastLine(out), summary)
			}
		})
	}
}

// TestMTUCheck checks --mtu turns on the path MTU rules: write_bw's 1024-byte
// FIRST and MIDDLE packets break a 512 MTU and a 2048 one (FIRST and MIDDLE
// must fill the MTU exactly).
func TestMTUCheck(t *testing.T) {
	path := capture(t, "write_bw.pcap")
	tests := []struct {
		mtu       string
		code      int
		malformed int
	}{
		{"1024", exitOK, 0},
		{"0", exitOK, 0},
		{"512", exitCheckFail, 40 - 8}, // every WRITE packet; the ACKs pass
		{"2048", exitCheckFail, 24},    // FIRST and MIDDLE; LAST may be shorter
	}
	for _, tc := range tests {
		t.Run(tc.mtu, func(t *testing.T) {
			code, out, _ := dump(t, "--check", "--mtu", tc.mtu, path)
			if code != tc.code || !strings.Contains(out, fmt.Sprintf(", %d malformed,", tc.malformed)) {
				t.Fatalf("exit %d, summary %q; want exit %d and %d malformed", code, lastLine(out), tc.code, tc.malformed)
			}
		})
	}
}

// TestCorruptedCapture flips bytes of a real capture in memory and checks
// --check catches each: a payload bit breaks the ICRC, an opcode byte makes
// the packet malformed, the ICRC-covered IP id breaks the ICRC while the
// masked TTL does not.
func TestCorruptedCapture(t *testing.T) {
	data, err := os.ReadFile(capture(t, "write_bw.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	// Frame 20 is the first RDMA WRITE FIRST: 1098 bytes, Ethernet + IPv4
	// + UDP + BTH + RETH then the payload. Find it by its record header.
	off := recordOffset(t, data, 20)
	const eth, ip, udp = 14, 20, 8
	tests := []struct {
		name    string
		at      int // offset in the frame
		xor     byte
		code    int
		want    string
		summary string
	}{
		{"payload bit", eth + ip + udp + 12 + 16 + 100, 0x01, exitCheckFail,
			"   20    1.080996  10.99.0.2:49952       → 10.99.0.3        RC RDMA_WRITE_FIRST          qpn=0x000014 psn=0x4b7ae6 ---  pay=1024  va=0x561cb6110000 rkey=0x0000054c dlen=4096  icrc=BAD(got 0x",
			"0 malformed, 1 bad ICRC"},
		{"opcode", eth + ip + udp, 0x06 ^ 0x1e, exitCheckFail,
			"   20    1.080996  10.99.0.2:49952       → 10.99.0.3        malformed: wire: BTH: unknown opcode (opcode=0x1e qpn=0x000014 psn=0x4b7ae6, 1056 bytes)  icrc=BAD(got 0x",
			"1 malformed, 1 bad ICRC"},
		{"ip id", eth + 5, 0x40, exitCheckFail, "icrc=BAD", "0 malformed, 1 bad ICRC"},
		{"ttl is masked", eth + 8, 0x40, exitOK, "psn=0x4b7ae6 ---  pay=1024  va=0x561cb6110000 rkey=0x0000054c dlen=4096  icrc=ok", "0 malformed, 0 bad ICRC"},
		{"fecn is masked", eth + ip + udp + 4, 0x80, exitOK, "psn=0x4b7ae6 ---  pay=1024  FECN  va=0x561cb6110000", "0 malformed, 0 bad ICRC"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := bytes.Clone(data)
			bad[off+tc.at] ^= tc.xor
			path := filepath.Join(t.TempDir(), "corrupt.pcap")
			if err := os.WriteFile(path, bad, 0o644); err != nil {
				t.Fatal(err)
			}
			code, out, _ := dump(t, "--check", path)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, head(out, 2))
			}
			if !strings.Contains(lastLine(out), tc.summary) {
				t.Errorf("summary %q lacks %q", lastLine(out), tc.summary)
			}
			if tc.code == exitCheckFail && !regexp.MustCompile(`icrc=BAD\(got 0x[0-9a-f]{8}, want 0x[0-9a-f]{8}\)`).MatchString(out) {
				t.Errorf("no icrc=BAD(got, want) in the output")
			}
		})
	}
}

// recordOffset returns the file offset of frame n's data (1-based) in a
// little-endian pcap file.
func recordOffset(t *testing.T, data []byte, n int) int {
	t.Helper()
	off := 24
	for i := 1; ; i++ {
		if off+16 > len(data) {
			t.Fatalf("frame %d not found", n)
		}
		capLen := int(data[off+8]) | int(data[off+9])<<8 | int(data[off+10])<<16 | int(data[off+11])<<24
		if i == n {
			return off + 16
		}
		off += 16 + capLen
	}
}

func TestUnreadableFiles(t *testing.T) {
	data, err := os.ReadFile(capture(t, "write_lat.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Cut inside frame 25 (a RoCEv2 packet): frames 23 and 24 are printed,
	// then the error.
	rec25 := recordOffset(t, data, 25)
	cut := write("cut.pcap", data[:rec25+50])
	tests := []struct {
		name    string
		path    string
		stderr  string
		packets int
	}{
		{"truncated", cut, fmt.Sprintf("goroce-dump: %s: pcap: truncated: record 25 at offset %d: 50 of 138 captured bytes present\n", cut, rec25-16), 2},
		{"missing", filepath.Join(dir, "nope.pcap"), "no such file or directory\n", 0},
		{"empty", write("empty.pcap", nil), "pcap: truncated: empty file\n", 0},
		{"pcapng", write("x.pcapng", []byte{0x0a, 0x0d, 0x0d, 0x0a, 0x1c, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a}), "pcapng", 0},
		{"text", write("notes.txt", []byte("not a capture at all")), "not a classic pcap file", 0},
		{"link type", write("dlt.pcap", linkTypeHeader(147)), "unsupported link type: LINKTYPE(147)\n", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := dump(t, "--check", tc.path)
			if code != exitUsageOrIO {
				t.Errorf("exit %d, want %d", code, exitUsageOrIO)
			}
			if strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, tc.stderr) || !strings.HasPrefix(stderr, "goroce-dump: "+tc.path+": ") {
				t.Errorf("stderr %q, want one line about %s containing %q", stderr, tc.path, tc.stderr)
			}
			if n := strings.Count(out, "icrc=ok"); n != tc.packets {
				t.Errorf("%d packets printed before the error, want %d", n, tc.packets)
			}
			// The summary still comes, so a script sees what was checked.
			if !strings.HasPrefix(lastLine(out), "check: ") {
				t.Errorf("no summary line: %q", lastLine(out))
			}
		})
	}
}

func linkTypeHeader(lt uint32) []byte {
	return []byte{0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0,
		byte(lt), byte(lt >> 8), 0, 0}
}

func TestUsage(t *testing.T) {
	path := capture(t, "ud_pingpong.pcap")
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no files", nil, exitUsageOrIO, "no capture file given"},
		{"help", []string{"-h"}, exitOK, "usage: goroce-dump"},
		{"unknown flag", []string{"--frobnicate", path}, exitUsageOrIO, "flag provided but not defined"},
		{"bad mtu", []string{"--mtu", "1500", path}, exitUsageOrIO, "--mtu 1500: not an InfiniBand MTU"},
		{"bad port", []string{"--port", "70000", path}, exitUsageOrIO, "--port 70000"},
		{"octal-looking qpn", []string{"--qpn", "014", path}, exitUsageOrIO, `QPN "014": write hexadecimal with 0x`},
		{"qpn too big", []string{"--qpn", "0x1000000", path}, exitUsageOrIO, "not a 24-bit number"},
		{"flags after the file", []string{path, "--check"}, exitOK, ""},
		{"file after --", []string{"--check", "--", path}, exitOK, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := dump(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.stderr)
			}
		})
	}
	// --port moves the RoCEv2 port: nothing in the capture goes to 4792.
	code, out, _ := dump(t, "--check", "--port", "4792", path)
	if code != exitOK || lastLine(out) != "check: 0 RoCEv2 packets, 0 malformed, 0 bad ICRC, 20 other frames skipped: OK" {
		t.Errorf("--port 4792: exit %d, %q", code, lastLine(out))
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func head(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	return strings.Join(lines[:min(n, len(lines))], "")
}

func grep(s, pattern string) string {
	re := regexp.MustCompile(pattern)
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if re.MatchString(l) {
			b.WriteString(l)
		}
	}
	return b.String()
}
