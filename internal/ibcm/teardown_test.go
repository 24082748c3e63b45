package ibcm

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/mad"
)

// established connects a to b and returns both IDs.
func established(t *testing.T, w *world, a, b *node) (ID, ID) {
	t.Helper()
	ida := a.connect(b, nil)
	w.run(100 * time.Millisecond)
	if s, _ := a.m.State(ida); s != StateEstablished {
		t.Fatalf("active state %v", s)
	}
	req, _ := b.last(EventConnectRequest)
	if s, _ := b.m.State(req.ID); s != StateEstablished {
		t.Fatalf("passive state %v", s)
	}
	return ida, req.ID
}

func TestDisconnectBothDirections(t *testing.T) {
	for _, activeCloses := range []bool{true, false} {
		w, a, b := pair(t, 1)
		ida, idb := established(t, w, a, b)
		closer, other, cid, oid := a, b, ida, idb
		if !activeCloses {
			closer, other, cid, oid = b, a, idb, ida
		}
		if err := closer.m.Disconnect(cid, []byte("bye"), w.now, &closer.out); err != nil {
			t.Fatal(err)
		}
		w.flush(closer)
		w.run(100 * time.Millisecond)
		dr, ok := other.last(EventDisconnectRequest)
		if !ok || dr.ID != oid || !bytes.HasPrefix(dr.PrivateData, []byte("bye")) {
			t.Fatalf("peer events %v", other.events)
		}
		d, ok := closer.last(EventDisconnected)
		if !ok || d.ID != cid || !bytes.HasPrefix(d.PrivateData, []byte("drep")) {
			t.Fatalf("closer events %v", closer.events)
		}
		for _, n := range []*node{a, b} {
			if n.m.Len() != 1 {
				t.Fatalf("%v: %d records in timewait", n.addr, n.m.Len())
			}
		}
		// The DREQ has a fresh TID; the DREP carries it back.
		var dreqTID, drepTID uint64
		for _, p := range w.sent {
			h, _ := mad.ParseHeader(p.mad[:])
			switch h.AttrID {
			case mad.AttrDREQ:
				dreqTID = h.TID
			case mad.AttrDREP:
				drepTID = h.TID
			}
		}
		if dreqTID != drepTID || dreqTID>>32 != uint64(closer.m.cfg.TIDHigh) {
			t.Errorf("DREQ TID %#x, DREP TID %#x", dreqTID, drepTID)
		}
		// Timewait: 2^(17−8) = 512 ms on both sides.
		w.run(400 * time.Millisecond)
		if a.m.Len() != 1 || b.m.Len() != 1 {
			t.Fatal("timewait ended early")
		}
		w.run(200 * time.Millisecond)
		if a.m.Len() != 0 || b.m.Len() != 0 || a.count(EventTimewaitExit) != 1 || b.count(EventTimewaitExit) != 1 {
			t.Fatalf("after timewait: %d %d records", a.m.Len(), b.m.Len())
		}
		mustCheck(t, a, b)
	}
}

func TestCrossingDREQs(t *testing.T) {
	w, a, b := pair(t, 1)
	ida, idb := established(t, w, a, b)
	if err := a.m.Disconnect(ida, nil, w.now, &a.out); err != nil {
		t.Fatal(err)
	}
	if err := b.m.Disconnect(idb, nil, w.now, &b.out); err != nil {
		t.Fatal(err)
	}
	w.flush(a)
	w.flush(b)
	w.run(time.Minute)
	for _, n := range []*node{a, b} {
		if n.count(EventDisconnected) != 1 || n.count(EventTimeout) != 0 || n.count(EventTimewaitExit) != 1 || n.m.Len() != 0 {
			t.Errorf("%v: events %v, %d records", n.addr, n.events, n.m.Len())
		}
	}
	if n := len(sendTimes(w, a, mad.AttrDREQ)); n != 1 {
		t.Errorf("%d DREQs from the active side", n)
	}
}

// TestDREQLost: the DREQ is retransmitted until the DREP; the DREP lost
// once, the peer answers the retransmitted DREQ from timewait.
func TestDREQLost(t *testing.T) {
	w, a, b := pair(t, 1)
	ida, _ := established(t, w, a, b)
	drops := 0
	w.drop = func(p *packet) bool {
		h, _ := mad.ParseHeader(p.mad[:])
		if h.AttrID == mad.AttrDREP && drops == 0 {
			drops++
			return true
		}
		return false
	}
	if err := a.m.Disconnect(ida, nil, w.now, &a.out); err != nil {
		t.Fatal(err)
	}
	w.flush(a)
	w.run(3 * time.Second)
	if got := sendTimes(w, a, mad.AttrDREQ); len(got) != 2 || got[1]-got[0] != 1536*time.Millisecond {
		t.Fatalf("DREQ sent at %v", got)
	}
	if a.count(EventDisconnected) != 1 || b.count(EventDisconnectRequest) != 1 {
		t.Fatalf("events %v / %v", a.events, b.events)
	}
}

