package cm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/mad"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/wire"
	"github.com/goroce/goroce/verbs"
)

// rawPeer is a forged CM peer: a plain UDP socket on a loopback address's
// RoCEv2 port, sending MADs to QP 1 of a device and reading the answers.
// Forged sources use the test process's addresses from testkit.Addr(101)
// on, which no device binds.
type rawPeer struct {
	uc   *net.UDPConn
	addr netip.AddrPort
}

func newRawPeer(t testing.TB, i int) *rawPeer {
	t.Helper()
	ap := netip.AddrPortFrom(testkit.Addr(i), verbs.DefaultUDPPort)
	uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(ap))
	if err != nil {
		t.Fatalf("raw peer on %v: %v", ap, err)
	}
	t.Cleanup(func() { _ = uc.Close() })
	return &rawPeer{uc: uc, addr: ap}
}

// send sends mad to QP 1 of the device at dst, framed as a GSI packet with
// a good ICRC.
func (p *rawPeer) send(t testing.TB, dst netip.Addr, madBytes []byte) {
	t.Helper()
	if err := p.trySend(dst, madBytes); err != nil {
		t.Fatal(err)
	}
}

// trySend is send for goroutines other than the test's.
func (p *rawPeer) trySend(dst netip.Addr, madBytes []byte) error {
	h := wire.Headers{
		BTH:  wire.BTHFields{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: wire.GSIQPN, AckReq: true},
		DETH: wire.DETHFields{QKey: wire.GSIQKey, SrcQP: wire.GSIQPN},
	}
	pkt := append(wire.AppendHeaders(nil, &h), madBytes...)
	to := netip.AddrPortFrom(dst, verbs.DefaultUDPPort)
	crc := wire.ICRCv4(p.addr.Addr().As4(), dst.As4(), 0, p.addr.Port(), to.Port(), pkt, nil)
	_, err := p.uc.WriteToUDPAddrPort(wire.AppendICRC(pkt, crc), to)
	return err
}

// receive returns the next MAD sent to the peer, or nil after wait.
func (p *rawPeer) receive(t testing.TB, wait time.Duration) []byte {
	t.Helper()
	buf := make([]byte, 2048)
	_ = p.uc.SetReadDeadline(time.Now().Add(wait))
	for {
		n, _, err := p.uc.ReadFromUDPAddrPort(buf)
		if err != nil {
			return nil
		}
		var pkt wire.Packet
		if pkt.Parse(buf[:n], 0) == nil && pkt.BTH.DestQP() == wire.GSIQPN && len(pkt.Payload) == mad.MADSize {
			return bytes.Clone(pkt.Payload)
		}
	}
}

// forgedREQ is a REQ from a forged peer for a port, with rdma_cm's header
// naming dst as its destination.
func forgedREQ(from, dst netip.Addr, ps PortSpace, port uint16, commID, qpn uint32, guid uint64) []byte {
	cma, err := (&mad.CMAHeader{SrcPort: 40000, Src: from, Dst: dst}).Append(nil)
	if err != nil {
		panic(err) // the test's own values
	}
	req := &mad.REQ{LocalCommID: commID, ServiceID: mad.RDMAServiceID(mad.PortSpace(ps), port), LocalCAGUID: guid,
		LocalQPN: qpn, ResponderResources: 1, InitiatorDepth: 1, RemoteCMResponseTimeout: 18,
		TransportServiceType: mad.TransportRC, StartingPSN: 100, LocalCMResponseTimeout: 18, RetryCount: 7,
		PKey: 0xFFFF, PathMTU: 5, RNRRetryCount: 7, MaxCMRetries: 15,
		Primary: mad.Path{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: mad.GIDFromAddr(from),
			RemoteGID: mad.GIDFromAddr(dst), HopLimit: 64, LocalACKTimeout: 17},
		PrivateData: cma}
	h := mad.CMHeader(mad.AttrREQ, uint64(commID)<<8|0xAB)
	b, err := mad.AppendMAD(nil, &h, req)
	if err != nil {
		panic(err)
	}
	return b
}

