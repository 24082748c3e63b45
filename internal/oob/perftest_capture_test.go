package oob

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
)

// perftestCaptures maps each capture of a perftest run to its program.
var perftestCaptures = []struct {
	name string
	kind PerftestKind
}{
	{"write_bw", WriteBW},
	{"read_bw", ReadBW},
	{"send_bw", SendBW},
	{"atomic_fadd", AtomicBW},
	{"atomic_cswap", AtomicBW},
	{"write_lat", WriteLat},
	{"send_lat", SendLat},
}

// keyLines parses every key-line segment the client (or server) sent.
func keyLines(t *testing.T, c oobCapture, fromClient bool) []Dest {
	t.Helper()
	var ds []Dest
	for _, seg := range c.segments {
		if seg.fromClient != fromClient || len(seg.payload) != KeyFormatGID.Size() {
			continue
		}
		d, err := ParseKeyLine(seg.payload, KeyFormatGID)
		if err != nil {
			t.Fatalf("%s frame %d: %v", c.name, seg.frame, err)
		}
		if got := AppendKeyLine(nil, d, KeyFormatGID); !bytes.Equal(got, seg.payload) {
			t.Fatalf("%s frame %d: re-encoded\n%q\nwant\n%q", c.name, seg.frame, got, seg.payload)
		}
		ds = append(ds, d)
	}
	if len(ds) == 0 {
		t.Fatalf("%s: no key line from the %s", c.name, map[bool]string{true: "client", false: "server"}[fromClient])
	}
	return ds
}

// logAddress is one "local address"/"remote address" entry of a perftest
// log; RKey, VAddr and OutReads are printed only by some tests.
type logAddress struct {
	lid, qpn, psn uint64
	outReads      uint64
	hasOut        bool
	rkey, vaddr   uint64
	hasRKey       bool
	gid           [16]byte
	side          string
	lineOfAddr    int
}

var (
	perftestAddrRE = regexp.MustCompile(`(local|remote) address: LID ([0-9a-f]+) QPN 0x([0-9a-f]+) PSN 0x([0-9a-f]+)(?: OUT 0x([0-9a-f]+))?(?: RKey 0x([0-9a-f]+) VAddr 0x([0-9a-f]+))?`)
	perftestGIDRE  = regexp.MustCompile(`^ GID: (\d+(?::\d+){15})$`)
)

// perftestLogAddresses parses the address entries of a perftest log; the
// GID line perftest prints after each has the bytes in decimal.
func perftestLogAddresses(t *testing.T, log string) []logAddress {
	t.Helper()
	lines := strings.Split(log, "\n")
	var out []logAddress
	hex := func(s string) uint64 {
		v, err := strconv.ParseUint(s, 16, 64)
		if err != nil {
			t.Fatalf("log: %v", err)
		}
		return v
	}
	for i, line := range lines {
		m := perftestAddrRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := logAddress{side: m[1], lid: hex(m[2]), qpn: hex(m[3]), psn: hex(m[4]), lineOfAddr: i + 1}
		if m[5] != "" {
			a.outReads, a.hasOut = hex(m[5]), true
		}
		if m[6] != "" {
			a.rkey, a.vaddr, a.hasRKey = hex(m[6]), hex(m[7]), true
		}
		if i+1 >= len(lines) {
			t.Fatalf("log line %d: no GID line", i+1)
		}
		g := perftestGIDRE.FindStringSubmatch(lines[i+1])
		if g == nil {
			t.Fatalf("log line %d: not a GID line: %q", i+2, lines[i+1])
		}
		for j, s := range strings.Split(g[1], ":") {
			v, err := strconv.ParseUint(s, 10, 8)
			if err != nil {
				t.Fatalf("log line %d: %v", i+2, err)
			}
			a.gid[j] = byte(v)
		}
		out = append(out, a)
	}
	return out
}

