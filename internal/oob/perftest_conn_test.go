package oob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
)

// recConn records the size of every Write call, to check that each block
// goes out in one write(2) as the C programs expect.
type recConn struct {
	net.Conn
	mu     sync.Mutex
	writes []int
}

func (c *recConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.writes = append(c.writes, len(b))
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *recConn) writeSizes() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.writes...)
}

// expectedWrites returns the Write sizes of one side running steps with
// the given options toward a peer announcing 6.06 or later.
func expectedWrites(steps []PerftestStep, f KeyFormat, perPort, done bool) []int {
	var s []int
	for _, st := range steps {
		switch st.Op {
		case OpVersions:
			s = append(s, 16)
		case OpSysData:
			s = append(s, 4, 4)
		case OpMTU:
			s = append(s, 2)
		case OpDest, OpBarrier:
			s = append(s, f.Size())
		case OpReport:
			s = append(s, BWReportLayout{PerPort: perPort}.fieldSizes()...)
		case OpClose:
			s = append(s, f.Size())
			if done {
				s = append(s, 5)
			}
		}
	}
	return s
}

func qpDests(side byte, n int) []Dest {
	ds := make([]Dest, n)
	for i := range ds {
		ds[i] = Dest{
			LID: uint16(side), OutReads: 1, QPN: uint32(side)<<16 | uint32(i), PSN: uint32(side)<<12 | uint32(i),
			RKey: 0xabc00000 | uint32(i), VAddr: 0x7f0000000000 + uint64(i)<<20, TailMarkersVAddr: uint64(side),
			GID: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: side}, SRQN: uint32(i),
		}
	}
	return ds
}

// TestPerftestRunBothSides runs our client against our server for every
// program, with one and three QPs, in every key format: each side must see
// the other's QPs, agree on the parameters, get the report where there is
// one, and write exactly the blocks the sequence says, one Write each.
func TestPerftestRunBothSides(t *testing.T) {
	kinds := []PerftestKind{WriteBW, ReadBW, AtomicBW, SendBW, WriteLat, ReadLat, AtomicLat, SendLat}
	type variant struct {
		qps     int
		format  KeyFormat
		perPort bool
		version string // of both sides
	}
	variants := []variant{
		{1, KeyFormatGID, false, ""},
		{3, KeyFormatGID, false, "6.27"},
		{2, KeyFormatLID, true, "5.70"},
		{1, KeyFormatGIDDataValidation, false, "6.17"},
		{2, KeyFormatLIDDataValidation, true, ""},
	}
	for _, kind := range kinds {
		for _, v := range variants {
			name := fmt.Sprintf("%v/q%d/%v/perport=%v/%s", kind, v.qps, v.format, v.perPort, v.version)
			t.Run(name, func(t *testing.T) {
				ce, se := tcpPair(t)
				rc, rs := &recConn{Conn: ce}, &recConn{Conn: se}
				cfg := PerftestConfig{Version: v.version, KeyFormat: v.format, ReportPerPort: v.perPort}
				cfg.Role = Client
				client, err := NewPerftestConn(rc, cfg)
				if err != nil {
					t.Fatal(err)
				}
				cfg.Role = Server
				server, err := NewPerftestConn(rs, cfg)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				plan := func(side byte, sys SysData, mtu ibv.MTU, report BWReport, connected *[]Dest) PerftestPlan {
					return PerftestPlan{
						Kind: kind, SysData: sys, MTU: mtu,
						Init: func(_ context.Context, a PerftestAgreement) ([]Dest, error) {
							if a.SysData != (SysData{65536, 128}) || a.MTU != ibv.MTU1024 {
								return nil, fmt.Errorf("agreement %+v", a)
							}
							return qpDests(side, v.qps), nil
						},
						Connect: func(_ context.Context, remote []Dest) error {
							*connected = remote
							return nil
						},
						Traffic: func(context.Context) (BWReport, error) { return report, nil },
					}
				}
				cReport := BWReport{Size: 65536, Iters: 1000, BWPeak: 11.5, BWAvg: 10.25, MsgRateAvg: 0.0002, BWAvgP1: 5, MsgRateAvgP2: 7}
				var cConnected, sConnected []Dest
				var sRes PerftestResult
				wait := peer(func() error {
					var err error
					sRes, err = server.Run(ctx, plan('s', SysData{4096, 128}, ibv.MTU1024, BWReport{}, &sConnected))
					return err
				})
				cRes, err := client.Run(ctx, plan('c', SysData{65536, 64}, ibv.MTU4096, cReport, &cConnected))
				if err != nil {
					t.Fatalf("client: %v (server: %v)", err, wait())
				}
				if err := wait(); err != nil {
					t.Fatalf("server: %v", err)
				}
				wantC, wantS := qpDests('c', v.qps), qpDests('s', v.qps)
				if !v.format.hasTailMarkers() {
					for i := range wantC {
						wantC[i].TailMarkersVAddr, wantS[i].TailMarkersVAddr = 0, 0
					}
				}
				if !v.format.hasGID() {
					for i := range wantC {
						wantC[i].GID, wantS[i].GID = [16]byte{}, [16]byte{}
					}
				}
				if fmt.Sprint(cRes.Remote) != fmt.Sprint(wantS) || fmt.Sprint(cConnected) != fmt.Sprint(wantS) {
					t.Errorf("client got %+v / connected %+v, want %+v", cRes.Remote, cConnected, wantS)
				}
				if fmt.Sprint(sRes.Remote) != fmt.Sprint(wantC) || fmt.Sprint(sConnected) != fmt.Sprint(wantC) {
					t.Errorf("server got %+v / connected %+v, want %+v", sRes.Remote, sConnected, wantC)
				}
				wantVersion := v.version
				if wantVersion == "" {
					wantVersion = DefaultPerftestVersion
				}
				if cRes.RemoteVersion != wantVersion || sRes.RemoteVersion != wantVersion {
					t.Errorf("remote versions %q %q", cRes.RemoteVersion, sRes.RemoteVersion)
				}
				hasReport := kind == WriteBW || kind == ReadBW || kind == AtomicBW
				if sRes.HasReport != hasReport || cRes.HasReport != hasReport {
					t.Errorf("HasReport %v %v, want %v", cRes.HasReport, sRes.HasReport, hasReport)
				}
				if hasReport {
					want := cReport
					if !v.perPort {
						want.BWAvgP1, want.MsgRateAvgP2 = 0, 0
					}
					if sRes.Report != want {
						t.Errorf("server got report %+v, want %+v", sRes.Report, want)
					}
					if cRes.Report != (BWReport{}) {
						t.Errorf("client got report %+v", cRes.Report)
					}
				}
				steps, err := PerftestSequence(kind, v.qps)
				if err != nil {
					t.Fatal(err)
				}
				ver, _ := parseVersion(wantVersion)
				want := expectedWrites(steps, v.format, v.perPort, ver < versionNoDone)
				for side, rc := range map[string]*recConn{"client": rc, "server": rs} {
					if got := rc.writeSizes(); fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("%s wrote %v, want %v", side, got, want)
					}
				}
			})
		}
	}
}

