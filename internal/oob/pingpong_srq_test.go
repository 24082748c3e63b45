package oob

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// srqDests returns n distinct Dests.
func srqDests(n int, base uint32) []PingpongDest {
	d := make([]PingpongDest, n)
	for i := range d {
		d[i] = testPingpongDest
		d[i].QPN, d[i].PSN = base+uint32(i), 0x100+uint32(i)
	}
	return d
}

// TestPingpongSRQBothSides runs our client against our server with
// different numbers of QPs: each gets the other's QPs then the zero
// padding, PingpongSRQMaxQP in all, and the wire carries exactly
// PingpongSRQMaxQP messages each way and "done".
func TestPingpongSRQBothSides(t *testing.T) {
	for _, n := range []struct{ client, server int }{{1, 1}, {16, 16}, {3, 5}, {PingpongSRQMaxQP, 1}} {
		ce, se := tcpPair(t)
		cli, srv := srqDests(n.client, 0x100), srqDests(n.server, 0x800)
		var connected []PingpongDest
		wait := peer(func() error {
			got, err := PingpongSRQServer(context.Background(), se, srv, func(_ context.Context, r []PingpongDest) error {
				connected = r
				return nil
			})
			if err == nil && !sameSRQ(got, cli) {
				err = errors.New("server got other Dests")
			}
			return err
		})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		got, err := PingpongSRQClient(ctx, ce, cli)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if err := wait(); err != nil {
			t.Fatal(err)
		}
		if !sameSRQ(got, srv) || !sameSRQ(connected, cli) {
			t.Errorf("%+v: client got %d Dests (%v), server connected to %d", n, len(got), sameSRQ(got, srv), len(connected))
		}
	}
}

// sameSRQ: got is want followed by zero Dests, PingpongSRQMaxQP in all.
func sameSRQ(got, want []PingpongDest) bool {
	if len(got) != PingpongSRQMaxQP {
		return false
	}
	for i, d := range got {
		if i < len(want) && d != want[i] || i >= len(want) && d != (PingpongDest{}) {
			return false
		}
	}
	return true
}

// TestPingpongSRQWire checks the client's bytes: PingpongSRQMaxQP messages,
// the padding all zero digits, then "done".
func TestPingpongSRQWire(t *testing.T) {
	ce, se := tcpPair(t)
	wait := peer(func() error {
		b, err := readExactly(se, PingpongSRQMaxQP*PingpongMsgSize)
		if err != nil {
			return err
		}
		first := string(AppendPingpongDest(nil, srqDests(1, 0x42)[0]))
		zero := "0000:000000:000000:00000000000000000000000000000000\x00"
		if string(b[:PingpongMsgSize]) != first || string(b[PingpongMsgSize:]) != strings.Repeat(zero, PingpongSRQMaxQP-1) {
			return errors.New("client's messages differ")
		}
		if _, err := se.Write(b); err != nil { // echo: a peer with the same QPs
			return err
		}
		done, err := readExactly(se, 5)
		if err == nil && string(done) != "done\x00" {
			err = errors.New("no done")
		}
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := PingpongSRQClient(ctx, ce, srqDests(1, 0x42)); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

// TestPingpongSRQBadPeer feeds both roles a misbehaving peer.
func TestPingpongSRQBadPeer(t *testing.T) {
	all := func() []byte {
		b, err := appendSRQDests(srqDests(2, 1))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	bad := all()
	bad[3*PingpongMsgSize+7] = 'x' // message 3's QPN
	tests := []struct {
		name  string
		role  Role
		send  []byte
		close bool
		want  error
		text  string
	}{
		{"client: one message only", Client, all()[:PingpongMsgSize], true, io.EOF, "remote address 1"},
		{"client: bad message 3", Client, bad, false, ErrMalformed, "remote address 3"},
		{"client: silent", Client, nil, false, context.DeadlineExceeded, ""},
		{"server: cut in message 100", Server, all()[:100*PingpongMsgSize+10], true, io.ErrUnexpectedEOF, "remote address 100"},
		{"server: bad message 3", Server, bad, false, ErrMalformed, "remote address 3"},
		{"server: no done", Server, all(), true, io.EOF, "done"},
		{"server: wrong done", Server, append(all(), "DONE!"...), false, ErrMalformed, "DONE"},
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
				_, err = PingpongSRQClient(ctx, mine, srqDests(2, 9))
			} else {
				_, err = PingpongSRQServer(ctx, mine, srqDests(2, 9), func(context.Context, []PingpongDest) error { return nil })
			}
			mine.Close()
			if werr := wait(); werr != nil && !isReset(werr) {
				t.Errorf("peer: %v", werr)
			}
			checkOneLine(t, err)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
				t.Errorf("error %q, want %v mentioning %q", err, tt.want, tt.text)
			}
			if !strings.HasPrefix(err.Error(), "oob: srq pingpong "+tt.role.String()+": ") {
				t.Errorf("error %q lacks the prefix", err)
			}
		})
	}
}

// TestPingpongSRQServerConnectError: the server does not answer when
// connecting its QPs fails.
func TestPingpongSRQServerConnectError(t *testing.T) {
	ce, se := tcpPair(t)
	boom := errors.New("modify QP failed")
	wait := peer(func() error {
		_, err := PingpongSRQServer(context.Background(), se, srqDests(4, 1), func(context.Context, []PingpongDest) error { return boom })
		se.Close()
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := PingpongSRQClient(ctx, ce, srqDests(4, 0x10))
	if !errors.Is(err, io.EOF) && !isReset(err) {
		t.Errorf("client: %v, want EOF", err)
	}
	if serr := wait(); !errors.Is(serr, boom) {
		t.Errorf("server: %v", serr)
	}
}

func TestPingpongSRQArgs(t *testing.T) {
	ce, _ := tcpPair(t)
	ctx := context.Background()
	for _, local := range [][]PingpongDest{nil, srqDests(PingpongSRQMaxQP+1, 1), {{PSN: 1 << 24}}} {
		if _, err := PingpongSRQClient(ctx, ce, local); err == nil {
			t.Errorf("client accepted %d Dests", len(local))
		}
	}
	if _, err := PingpongSRQServer(ctx, ce, srqDests(1, 1), nil); err == nil {
		t.Error("server accepted a nil connect")
	}
}
