package oob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var testPingpongDest = PingpongDest{
	LID: 0x00ab, QPN: 0x000025, PSN: 0xce973c,
	GID: netip.MustParseAddr("::ffff:10.99.0.2").As16(),
}

func TestAppendPingpongDest(t *testing.T) {
	// The client's message from captures/rc_pingpong.pcap, with a LID.
	want := "00ab:000025:ce973c:00000000000000000000ffff0a630002\x00"
	got := AppendPingpongDest([]byte("x"), testPingpongDest)
	if string(got) != "x"+want {
		t.Fatalf("got %q, want %q", got, "x"+want)
	}
	if len(got)-1 != PingpongMsgSize {
		t.Errorf("%d bytes", len(got)-1)
	}
	d, err := ParsePingpongDest([]byte(want))
	if err != nil || d != testPingpongDest {
		t.Errorf("ParsePingpongDest = %+v, %v", d, err)
	}
	// sscanf("%x") takes either case; so do we.
	d, err = ParsePingpongDest(bytes.ToUpper([]byte(want)))
	if err != nil || d != testPingpongDest {
		t.Errorf("upper case: %+v, %v", d, err)
	}
	// Out-of-range values are cut to their field, as the examples' printf
	// would overflow the buffer instead.
	if s := string(AppendPingpongDest(nil, PingpongDest{QPN: 0x1000001, PSN: 0xfffffff})); !strings.HasPrefix(s, "0000:000001:ffffff:") {
		t.Errorf("masking: %q", s)
	}
}

func TestParsePingpongDestErrors(t *testing.T) {
	good := AppendPingpongDest(nil, testPingpongDest)
	mutate := func(off int, c byte) []byte {
		b := bytes.Clone(good)
		b[off] = c
		return b
	}
	tests := []struct {
		name string
		msg  []byte
		want string
	}{
		{"empty", nil, "0 bytes, want 52"},
		{"short", good[:51], "51 bytes"},
		{"long", append(bytes.Clone(good), 'x'), "53 bytes"},
		{"no NUL", mutate(51, '0'), "not NUL-terminated"},
		{"separator", mutate(4, '.'), "':' at byte 4"},
		{"separator 2", mutate(11, 0), "':' at byte 11"},
		{"LID", mutate(1, 'g'), "LID"},
		{"QPN", mutate(5, ' '), "QPN"},
		{"PSN", mutate(17, '-'), "PSN"},
		{"GID", mutate(50, 'z'), "GID"},
		{"GID NUL", mutate(30, 0), "GID"},
		{"perftest key line", AppendKeyLine(nil, Dest{}, KeyFormatGID)[:52], "not NUL-terminated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := ParsePingpongDest(tt.msg)
			checkOneLine(t, err)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want ErrMalformed mentioning %q", err, tt.want)
			}
			if d != (PingpongDest{}) {
				t.Errorf("returned %+v", d)
			}
		})
	}
	for i := range good {
		b := bytes.Clone(good)
		b[i] = '#'
		if _, err := ParsePingpongDest(b); err == nil {
			t.Errorf("accepted '#' at byte %d", i)
		}
	}
}

var pingpongAddrRE = regexp.MustCompile(`(local|remote) address:\s+LID 0x([0-9a-f]+), QPN 0x([0-9a-f]+), PSN 0x([0-9a-f]+)[:,] GID (\S+)`)

// pingpongLogDests parses the addresses the pingpong examples printed.
func pingpongLogDests(t *testing.T, log string) []PingpongDest {
	t.Helper()
	var ds []PingpongDest
	for _, m := range pingpongAddrRE.FindAllStringSubmatch(log, -1) {
		var v [3]uint64
		for i := range v {
			x, err := strconv.ParseUint(m[2+i], 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			v[i] = x
		}
		gid, err := netip.ParseAddr(m[5])
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, PingpongDest{LID: uint16(v[0]), QPN: uint32(v[1]), PSN: uint32(v[2]), GID: gid.As16()})
	}
	if len(ds) != 4 {
		t.Fatalf("%d addresses in the log, want 4", len(ds))
	}
	return ds
}

var pingpongCaptures = []string{"rc_pingpong", "uc_pingpong", "ud_pingpong"}

