package cm

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/mad"
	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// initWithRecv prepares qp (INIT, no remote rights) and posts a receive
// into buf's first 64 bytes.
func initWithRecv(t *testing.T, h *host, qp *verbs.QP, wrid uint64) {
	t.Helper()
	if err := PrepareQP(qp); err != nil {
		t.Fatal(err)
	}
	if a, _, _ := qp.Query(0); a.QPState != verbs.QPStateInit || a.QPAccessFlags != 0 {
		t.Fatalf("prepared QP in %v with rights %v, want INIT with none", a.QPState, a.QPAccessFlags)
	}
	if err := qp.PostRecv(&verbs.RecvWR{WRID: wrid, SGList: []verbs.SGE{h.mr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
}

// TestPrepostedReceives: QPs handed over in INIT, without remote rights
// and with receives posted, keep their receives and get the connection's
// rights: each side SENDs the moment its call returns, and a WRITE (which
// needs REMOTE_WRITE) lands.
func TestPrepostedReceives(t *testing.T) {
	checkLeaks(t)
	a, b := newHost(t, 1), newHost(t, 2)
	l, err := Listen(b.at(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	qa, qb := a.qp(t, verbs.QPTypeRC), b.qp(t, verbs.QPTypeRC)
	initWithRecv(t, a, qa, 10)
	initWithRecv(t, b, qb, 20)
	send := func(h *host, qp *verbs.QP, msg string) error {
		copy(h.buf[1024:], msg)
		return qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{h.mr.SGE(1024, len(msg))}})
	}
	go func() {
		req, err := l.Accept(testkit.Context(t))
		if err != nil {
			return
		}
		if c, err := req.Accept(testkit.Context(t), qb, nil); err == nil {
			_ = send(b, qb, "from b")
			<-c.Done()
			_ = c.Close()
		}
	}()
	ca, err := Dial(testkit.Context(t), l.Addr().String(), qa, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := send(a, qa, "from a"); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]string{}
	for len(got) < 2 {
		wc := rdmatest.WaitOne(t, a.cq)
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("a: %+v", wc)
		}
		if wc.Opcode == verbs.WCRecv {
			got[wc.WRID] = string(a.buf[:wc.ByteLen])
		} else {
			got[0] = "sent"
		}
	}
	if got[10] != "from b" {
		t.Errorf("a received %q", got[10])
	}
	if wc := rdmatest.WaitOne(t, b.cq); wc.Status != verbs.WCSuccess {
		t.Fatalf("b: %+v", wc)
	}
	attr, _, _ := qa.Query(0)
	if attr.QPAccessFlags&verbs.AccessRemoteWrite == 0 {
		t.Errorf("a's rights after the connection: %v", attr.QPAccessFlags)
	}
	if err := qa.PostSend(&verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(1024, 6)}, RDMA: verbs.RDMAParams{RemoteAddr: b.mr.IOVA() + 2048, RKey: b.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	for {
		wc := rdmatest.WaitOne(t, a.cq)
		if wc.WRID == 3 {
			if wc.Status != verbs.WCSuccess || !bytes.Equal(b.buf[2048:2054], []byte("from a")) {
				t.Fatalf("WRITE %+v", wc)
			}
			break
		}
	}
	_ = ca.Close()
}

// TestPrepareQP: PrepareQP takes RC, UC and UD QPs from RESET to INIT
// (UD with UDPQKey), leaves one in INIT as it is, and refuses the other
// states and nil.
func TestPrepareQP(t *testing.T) {
	checkLeaks(t)
	h := newHost(t, 1)
	for _, typ := range []verbs.QPType{verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD} {
		qp := h.qp(t, typ)
		for range 2 { // the second call finds it in INIT
			if err := PrepareQP(qp); err != nil {
				t.Fatalf("%v: %v", typ, err)
			}
			a, _, err := qp.Query(0)
			if err != nil || a.QPState != verbs.QPStateInit || a.PortNum != 1 || a.QPAccessFlags != 0 ||
				typ == verbs.QPTypeUD && a.QKey != UDPQKey {
				t.Fatalf("%v: prepared into %+v, %v", typ, a, err)
			}
		}
		if err := qp.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{h.mr.SGE(0, 64)}}); err != nil {
			t.Errorf("%v: a receive on the prepared QP: %v", typ, err)
		}
		if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
			t.Fatal(err)
		}
		testkit.WantErr(t, PrepareQP(qp), verbs.ErrInvalidState)
	}
	testkit.WantErr(t, PrepareQP(nil), verbs.ErrInvalidArgument)
}

