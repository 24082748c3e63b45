package pingpong

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/oob"
	"github.com/goroce/goroce/verbs"
)

// udLocalLine is ibv_ud_pingpong's local address line, with its colon.
var udLocalLine = regexp.MustCompile(`^  local address:  LID 0x([0-9a-f]{4}), QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6}): GID (\S+)$`)

// multiReport is a successful run's stdout, parsed, for any transport:
// n local lines, n remote lines, the two result lines and the rest.
type multiReport struct {
	local, remote [][]string // per QP: LID, QPN, PSN, GID as printed
	bytes, iters  int
	extra         []string
}

func parseMultiReport(t *testing.T, tr Transport, who, stdout string, n int) multiReport {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) < 2*n+2 {
		t.Fatalf("%s: %d lines of output, want %d or more:\n%s", who, len(lines), 2*n+2, stdout)
	}
	var r multiReport
	for i := range 2 * n {
		var m []string
		switch {
		case i < n && tr == UD:
			if m = udLocalLine.FindStringSubmatch(lines[i]); m != nil {
				m = append([]string{m[0], "local address: "}, m[1:]...)
			}
		default:
			m = addressLine.FindStringSubmatch(lines[i])
		}
		want := "local address: "
		if i >= n {
			want = "remote address:"
		}
		if m == nil || m[1] != want {
			t.Fatalf("%s: line %d %q is not a %s line", who, i+1, lines[i], want)
		}
		if i < n {
			r.local = append(r.local, m[2:])
		} else {
			r.remote = append(r.remote, m[2:])
		}
	}
	m := bytesLine.FindStringSubmatch(lines[2*n])
	if m == nil {
		t.Fatalf("%s: line %q is not the bytes line", who, lines[2*n])
	}
	r.bytes, _ = strconv.Atoi(m[1])
	if m = itersLine.FindStringSubmatch(lines[2*n+1]); m == nil {
		t.Fatalf("%s: line %q is not the iters line", who, lines[2*n+1])
	}
	r.iters, _ = strconv.Atoi(m[1])
	r.extra = lines[2*n+2:]
	return r
}

// runPair runs a server and a client of tr with args on both sides and
// returns their outcomes.
func runPair(t *testing.T, tr Transport, srvArgs, cliArgs []string) (srv, cli outcome) {
	t.Helper()
	hostPort, done := startServer(t, &program{transport: tr}, srvArgs)
	cli = runProgram(context.Background(), &program{transport: tr}, clientArgs(t, hostPort, cliArgs...))
	return wait(t, done, "server"), cli
}

// TestTransports runs every transport between two goroce processes' worth
// of devices and checks both reports: one address line per QP each way,
// crossing, and the byte and iteration counts.
func TestTransports(t *testing.T) {
	for _, tc := range []struct {
		tr   Transport
		args []string
		size int
		iter int
		qps  int
	}{
		{UC, []string{"-n", "20", "-c"}, 4096, 20, 1},
		{UC, []string{"-n", "10", "-e", "-c", "-s", "10000", "-m", "512"}, 10000, 10, 1},
		{UC, []string{"-n", "30", "-s", "1", "-r", "2"}, 1, 30, 1},
		{UD, []string{"-n", "20", "-c"}, 1024, 20, 1},
		{UD, []string{"-n", "20", "-e", "-c", "-s", "4096"}, 4096, 20, 1}, // the loopback MTU
		{UD, []string{"-n", "25", "-s", "1", "-r", "3", "-l", "2"}, 1, 25, 1},
		{SRQ, []string{"-n", "64", "-c"}, 4096, 64, 16},
		{SRQ, []string{"-n", "40", "-q", "4", "-r", "4", "-e", "-c", "-s", "9000"}, 9000, 40, 4},
		{SRQ, []string{"-n", "10", "-q", "1", "-s", "100"}, 100, 10, 1},
	} {
		t.Run(fmt.Sprintf("%s %s", tc.tr.Command(), strings.Join(tc.args, " ")), func(t *testing.T) {
			srv, cli := runPair(t, tc.tr, tc.args, tc.args)
			wantSuccess(t, srv, cli)
			s := parseMultiReport(t, tc.tr, "server", srv.stdout, tc.qps)
			c := parseMultiReport(t, tc.tr, "client", cli.stdout, tc.qps)
			if fmt.Sprint(s.local) != fmt.Sprint(c.remote) || fmt.Sprint(c.local) != fmt.Sprint(s.remote) {
				t.Errorf("addresses do not cross: server %q/%q, client %q/%q", s.local, s.remote, c.local, c.remote)
			}
			qpns := map[string]bool{}
			for _, r := range []struct {
				who     string
				addrs   [][]string
				wantGID string
			}{{"server", s.local, "::ffff:" + serverAddr}, {"client", c.local, "::ffff:" + clientAddr}} {
				for _, a := range r.addrs {
					if a[0] != "0000" || a[3] != r.wantGID || a[1] == "000000" || qpns[r.who+a[1]] {
						t.Errorf("%s local address %q: want LID 0, a new QPN and GID %s", r.who, a, r.wantGID)
					}
					qpns[r.who+a[1]] = true
				}
			}
			for _, r := range []multiReport{s, c} {
				if r.bytes != 2*tc.size*tc.iter || r.iters != tc.iter || len(r.extra) != 0 {
					t.Errorf("report %+v: want %d bytes, %d iters and nothing else", r, 2*tc.size*tc.iter, tc.iter)
				}
			}
		})
	}
}