// TestPingpongCaptures parses both messages of each real exchange, checks
// they re-encode byte for byte and match what both programs printed, and
// that the client ended with "done\0".
func TestPingpongCaptures(t *testing.T) {
	for _, name := range pingpongCaptures {
		t.Run(name, func(t *testing.T) {
			c := loadOOBCapture(t, name, DefaultPort)
			if got := fmt.Sprint(c.sizes(true), c.sizes(false)); got != "[52 5] [52]" {
				t.Fatalf("block sizes %s", got)
			}
			if !bytes.Equal(c.c2s[52:], doneMsg) {
				t.Errorf("client ended with %q", c.c2s[52:])
			}
			logged := pingpongLogDests(t, readLog(t, name))
			for _, stream := range [][]byte{c.c2s[:52], c.s2c} {
				d, err := ParsePingpongDest(stream)
				if err != nil {
					t.Fatal(err)
				}
				if re := AppendPingpongDest(nil, d); !bytes.Equal(re, stream) {
					t.Errorf("re-encoded %q, want %q", re, stream)
				}
				n := 0
				for _, l := range logged {
					if l == d {
						n++
					}
				}
				if n != 2 { // local on one side, remote on the other
					t.Errorf("%+v appears %d times in the log, want 2", d, n)
				}
			}
		})
	}
}

// eventLog records what happened in which order across goroutines.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) add(e string) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func (l *eventLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.events, " ")
}

// logConn adds "write" to an event log on every Write.
type logConn struct {
	net.Conn
	log *eventLog
}

func (c logConn) Write(b []byte) (int, error) {
	c.log.add("write")
	return c.Conn.Write(b)
}

// TestPingpongReplay runs our client against the real server's bytes and
// our server against the real client's, for RC, UC and UD: the fake peer
// writes the real messages in the real order and checks ours.
func TestPingpongReplay(t *testing.T) {
	ours := PingpongDest{LID: 0, QPN: 0x000777, PSN: 0x123456, GID: netip.MustParseAddr("::ffff:127.0.0.1").As16()}
	for _, name := range pingpongCaptures {
		for _, role := range []Role{Client, Server} {
			t.Run(name+"/"+role.String(), func(t *testing.T) {
				c := loadOOBCapture(t, name, DefaultPort)
				playClient := role == Server
				var realPeer PingpongDest
				var err error
				if playClient {
					realPeer, err = ParsePingpongDest(c.c2s[:52])
				} else {
					realPeer, err = ParsePingpongDest(c.s2c)
				}
				if err != nil {
					t.Fatal(err)
				}
				ce, se := tcpPair(t)
				mine, fake := ce, se
				if role == Server {
					mine, fake = se, ce
				}
				wait := peer(func() error {
					defer fake.Close()
					return fakeSegments(fake, c.segments, playClient, func(seg tcpSegment, b []byte) error {
						if len(seg.payload) == PingpongMsgSize {
							d, err := ParsePingpongDest(b)
							if err != nil {
								return err
							}
							if d != ours {
								return fmt.Errorf("our message %+v, want %+v", d, ours)
							}
							return nil
						}
						if !bytes.Equal(b, seg.payload) {
							return fmt.Errorf("we sent %q, real %q", b, seg.payload)
						}
						return nil
					})
				})
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				var got PingpongDest
				events := &eventLog{}
				if role == Client {
					got, err = PingpongClient(ctx, mine, ours)
				} else {
					got, err = PingpongServer(ctx, logConn{mine, events}, ours, func(_ context.Context, r PingpongDest) error {
						events.add("connect")
						if r != realPeer {
							return fmt.Errorf("connect to %+v, want %+v", r, realPeer)
						}
						return nil
					})
				}
				if err != nil {
					t.Fatalf("%v (fake peer: %v)", err, wait())
				}
				mine.Close() // as the examples do after the exchange
				if err := wait(); err != nil {
					t.Fatalf("fake peer: %v", err)
				}
				if got != realPeer {
					t.Errorf("got %+v, want %+v", got, realPeer)
				}
				if role == Server && events.String() != "connect write" {
					t.Errorf("server events %q, want the QP connected before the answer", events)
				}
			})
		}
	}
}