// TestDREQTimeout: the peer vanished; the DREQ times out into timewait.
func TestDREQTimeout(t *testing.T) {
	w, a, b := pair(t, 1)
	ida, _ := established(t, w, a, b)
	w.drop = func(*packet) bool { return true }
	if err := a.m.Disconnect(ida, nil, w.now, &a.out); err != nil {
		t.Fatal(err)
	}
	w.flush(a)
	w.run(2 * time.Minute)
	ev, ok := a.last(EventTimeout)
	if !ok || ev.Unanswered != mad.AttrDREQ || a.count(EventTimewaitExit) != 1 || a.m.Len() != 0 {
		t.Fatalf("events %v, %d records", a.events, a.m.Len())
	}
}

func TestDREQChecks(t *testing.T) {
	w, a, b := pair(t, 1)
	ida, idb := established(t, w, a, b)
	// A DREQ naming another QPN is dropped without an answer.
	dreq, _ := mad.AppendCM(nil, 99, &mad.DREQ{LocalCommID: uint32(idb), RemoteCommID: uint32(ida), RemoteQPN: 0x777})
	a.m.HandleMAD(b.addr, dreq, w.now, &a.out)
	if len(a.out.Sends()) != 0 || len(a.out.Events()) != 0 {
		t.Fatalf("answered a DREQ for QPN 0x777: %d sends", len(a.out.Sends()))
	}
	// A DREQ for an unknown connection gets a DREP with the IDs swapped
	// and the DREQ's TID.
	dreq, _ = mad.AppendCM(nil, 99, &mad.DREQ{LocalCommID: 5, RemoteCommID: 6, RemoteQPN: 1})
	a.m.HandleMAD(b.addr, dreq, w.now, &a.out)
	var drep mad.DREP
	if len(a.out.Sends()) != 1 || drep.Parse(a.out.Sends()[0].MAD[:]) != nil || drep.LocalCommID != 6 || drep.RemoteCommID != 5 {
		t.Fatalf("answer to an unknown DREQ: %+v", drep)
	}
	if h, _ := mad.ParseHeader(a.out.Sends()[0].MAD[:]); h.TID != 99 {
		t.Errorf("DREP TID %d", h.TID)
	}
	if s, _ := a.m.State(ida); s != StateEstablished {
		t.Errorf("state %v", s)
	}
}

// TestStaleConnection: the active side loses a connection silently (its
// DREQ is lost and it destroys the ID) and connects again with the same
// QPN while the passive side still holds the old one. The passive side
// refuses with REJ "stale connection" and disconnects the old one.
func TestStaleConnection(t *testing.T) {
	w, a, b := pair(t, 1)
	ida, idb := established(t, w, a, b)
	qpn := a.qpn
	w.drop = func(p *packet) bool { return p.from == a.addr }
	if err := a.m.Destroy(ida, nil, w.now, &a.out); err != nil {
		t.Fatal(err)
	}
	w.flush(a)
	w.run(time.Second) // past a's timewait
	w.drop = nil
	id2 := a.connectQPN(b, qpn, nil)
	w.run(time.Second)
	ev, ok := a.last(EventRejected)
	if !ok || ev.ID != id2 || ev.Reason != mad.RejectStaleConnection {
		t.Fatalf("active events %v", a.events)
	}
	if got := b.eventsOf(idb); !slices.Equal(got[len(got)-3:], []EventType{EventStale, EventDisconnected, EventTimewaitExit}) {
		t.Fatalf("old connection's events %v", got)
	}
	if b.count(EventConnectRequest) != 1 {
		t.Errorf("the stale REQ was delivered: %v", b.events)
	}
	w.run(time.Second)
	if a.m.Len() != 0 || b.m.Len() != 0 {
		t.Errorf("records left %d %d", a.m.Len(), b.m.Len())
	}
	mustCheck(t, a, b)
}

