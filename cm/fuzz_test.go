package cm

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/gsi"
	"github.com/goroce/goroce/internal/mad"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// FuzzAgentMAD feeds arbitrary MADs, up to four in a row, to a device's CM
// agent that has listeners on rping's port (TCP and UDP port spaces,
// wildcard), as if they came from a peer, and takes what the listeners
// report: nothing panics, every request the application sees can be
// refused, and the CM holds no more than its limits.
func FuzzAgentMAD(f *testing.F) {
	// Each fuzzing worker is a process of its own: its own addresses.
	dev, err := verbs.Open(verbs.DeviceConfig{Addr: testkit.Addr(9), NoStatsEndpoint: true})
	if err != nil {
		f.Fatal(err)
	}
	defer dev.Close()
	ch := NewEventChannel()
	for _, ps := range []PortSpace{PortSpaceTCP, PortSpaceUDP} {
		l, err := ch.CreateID(nil, ps)
		if err != nil {
			f.Fatal(err)
		}
		if err := l.BindAddr(netip.MustParseAddrPort("0.0.0.0:7174")); err != nil {
			f.Fatal(err)
		}
		if err := l.Listen(0); err != nil {
			f.Fatal(err)
		}
		defer l.Destroy()
	}
	lock()
	a := state.agents[gsi.Lookup(dev.Addr())]
	unlock()
	// Answers go to an address nothing listens on.
	from := testkit.Addr(10)
	f.Fuzz(func(t *testing.T, b []byte) {
		now := time.Now()
		lock()
		for i := 0; i < 4 && len(b) > 0; i++ {
			n := min(len(b), mad.MADSize)
			a.mgr.HandleMAD(from, b[:n], now, &a.out)
			a.process(now)
			a.match = nil
			b = b[n:]
		}
		recs := a.mgr.Len()
		unlock()
		if recs > 65536 {
			t.Fatalf("%d records", recs)
		}
		for {
			ev, ok := ch.TryGetEvent()
			if !ok {
				break
			}
			_ = ev.Ack()
			if ev.Type == EventConnectRequest {
				_ = ev.ID.Reject(nil)
				if err := ev.ID.Destroy(); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}