// TestPerftestCaptureKeyLines parses every key line of the real exchanges,
// checks that they re-encode byte for byte and that each side sent the
// same line every time, and compares the values with what both perftests
// printed for that QP.
func TestPerftestCaptureKeyLines(t *testing.T) {
	for _, pc := range perftestCaptures {
		t.Run(pc.name, func(t *testing.T) {
			c := loadOOBCapture(t, pc.name, DefaultPort)
			addrs := perftestLogAddresses(t, readLog(t, pc.name))
			for _, fromClient := range []bool{true, false} {
				ds := keyLines(t, c, fromClient)
				for _, d := range ds[1:] {
					if d != ds[0] {
						t.Errorf("key lines differ: %+v and %+v", ds[0], d)
					}
				}
				d := ds[0]
				matched := 0
				for _, a := range addrs {
					if a.qpn != uint64(d.QPN) {
						continue
					}
					matched++
					if a.lid != uint64(d.LID) || a.psn != uint64(d.PSN) || a.gid != d.GID {
						t.Errorf("log line %d (%s) %+v disagrees with key line %+v", a.lineOfAddr, a.side, a, d)
					}
					if a.hasRKey && (a.rkey != uint64(d.RKey) || a.vaddr != d.VAddr) {
						t.Errorf("log line %d: RKey %#x VAddr %#x, key line %#x %#x", a.lineOfAddr, a.rkey, a.vaddr, d.RKey, d.VAddr)
					}
					if a.hasOut && a.outReads != uint64(d.OutReads) {
						t.Errorf("log line %d: OUT %#x, key line %#x", a.lineOfAddr, a.outReads, d.OutReads)
					}
				}
				// Each QP appears twice: as local address on its side and
				// remote address on the other.
				if matched != 2 {
					t.Errorf("QPN %#x appears %d times in the log, want 2", d.QPN, matched)
				}
				wantGID := netip.MustParseAddr("::ffff:10.99.0.3").As16()
				if fromClient {
					wantGID = netip.MustParseAddr("::ffff:10.99.0.2").As16()
				}
				if d.GID != wantGID {
					t.Errorf("GID %x, want %x", d.GID, wantGID)
				}
			}
		})
	}
}

// reportBytes returns the 40 report bytes the client (or server) sent: the
// five 8-byte segments before the closing key line.
func reportBytes(t *testing.T, c oobCapture, fromClient bool) []byte {
	t.Helper()
	var b []byte
	for _, seg := range c.segments {
		if seg.fromClient == fromClient && len(seg.payload) == 8 {
			b = append(b, seg.payload...)
		}
	}
	return b
}

