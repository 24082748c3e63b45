package rsocket

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// say writes msg on c and reads it on peer: what c posted before it has
// completed its way to peer (RC delivers in order), and what peer learned
// from c's earlier messages is applied.
func say(t *testing.T, c, peer *Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(peer, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != msg {
		t.Fatalf("read %q, want %q", got, msg)
	}
}

// The server maps a buffer at an offset of its choosing; the client
// writes into it by offset, in pieces that cross its small send buffer's
// wrap, and the bytes land in the server's buffer with no message.
func TestIOMapWrite(t *testing.T) {
	testkit.CheckLeaks(t)
	cfg := Config{SendBuffer: 16 << 10, ReceiveBuffer: 16 << 10, IOMapSize: 2}
	client, server := pair(t, 50, 51, cfg)
	const base = 1 << 40
	buf := make([]byte, 300007)
	mr, err := server.IOMap(buf, base)
	if err != nil {
		t.Fatal(err)
	}
	say(t, server, client, "mapped") // the entry reached the client first
	want := pattern(50, len(buf))
	for _, w := range []struct{ off, n int }{{0, 1}, {1, 2047}, {2048, 70000}, {72048, len(buf) - 72048}} {
		if n, err := client.IOWrite(want[w.off:w.off+w.n], base+uint64(w.off)); n != w.n || err != nil {
			t.Fatalf("IOWrite(%d bytes at %d) = %d, %v", w.n, w.off, n, err)
		}
	}
	say(t, client, server, "written") // after the writes, in order
	if !bytes.Equal(buf, want) {
		t.Fatalf("mapped buffer differs at byte %d", firstDiff(buf, want))
	}
	if mr.RemoteWrites() == 0 {
		t.Fatal("the region counted no remote write")
	}

	// Outside every mapping: nothing written, or up to the mapping's end.
	var n int
	n, err = client.IOWrite([]byte{1}, base-1)
	testkit.WantErr(t, err, ErrNoIOMap)
	if n != 0 {
		t.Fatalf("IOWrite before the mapping wrote %d bytes", n)
	}
	n, err = client.IOWrite(make([]byte, 10), base+uint64(len(buf))-4)
	testkit.WantErr(t, err, ErrNoIOMap)
	if n != 4 {
		t.Fatalf("IOWrite across the mapping's end wrote %d bytes, want 4", n)
	}
	if err := server.IOUnmap(mr); err != nil {
		t.Fatal(err)
	}
	testkit.WantErr(t, server.IOUnmap(mr), syscall.EINVAL)
}

// riostream's loop: each side maps its buffer, writes the other's, and
// tells it with a message (riostream polls the last byte instead, which
// the race detector cannot vouch for: cmd/goroce-riostream's test); the
// table's one entry is reused after IOUnmap.
func TestIOMapBothWays(t *testing.T) {
	testkit.CheckLeaks(t)
	cfg := Config{IOMapSize: 1}
	client, server := pair(t, 52, 53, cfg)
	conns := []*Conn{client, server}
	for round, size := range []int{64, 4096, 1 << 20} {
		bufs := [2][]byte{make([]byte, size), make([]byte, size)}
		var mrs [2]*verbs.MR
		for i, c := range conns {
			mr, err := c.IOMap(bufs[i], 0)
			if err != nil {
				t.Fatal(err)
			}
			mrs[i] = mr
		}
		say(t, client, server, "sync")
		say(t, server, client, "sync")
		for i, c := range conns {
			data := pattern(uint64(round*2+i), size)
			before := mrs[1-i].RemoteWrites()
			if _, err := c.IOWrite(data, 0); err != nil {
				t.Fatal(err)
			}
			say(t, c, conns[1-i], "done")
			if dst := bufs[1-i]; !bytes.Equal(dst, data) {
				t.Fatalf("size %d: differs at byte %d", size, firstDiff(dst, data))
			}
			if mrs[1-i].RemoteWrites() == before {
				t.Fatalf("size %d: the mapped region counted no store", size)
			}
		}
		// The one entry is taken until IOUnmap.
		if _, err := client.IOMap(make([]byte, 8), 0); !errors.Is(err, syscall.ENOMEM) {
			t.Fatalf("IOMap with the peer's table full: %v, want ENOMEM", err)
		}
		for i, c := range conns {
			if err := c.IOUnmap(mrs[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A peer that announced no iomap table (rsockets' default) cannot be
// mapped into; IOMap fails without breaking the connection.
func TestIOMapNoTable(t *testing.T) {
	testkit.CheckLeaks(t)
	client, server := pair(t, 54, 55, Config{})
	if _, err := client.IOMap(make([]byte, 64), 0); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("IOMap: %v, want ENOMEM", err)
	}
	if _, err := client.IOMap(nil, 0); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("IOMap of nothing: %v, want EINVAL", err)
	}
	say(t, client, server, "still up")
}

// A mapping the side still holds at Close is released with the
// connection: Close would fail to free the protection domain otherwise.
func TestIOMapReleasedByClose(t *testing.T) {
	testkit.CheckLeaks(t)
	client, server := pair(t, 56, 57, Config{IOMapSize: 1})
	mr, err := server.IOMap(make([]byte, 4096), 7)
	if err != nil {
		t.Fatal(err)
	}
	say(t, server, client, "x")
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	testkit.WantErr(t, server.IOUnmap(mr), net.ErrClosed)
}

// A peer that announces an entry outside this side's table, or an empty
// one, breaks the protocol: the connection ends with an error wrapping
// errProtocol, and the entry is not used.
func TestIOMapBadAnnouncement(t *testing.T) {
	testkit.CheckLeaks(t)
	for i, c := range []struct {
		name  string
		index uint32
		entry ioMap
	}{
		{"index beyond the table", 7, ioMap{offset: 0, region: sge{addr: 0x1000, key: 1, length: 64}}},
		{"empty region", 0, ioMap{offset: 0, region: sge{addr: 0x1000, key: 1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, server := pair(t, 70+2*i, 71+2*i, Config{IOMapSize: 1})
			if err := postIOMapEntry(client, c.entry, c.index); err != nil {
				t.Fatal(err)
			}
			_, err := server.Read(make([]byte, 1))
			testkit.WantErr(t, err, errProtocol)
			server.mu.Lock()
			found := server.maps.find(0)
			server.mu.Unlock()
			if found != nil {
				t.Fatalf("the bad entry was taken: %+v", *found)
			}
		})
	}
}

// postIOMapEntry is IOMap's post, by hand: entry written to slot 0 of the
// peer's table, the message naming index.
func postIOMapEntry(c *Conn, entry ioMap, index uint32) error {
	c.wrMu.Lock()
	defer c.wrMu.Unlock()
	c.postMu.Lock()
	defer c.postMu.Unlock()
	c.mu.Lock()
	if err := c.sendable(); err != nil {
		c.mu.Unlock()
		return err
	}
	seg := c.snd.reserveOwn(ioMapLen, true)
	seg.dst = sge{addr: c.maps.remote.addr, key: c.maps.remote.key}
	c.mu.Unlock()
	return c.postWrite(appendIOMap(nil, entry, false), seg, msg(opIOMapSGL, index), true)
}