// TestSameDevice: both ends on one device (as rdma-core's tests run
// their players), over IPv4 and over IPv6's ::1.
func TestSameDevice(t *testing.T) {
	// ::1 is every process's: the device binds a port of this one's.
	for _, cfg := range []verbs.DeviceConfig{{Addr: testkit.Addr(3)}, {Addr: netip.IPv6Loopback(), Port: testkit.Port()}} {
		t.Run(cfg.Addr.String(), func(t *testing.T) {
			checkLeaks(t)
			h := newHostConfig(t, cfg)
			l, err := Listen(h.at(0))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			qa, qb := h.qp(t, verbs.QPTypeRC), h.qp(t, verbs.QPTypeRC)
			done := acceptOne(t, l, qb, &Params{PrivateData: []byte("same")})
			ca, err := Dial(testkit.Context(t), l.Addr().String(), qa, nil)
			if err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			if !bytes.HasPrefix(ca.Remote().PrivateData, []byte("same")) || ca.Remote().QPN != qb.QPN() ||
				r.conn.Remote().Addr.Addr() != h.dev.Addr() {
				t.Errorf("remote %+v / %+v", ca.Remote(), r.conn.Remote())
			}
			if err := qa.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{h.mr.SGE(0, 8)}, RDMA: verbs.RDMAParams{RemoteAddr: h.mr.IOVA() + 100, RKey: h.mr.RKey()}}); err != nil {
				t.Fatal(err)
			}
			if wc := rdmatest.WaitOne(t, h.cq); wc.Status != verbs.WCSuccess {
				t.Fatalf("WRITE %+v", wc)
			}
			_ = ca.Close()
			<-r.conn.Done()
			testkit.WaitFor(t, "timewait", func() bool { return records(h.dev) == 0 })
		})
	}
}

// TestDeviceRemoval: closing a device ends its connections: the local
// Conn with ErrDeviceRemoved, the peer's with ErrDisconnected (the CM
// sends a DREQ as it goes); a listener on it returns ErrDeviceRemoved.
func TestDeviceRemoval(t *testing.T) {
	checkLeaks(t)
	a, b := newHost(t, 1), newHost(t, 2)
	ca, cb, _, _ := dialPair(t, a, b, nil, nil)
	l, err := Listen(a.at(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.dev.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Conn{ca, cb} {
		select {
		case <-c.Done():
		case <-testkit.Context(t).Done():
			t.Fatal("a connection did not end")
		}
	}
	if !errors.Is(ca.Err(), ErrDeviceRemoved) || !errors.Is(cb.Err(), ErrDisconnected) {
		t.Errorf("errors: %v, %v", ca.Err(), cb.Err())
	}
	if _, err := l.Accept(testkit.Context(t)); !errors.Is(err, ErrDeviceRemoved) {
		t.Errorf("Accept on a closed device's listener: %v", err)
	}
	_ = l.Close()
	_ = cb.Close()
	_ = ca.Close()
}

// TestBacklog: a listener holds at most its backlog of requests not yet
// taken; the next REQ is dropped unanswered, and its retransmission gets
// through once Accept made room.
func TestBacklog(t *testing.T) {
	checkLeaks(t)
	a, b := newHost(t, 1), newHost(t, 2)
	l, err := ListenConfig{Backlog: 1}.Listen(context.Background(), b.at(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := &Params{CMResponseTimeout: 12} // REQs retransmitted every ~0.5 s
	type result struct {
		c   *Conn
		err error
	}
	dials := make(chan result, 2)
	for range 2 {
		qa := a.qp(t, verbs.QPTypeRC)
		go func() {
			c, err := Dial(testkit.Context(t), l.Addr().String(), qa, p)
			dials <- result{c, err}
		}()
	}
	ab := agentOf(t, b.dev)
	testkit.WaitFor(t, "a dropped REQ", func() bool { return ab.counters().Dropped > 0 })
	for range 2 {
		req, err := l.Accept(testkit.Context(t))
		if err != nil {
			t.Fatal(err)
		}
		qb := b.qp(t, verbs.QPTypeRC)
		go func() {
			if c, err := req.Accept(testkit.Context(t), qb, nil); err == nil {
				<-c.Done()
				_ = c.Close()
			}
		}()
	}
	for range 2 {
		r := <-dials
		if r.err != nil {
			t.Fatal(r.err)
		}
		_ = r.c.Close()
	}
}

// TestRTULost: when the RTU is lost, the passive side's connection is
// established by its QP's first packet (EventCommEst), not by the REP's
// retransmission.
func TestRTULost(t *testing.T) {
	checkLeaks(t)
	a, b := newHost(t, 1), newHost(t, 2)
	drop := func(_ netip.AddrPort, m []byte) bool {
		h, err := mad.ParseCMHeader(m)
		return err == nil && h.AttrID == mad.AttrRTU
	}
	rxFilter.Store(&drop)
	defer rxFilter.Store(nil)
	l, err := Listen(b.at(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	qa, qb := a.qp(t, verbs.QPTypeRC), b.qp(t, verbs.QPTypeRC)
	initWithRecv(t, b, qb, 1)
	done := acceptOne(t, l, qb, nil)
	// The REQ's response timeout sets the REP's retransmission period: 22
	// is 16 s, longer than this test waits, so only the first packet can
	// establish the passive side.
	ca, err := Dial(testkit.Context(t), l.Addr().String(), qa, &Params{CMResponseTimeout: 22})
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	if err := qa.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 4)}}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.conn.Close()
	if c := agentOf(t, b.dev).counters(); c.Received[4] != 0 || c.Resent != 0 {
		t.Errorf("passive CM received %d RTUs, resent %d MADs: want the first packet to establish", c.Received[4], c.Resent)
	}
}