// versionPrefix is what a well-behaved 6.06 peer sends before the first
// key line, as the server would (the same bytes either way).
func versionPrefix() []byte {
	b := appendVersionBlock(nil, "6.06")
	b = appendSysData(b, SysData{4096, 64})
	return appendMTUBlock(b, ibv.MTU1024, 2)
}

// preamble runs the steps before the first key line on c.
func preamble(ctx context.Context, c *PerftestConn) error {
	if _, err := c.ExchangeVersions(ctx); err != nil {
		return err
	}
	if _, err := c.ExchangeSysData(ctx, SysData{4096, 64}); err != nil {
		return err
	}
	_, err := c.ExchangeMTU(ctx, ibv.MTU1024)
	return err
}

// TestPerftestBadPeer feeds both roles a peer that misbehaves at various
// points: each case must end with a one-line error of the expected kind,
// promptly, and the connection must then refuse further exchanges.
func TestPerftestBadPeer(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	garbageLine := random(108)
	garbageLine[107] = 0 // NUL-terminated but not a key line
	tests := []struct {
		name string
		// send is what the peer sends, all at once; then it closes its
		// sending side if close, and otherwise goes silent. Either way it
		// keeps reading, so that our writes never fail.
		send  []byte
		close bool
		// want is matched with errors.Is.
		want error
		// inPreamble: the failure comes before the first key line.
		inPreamble bool
	}{
		{"close at once", nil, true, io.EOF, true},
		{"random version", random(16), false, ErrMalformed, true},
		{"version without NUL", []byte("6.066666666666666"), false, ErrMalformed, true},
		{"old version", appendVersionBlock(nil, "5.60"), false, ErrIncompatibleVersion, true},
		{"short version then close", []byte("6.06\x00\x00"), true, io.ErrUnexpectedEOF, true},
		{"bad sysdata", append(appendVersionBlock(nil, "6.06"), 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 64), false, ErrMalformed, true},
		{"bad MTU", append(appendSysData(appendVersionBlock(nil, "6.06"), SysData{4096, 64}), '9', 0), false, ErrMalformed, true},
		{"close after MTU", versionPrefix(), true, io.EOF, false},
		{"random key line", append(versionPrefix(), random(108)...), false, ErrMalformed, false},
		{"NUL-terminated garbage key line", append(versionPrefix(), garbageLine...), false, ErrMalformed, false},
		{"LID key line for GID format", append(versionPrefix(), append(AppendKeyLine(nil, testDest, KeyFormatLID), random(49)...)...), false, ErrMalformed, false},
		{"half a key line then close", append(versionPrefix(), AppendKeyLine(nil, testDest, KeyFormatGID)[:50]...), true, io.ErrUnexpectedEOF, false},
		{"silent", nil, false, context.DeadlineExceeded, true},
		{"silent after version", appendVersionBlock(nil, "6.06"), false, context.DeadlineExceeded, true},
		{"silent before key line", versionPrefix(), false, context.DeadlineExceeded, false},
	}
	for _, tt := range tests {
		for _, role := range []Role{Client, Server} {
			t.Run(tt.name+"/"+role.String(), func(t *testing.T) {
				ce, se := tcpPair(t)
				ours, theirs := ce, se
				if role == Server {
					ours, theirs = se, ce
				}
				wait := peer(func() error {
					// Drain whatever we send, until we close.
					drained := peer(func() error {
						_, err := io.Copy(io.Discard, theirs)
						return err
					})
					if _, err := theirs.Write(tt.send); err != nil {
						return err
					}
					if tt.close {
						if err := theirs.(*net.TCPConn).CloseWrite(); err != nil {
							return err
						}
					}
					return drained()
				})
				defer func() {
					ours.Close()
					if err := wait(); err != nil && !isReset(err) {
						t.Errorf("peer: %v", err)
					}
				}()
				c, err := NewPerftestConn(ours, PerftestConfig{Role: role})
				if err != nil {
					t.Fatal(err)
				}
				timeout := 20 * time.Second
				if tt.want == context.DeadlineExceeded {
					timeout = 100 * time.Millisecond
				}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				err = preamble(ctx, c)
				if err == nil {
					if tt.inPreamble {
						t.Fatal("preamble succeeded")
					}
					_, err = c.ExchangeDest(ctx, testDest)
				} else if !tt.inPreamble {
					t.Fatalf("preamble: %v", err)
				}
				checkOneLine(t, err)
				if !errors.Is(err, tt.want) {
					t.Fatalf("error %q, want %v", err, tt.want)
				}
				if !strings.HasPrefix(err.Error(), "oob: perftest "+role.String()+": ") {
					t.Errorf("error %q lacks the prefix", err)
				}
				// Sticky: the streams are out of step now.
				if _, err2 := c.ExchangeDest(context.Background(), testDest); err2 != err {
					t.Errorf("next exchange: %v, want the first error", err2)
				}
				if err2 := c.Close(context.Background()); err2 != err {
					t.Errorf("Close: %v, want the first error", err2)
				}
			})
		}
	}
}

