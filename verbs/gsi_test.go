package verbs_test

import (
	"bytes"
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/goroce/goroce/internal/gsi"
	"github.com/goroce/goroce/internal/netio"
	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/wire"
	"github.com/goroce/goroce/verbs"
)

// madRecorder is a gsi.Receiver that keeps what it gets.
type madRecorder struct {
	mu      sync.Mutex
	mads    [][]byte
	froms   []netip.AddrPort
	tos     []netip.Addr
	commEst []uint32
}

func (r *madRecorder) ReceiveMAD(from netip.AddrPort, to netip.Addr, mad []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mads = append(r.mads, bytes.Clone(mad))
	r.froms = append(r.froms, from)
	r.tos = append(r.tos, to)
}

func (r *madRecorder) CommEstablished(qpn uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.commEst = append(r.commEst, qpn)
}

func (r *madRecorder) count() (mads, commEst int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.mads), len(r.commEst)
}

// portOf returns d's QP 1 from the registry.
func portOf(t testing.TB, d *verbs.Device) gsi.Port {
	t.Helper()
	p := gsi.Lookup(d.Addr())
	if p == nil || p.Device() != d {
		t.Fatalf("no GSI port registered for %v", d.Addr())
	}
	return p
}

// testMAD is a recognisable 256-byte MAD.
func testMAD(seed byte) []byte {
	m := make([]byte, gsi.MADSize)
	fill(m, seed)
	return m
}

// TestGSIExchange: a device's QP 1 sends a MAD to another's, which hands
// it to its receiver with the sender's address and QP 1's constant
// source port; the registry follows the devices' lives.
func TestGSIExchange(t *testing.T) {
	a := rdmatest.OpenDevice(t, verbs.DeviceConfig{Addr: testkit.Addr(1)})
	b := rdmatest.OpenDevice(t, verbs.DeviceConfig{Addr: testkit.Addr(2)})
	pa, pb := portOf(t, a), portOf(t, b)
	if pa.NodeGUID() != uint64(a.Query().NodeGUID) || pa.UDPPort() != a.UDPPort() || pa.Addr() != a.Addr() {
		t.Errorf("port of a: GUID %#x addr %v:%d", pa.NodeGUID(), pa.Addr(), pa.UDPPort())
	}
	var rb madRecorder
	pb.SetReceiver(&rb)
	for i := range 3 {
		if err := pa.Send(netip.AddrPortFrom(b.Addr(), b.UDPPort()), testMAD(byte(i))); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, "three MADs", func() bool { n, _ := rb.count(); return n == 3 })
	for i, m := range rb.mads {
		if !bytes.Equal(m, testMAD(byte(i))) {
			t.Errorf("MAD %d differs", i)
		}
		if want := netip.AddrPortFrom(a.Addr(), netio.SourcePortForQPN(wire.GSIQPN)); rb.froms[i] != want {
			t.Errorf("MAD %d from %v, want %v", i, rb.froms[i], want)
		}
		if rb.tos[i] != b.Addr() {
			t.Errorf("MAD %d to %v", i, rb.tos[i])
		}
	}
	if ca, cb := a.Counters(), b.Counters(); ca.GSISent != 3 || cb.GSIRcvd != 3 || cb.GSIDropped != 0 || cb.DroppedUnknownQP != 0 {
		t.Errorf("counters: a sent %d, b received %d, dropped %d, unknown QP %d", ca.GSISent, cb.GSIRcvd, cb.GSIDropped, cb.DroppedUnknownQP)
	}
	if err := pa.Send(netip.AddrPortFrom(b.Addr(), b.UDPPort()), make([]byte, 100)); err == nil {
		t.Error("Send of a 100-byte MAD succeeded")
	}

	// Without a receiver the MAD is counted and dropped.
	pb.SetReceiver(nil)
	if err := pa.Send(netip.AddrPortFrom(b.Addr(), b.UDPPort()), testMAD(9)); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "a dropped MAD", func() bool { return b.Counters().GSIDropped == 1 })

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if gsi.Lookup(b.Addr()) != nil {
		t.Error("a closed device's port is still registered")
	}
	if err := pb.Send(netip.AddrPortFrom(a.Addr(), a.UDPPort()), testMAD(1)); err == nil {
		t.Error("QP 1 of a closed device sent")
	}
}

// gsiPacket is a packet to QP 1 shaped by the arguments.
func gsiPacket(op wire.Opcode, qkey uint32, srcQP wire.QPN, pkey uint16, payload []byte) []byte {
	h := wire.Headers{
		BTH:  wire.BTHFields{Opcode: op, PKey: pkey, DestQP: wire.GSIQPN, PadCount: wire.PadCount(len(payload))},
		DETH: wire.DETHFields{QKey: qkey, SrcQP: srcQP},
	}
	b := wire.AppendHeaders(nil, &h)
	b = append(b, payload...)
	return wire.AppendPad(b, wire.PadCount(len(payload)))
}