// TestPingpongBadPeer feeds both roles a misbehaving peer.
func TestPingpongBadPeer(t *testing.T) {
	good := AppendPingpongDest(nil, testPingpongDest)
	tests := []struct {
		name  string
		role  Role
		send  []byte
		close bool
		want  error
	}{
		{"client: server closes", Client, nil, true, io.EOF},
		{"client: garbage answer", Client, bytes.Repeat([]byte("zz"), 26), false, ErrMalformed},
		{"client: short answer", Client, good[:20], true, io.ErrUnexpectedEOF},
		{"client: silent server", Client, nil, false, context.DeadlineExceeded},
		{"server: client closes", Server, nil, true, io.EOF},
		{"server: garbage", Server, append(bytes.Repeat([]byte{0xff}, 51), 0), false, ErrMalformed},
		{"server: no done", Server, good, true, io.EOF},
		{"server: short done", Server, append(bytes.Clone(good), "don"...), true, io.ErrUnexpectedEOF},
		{"server: wrong done", Server, append(bytes.Clone(good), "DONE!"...), false, ErrMalformed},
		{"server: silent client", Server, nil, false, context.DeadlineExceeded},
		{"server: silent after message", Server, good, false, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ce, se := tcpPair(t)
			mine, theirs := ce, se
			if tt.role == Server {
				mine, theirs = se, ce
			}
			wait := peer(func() error {
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
			timeout := 20 * time.Second
			if tt.want == context.DeadlineExceeded {
				timeout = 100 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			var err error
			if tt.role == Client {
				_, err = PingpongClient(ctx, mine, testPingpongDest)
			} else {
				_, err = PingpongServer(ctx, mine, testPingpongDest, func(context.Context, PingpongDest) error { return nil })
			}
			mine.Close()
			if werr := wait(); werr != nil && !isReset(werr) {
				t.Errorf("peer: %v", werr)
			}
			checkOneLine(t, err)
			if !errors.Is(err, tt.want) {
				t.Errorf("error %q, want %v", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "oob: pingpong "+tt.role.String()+": ") {
				t.Errorf("error %q lacks the prefix", err)
			}
		})
	}
}

// TestPingpongServerConnectError: when connecting the QP fails, the server
// must not answer, so that the client does not start sending.
func TestPingpongServerConnectError(t *testing.T) {
	ce, se := tcpPair(t)
	boom := errors.New("modify QP failed")
	wait := peer(func() error {
		_, err := PingpongServer(context.Background(), se, testPingpongDest, func(context.Context, PingpongDest) error { return boom })
		se.Close()
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := PingpongClient(ctx, ce, testPingpongDest)
	if !errors.Is(err, io.EOF) && !isReset(err) {
		t.Errorf("client: %v, want EOF", err)
	}
	serr := wait()
	checkOneLine(t, serr)
	if !errors.Is(serr, boom) {
		t.Errorf("server: %v", serr)
	}
}

func TestPingpongArgs(t *testing.T) {
	ce, _ := tcpPair(t)
	ctx := context.Background()
	if _, err := PingpongClient(ctx, ce, PingpongDest{PSN: 1 << 24}); err == nil {
		t.Error("client accepted a 25-bit PSN")
	}
	if _, err := PingpongServer(ctx, ce, PingpongDest{QPN: 1 << 24}, func(context.Context, PingpongDest) error { return nil }); err == nil {
		t.Error("server accepted a 25-bit QPN")
	}
	if _, err := PingpongServer(ctx, ce, testPingpongDest, nil); err == nil {
		t.Error("server accepted a nil connect")
	}
}

// TestPingpongBothSides runs our client against our server.
func TestPingpongBothSides(t *testing.T) {
	ce, se := tcpPair(t)
	srv := PingpongDest{LID: 7, QPN: 0xfffffe, PSN: 0, GID: netip.MustParseAddr("fe80::5054:ff:fe99:2").As16()}
	var connected PingpongDest
	wait := peer(func() error {
		got, err := PingpongServer(context.Background(), se, srv, func(_ context.Context, r PingpongDest) error {
			connected = r
			return nil
		})
		if err == nil && got != testPingpongDest {
			err = fmt.Errorf("server got %+v", got)
		}
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, err := PingpongClient(ctx, ce, testPingpongDest)
	if err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if got != srv || connected != testPingpongDest {
		t.Errorf("client got %+v, server connected to %+v", got, connected)
	}
}
