package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"testing"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// store is what both clients offer.
type store interface {
	Get(ctx context.Context, key, dst []byte) ([]byte, error)
	Put(ctx context.Context, key, value []byte) error
	Close() error
}

// valueOf is key i's value at version v: distinct for every (i, v), of
// a length that varies with both.
func valueOf(i, v, max int) []byte {
	n := (i*7 + v*13) % (max + 1)
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i*31 + v*17 + j)
	}
	return b
}

// exercise PUTs keys, overwrites some, and GETs every one back, checking
// the bytes, a missing key, and the errors for oversized input.
func exercise(t *testing.T, ctx context.Context, s store, valueMax int) {
	const keys = 300
	for v := range 2 {
		for i := range keys {
			if v == 1 && i%3 != 0 {
				continue
			}
			if err := s.Put(ctx, []byte("key-"+strconv.Itoa(i)), valueOf(i, v, valueMax)); err != nil {
				t.Fatalf("Put key-%d: %v", i, err)
			}
		}
	}
	var got []byte
	for i := range keys {
		var err error
		got, err = s.Get(ctx, []byte("key-"+strconv.Itoa(i)), got)
		if err != nil {
			t.Fatalf("Get key-%d: %v", i, err)
		}
		want := valueOf(i, 0, valueMax)
		if i%3 == 0 {
			want = valueOf(i, 1, valueMax)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("Get key-%d = %x, want %x", i, got, want)
		}
	}
	if _, err := s.Get(ctx, []byte("absent"), nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get absent: %v, want ErrNotFound", err)
	}
	if err := s.Put(ctx, []byte("big"), make([]byte, valueMax+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Put of %d bytes: %v, want ErrTooLarge", valueMax+1, err)
	}
	if err := s.Put(ctx, make([]byte, KeyMax+1), nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Put of a %d-byte key: %v, want ErrTooLarge", KeyMax+1, err)
	}
}

// rdmaPair serves a table of valueMax-byte values over goroce on loopback
// and returns the server and a connected client.
func rdmaPair(t *testing.T, valueMax int) (*RDMAServer, *RDMAClient) {
	t.Helper()
	ctx := testkit.Context(t)
	open := func(i int) *verbs.Device {
		d, err := verbs.Open(verbs.DeviceConfig{Addr: testkit.Addr(i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	sdev, cdev := open(1), open(2)
	tbl, err := NewTable(1024, valueMax)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewRDMAServer(sdev, tbl)
	if err != nil {
		t.Fatal(err)
	}
	l, err := cm.Listen(netip.AddrPortFrom(testkit.Addr(1), testkit.Port()).String())
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, l) }()
	t.Cleanup(func() {
		stop()
		<-done
		l.Close()
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	pd, err := cdev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	c, err := DialRDMA(ctx, pd, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return srv, c
}

func TestRDMA(t *testing.T) {
	srv, c := rdmaPair(t, 100)
	exercise(t, testkit.Context(t), c, 104)
	// Every PUT went through the server's goroutine; no GET did.
	if got := srv.Puts(); got != 400 {
		t.Errorf("server applied %d PUTs, want 400 (the oversized ones never leave the client)", got)
	}
	if c.TornReads() != 0 {
		t.Errorf("%d torn reads with no writer racing the reads", c.TornReads())
	}
}

func TestTCP(t *testing.T) {
	tbl, err := NewTable(1024, 100)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewTCPServer(tbl)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := NewTCPClient(nc)
	exercise(t, testkit.Context(t), c, 104)
	c.Close()
	l.Close()
	<-done
	if srv.Gets() != 301 || srv.Puts() != 400 {
		t.Errorf("server answered %d GETs and %d PUTs, want 301 and 400", srv.Gets(), srv.Puts())
	}
}

func TestTableFull(t *testing.T) {
	tbl, err := NewTable(MaxProbe, 8) // every key probes the whole table
	if err != nil {
		t.Fatal(err)
	}
	for i := range MaxProbe {
		if err := tbl.Put(fmt.Appendf(nil, "k%d", i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tbl.Put([]byte("one more"), nil); !errors.Is(err, ErrFull) {
		t.Fatalf("Put into a full table: %v, want ErrFull", err)
	}
	for i := range MaxProbe {
		v, err := tbl.Get(fmt.Appendf(nil, "k%d", i), nil)
		if err != nil || !bytes.Equal(v, []byte{byte(i)}) {
			t.Fatalf("Get k%d = %x, %v", i, v, err)
		}
	}
}

// TestTornSlot hands lookup the states a READ racing a write can return.
func TestTornSlot(t *testing.T) {
	tbl, err := NewTable(1, 16)
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("k")
	if err := tbl.Put(key, []byte("0123456789abcdef")); err != nil {
		t.Fatal(err)
	}
	s := tbl.slot(0)
	if v, st := lookup(s, key); st != slotHit || string(v) != "0123456789abcdef" {
		t.Fatalf("stable slot: %q, state %d", v, st)
	}
	if _, st := lookup(s, []byte("other")); st != slotOther {
		t.Fatalf("another key's slot: state %d, want slotOther", st)
	}
	torn := bytes.Clone(s)
	torn[offValue+3] ^= 1 // a byte of the next write, read with the old check
	if _, st := lookup(torn, key); st != slotTorn {
		t.Fatalf("torn value: state %d, want slotTorn", st)
	}
	odd := bytes.Clone(s)
	odd[0]++ // a write in progress
	if _, st := lookup(odd, key); st != slotTorn {
		t.Fatalf("odd version: state %d, want slotTorn", st)
	}
}