// TestAddressMismatch: a REQ for a port that has a listener on the device,
// but whose rdma_cm header names another address, is refused with REJ
// "consumer defined" and local comm ID 0, as the kernel refuses it; one
// for a port without a listener gets "invalid service ID".
func TestAddressMismatch(t *testing.T) {
	checkLeaks(t)
	b := newHost(t, 2)
	l, err := Listen(b.at(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := newRawPeer(t, 101)
	for _, tc := range []struct {
		dst    netip.Addr
		port   uint16
		reason mad.RejectReason
	}{
		{testkit.Addr(77), l.Addr().Port(), mad.RejectConsumer},
		{b.dev.Addr(), l.Addr().Port() + 1, mad.RejectInvalidServiceID},
	} {
		p.send(t, b.dev.Addr(), forgedREQ(p.addr.Addr(), tc.dst, PortSpaceTCP, tc.port, 0x1111, 0x22, 0x77))
		got := p.receive(t, testTimeout)
		var rej mad.REJ
		if err := rej.Parse(got); err != nil {
			t.Fatalf("answer to a REQ for %s:%d: %v", tc.dst, tc.port, err)
		}
		if rej.Reason != tc.reason || rej.LocalCommID != 0 || rej.RemoteCommID != 0x1111 || rej.MsgRejected != mad.RespondREQ {
			t.Errorf("REQ for %s:%d: REJ %+v, want reason %v", tc.dst, tc.port, rej, tc.reason)
		}
	}
	if records(b.dev) != 0 {
		t.Errorf("%d records", records(b.dev))
	}
}

// TestFlood: a listener flooded from many forged addresses with
// duplicate, malformed and half-finished REQs (answered with a REP that
// never gets its RTU) keeps accepting real connections, and what the
// flood makes the CM hold stays within its limits.
func TestFlood(t *testing.T) {
	checkLeaks(t)
	a, b := newHost(t, 1), newHost(t, 2)
	l, err := Listen(b.at(0))
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().Port()

	// The application: real requests are accepted, forged ones too (it
	// cannot tell them apart), with QPs it then drops when their RTU
	// never comes.
	var wg sync.WaitGroup
	accepted := make(chan *Conn, 64)
	serve, stop := context.WithCancel(context.Background())
	defer func() {
		stop()
		_ = l.Close()
		wg.Wait()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			req, err := l.Accept(serve)
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				qp, err := b.pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: b.cq, RecvCQ: b.cq,
					Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
				if err != nil {
					_ = req.Reject(nil)
					return
				}
				defer qp.Destroy()
				ctx, cancel := context.WithTimeout(serve, 3*time.Second)
				defer cancel()
				conn, err := req.Accept(ctx, qp, nil)
				if err == nil {
					accepted <- conn
					select {
					case <-conn.Done():
					case <-serve.Done():
					}
					_ = conn.Close()
				}
			}()
		}
	}()

	// The flood: 40 forged sources take turns sending REQs (a third of
	// them duplicates), malformed MADs and REQs for nobody's port. It runs
	// at the pace the server takes it: it waits while MADs are piling up
	// on their way to the CM, or the listener's backlog is filling. A
	// flood beyond what the CM can read is dropped at its queue (as a
	// kernel's is), and one beyond what the application accepts starves
	// it as a SYN flood does; what this tests is the CM's state under a
	// flood it keeps up with: a half-open table kept full of requests that
	// never finish, duplicates and malformed MADs.
	ab := agentOf(t, b.dev)
	peers := make([]*rawPeer, 40)
	for s := range peers {
		peers[s] = newRawPeer(t, 101+s)
	}
	flooding, floodDone := context.WithCancel(context.Background())
	var fwg sync.WaitGroup
	defer func() {
		floodDone()
		fwg.Wait()
	}()
	fwg.Add(1)
	go func() {
		defer fwg.Done()
		rng := rand.New(rand.NewPCG(1, 1))
		junk := make([]byte, mad.MADSize)
		var sent uint64
		for i := uint32(0); flooding.Err() == nil; i++ {
			if i%64 == 0 {
				for flooding.Err() == nil {
					c := b.dev.Counters()
					if sent-(c.GSIRcvd+c.GSIDropped)+uint64(ab.rx.len()) < rxBatch/2 && l.pending() < 32 {
						break
					}
					time.Sleep(time.Millisecond)
				}
			}
			s := int(i) % len(peers)
			p, n := peers[s], i/uint32(len(peers))
			switch n % 4 {
			case 0, 1:
				id := n / 3 // repeats: duplicates of the same REQ
				_ = p.trySend(b.dev.Addr(), forgedREQ(p.addr.Addr(), b.dev.Addr(), PortSpaceTCP, port, id+1, 0x100+id, uint64(s)+1))
			case 2:
				for j := range junk {
					junk[j] = byte(rng.Uint32())
				}
				binary.BigEndian.PutUint32(junk, 0x01070203) // a CM header's start, the rest noise
				_ = p.trySend(b.dev.Addr(), junk)
			case 3:
				_ = p.trySend(b.dev.Addr(), forgedREQ(p.addr.Addr(), b.dev.Addr(), PortSpaceTCP, port+1, n+1, 0x200, uint64(s)+1))
			}
			sent++
		}
	}()

	// Meanwhile, real connections.
	const real = 5
	// The flood fills the half-open table first (on an idle machine to
	// its limit: the oldest forgeries are then evicted).
	testkit.WaitFor(t, "half-open forgeries", func() bool {
		lock()
		defer unlock()
		return ab.mgr.HalfOpen() >= 100 || ab.mgr.Counters().Evicted > 0
	})
	var conns []*Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for i := range real {
		qa := a.qp(t, verbs.QPTypeRC)
		start := time.Now()
		c, err := Dial(testkit.Context(t), l.Addr().String(), qa, nil)
		t.Logf("real connection %d: %v", i, time.Since(start))
		if err != nil {
			floodDone()
			t.Fatalf("real connection %d during the flood: %v", i, err)
		}
		conns = append(conns, c)
	}
	floodDone()
	fwg.Wait()
	n := 0
	for n < real {
		select {
		case <-accepted:
			n++
		case <-testkit.Context(t).Done():
			t.Fatalf("%d of %d real connections accepted", n, real)
		}
	}
	lock()
	c, halfOpen, recs := ab.mgr.Counters(), ab.mgr.HalfOpen(), ab.mgr.Len()
	unlock()
	t.Logf("flood: %d REQs received, %d malformed, %d duplicates, %d limited, %d evicted, %d dropped (backlog), %d queue drops; %d half-open, %d records now",
		c.Received[0], c.Malformed, c.Duplicates, c.Limited, c.Evicted, c.Dropped, ab.rxDropped.Load(), halfOpen, recs)
	if c.Malformed == 0 || c.Duplicates == 0 {
		t.Errorf("the flood did not reach the CM: %+v", c)
	}
	if halfOpen > 1024 || recs > 65536 {
		t.Errorf("%d half-open requests, %d records: beyond the limits", halfOpen, recs)
	}
}