// TestTransportCheckDetectsMissingPattern: a server with -c and a client
// without: the server finds no pattern in any page (with UD, in the
// message after the GRH), for every transport whose buffer is not zeros.
func TestTransportCheckDetectsMissingPattern(t *testing.T) {
	for _, tr := range []Transport{RC, UC, UD} {
		t.Run(tr.Command(), func(t *testing.T) {
			size := 10000
			if tr == UD {
				size = 4096
			}
			args := []string{"-n", "3", "-s", strconv.Itoa(size)}
			srv, cli := runPair(t, tr, append(args, "-c"), args)
			if cli.code != 0 {
				t.Errorf("client: exit %d, stderr %q", cli.code, cli.stderr)
			}
			r := parseMultiReport(t, tr, "server", srv.stdout, 1)
			var want []string
			for page := 0; page*os.Getpagesize() < size; page++ {
				want = append(want, fmt.Sprintf("invalid data in page %d", page))
			}
			if strings.Join(r.extra, "|") != strings.Join(want, "|") {
				t.Errorf("server extra lines %q, want %q", r.extra, want)
			}
			if srv.code != 1 || !strings.Contains(srv.stderr, "invalid data") {
				t.Errorf("server: exit %d, stderr %q", srv.code, srv.stderr)
			}
		})
	}
}

// TestUDSizeAboveMTU: a UD message must fit the port's active MTU (4096
// on loopback); the error comes before any peer is involved.
func TestUDSizeAboveMTU(t *testing.T) {
	o := runProgram(context.Background(), &program{transport: UD}, []string{"--bind", serverAddr, "-s", "4097"})
	if o.code != 1 || o.stderr != "goroce-ud-pingpong: requested size larger than port MTU (4096)\n" || o.stdout != "" {
		t.Errorf("exit %d, stdout %q, stderr %q", o.code, o.stdout, o.stderr)
	}
}

// TestSRQQPCountMismatch: sides with different -q fail at the exchange,
// the server without answering.
func TestSRQQPCountMismatch(t *testing.T) {
	srv, cli := runPair(t, SRQ, []string{"-n", "5", "-q", "4"}, []string{"-n", "5", "-q", "3"})
	oneLineErrorFrom(t, "goroce-srq-pingpong", "server", srv, "the peer has 3 QPs and we have 4: run both sides with the same -q")
	oneLineErrorFrom(t, "goroce-srq-pingpong", "client", cli, "EOF")
}

// TestSRQBadPeer runs an SRQ client against misbehaving servers.
func TestSRQBadPeer(t *testing.T) {
	answer := func(dests []oob.PingpongDest) func(nc net.Conn) {
		return func(nc net.Conn) {
			io.ReadFull(nc, make([]byte, oob.PingpongSRQMaxQP*oob.PingpongMsgSize))
			var b []byte
			for i := range oob.PingpongSRQMaxQP {
				var d oob.PingpongDest
				if i < len(dests) {
					d = dests[i]
				}
				b = oob.AppendPingpongDest(b, d)
			}
			nc.Write(b)
			io.Copy(io.Discard, nc)
		}
	}
	gid := verbs.GIDFromAddr(netip.MustParseAddr(serverAddr))
	dest := func(qpn uint32) oob.PingpongDest { return oob.PingpongDest{QPN: qpn, PSN: 1, GID: gid} }
	for _, tc := range []struct {
		name string
		talk func(nc net.Conn)
		want string
	}{
		{"one message", func(nc net.Conn) {
			io.ReadFull(nc, make([]byte, oob.PingpongSRQMaxQP*oob.PingpongMsgSize))
			nc.Write(oob.AppendPingpongDest(nil, dest(0x11)))
		}, "remote address 1"},
		{"gap", answer([]oob.PingpongDest{dest(0x11), {}, dest(0x12)}), "gap at QP 1"},
		{"more QPs", answer([]oob.PingpongDest{dest(0x11), dest(0x12), dest(0x13)}), "the peer has 3 QPs and we have 2"},
		{"no GID", answer([]oob.PingpongDest{{QPN: 0x11}, {QPN: 0x12}}), "the peer sent no GID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hostPort := fakeServer(t, tc.talk)
			o := runProgram(context.Background(), &program{transport: SRQ, exchangeTimeout: time.Second}, clientArgs(t, hostPort, "-n", "5", "-q", "2"))
			oneLineErrorFrom(t, "goroce-srq-pingpong", "client", o, tc.want)
		})
	}
}

