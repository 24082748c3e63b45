package stats

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

func TestParseProcNetUnix(t *testing.T) {
	const table = `Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 41201 @goroce-stats/17/1/goroce0
0000000000000000: 00000002 00000000 00010000 0001 01 41202 @goroce-stats/17/2/goroce0
0000000000000000: 00000003 00000000 00000000 0001 03 41203 @goroce-stats/17/1/goroce0
0000000000000000: 00000002 00000000 00010000 0001 01 41204 @goroce-stats/17/1/goroce0
0000000000000000: 00000002 00000000 00010000 0001 01 41205 /run/systemd/notify
0000000000000000: 00000002 00000000 00010000 0001 01 41206
0000000000000000: 00000002 00000000 0001zzzz 0001 01 41207 @goroce-stats/17/3/goroce1
`
	// Listening sockets only (the third line is an accepted connection),
	// each name once, nothing that is not goroce's or cannot be parsed.
	want := []string{"@goroce-stats/17/1/goroce0", "@goroce-stats/17/2/goroce0"}
	if got := parseProcNetUnix(table); !slices.Equal(got, want) {
		t.Errorf("endpoints %q, want %q", got, want)
	}
}

// TestReadDevice reads the stats of a device through the endpoint that
// Endpoints lists, and sees a counter move.
func TestReadDevice(t *testing.T) {
	d := rdmatest.NewEnd(t, rdmatest.EndOptions{Addr: testkit.Addr(1)}).Dev
	names, err := Endpoints()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names, d.StatsEndpoint()) {
		t.Fatalf("Endpoints() = %q lacks the device's %q", names, d.StatsEndpoint())
	}
	c, err := net.Dial("udp", net.JoinHostPort(d.Addr().String(), "4791"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Datagrams too short to be RoCEv2: the device counts them as
	// malformed, and the endpoint must show that.
	for range 3 {
		if _, err := c.Write([]byte("not roce")); err != nil {
			t.Fatal(err)
		}
	}
	ctx := testkit.Context(t)
	testkit.WaitFor(t, "3 malformed datagrams in the stats", func() bool {
		s, err := Read(ctx, d.StatsEndpoint())
		if err != nil {
			t.Fatal(err)
		}
		if s.Device != d.Name() || s.Addr != d.Addr().String() || len(s.QPs) != 1 || s.QPs[0].QPN == 0 {
			t.Fatalf("stats %+v", s)
		}
		return counter(s, "malformed") == 3
	})
}

func counter(s verbs.Stats, name string) uint64 {
	for _, c := range s.Counters {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}

// TestReadErrors: a name that is not an endpoint's is refused without a
// connection, and a read gives up when its context ends, also on an
// endpoint that never answers.
func TestReadErrors(t *testing.T) {
	if _, err := Read(context.Background(), "/tmp/not-goroce"); !errors.Is(err, ErrNotEndpoint) {
		t.Errorf("Read of a name without the prefix: %v", err)
	}
	// An endpoint that accepts and then says nothing.
	name := verbs.StatsSocketPrefix + "stats-test/" + t.Name()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, context.DeadlineExceeded},
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
	} {
		ctx, cancel := tc.ctx()
		_, err := Read(ctx, name)
		cancel()
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: Read = %v, want %v", tc.name, err, tc.want)
		}
	}
}