// TestGSIMalformed: packets for QP 1 that are not a well-formed MAD are
// counted as dropped and never reach the receiver; a good one does.
func TestGSIMalformed(t *testing.T) {
	d := rdmatest.OpenDevice(t, verbs.DeviceConfig{Addr: testkit.Addr(1)})
	var r madRecorder
	portOf(t, d).SetReceiver(&r)
	uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(testkit.Addr(3), 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	src := uc.LocalAddr().(*net.UDPAddr).AddrPort()
	dst := netip.AddrPortFrom(d.Addr(), d.UDPPort())
	send := func(pkt []byte) {
		t.Helper()
		crc := wire.ICRCv4(src.Addr().As4(), dst.Addr().As4(), 0, src.Port(), dst.Port(), pkt, nil)
		if _, err := uc.WriteToUDPAddrPort(wire.AppendICRC(pkt, crc), dst); err != nil {
			t.Fatal(err)
		}
	}
	mad := testMAD(7)
	bad := [][]byte{
		gsiPacket(wire.UDSendOnly, 0x1234, wire.GSIQPN, wire.DefaultPKey, mad),             // Q_Key
		gsiPacket(wire.UDSendOnly, wire.GSIQKey, 5, wire.DefaultPKey, mad),                 // source QP
		gsiPacket(wire.UDSendOnly, wire.GSIQKey, wire.GSIQPN, 0x7FFF, mad),                 // P_Key
		gsiPacket(wire.UDSendOnly, wire.GSIQKey, wire.GSIQPN, wire.DefaultPKey, mad[:200]), // length
		gsiPacket(wire.UDSendOnlyWithImmediate, wire.GSIQKey, wire.GSIQPN, wire.DefaultPKey, mad),
		rawPacket(src, dst, 1)[:wire.BTHLen+4], // an RC SEND to QP 1 (ICRC appended again below)
	}
	for _, pkt := range bad {
		send(pkt)
	}
	testkit.WaitFor(t, "six drops", func() bool { return d.Counters().GSIDropped == uint64(len(bad)) })
	send(gsiPacket(wire.UDSendOnly, wire.GSIQKey, wire.GSIQPN, wire.DefaultPKey, mad))
	testkit.WaitFor(t, "the good MAD", func() bool { n, _ := r.count(); return n == 1 })
	if !bytes.Equal(r.mads[0], mad) || r.froms[0] != src {
		t.Errorf("received MAD from %v differs", r.froms[0])
	}
	if c := d.Counters(); c.GSIRcvd != 1 || c.GSIDropped != uint64(len(bad)) || c.DroppedUnknownQP != 0 {
		t.Errorf("counters: received %d, dropped %d, unknown QP %d", c.GSIRcvd, c.GSIDropped, c.DroppedUnknownQP)
	}
}

// TestCommEst: an RC QP in RTR that receives its first packet raises
// EventCommEst, once, and tells the CM's receiver; a QP moved on to RTS
// and a second packet raise nothing more, a new connection raises it
// again, and one whose first packet finds it in RTS only tells the CM.
func TestCommEst(t *testing.T) {
	a, b := newEnd(t, 1, rdmatest.EndOptions{}), newEnd(t, 2, rdmatest.EndOptions{})
	var r madRecorder
	portOf(t, b.Dev).SetReceiver(&r)
	link := rdmatest.DefaultLink()
	rdmatest.LinkQP(t, a.QP, link, 100, rdmatest.PeerOf(t, b.QP, 200))
	// b only to RTR: it takes a's SENDs but cannot answer them yet.
	steps := rdmatest.Transitions(verbs.QPTypeRC, link, 200, rdmatest.PeerOf(t, a.QP, 100))
	rdmatest.Modify(t, b.QP, steps[0])
	rdmatest.Modify(t, b.QP, steps[1])
	exchange := func(wrid uint64) {
		t.Helper()
		rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: wrid, SGList: []verbs.SGE{b.MR.SGE(0, 64)}})
		rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: wrid, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(0, 8)}})
		rdmatest.WaitN(t, b.CQ, 1)
	}
	for i := range 2 {
		exchange(uint64(i))
	}
	_, n := r.count()
	if n != 1 || r.commEst[0] != b.QP.QPN() {
		t.Fatalf("CM told of %v, want QP %#x once", r.commEst, b.QP.QPN())
	}
	events := pendingEvents(b.Dev)
	if len(events) != 1 || events[0].Type != verbs.EventCommEst || events[0].QP != b.QP {
		t.Fatalf("async events %+v, want one COMM_EST for b's QP", events)
	}

	// RTS: more packets, no more events.
	rdmatest.Modify(t, b.QP, steps[2])
	exchange(3)
	if evs := pendingEvents(b.Dev); len(evs) != 0 {
		t.Errorf("events in RTS: %+v", evs)
	}

	// A new connection of the same QP raises it again (a has sent PSNs
	// 100-102).
	reset := rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateReset}, Mask: verbs.QPAttrState}
	rdmatest.Modify(t, b.QP, reset)
	steps = rdmatest.Transitions(verbs.QPTypeRC, link, 200, rdmatest.PeerOf(t, a.QP, 103))
	rdmatest.Modify(t, b.QP, steps[0])
	rdmatest.Modify(t, b.QP, steps[1])
	exchange(4)
	if evs := pendingEvents(b.Dev); len(evs) != 1 || evs[0].Type != verbs.EventCommEst {
		t.Errorf("events of the second connection: %+v", evs)
	}
	if _, n := r.count(); n != 2 {
		t.Errorf("CM told %d times, want 2", n)
	}

	// A third connection reaches RTS before its first packet: no event
	// (IBA raises it in RTR), but the CM is told.
	rdmatest.Modify(t, b.QP, reset)
	rdmatest.LinkQP(t, b.QP, link, 300, rdmatest.PeerOf(t, a.QP, 104))
	exchange(5)
	if evs := pendingEvents(b.Dev); len(evs) != 0 {
		t.Errorf("events of a connection in RTS: %+v", evs)
	}
	if _, n := r.count(); n != 3 || r.commEst[2] != b.QP.QPN() {
		t.Errorf("CM told %v", r.commEst)
	}
}