// oneLineErrorFrom checks a failed run of command: exit status 1 and one
// line on stderr containing want.
func oneLineErrorFrom(t *testing.T, command, who string, o outcome, want string) {
	t.Helper()
	if o.code != 1 || strings.Count(o.stderr, "\n") != 1 || !strings.HasPrefix(o.stderr, command+": ") || !strings.Contains(o.stderr, want) {
		t.Errorf("%s: exit %d, stderr %q; want 1 and one line with %q", who, o.code, o.stderr, want)
	}
}

func TestParseArgsTransports(t *testing.T) {
	for _, tc := range []struct {
		tr   Transport
		args []string
		want func(*options) bool
		err  string
	}{
		{UD, nil, func(o *options) bool { return o.size == 1024 && o.numQP == 1 && o.mtu == verbs.MTU1024 }, ""},
		{UD, []string{"-m", "1024"}, nil, "-m"},
		{UD, []string{"--mtu=2048"}, nil, "-mtu"},
		{UD, []string{"-q", "2"}, nil, "-q"},
		{UC, nil, func(o *options) bool { return o.size == 4096 && o.numQP == 1 }, ""},
		{UC, []string{"-q", "2"}, nil, "-q"},
		{RC, []string{"--num-qp", "2"}, nil, "-num-qp"},
		{SRQ, nil, func(o *options) bool { return o.size == 4096 && o.numQP == 16 && o.rxDepth == 500 }, ""},
		{SRQ, []string{"--num-qp=255", "-m", "4096", "h"}, func(o *options) bool { return o.numQP == 255 && o.host == "h" && o.mtu == verbs.MTU4096 }, ""},
		{SRQ, []string{"-q", "256"}, nil, "--num-qp 256: want 1 to 255"},
		{SRQ, []string{"-q", "0"}, nil, "--num-qp 0"},
		{SRQ, []string{"-q", "20", "-r", "19"}, nil, "--rx-depth 19 is too small for 20 QPs"},
		{SRQ, []string{"-q", "20", "-r", "20"}, func(o *options) bool { return o.numQP == 20 && o.rxDepth == 20 }, ""},
	} {
		t.Run(tc.tr.Command()+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			o, err := parseArgs(tc.tr, tc.args)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.transport != tc.tr || !tc.want(o) {
				t.Errorf("got %+v", *o)
			}
		})
	}
}

// TestUsageTransports: each command's usage names it and lists the options
// its example has.
func TestUsageTransports(t *testing.T) {
	for _, tc := range []struct {
		tr          Transport
		has, hasNot []string
	}{
		{RC, []string{"goroce-pingpong <host>", "--mtu", "(default 4096)"}, []string{"--num-qp"}},
		{UC, []string{"goroce-uc-pingpong <host>", "--mtu"}, []string{"--num-qp"}},
		{UD, []string{"goroce-ud-pingpong <host>", "(default 1024)"}, []string{"--mtu", "--num-qp"}},
		{SRQ, []string{"goroce-srq-pingpong <host>", "--mtu", "--num-qp=<num>     number of QPs to use (default 16)"}, nil},
	} {
		var out, errOut bytes.Buffer
		if code := Run(context.Background(), tc.tr, []string{"-h"}, &out, &errOut); code != 0 || errOut.Len() != 0 {
			t.Errorf("%v -h: exit %d, stderr %q", tc.tr.Command(), code, errOut.String())
		}
		for _, s := range tc.has {
			if !strings.Contains(out.String(), s) {
				t.Errorf("%v usage lacks %q", tc.tr.Command(), s)
			}
		}
		for _, s := range tc.hasNot {
			if strings.Contains(out.String(), s) {
				t.Errorf("%v usage has %q", tc.tr.Command(), s)
			}
		}
	}
	var out, errOut bytes.Buffer
	if code := Run(context.Background(), Transport(9), nil, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "Transport(9)") {
		t.Errorf("unknown transport: exit %d, stderr %q", code, errOut.String())
	}
}
