package gsi

import (
	"net/netip"
	"sync"
	"testing"
)

type fakePort struct{ addr netip.Addr }

func (p *fakePort) Addr() netip.Addr                  { return p.addr }
func (p *fakePort) UDPPort() uint16                   { return 4791 }
func (p *fakePort) NodeGUID() uint64                  { return 1 }
func (p *fakePort) Device() any                       { return nil }
func (p *fakePort) Send(netip.AddrPort, []byte) error { return nil }
func (p *fakePort) SetReceiver(Receiver)              {}

// TestRegistry: Lookup finds a registered port by address (IPv4-mapped or
// not), a watcher sees every port up once, before it goes down once, and
// nothing after stop.
func TestRegistry(t *testing.T) {
	a := &fakePort{netip.MustParseAddr("127.0.9.1")}
	b := &fakePort{netip.MustParseAddr("::1")}
	Register(a)
	defer Unregister(a)

	type ev struct {
		p  Port
		up bool
	}
	var mu sync.Mutex
	var seen []ev
	stop := Watch(func(p Port, up bool) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, ev{p, up})
	})
	Register(b)
	if Lookup(netip.MustParseAddr("::ffff:127.0.9.1")) != a || Lookup(b.addr) != b {
		t.Fatal("Lookup misses a registered port")
	}
	if len(Ports()) < 2 {
		t.Fatalf("Ports %v", Ports())
	}
	Unregister(b)
	Unregister(b) // a second time: nothing
	if Lookup(b.addr) != nil {
		t.Fatal("an unregistered port is found")
	}
	stop()
	c := &fakePort{netip.MustParseAddr("127.0.9.3")}
	Register(c)
	Unregister(c)
	want := []ev{{a, true}, {b, true}, {b, false}}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != len(want) {
		t.Fatalf("watcher saw %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("watcher saw %v, want %v", seen, want)
		}
	}
}