// TestTimewaitBlocksStaleREQ: a REQ reusing the QPN (or the comm ID) of a
// connection in timewait is refused as stale; after timewait the same
// REQ is a new connection.
func TestTimewaitBlocksStaleREQ(t *testing.T) {
	w, a, b := pair(t, 1)
	ida, idb := established(t, w, a, b)
	if err := b.m.Disconnect(idb, nil, w.now, &b.out); err != nil {
		t.Fatal(err)
	}
	w.flush(b)
	w.run(10 * time.Millisecond)
	if s, _ := b.m.State(idb); s != StateTimewait {
		t.Fatalf("passive state %v", s)
	}
	// A new REQ with the old QPN, from another manager with a's GUID (a
	// rebooted a with a fresh comm ID sequence).
	a2 := w.addNode("10.99.0.2", 0x505400fffe990002, func(c *Config) { c.IDSeed = 0x1234 })
	w.nodes = slices.DeleteFunc(w.nodes, func(n *node) bool { return n == a })
	p := a2.params(b, a.qpn, nil)
	if _, err := a2.m.Connect(p, w.now, &a2.out); err != nil {
		t.Fatal(err)
	}
	w.flush(a2)
	w.run(10 * time.Millisecond)
	if ev, ok := a2.last(EventRejected); !ok || ev.Reason != mad.RejectStaleConnection {
		t.Fatalf("REQ during timewait: %v", a2.events)
	}
	// The retransmitted old REQ (same comm ID and GUID) in timewait: REJ
	// stale too (cm_dup_req_handler).
	var oldREQ [mad.MADSize]byte
	for _, pk := range w.sent {
		if h, _ := mad.ParseHeader(pk.mad[:]); h.AttrID == mad.AttrREQ && pk.from == a.addr {
			oldREQ = pk.mad
			break
		}
	}
	b.m.HandleMAD(a.addr, oldREQ[:], w.now, &b.out)
	var rej mad.REJ
	if len(b.out.Sends()) != 1 || rej.Parse(b.out.Sends()[0].MAD[:]) != nil || rej.Reason != mad.RejectStaleConnection ||
		rej.LocalCommID != uint32(idb) || rej.RemoteCommID != uint32(ida) {
		t.Fatalf("answer to the old REQ in timewait: %+v", rej)
	}
	b.out.Reset()
	w.run(time.Second)
	if b.m.Len() != 0 {
		t.Fatalf("passive records %d after timewait", b.m.Len())
	}
	a2.events = nil
	if _, err := a2.m.Connect(p, w.now, &a2.out); err != nil {
		t.Fatal(err)
	}
	w.flush(a2)
	w.run(time.Second)
	if a2.count(EventEstablished) != 1 {
		t.Fatalf("REQ after timewait: %v", a2.events)
	}
}

// TestStaleREP: the passive side answers with the QPN of a connection the
// active side still holds: the REP is refused as stale, the new
// connection ends, the old one is disconnected.
func TestStaleREP(t *testing.T) {
	w, a, b := pair(t, 1)
	ida, _ := established(t, w, a, b)
	b.qpn-- // b's next Accept reuses the QPN of the first connection
	id2 := a.connect(b, nil)
	w.run(time.Second)
	ev, ok := a.last(EventRejected)
	if !ok || ev.ID != id2 || ev.Reason != mad.RejectStaleConnection || !ev.Local {
		t.Fatalf("active events %v", a.events)
	}
	if got := a.eventsOf(ida); !slices.Contains(got, EventStale) {
		t.Errorf("old connection's events %v", got)
	}
	if pev, ok := b.last(EventRejected); !ok || pev.MsgRejected != mad.RespondREP {
		t.Errorf("passive events %v", b.events)
	}
	w.run(5 * time.Second)
	if a.m.Len() != 0 || b.m.Len() != 0 {
		t.Errorf("records left %d %d", a.m.Len(), b.m.Len())
	}
	mustCheck(t, a, b)
}