var perftestResultRE = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$`)

// TestPerftestCaptureReports parses the client's bandwidth reports from the
// real exchanges and checks them against the result line both sides
// printed (the server prints the report it received); the server's report,
// stack garbage in a one-way test, must parse too.
func TestPerftestCaptureReports(t *testing.T) {
	for _, pc := range perftestCaptures {
		if pc.kind != WriteBW && pc.kind != ReadBW && pc.kind != AtomicBW {
			continue
		}
		t.Run(pc.name, func(t *testing.T) {
			c := loadOOBCapture(t, pc.name, DefaultPort)
			l := layoutFor(6.06, false)
			r, err := ParseBWReport(reportBytes(t, c, true), l)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ParseBWReport(reportBytes(t, c, false), l); err != nil {
				t.Fatalf("server report: %v", err)
			}
			results := perftestResultRE.FindAllStringSubmatch(readLog(t, pc.name), -1)
			if len(results) != 2 {
				t.Fatalf("%d result lines in the log, want 2", len(results))
			}
			got := []string{
				strconv.FormatUint(r.Size, 10), strconv.FormatUint(r.Iters, 10),
				fmt.Sprintf("%.2f", r.BWPeak), fmt.Sprintf("%.2f", r.BWAvg), fmt.Sprintf("%.6f", r.MsgRateAvg),
			}
			for _, m := range results {
				if !slices.Equal(got, m[1:]) {
					t.Errorf("report %v prints as %q, log has %q", r, got, m[1:])
				}
			}
			if re := AppendBWReport(nil, r, l); !bytes.Equal(re, reportBytes(t, c, true)) {
				t.Errorf("report re-encodes as %x", re)
			}
		})
	}
}

// blockSizes returns the sizes of the blocks one side writes for steps,
// toward a 6.06 peer, with GID key lines and, since both sides announce
// 6.06, a "done" after the closing barrier.
func blockSizes(steps []PerftestStep) []int {
	var s []int
	for _, st := range steps {
		switch st.Op {
		case OpVersions:
			s = append(s, perftestVersionSize)
		case OpSysData:
			s = append(s, 4, 4)
		case OpMTU:
			s = append(s, 2)
		case OpDest, OpBarrier:
			s = append(s, KeyFormatGID.Size())
		case OpReport:
			s = append(s, layoutFor(6.06, false).fieldSizes()...)
		case OpClose:
			s = append(s, KeyFormatGID.Size(), len(doneMsg))
		}
	}
	return s
}

// TestPerftestSequenceMatchesCaptures checks that the documented sequence of
// each program gives exactly the blocks each side wrote in the capture.
func TestPerftestSequenceMatchesCaptures(t *testing.T) {
	for _, pc := range perftestCaptures {
		t.Run(pc.name, func(t *testing.T) {
			c := loadOOBCapture(t, pc.name, DefaultPort)
			steps, err := PerftestSequence(pc.kind, 1)
			if err != nil {
				t.Fatal(err)
			}
			want := blockSizes(steps)
			for _, fromClient := range []bool{true, false} {
				if got := c.sizes(fromClient); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("client=%v wrote blocks %v, sequence %v gives %v", fromClient, got, steps, want)
				}
			}
		})
	}
}

// fakeSegments plays one side of a captured exchange against our code on
// conn. Segments the played side sent are written as they are; for the
// others it reads as many bytes from conn and hands them to check. The
// played side's closing "done" is written only after reading everything
// ours sends, since nobody reads it; then ours must close.
func fakeSegments(conn io.ReadWriter, segs []tcpSegment, playClient bool, check func(seg tcpSegment, ours []byte) error) error {
	var trailing [][]byte
	for _, seg := range segs {
		if seg.fromClient == playClient {
			if bytes.Equal(seg.payload, doneMsg) {
				trailing = append(trailing, seg.payload)
				continue
			}
			if _, err := conn.Write(seg.payload); err != nil {
				return fmt.Errorf("frame %d: write: %w", seg.frame, err)
			}
			continue
		}
		ours := make([]byte, len(seg.payload))
		if _, err := io.ReadFull(conn, ours); err != nil {
			return fmt.Errorf("frame %d: reading %d bytes: %w", seg.frame, len(ours), err)
		}
		if err := check(seg, ours); err != nil {
			return fmt.Errorf("frame %d: %w", seg.frame, err)
		}
	}
	for _, b := range trailing {
		_, _ = conn.Write(b) // the other side may have closed: "done" is never read
	}
	return expectEOF(conn)
}

// TestPerftestReplay runs our client against the real server's bytes and
// our server against the real client's, for every capture: the fake peer
// writes the real blocks in the real order and checks ours block by block
// (same sizes; version, system data, MTU and "done" identical since we
// announce the same ones; key lines and report parse to our values).
func TestPerftestReplay(t *testing.T) {
	ourDest := Dest{
		OutReads: 0x10, QPN: 0x123456, PSN: 0xabcdef, RKey: 0xdeadbeef,
		VAddr: 0x00007f0011223344, GID: netip.MustParseAddr("::ffff:127.0.0.1").As16(),
	}
	ourReport := BWReport{Size: 4096, Iters: 8, BWPeak: 1.5, BWAvg: 1.25, MsgRateAvg: 0.0003}
	for _, pc := range perftestCaptures {
		for _, role := range []Role{Client, Server} {
			t.Run(pc.name+"/"+role.String(), func(t *testing.T) {
				c := loadOOBCapture(t, pc.name, DefaultPort)
				peerIsClient := role == Server
				realPeer := keyLines(t, c, peerIsClient)[0]
				hasReport := pc.kind == WriteBW || pc.kind == ReadBW || pc.kind == AtomicBW

				clientEnd, serverEnd := tcpPair(t)
				ours, fake := clientEnd, serverEnd
				if role == Server {
					ours, fake = serverEnd, clientEnd
				}
				var ourReportBytes []byte
				wait := peer(func() error {
					defer fake.Close()
					return fakeSegments(fake, c.segments, peerIsClient, func(seg tcpSegment, b []byte) error {
						switch len(seg.payload) {
						case KeyFormatGID.Size():
							d, err := ParseKeyLine(b, KeyFormatGID)
							if err != nil {
								return err
							}
							if d != ourDest {
								return fmt.Errorf("our key line %+v, want %+v", d, ourDest)
							}
						case 8:
							ourReportBytes = append(ourReportBytes, b...)
						default:
							if !bytes.Equal(b, seg.payload) {
								return fmt.Errorf("our block %q, real %q", b, seg.payload)
							}
						}
						return nil
					})
				})

				var steps []string
				conn, err := NewPerftestConn(ours, PerftestConfig{Role: role})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				res, err := conn.Run(ctx, PerftestPlan{
					Kind:    pc.kind,
					SysData: SysData{CycleBuffer: 4096, CacheLineSize: 64},
					MTU:     ibv.MTU1024,
					Init: func(_ context.Context, a PerftestAgreement) ([]Dest, error) {
						steps = append(steps, "init")
						want := PerftestAgreement{RemoteVersion: "6.06", SysData: SysData{4096, 64}, MTU: ibv.MTU1024}
						if a != want {
							return nil, fmt.Errorf("agreement %+v, want %+v", a, want)
						}
						return []Dest{ourDest}, nil
					},
					Connect: func(_ context.Context, remote []Dest) error {
						steps = append(steps, "connect")
						if len(remote) != 1 || remote[0] != realPeer {
							return fmt.Errorf("connect to %+v, want %+v", remote, realPeer)
						}
						return nil
					},
					Prepare: func(context.Context) error {
						steps = append(steps, "prepare")
						return nil
					},
					Traffic: func(context.Context) (BWReport, error) {
						steps = append(steps, "traffic")
						return ourReport, nil
					},
				})
				if err != nil {
					t.Fatalf("Run: %v (fake peer: %v)", err, wait())
				}
				if err := wait(); err != nil {
					t.Fatalf("fake peer: %v", err)
				}
				wantSteps := "init connect traffic"
				if pc.kind == SendBW || pc.kind == SendLat {
					wantSteps = "init connect prepare traffic"
				}
				if got := strings.Join(steps, " "); got != wantSteps {
					t.Errorf("callbacks %q, want %q", got, wantSteps)
				}
				if len(res.Remote) != 1 || res.Remote[0] != realPeer {
					t.Errorf("remote %+v, want %+v", res.Remote, realPeer)
				}
				if res.HasReport != hasReport {
					t.Errorf("HasReport %v, want %v", res.HasReport, hasReport)
				}
				if hasReport {
					want, err := ParseBWReport(reportBytes(t, c, peerIsClient), layoutFor(6.06, false))
					if err != nil {
						t.Fatal(err)
					}
					if !sameReport(res.Report, want) {
						t.Errorf("peer's report %+v, want %+v", res.Report, want)
					}
					if got := AppendBWReport(nil, ourReport, layoutFor(6.06, false)); !bytes.Equal(ourReportBytes, got) {
						t.Errorf("our report bytes %x, want %x", ourReportBytes, got)
					}
				} else if len(ourReportBytes) != 0 {
					t.Errorf("report bytes %x in a test without report", ourReportBytes)
				}
			})
		}
	}
}

// sameReport compares reports bit for bit, so that NaNs from a server's
// uninitialised report compare equal.
func sameReport(a, b BWReport) bool {
	l := BWReportLayout{PerPort: true}
	return bytes.Equal(AppendBWReport(nil, a, l), AppendBWReport(nil, b, l))
}