// TestPeerVanishes: an active peer that sends its REQ and vanishes (no
// RTU, no REJ) costs the passive side its REP's retransmissions: Accept
// then fails with ErrTimeout, the peer is sent REJ "timeout", and nothing
// is left.
func TestPeerVanishes(t *testing.T) {
	checkLeaks(t)
	b := newHost(t, 2)
	l, err := Listen(b.at(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := newRawPeer(t, 101)
	req := forgedREQ(p.addr.Addr(), b.dev.Addr(), PortSpaceTCP, l.Addr().Port(), 0x4242, 0x33, 0x99)
	// The REQ's own response timeout (8: 1 ms) and retries (1) pace the
	// REP's retransmission.
	var m mad.REQ
	if err := m.Parse(req); err != nil {
		t.Fatal(err)
	}
	m.LocalCMResponseTimeout, m.MaxCMRetries = 8, 1
	h, _ := mad.ParseCMHeader(req)
	req, err = mad.AppendMAD(nil, &h, &m)
	if err != nil {
		t.Fatal(err)
	}
	p.send(t, b.dev.Addr(), req)
	r, err := l.Accept(testkit.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Accept(testkit.Context(t), b.qp(t, verbs.QPTypeRC), nil)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Accept of a vanished peer's request: %v", err)
	}
	var sawREP, sawREJ bool
	for msg := p.receive(t, time.Second); msg != nil; msg = p.receive(t, 100*time.Millisecond) {
		hh, err := mad.ParseCMHeader(msg)
		if err != nil {
			continue
		}
		switch hh.AttrID {
		case mad.AttrREP:
			sawREP = true
		case mad.AttrREJ:
			var rej mad.REJ
			sawREJ = rej.Parse(msg) == nil && rej.Reason == mad.RejectTimeout
		}
	}
	if !sawREP || !sawREJ {
		t.Errorf("the vanished peer was sent REP %v, REJ timeout %v", sawREP, sawREJ)
	}
	if records(b.dev) != 0 {
		t.Errorf("%d records left", records(b.dev))
	}
}