// FuzzGSIReceive drives QP 1's receive path with arbitrary packets
// addressed to it (the bytes from the BTH on, as the socket hands them
// over after the ICRC check): every packet is either delivered, exactly
// when it is a well-formed MAD and then byte for byte, or counted as
// dropped; nothing panics.
func FuzzGSIReceive(f *testing.F) {
	mad := testMAD(3)
	f.Add(gsiPacket(wire.UDSendOnly, wire.GSIQKey, wire.GSIQPN, wire.DefaultPKey, mad))
	f.Add(gsiPacket(wire.UDSendOnly, 0x1234, wire.GSIQPN, wire.DefaultPKey, mad))
	f.Add(gsiPacket(wire.UDSendOnly, wire.GSIQKey, wire.GSIQPN, wire.DefaultPKey, mad[:17]))
	f.Add(gsiPacket(wire.UDSendOnlyWithImmediate, wire.GSIQKey, wire.GSIQPN, wire.DefaultPKey, mad))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p wire.Packet
		pkt := append(bytes.Clone(b), 0, 0, 0, 0) // the ICRC the socket checked
		if p.Parse(pkt, 0) != nil || p.BTH.DestQP() != wire.GSIQPN {
			return // the socket's malformed count, or another QP's packet
		}
		var r madRecorder
		local := testkit.Addr(1) // GSIReceive opens no socket
		from := netip.AddrPortFrom(testkit.Addr(2), 55410)
		rcvd, dropped, want, err := verbs.GSIReceive(&p, from, local, &r)
		n, _ := r.count()
		switch {
		case rcvd+dropped != 1:
			t.Fatalf("received %d, dropped %d", rcvd, dropped)
		case err != nil && n != 0:
			t.Fatalf("delivered a packet checkGSI refuses: %v", err)
		case err == nil && (n != 1 || !bytes.Equal(r.mads[0], want) || len(want) != gsi.MADSize):
			t.Fatalf("well-formed MAD not delivered whole (%d delivered)", n)
		case n == 1 && (r.froms[0] != from || r.tos[0] != local):
			t.Fatalf("delivered from %v to %v", r.froms[0], r.tos[0])
		}
	})
}

// TestFlowLabelSourcePort: a connected QP whose address vector carries a
// flow label sends from the port rdma_get_udp_sport derives from it (what
// rxe does for rdma_cm's connections); without one, from both QPNs.
func TestFlowLabelSourcePort(t *testing.T) {
	a, b := newEnd(t, 1, rdmatest.EndOptions{}), newEnd(t, 2, rdmatest.EndOptions{})
	steps := rdmatest.Transitions(verbs.QPTypeRC, rdmatest.DefaultLink(), 1, rdmatest.PeerOf(t, b.QP, 1))
	rtr := func(fl uint32) {
		t.Helper()
		rdmatest.Modify(t, a.QP, steps[0])
		s := steps[1]
		s.Attr.AHAttr.FlowLabel = fl
		rdmatest.Modify(t, a.QP, s)
	}
	rtr(0x2441) // rxe sent from 58433 for this label (rping against goroce)
	if p := verbs.QPSourcePort(a.QP); p != 58433 || p != netio.SourcePortForFlowLabel(0x2441) {
		t.Errorf("source port %d for flow label 0x2441, want 58433", p)
	}
	rdmatest.Modify(t, a.QP, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateReset}, Mask: verbs.QPAttrState})
	rtr(0)
	if p, want := verbs.QPSourcePort(a.QP), netio.SourcePortForFlow(wire.QPN(a.QP.QPN()), wire.QPN(b.QP.QPN())); p != want {
		t.Errorf("source port %d without a flow label, want %d", p, want)
	}
}