// TestPerftestCancel cancels the context while our side waits for a silent
// peer.
func TestPerftestCancel(t *testing.T) {
	ce, se := tcpPair(t)
	c, err := NewPerftestConn(ce, PerftestConfig{Role: Client})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// The peer cancels once our version has reached it, so our side is
	// then blocked reading the answer.
	wait := peer(func() error {
		if _, err := readExactly(se, 16); err != nil {
			return err
		}
		cancel()
		return nil
	})
	_, err = c.ExchangeVersions(ctx)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	checkOneLine(t, err)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	// An already-cancelled context does no I/O.
	c2, _ := NewPerftestConn(se, PerftestConfig{Role: Server})
	if _, err := c2.ExchangeVersions(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
}

// TestPerftestFragmentedPeer has the peer send its blocks one byte at a
// time: TCP may split them, and reads must gather them.
func TestPerftestFragmentedPeer(t *testing.T) {
	for _, role := range []Role{Client, Server} {
		t.Run(role.String(), func(t *testing.T) {
			ce, se := tcpPair(t)
			ours, theirs := ce, se
			if role == Server {
				ours, theirs = se, ce
			}
			peerBytes := append(versionPrefix(), AppendKeyLine(nil, testDest, KeyFormatGID)...)
			wait := peer(func() error {
				go io.Copy(io.Discard, theirs)
				for i := range peerBytes {
					if _, err := theirs.Write(peerBytes[i : i+1]); err != nil {
						return err
					}
				}
				return nil
			})
			c, err := NewPerftestConn(ours, PerftestConfig{Role: role})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := preamble(ctx, c); err != nil {
				t.Fatal(err)
			}
			d, err := c.ExchangeDest(ctx, testDest)
			if err != nil {
				t.Fatal(err)
			}
			want := testDest
			want.TailMarkersVAddr = 0
			if d != want {
				t.Errorf("got %+v", d)
			}
			if err := wait(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPerftestOrder checks who speaks first: the client's block must be on
// the wire before it reads, and the server must not write before it has
// read the client's.
func TestPerftestOrder(t *testing.T) {
	t.Run("client writes first", func(t *testing.T) {
		ce, se := tcpPair(t)
		c, _ := NewPerftestConn(ce, PerftestConfig{Role: Client})
		wait := peer(func() error {
			b, err := readExactly(se, 16)
			if err != nil {
				return err
			}
			if !bytes.Equal(b, appendVersionBlock(nil, DefaultPerftestVersion)) {
				return fmt.Errorf("client sent %q", b)
			}
			_, err = se.Write(appendVersionBlock(nil, "6.29"))
			return err
		})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		v, err := c.ExchangeVersions(ctx)
		if err != nil || v != "6.29" || c.RemoteVersion() != "6.29" {
			t.Fatalf("ExchangeVersions = %q, %v", v, err)
		}
		if err := wait(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("server reads first", func(t *testing.T) {
		ce, se := tcpPair(t)
		s, _ := NewPerftestConn(se, PerftestConfig{Role: Server})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		// Nobody writes: a server that wrote first would have put its
		// version on the wire before timing out.
		if _, err := s.ExchangeVersions(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ExchangeVersions: %v", err)
		}
		ce.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		var b [16]byte
		if n, err := ce.Read(b[:]); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("server wrote %q before reading (%v)", b[:n], err)
		}
	})
}

// TestPerftestNewerPeer talks to a peer announcing 6.29: since we announce
// less than 6.28 it skips negotiate_params, and so must we; the system data
// follows the version directly.
func TestPerftestNewerPeer(t *testing.T) {
	ce, se := tcpPair(t)
	c, _ := NewPerftestConn(ce, PerftestConfig{Role: Client})
	wait := peer(func() error {
		if _, err := readExactly(se, 16); err != nil {
			return err
		}
		if _, err := se.Write(appendVersionBlock(nil, "6.29")); err != nil {
			return err
		}
		b, err := readExactly(se, 4)
		if err != nil {
			return err
		}
		if !bytes.Equal(b, []byte{0, 0, 0x10, 0}) {
			return fmt.Errorf("after the version we sent %x, want the cycle buffer size", b)
		}
		_, err = se.Write([]byte{0, 1, 0, 0})
		if err != nil {
			return err
		}
		if _, err := readExactly(se, 4); err != nil {
			return err
		}
		_, err = se.Write([]byte{0, 0, 0, 128})
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.ExchangeVersions(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := c.ExchangeSysData(ctx, SysData{4096, 64})
	if err != nil || s != (SysData{65536, 128}) {
		t.Fatalf("ExchangeSysData = %+v, %v", s, err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

// TestPerftestClose checks the closing barrier and the version-dependent
// "done": written when we announce a version before 6.17 only.
func TestPerftestClose(t *testing.T) {
	for _, tt := range []struct {
		version string
		done    bool
	}{{"6.06", true}, {"6.16", true}, {"6.17", false}, {"6.27", false}} {
		for _, role := range []Role{Client, Server} {
			t.Run(tt.version+"/"+role.String(), func(t *testing.T) {
				ce, se := tcpPair(t)
				ours, theirs := ce, se
				if role == Server {
					ours, theirs = se, ce
				}
				c, err := NewPerftestConn(ours, PerftestConfig{Role: role, Version: tt.version})
				if err != nil {
					t.Fatal(err)
				}
				wait := peer(func() error {
					if _, err := theirs.Write(AppendKeyLine(nil, testDest, KeyFormatGID)); err != nil {
						return err
					}
					line, err := readExactly(theirs, 108)
					if err != nil {
						return err
					}
					if _, err := ParseKeyLine(line, KeyFormatGID); err != nil {
						return err
					}
					rest, err := io.ReadAll(theirs)
					if err != nil {
						return err
					}
					if want := map[bool]string{true: "done\x00", false: ""}[tt.done]; string(rest) != want {
						return fmt.Errorf("after the barrier %q, want %q", rest, want)
					}
					return nil
				})
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				if err := c.Close(ctx); err != nil {
					t.Fatal(err)
				}
				if err := wait(); err != nil {
					t.Fatal(err)
				}
				if _, err := c.ExchangeDest(ctx, testDest); !errors.Is(err, net.ErrClosed) {
					t.Errorf("exchange after Close: %v", err)
				}
			})
		}
	}
}

func TestPerftestConfigErrors(t *testing.T) {
	ce, _ := tcpPair(t)
	for _, cfg := range []PerftestConfig{
		{},
		{Role: 3},
		{Role: Client, Version: "6.28"},
		{Role: Client, Version: "5.5"},
		{Role: Server, Version: "six"},
		{Role: Server, KeyFormat: 6},
	} {
		if _, err := NewPerftestConn(ce, cfg); err == nil {
			t.Errorf("NewPerftestConn(%+v) succeeded", cfg)
		} else {
			checkOneLine(t, err)
		}
	}
	c, _ := NewPerftestConn(ce, PerftestConfig{Role: Client})
	if _, err := c.ExchangeSysData(context.Background(), SysData{4096, 64}); !errors.Is(err, errNoVersion) {
		t.Errorf("ExchangeSysData before the versions: %v", err)
	}
	if _, err := c.ExchangeDest(context.Background(), Dest{QPN: 1 << 24}); err == nil {
		t.Error("ExchangeDest accepted a 25-bit QPN")
	}
}

// TestPerftestRunCallbackErrors checks that Run stops at a failing callback,
// returns its error and closes the connection, so the peer sees EOF.
func TestPerftestRunCallbackErrors(t *testing.T) {
	boom := errors.New("boom")
	for _, failAt := range []string{"init", "empty init", "connect", "prepare", "traffic"} {
		t.Run(failAt, func(t *testing.T) {
			ce, se := tcpPair(t)
			client, _ := NewPerftestConn(ce, PerftestConfig{Role: Client})
			server, _ := NewPerftestConn(se, PerftestConfig{Role: Server})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ok := PerftestPlan{
				Kind: SendBW, SysData: SysData{4096, 64}, MTU: ibv.MTU1024,
				Init:    func(context.Context, PerftestAgreement) ([]Dest, error) { return qpDests('s', 1), nil },
				Connect: func(context.Context, []Dest) error { return nil },
			}
			bad := ok
			bad.Init = func(context.Context, PerftestAgreement) ([]Dest, error) {
				switch failAt {
				case "init":
					return nil, boom
				case "empty init":
					return nil, nil
				}
				return qpDests('c', 1), nil
			}
			bad.Connect = func(context.Context, []Dest) error {
				if failAt == "connect" {
					return boom
				}
				return nil
			}
			bad.Prepare = func(context.Context) error {
				if failAt == "prepare" {
					return boom
				}
				return nil
			}
			bad.Traffic = func(context.Context) (BWReport, error) {
				if failAt == "traffic" {
					return BWReport{}, boom
				}
				return BWReport{}, nil
			}
			wait := peer(func() error {
				_, err := server.Run(ctx, ok)
				return err
			})
			_, err := client.Run(ctx, bad)
			checkOneLine(t, err)
			if failAt != "empty init" && !errors.Is(err, boom) {
				t.Errorf("Run: %v, want boom", err)
			}
			if !strings.Contains(err.Error(), strings.Fields(failAt)[len(strings.Fields(failAt))-1]) {
				t.Errorf("error %q does not name the step", err)
			}
			if err := wait(); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !isReset(err) {
				t.Errorf("server: %v, want EOF", err)
			}
		})
	}
	ce, _ := tcpPair(t)
	c, _ := NewPerftestConn(ce, PerftestConfig{Role: Client})
	if _, err := c.Run(context.Background(), PerftestPlan{Kind: WriteBW}); err == nil {
		t.Error("Run without callbacks succeeded")
	}
}

func TestPerftestSequenceArgs(t *testing.T) {
	if _, err := PerftestSequence(0, 1); err == nil {
		t.Error("kind 0 accepted")
	}
	if _, err := PerftestSequence(WriteBW, 0); err == nil {
		t.Error("0 QPs accepted")
	}
	s, err := PerftestSequence(WriteLat, 2)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, st := range s {
		names = append(names, st.String())
	}
	want := "versions sysdata mtu init dest[0] dest[0] dest[1] connect dest[0] dest[1] barrier traffic"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("ib_write_lat -q 2:\n got %s\nwant %s", got, want)
	}
	if WriteBW.String() != "ib_write_bw" || SendLat.String() != "ib_send_lat" || PerftestKind(99).String() != "PerftestKind(99)" {
		t.Error("PerftestKind.String")
	}
	if !OpTraffic.Local() || OpBarrier.Local() || PerftestOp(0).String() != "PerftestOp(0)" {
		t.Error("PerftestOp")
	}
}