func TestDestroy(t *testing.T) {
	cases := []struct {
		name  string
		setup func(w *world, a, b *node) (*node, ID)
		sends mad.AttrID
	}{
		{"pending REQ", func(w *world, a, b *node) (*node, ID) {
			w.drop = func(*packet) bool { return true }
			return a, a.connect(b, nil)
		}, mad.AttrREJ},
		{"connect request", func(w *world, a, b *node) (*node, ID) {
			b.accept = false
			a.connect(b, nil)
			w.run(10 * time.Millisecond)
			ev, _ := b.last(EventConnectRequest)
			return b, ev.ID
		}, mad.AttrREJ},
		{"REP sent", func(w *world, a, b *node) (*node, ID) {
			w.drop = func(p *packet) bool { return p.to == b.addr && p.at.After(epoch.Add(2*time.Millisecond)) }
			a.connect(b, nil)
			w.run(10 * time.Millisecond)
			ev, _ := b.last(EventConnectRequest)
			return b, ev.ID
		}, mad.AttrREJ},
		{"established", func(w *world, a, b *node) (*node, ID) {
			ida, _ := established(w.t.(*testing.T), w, a, b)
			return a, ida
		}, mad.AttrDREQ},
	}
	for _, c := range cases {
		w, a, b := pair(t, 1)
		n, id := c.setup(w, a, b)
		n.events = nil
		before := len(w.sent)
		if err := n.m.Destroy(id, nil, w.now, &n.out); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		w.flush(n)
		if len(w.sent) != before+1 {
			t.Fatalf("%s: %d MADs sent", c.name, len(w.sent)-before)
		}
		if h, _ := mad.ParseHeader(w.sent[before].mad[:]); h.AttrID != c.sends {
			t.Errorf("%s: sent %v, want %v", c.name, h.AttrID, c.sends)
		}
		if _, ok := n.m.State(id); ok {
			t.Errorf("%s: ID still visible", c.name)
		}
		w.run(time.Minute)
		if len(n.events) != 0 || n.m.Len() != 0 {
			t.Errorf("%s: events %v after Destroy, %d records", c.name, n.events, n.m.Len())
		}
		if c.name == "established" && len(sendTimes(w, a, mad.AttrDREQ)) != 1 {
			t.Errorf("the DREQ of a destroyed connection was retransmitted")
		}
		mustCheck(t, a, b)
	}
}

func TestLAPGetsAPRUnsupported(t *testing.T) {
	w, a, b := pair(t, 1)
	ida, idb := established(t, w, a, b)
	lap, _ := mad.AppendCM(nil, 42, &mad.LAP{LocalCommID: uint32(idb), RemoteCommID: uint32(ida), RemoteQPN: a.qpn})
	a.m.HandleMAD(b.addr, lap, w.now, &a.out)
	var apr mad.APR
	if len(a.out.Sends()) != 1 || apr.Parse(a.out.Sends()[0].MAD[:]) != nil || apr.Status != mad.APRUnsupported ||
		apr.LocalCommID != uint32(ida) || apr.RemoteCommID != uint32(idb) {
		t.Fatalf("answer to a LAP: %+v", apr)
	}
	a.out.Reset()
	aprMAD, _ := mad.AppendCM(nil, 42, &apr)
	b.m.HandleMAD(a.addr, aprMAD, w.now, &b.out)
	if len(b.out.Sends())+len(b.out.Events()) != 0 || b.m.Counters().Unmatched == 0 {
		t.Error("an APR had an effect")
	}
}

// TestDisconnectingRefusesREJAndStale: a connection whose Disconnecting
// refuses (package cm's secured ones, without the peer's tag) survives a
// REJ matching it and a new REQ reusing its peer's QPN; both are counted
// as refused, and the new REQ is still refused as stale.
func TestDisconnectingRefusesREJAndStale(t *testing.T) {
	w := newWorld(t, 1)
	a := w.addNode("10.99.0.2", 0x505400fffe990002, nil)
	b := w.addNode("10.99.0.3", 0x505400fffe990003, func(c *Config) {
		c.Disconnecting = func(ID, []byte) bool { return false }
	})
	ida, idb := established(t, w, a, b)
	rej, _ := mad.AppendCM(nil, 77, &mad.REJ{LocalCommID: uint32(ida), RemoteCommID: uint32(idb),
		MsgRejected: mad.RespondOther, Reason: mad.RejectConsumer})
	b.m.HandleMAD(a.addr, rej, w.now, &b.out)
	if s, _ := b.m.State(idb); s != StateEstablished || b.m.Counters().Refused != 1 || len(b.out.Events()) != 0 {
		t.Fatalf("after a REJ: state %v, refused %d, events %v", s, b.m.Counters().Refused, b.out.Events())
	}

	// As in TestStaleConnection: a loses the connection and comes back
	// with the same QPN.
	qpn := a.qpn
	w.drop = func(p *packet) bool { return p.from == a.addr }
	if err := a.m.Destroy(ida, nil, w.now, &a.out); err != nil {
		t.Fatal(err)
	}
	w.flush(a)
	w.run(time.Second)
	w.drop = nil
	id2 := a.connectQPN(b, qpn, nil)
	w.run(time.Second)
	if ev, ok := a.last(EventRejected); !ok || ev.ID != id2 || ev.Reason != mad.RejectStaleConnection {
		t.Fatalf("active events %v", a.events)
	}
	if s, _ := b.m.State(idb); s != StateEstablished || b.m.Counters().Refused != 2 {
		t.Fatalf("after a stale REQ: state %v, refused %d, events %v", s, b.m.Counters().Refused, b.eventsOf(idb))
	}
}
