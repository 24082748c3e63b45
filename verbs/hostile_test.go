package verbs_test

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/transport"
	"github.com/goroce/goroce/internal/wire"
	"github.com/goroce/goroce/verbs"
)

// The hostile tests play a remote peer by hand: a plain UDP socket sends
// packets built here, with a correct ICRC or a wrong one, to a device whose
// RC QP believes it is connected to that socket, and reads what the device
// answers. Everything the receive path does runs for real: parse, ICRC,
// QP lookup, source and P_Key checks, PSN window, key resolution, bounds,
// access rights, execution, acknowledgement.

// rawPeer is a UDP socket on the RoCEv2 port acting as a remote RC QP.
type rawPeer struct {
	conn *net.UDPConn
	addr netip.AddrPort
	buf  []byte
}

func newRawPeer(t testing.TB, addr netip.Addr, port uint16) *rawPeer {
	t.Helper()
	ap := netip.AddrPortFrom(addr, port)
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(ap))
	if err != nil {
		t.Fatalf("peer socket on %v: %v", ap, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	// The port the socket got (port 0 asks for any): the ICRC covers it.
	ap = netip.AddrPortFrom(addr, uint16(c.LocalAddr().(*net.UDPAddr).Port))
	return &rawPeer{conn: c, addr: ap, buf: make([]byte, 1<<16)}
}

// send sends the transport bytes pkt (BTH through pad) to dst with the
// ICRC of the exact bytes, or its complement when badICRC.
func (p *rawPeer) send(t testing.TB, dst netip.AddrPort, pkt []byte, badICRC bool) {
	t.Helper()
	out := append([]byte(nil), pkt...)
	if len(pkt) >= wire.BTHLen {
		crc := icrcExact(p.addr, dst, pkt)
		if badICRC {
			crc = ^crc
		}
		out = wire.AppendICRC(out, crc)
	}
	if _, err := p.conn.WriteToUDPAddrPort(out, dst); err != nil {
		t.Fatalf("peer send: %v", err)
	}
}

// icrcExact computes the ICRC of pkt (BTH through pad) over a synthesised
// IPv4/UDP header, hashing the pad bytes as they are.
func icrcExact(src, dst netip.AddrPort, pkt []byte) uint32 {
	udpLen := wire.UDPHeaderLen + len(pkt) + wire.ICRCLen
	ip := make([]byte, wire.IPv4MinHeaderLen)
	wire.IPv4(ip).Encode(&wire.IPv4Fields{
		TotalLength: uint16(wire.IPv4MinHeaderLen + udpLen),
		Flags:       wire.IPv4DontFragment,
		TTL:         64,
		Protocol:    wire.IPProtocolUDP,
		Src:         src.Addr().As4(),
		Dst:         dst.Addr().As4(),
	})
	udp := make([]byte, wire.UDPHeaderLen)
	wire.UDP(udp).Encode(&wire.UDPFields{SrcPort: src.Port(), DstPort: dst.Port(), Length: uint16(udpLen)})
	return wire.ICRC(ip, udp, pkt)
}

// drain returns the datagrams queued on the socket without waiting for
// more, each parsed (ICRC stripped) and copied. It reads with
// MSG_DONTWAIT: a read deadline in the past would not read at all.
func (p *rawPeer) drain(t testing.TB) []*wire.Packet {
	t.Helper()
	var out []*wire.Packet
	for _, b := range p.drainRaw(t) {
		pkt := new(wire.Packet)
		if err := pkt.Parse(b, 0); err != nil {
			t.Fatalf("device sent a malformed packet: %v", err)
		}
		out = append(out, pkt)
	}
	return out
}

// drainRaw returns copies of the datagrams queued on the socket, without
// waiting for more.
func (p *rawPeer) drainRaw(t testing.TB) [][]byte {
	t.Helper()
	rc, err := p.conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for {
		var (
			n    int
			rerr error
		)
		if err := rc.Read(func(fd uintptr) bool {
			n, _, rerr = syscall.Recvfrom(int(fd), p.buf, syscall.MSG_DONTWAIT)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if rerr == syscall.EAGAIN {
			return out
		}
		if rerr != nil {
			t.Fatalf("peer receive: %v", rerr)
		}
		out = append(out, append([]byte(nil), p.buf[:n]...))
	}
}

// The target's memory: one Go allocation holding every region, with
// canary bytes around and between them. Only rw may change; ro, noRemote,
// the stale region and the other PD's region are registered (or were) but
// the target QP may not write them.
const (
	arenaLen   = 16384
	rwOff      = 1024 // remote write, read, atomic; receives land here too
	rwLen      = 4096
	roOff      = 6144 // remote read only
	roLen      = 1024
	noRemOff   = 8192 // local write only
	noRemLen   = 512
	staleOff   = 9216 // registered with every right, then deregistered
	staleLen   = 512
	otherPDOff = 10240 // every right, in another PD
	otherPDLen = 512
	recvSlot   = 256 // receive buffers at the end of rw
	recvSlots  = 4
	recvBase   = rwOff + rwLen - recvSlot*recvSlots

	hostileMTU     = 1024
	hostilePeerQPN = 0xABCDE
	hostileRQPSN   = 0xFFFFF0 // the first expected PSN: the PSNs cross the 24-bit wrap
)

// hostileTarget is a device with an RC QP in RTS "connected" to a rawPeer.
type hostileTarget struct {
	dev   *verbs.Device
	pd    *verbs.PD
	cq    *verbs.CQ
	qp    *verbs.QP
	peer  *rawPeer
	other *rawPeer // a third address, not the QP's peer
	dst   netip.AddrPort

	arena   []byte
	initial []byte // the arena as it was before any packet
	rw, ro  *verbs.MR
	noRem   *verbs.MR
	otherMR *verbs.MR
	stale   uint32 // rkey of the deregistered region

	// rqpsn is the PSN the responder expects first. Each reset moves it
	// far away, so that an answer of the device still on its way from an
	// earlier connection is told apart by its PSN.
	rqpsn psn.PSN
}

// newHostileTarget opens the target device and the peer sockets, all on
// UDP port port.
func newHostileTarget(t testing.TB, port uint16) *hostileTarget {
	t.Helper()
	return newHostileTargetConfig(t, verbs.DeviceConfig{Addr: testkit.Addr(1), Port: port})
}

// newHostileTargetConfig is newHostileTarget for a device opened with cfg.
func newHostileTargetConfig(t testing.TB, cfg verbs.DeviceConfig) *hostileTarget {
	t.Helper()
	port := cfg.Port
	if port == 0 {
		port = verbs.DefaultUDPPort
	}
	h := &hostileTarget{
		dev:   rdmatest.OpenDevice(t, cfg),
		peer:  newRawPeer(t, testkit.Addr(2), port),
		other: newRawPeer(t, testkit.Addr(3), port),
		arena: make([]byte, arenaLen),
	}
	h.dst = netip.AddrPortFrom(h.dev.Addr(), h.dev.UDPPort())
	h.rqpsn = hostileRQPSN
	for i := range h.arena {
		h.arena[i] = byte(i*7) ^ 0xA5
	}
	h.initial = append([]byte(nil), h.arena...)
	h.pd = rdmatest.PD(t, h.dev)
	pd2 := rdmatest.PD(t, h.dev)
	h.cq = rdmatest.CQ(t, h.dev, 256)
	h.rw = rdmatest.MR(t, h.pd, h.arena[rwOff:rwOff+rwLen], rdmatest.RCAccess)
	h.ro = rdmatest.MR(t, h.pd, h.arena[roOff:roOff+roLen], verbs.AccessRemoteRead)
	h.noRem = rdmatest.MR(t, h.pd, h.arena[noRemOff:noRemOff+noRemLen], verbs.AccessLocalWrite)
	h.otherMR = rdmatest.MR(t, pd2, h.arena[otherPDOff:otherPDOff+otherPDLen], rdmatest.RCAccess)
	stale := rdmatest.MR(t, h.pd, h.arena[staleOff:staleOff+staleLen], rdmatest.RCAccess)
	h.stale = stale.RKey()
	if err := stale.Dereg(); err != nil {
		t.Fatal(err)
	}
	var err error
	h.qp, err = h.pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: h.cq, RecvCQ: h.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2}})
	if err != nil {
		t.Fatal(err)
	}
	h.connect(t, recvSlots)
	return h
}

// connect moves the QP from RESET to RTS toward the peer and posts n
// receives into the slots at the end of rw.
func (h *hostileTarget) connect(t testing.TB, n int) {
	t.Helper()
	rdmatest.Modify(t, h.qp, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: rdmatest.RCAccess},
		Mask: verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags})
	rdmatest.Modify(t, h.qp, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPNum: hostilePeerQPN,
		RQPSN: uint32(h.rqpsn), MaxDestRdAtomic: 4, MinRNRTimer: 1,
		AHAttr: verbs.AddressVector{DGID: verbs.GIDFromAddr(h.peer.addr.Addr()), SGIDIndex: 1, HopLimit: 64, IsGlobal: true, PortNum: 1,
			UDPPort: h.peer.addr.Port()}},
		Mask: verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer})
	rdmatest.Modify(t, h.qp, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: 0x100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
		Mask: verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic})
	for i := range n {
		rdmatest.PostRecv(t, h.qp, verbs.RecvWR{WRID: uint64(100 + i), SGList: []verbs.SGE{h.rw.SGE(recvBase-rwOff+i*recvSlot, recvSlot)}})
	}
}

// reset brings the QP back to a fresh RTS with n receives posted, and
// empties the CQ and the event queue.
func (h *hostileTarget) reset(t testing.TB, n int) {
	t.Helper()
	rdmatest.Modify(t, h.qp, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateReset}, Mask: verbs.QPAttrState})
	rdmatest.Poll(t, h.cq)
	h.drainEvents()
	h.rqpsn = h.rqpsn.Add(0x20_0000 + 0x1357)
	h.connect(t, n)
	h.peer.drain(t)
	h.other.drain(t)
}

func (h *hostileTarget) drainEvents() []verbs.AsyncEvent {
	var evs []verbs.AsyncEvent
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for {
		ev, err := h.dev.GetAsyncEvent(ctx)
		if err != nil {
			return evs
		}
		evs = append(evs, ev)
	}
}

// fence returns the device's answers until it has answered a zero-length
// READ sent now at the expected PSN: on loopback they arrive in the order
// sent, so every answer to an earlier packet is among them. The QP must
// accept requests; the fence's own response is not returned.
func (h *hostileTarget) fence(t testing.TB) []*wire.Packet {
	t.Helper()
	p := h.request(wire.RCRDMAReadRequest, 0)
	seen := func() uint64 { c := h.dev.Counters(); return c.RcvdPkts + c.Malformed + c.ICRCErrors }
	before, copies := seen(), uint64(0)
	var got []*wire.Packet
	testkit.WaitFor(t, "the fence's response", func() bool {
		// Sent again until answered, since the socket may drop it; a copy
		// is a duplicate READ, answered again with the same PSN.
		h.peer.send(t, h.dst, p.build(), false)
		copies++
		for _, r := range h.peer.drain(t) {
			if r.BTH.Opcode() == wire.RCRDMAReadResponseOnly && r.BTH.PSN() == p.psn && len(r.Payload) == 0 {
				return true
			}
			got = append(got, r)
		}
		return false
	})
	// Copies sent after the answered one may still be on their way: wait
	// until the device has read them all, or one would be taken for the
	// next packet delivered (deliver counts datagrams read), or reach a
	// reconnected QP as a stray duplicate. At most copies datagrams were
	// sent since before, and on loopback none is lost but by the socket
	// buffer overflowing, which one peer's few packets do not.
	testkit.WaitFor(t, "the fence's copies read", func() bool { return seen()-before >= copies })
	return got
}

// current drops from pkts the late answers of an earlier connection (a
// previous row's resent fence): every reset moves the PSNs 2^21 away.
func (h *hostileTarget) current(pkts []*wire.Packet) []*wire.Packet {
	out := pkts[:0]
	for _, p := range pkts {
		if d := p.BTH.PSN().Sub(h.rqpsn); d > -0x10000 && d < 0x10000 {
			out = append(out, p)
		}
	}
	return out
}

// awaitAnswer returns the device's answers once at least one arrived.
func (h *hostileTarget) awaitAnswer(t testing.TB) []*wire.Packet {
	t.Helper()
	var got []*wire.Packet
	testkit.WaitFor(t, "an answer", func() bool {
		got = append(got, h.peer.drain(t)...)
		return len(got) > 0
	})
	return got
}

// snapshot is the transport state the packet builders and checks need.
func (h *hostileTarget) snapshot() transport.Snapshot { return verbs.QPSnapshot(h.qp) }

// fate is what one delivered datagram did, as the counters tell it.
type fate struct {
	dev, qp verbs.Counters
	epsn    psn.PSN // the responder's expected PSN afterwards
}

// deliver sends pkt from the peer (or from the other address) and waits
// until the device has processed it and sent every response it queued.
// It returns the counter deltas.
func (h *hostileTarget) deliver(t testing.TB, pkt []byte, badICRC, fromOther bool) fate {
	t.Helper()
	d0, q0 := h.dev.Counters(), h.qp.Counters()
	seen := func(c verbs.Counters) uint64 { return c.RcvdPkts + c.Malformed + c.ICRCErrors }
	if fromOther {
		h.other.send(t, h.dst, pkt, badICRC)
	} else {
		h.peer.send(t, h.dst, pkt, badICRC)
	}
	var d1 verbs.Counters
	testkit.WaitFor(t, "the device read the datagram", func() bool {
		d1 = h.dev.Counters()
		return seen(d1) > seen(d0)
	})
	testkit.WaitFor(t, "the QP sent its queued responses", func() bool {
		s := h.snapshot()
		return s.RepliesQueued == 0 && !s.AckOwed
	})
	q1 := h.qp.Counters()
	return fate{dev: verbs.SubCounters(d1, d0), qp: verbs.SubCounters(q1, q0), epsn: h.snapshot().ExpectedPSN}
}

// checkMemory fails if a byte the QP may not write changed: everything of
// the arena outside rw.
func (h *hostileTarget) checkMemory(t testing.TB) {
	t.Helper()
	for i := range h.arena {
		if i >= rwOff && i < rwOff+rwLen {
			continue
		}
		if h.arena[i] != h.initial[i] {
			t.Fatalf("arena byte %d (outside the writable region) changed from %#x to %#x", i, h.initial[i], h.arena[i])
		}
	}
}

// readReq is a READ request the peer sent, to check the responses by.
type readReq struct {
	first psn.PSN
	n     uint32
	// data is what the request may be answered with: the bytes it names,
	// copied right after the device processed it, if its rkey names a
	// remotely readable region of the target's PD that holds them all;
	// nil otherwise, and then no response may answer it.
	data []byte
}

// newReadReq records a READ request of n bytes at va through rkey.
func (h *hostileTarget) newReadReq(first psn.PSN, va uint64, rkey uint32, n uint32) readReq {
	r := readReq{first: first, n: n}
	for _, mr := range []*verbs.MR{h.rw, h.ro} {
		if mr.RKey() != rkey || va < mr.IOVA() {
			continue
		}
		off := va - mr.IOVA()
		if off <= uint64(mr.Len()) && uint64(n) <= uint64(mr.Len())-off {
			r.data = append([]byte{}, mr.Buf()[off:off+uint64(n)]...)
		}
	}
	return r
}

// checkReadResponses verifies that every READ response carries exactly the
// registered, remotely readable bytes the request it answers names: the
// latest request in reqs whose PSN range holds the response's PSN.
func (h *hostileTarget) checkReadResponses(t testing.TB, pkts []*wire.Packet, reqs []readReq) {
	t.Helper()
	for _, p := range pkts {
		if !p.Info().IsReadResponse() || len(p.Payload) == 0 {
			// An empty READ response (a zero-length READ, FLUSH,
			// ATOMIC WRITE) carries no memory.
			continue
		}
		P := p.BTH.PSN()
		var req *readReq
		for i := len(reqs) - 1; i >= 0; i-- {
			r := &reqs[i]
			np := max((r.n+hostileMTU-1)/hostileMTU, 1)
			if r.first.LessThanEq(P) && P.LessThan(r.first.Add(np)) {
				req = r
				break
			}
		}
		if req == nil {
			t.Fatalf("READ response PSN %#x answers no READ request", uint32(P))
		}
		if req.data == nil {
			t.Fatalf("READ response PSN %#x answers a request for memory the QP may not read", uint32(P))
		}
		off := uint64(P.Sub(req.first)) * hostileMTU
		if off+uint64(len(p.Payload)) > uint64(len(req.data)) {
			t.Fatalf("READ response PSN %#x of %d bytes beyond the %d requested", uint32(P), len(p.Payload), len(req.data))
		}
		if string(p.Payload) != string(req.data[off:off+uint64(len(p.Payload))]) {
			t.Fatalf("READ response PSN %#x carries bytes that are not the region's", uint32(P))
		}
	}
}

// hostilePkt describes one packet the peer sends.
type hostilePkt struct {
	op      wire.Opcode
	qpn     uint32
	pkey    uint16
	psn     psn.PSN
	ackReq  bool
	se      bool
	va      uint64
	rkey    uint32
	dmaLen  uint32
	swap    uint64
	compare uint64
	imm     uint32
	payload []byte
	pad     uint8 // pad count, normally wire.PadCount(len(payload))
}

// build returns the transport bytes of the packet (BTH through pad).
func (p *hostilePkt) build() []byte {
	h := wire.Headers{
		BTH: wire.BTHFields{Opcode: p.op, SolicitedEvent: p.se, PadCount: p.pad, PKey: p.pkey,
			DestQP: wire.QPN(p.qpn & wire.QPNMask), AckReq: p.ackReq, PSN: p.psn.Add(0)},
		RETH:      wire.RETHFields{VA: p.va, RKey: p.rkey, DMALength: p.dmaLen},
		AtomicETH: wire.AtomicETHFields{VA: p.va, RKey: p.rkey, SwapAdd: p.swap, Compare: p.compare},
		ImmDt:     wire.ImmDtFields{Imm: p.imm},
		IETH:      wire.IETHFields{RKey: p.rkey},
		AETH:      wire.AETHFields{Syndrome: wire.SyndromeAckUnlimited},
	}
	b := wire.AppendHeaders(nil, &h)
	b = append(b, p.payload...)
	return wire.AppendPad(b, p.pad)
}

// request returns a well-formed request to the target QP at its expected
// PSN: the rows of the table test start from it.
func (h *hostileTarget) request(op wire.Opcode, payload int) hostilePkt {
	return hostilePkt{op: op, qpn: h.qp.QPN(), pkey: verbs.DefaultPKey, psn: h.snapshot().ExpectedPSN, ackReq: true,
		va: h.rw.IOVA(), rkey: h.rw.RKey(), dmaLen: uint32(payload),
		payload: make([]byte, payload), pad: wire.PadCount(payload)}
}

// reply is the kind of response a hostile case expects.
type reply int

const (
	replyNone reply = iota
	replyAck
	replyNAK    // with nakCode
	replyRNRNAK // RNR NAK
	replyData   // READ response or atomic acknowledge
)

// TestHostileReceive sends one hostile packet per row to an established RC
// QP and checks the reaction the IBA prescribes: a silent drop or a NAK
// with the right code, the counter that accounts for it, the QP's state,
// the asynchronous event of a responder error that no completion reports,
// and that no byte outside what the QP may write changed.
func TestHostileReceive(t *testing.T) {
	h := newHostileTarget(t, verbs.DefaultUDPPort)
	type row struct {
		name      string
		pkt       func() hostilePkt
		badICRC   bool
		truncate  bool // cut the packet inside its BTH
		fromOther bool
		prep      func() // before building the packet
		want      reply
		nak       wire.NAKCode
		counter   string // the counter that moves by one
		err       bool   // the QP ends in ERR
		events    []verbs.AsyncEventType
	}
	rows := []row{
		{name: "unknown QP", want: replyNone, counter: "dropped_unknown_qp",
			pkt: func() hostilePkt { p := h.request(wire.RCRDMAWriteOnly, 8); p.qpn ^= 0x5A5A; return p }},
		{name: "wrong P_Key", want: replyNone, counter: "dropped_pkts",
			pkt: func() hostilePkt { p := h.request(wire.RCRDMAWriteOnly, 8); p.pkey = 0x8001; return p }},
		{name: "bad ICRC", badICRC: true, want: replyNone, counter: "icrc_err",
			pkt: func() hostilePkt { return h.request(wire.RCRDMAWriteOnly, 8) }},
		{name: "truncated BTH", truncate: true, want: replyNone, counter: "malformed",
			pkt: func() hostilePkt { return h.request(wire.RCRDMAWriteOnly, 8) }},
		{name: "not from the QP's peer", fromOther: true, want: replyNone, counter: "dropped_wrong_source",
			pkt: func() hostilePkt { return h.request(wire.RCRDMAWriteOnly, 8) }},
		{name: "UD opcode on an RC QP", want: replyNone, counter: "dropped_pkts",
			pkt: func() hostilePkt { return h.request(wire.UDSendOnly, 8) }},
		{name: "PSN ahead of the window", want: replyNAK, nak: wire.NAKPSNSequenceError, counter: "sent_seq_err",
			pkt: func() hostilePkt { p := h.request(wire.RCRDMAWriteOnly, 8); p.psn = p.psn.Add(1000); return p }},
		{name: "PSN far behind: duplicate, not executed", want: replyAck, counter: "duplicate_request",
			pkt: func() hostilePkt {
				p := h.request(wire.RCRDMAWriteOnly, 8)
				p.psn = p.psn.Add(psn.Mask - 5000)
				return p
			}},
		{name: "duplicate READ never seen", want: replyNone, counter: "duplicate_request",
			pkt: func() hostilePkt {
				p := h.request(wire.RCRDMAReadRequest, 0)
				p.psn, p.dmaLen = p.psn.Add(psn.Mask), 64
				return p
			}},
		{name: "forged rkey WRITE", want: replyNAK, nak: wire.NAKRemoteAccessError, counter: "sent_naks", err: true, events: []verbs.AsyncEventType{verbs.EventQPAccessErr},
			pkt: func() hostilePkt { p := h.request(wire.RCRDMAWriteOnly, 8); p.rkey = 0x7F00_0012; return p }},
		{name: "stale rkey READ", want: replyNAK, nak: wire.NAKRemoteAccessError, counter: "sent_naks", err: true, events: []verbs.AsyncEventType{verbs.EventQPAccessErr},
			pkt: func() hostilePkt {
				p := h.request(wire.RCRDMAReadRequest, 0)
				p.rkey, p.va, p.dmaLen = h.stale, uint64(uintptr(unsafe.Pointer(&h.arena[staleOff]))), 16
				return p
			}},
		{name: "rkey of another PD", want: replyNAK, nak: wire.NAKRemoteAccessError, counter: "sent_naks", err: true, events: []verbs.AsyncEventType{verbs.EventQPAccessErr},
			pkt: func() hostilePkt {
				p := h.request(wire.RCRDMAWriteOnly, 8)
				p.rkey, p.va = h.otherMR.RKey(), h.otherMR.IOVA()
				return p
			}},
		{name: "WRITE to a read-only region", want: replyNAK, nak: wire.NAKRemoteAccessError, counter: "sent_naks", err: true, events: []verbs.AsyncEventType{verbs.EventQPAccessErr},
			pkt: func() hostilePkt {
				p := h.request(wire.RCRDMAWriteOnly, 8)
				p.rkey, p.va = h.ro.RKey(), h.ro.IOVA()
				return p
			}},
		{name: "READ of a region without remote rights", want: replyNAK, nak: wire.NAKRemoteAccessError, counter: "sent_naks", err: true, events: []verbs.AsyncEventType{verbs.EventQPAccessErr},
			pkt: func() hostilePkt {
				p := h.request(wire.RCRDMAReadRequest, 0)
				p.rkey, p.va, p.dmaLen = h.noRem.RKey(), h.noRem.IOVA(), 8
				return p
			}},
		{name: "WRITE past the region's end", want: replyNAK, nak: wire.NAKRemoteAccessError, counter: "sent_naks", err: true, events: []verbs.AsyncEventType{verbs.EventQPAccessErr},
			pkt: func() hostilePkt { p := h.request(wire.RCRDMAWriteOnly, 8); p.va += rwLen - 4; return p }},
		{name: "READ with VA + length overflowing 2^64", want: replyNAK, nak: wire.NAKRemoteAccessError, counter: "sent_naks", err: true, events: []verbs.AsyncEventType{verbs.EventQPAccessErr},
			pkt: func() hostilePkt {
				p := h.request(wire.RCRDMAReadRequest, 0)
				p.va, p.dmaLen = ^uint64(0)-15, 64
				return p
			}},
		{name: "huge WRITE length", want: replyNAK, nak: wire.NAKInvalidRequest, counter: "sent_naks", err: true, events: []verbs.AsyncEventType{verbs.EventQPReqErr},
			pkt: func() hostilePkt { p := h.request(wire.RCRDMAWriteFirst, hostileMTU); p.dmaLen = 0xFFFF_FFF0; return p }},
		{name: "huge READ length", want: replyNAK, nak: wire.NAKInvalidRequest, counter: "sent_naks", err: true, events: []verbs.AsyncEventType{verbs.EventQPReqErr},
			pkt: func() hostilePkt { p := h.request(wire.RCRDMAReadRequest, 0); p.dmaLen = 0xFFFF_FFFF; return p }},
		{name: "payload beyond the RETH length", want: replyNAK, nak: wire.NAKInvalidRequest, counter: "sent_naks", err: true, events: []verbs.AsyncEventType{verbs.EventQPReqErr},
			pkt: func() hostilePkt { p := h.request(wire.RCRDMAWriteOnly, 64); p.dmaLen = 8; return p }},
		{name: "payload beyond the path MTU", want: replyNAK, nak: wire.NAKInvalidRequest, counter: "sent_naks", err: true, events: []verbs.AsyncEventType{verbs.EventQPReqErr},
			pkt: func() hostilePkt { return h.request(wire.RCRDMAWriteOnly, 2*hostileMTU) }},
		{name: "MIDDLE without FIRST", want: replyNAK, nak: wire.NAKInvalidRequest, counter: "sent_naks", err: true, events: []verbs.AsyncEventType{verbs.EventQPReqErr},
			pkt: func() hostilePkt { return h.request(wire.RCRDMAWriteMiddle, hostileMTU) }},
		{name: "misaligned atomic", want: replyNAK, nak: wire.NAKInvalidRequest, counter: "sent_naks", err: true, events: []verbs.AsyncEventType{verbs.EventQPReqErr},
			pkt: func() hostilePkt { p := h.request(wire.RCFetchAdd, 0); p.va += 4; return p }},
		{name: "atomic on a region without remote atomic", want: replyNAK, nak: wire.NAKRemoteAccessError, counter: "sent_naks", err: true, events: []verbs.AsyncEventType{verbs.EventQPAccessErr},
			pkt: func() hostilePkt {
				p := h.request(wire.RCCompareSwap, 0)
				p.rkey, p.va = h.ro.RKey(), h.ro.IOVA()
				return p
			}},
		{name: "SEND longer than the receive", want: replyNAK, nak: wire.NAKInvalidRequest, counter: "sent_naks", err: true,
			pkt: func() hostilePkt { return h.request(wire.RCSendOnly, recvSlot+4) }},
		{name: "SEND without a posted receive", want: replyRNRNAK, counter: "send_rnr_err",
			prep: func() { h.reset(t, 0) },
			pkt:  func() hostilePkt { return h.request(wire.RCSendOnly, 8) }},
		{name: "unsolicited ACK", want: replyNone, counter: "stale_responses",
			pkt: func() hostilePkt { return h.request(wire.RCAcknowledge, 0) }},
		{name: "unsolicited READ response", want: replyNone, counter: "stale_responses",
			pkt: func() hostilePkt { return h.request(wire.RCRDMAReadResponseOnly, 16) }},
		{name: "valid READ", want: replyData, counter: "sent_pkts",
			pkt: func() hostilePkt { p := h.request(wire.RCRDMAReadRequest, 0); p.dmaLen = 100; return p }},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			h.reset(t, recvSlots)
			if r.prep != nil {
				r.prep()
			}
			hp := r.pkt()
			b := hp.build()
			if r.truncate {
				b = b[:wire.BTHLen-3]
			}
			f := h.deliver(t, b, r.badICRC, r.fromOther)
			moved := ""
			all := f.dev.Add(f.qp)
			all.Each(func(name string, v uint64) {
				if name == r.counter && v >= 1 {
					moved = name
				}
			})
			if moved == "" {
				t.Errorf("counter %s did not move: device %+v, QP %+v", r.counter, f.dev, f.qp)
			}
			var pkts []*wire.Packet
			switch {
			case r.want == replyNone:
				pkts = h.fence(t)
			case r.err:
				// No fence through a QP in ERR: wait for the NAK.
				pkts = h.awaitAnswer(t)
			default:
				pkts = h.fence(t)
			}
			pkts = h.current(append(pkts, h.other.drain(t)...))
			switch r.want {
			case replyNone:
				if len(pkts) != 0 {
					t.Fatalf("%d responses to a packet to drop: first %v", len(pkts), pkts[0].BTH.Opcode())
				}
			case replyData:
				if len(pkts) != 1 || !pkts[0].Info().IsReadResponse() {
					t.Fatalf("responses %d, want one READ response", len(pkts))
				}
				h.checkReadResponses(t, pkts, []readReq{h.newReadReq(hp.psn, hp.va, hp.rkey, hp.dmaLen)})
			default:
				if len(pkts) != 1 || pkts[0].BTH.Opcode() != wire.RCAcknowledge {
					t.Fatalf("%d responses, want one acknowledgement", len(pkts))
				}
				syn := pkts[0].AETH.Syndrome()
				switch {
				case r.want == replyAck && syn.Kind() != wire.AETHAck,
					r.want == replyRNRNAK && syn.Kind() != wire.AETHRNRNak,
					r.want == replyNAK && (syn.Kind() != wire.AETHNak || syn.NAKCode() != r.nak):
					t.Fatalf("acknowledgement with syndrome %v", syn)
				}
				if pkts[0].BTH.DestQP() != hostilePeerQPN {
					t.Fatalf("acknowledgement to QP %#x", pkts[0].BTH.DestQP())
				}
			}
			if got := h.qp.State() == verbs.QPStateErr; got != r.err {
				t.Fatalf("QP in %v after the packet", h.qp.State())
			}
			evs := h.drainEvents()
			if len(evs) != len(r.events) {
				t.Fatalf("async events %v, want %v", evs, r.events)
			}
			for i, ev := range evs {
				if ev.Type != r.events[i] || ev.QP != h.qp {
					t.Fatalf("async event %v for QP %v, want %v for the target QP", ev.Type, ev.QP, r.events[i])
				}
			}
			h.checkMemory(t)
		})
	}
}

// fuzzOpcodes are the opcodes the fuzz target's first byte picks from:
// every RC request and response, and a few that an RC QP must drop.
var fuzzOpcodes = [...]wire.Opcode{
	wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast, wire.RCSendLastWithImmediate,
	wire.RCSendOnly, wire.RCSendOnlyWithImmediate, wire.RCRDMAWriteFirst, wire.RCRDMAWriteMiddle,
	wire.RCRDMAWriteLast, wire.RCRDMAWriteLastWithImmediate, wire.RCRDMAWriteOnly, wire.RCRDMAWriteOnlyWithImmediate,
	wire.RCRDMAReadRequest, wire.RCRDMAReadResponseFirst, wire.RCRDMAReadResponseMiddle, wire.RCRDMAReadResponseLast,
	wire.RCRDMAReadResponseOnly, wire.RCAcknowledge, wire.RCAtomicAcknowledge, wire.RCCompareSwap,
	wire.RCFetchAdd, wire.RCSendLastWithInvalidate, wire.RCSendOnlyWithInvalidate, wire.RCFlush,
	wire.RCAtomicWrite, wire.UCSendOnly, wire.UCRDMAWriteOnly, wire.UDSendOnly,
	wire.CNP, wire.Opcode(0x1F), wire.RCRDMAReadRequest, wire.RCRDMAWriteOnly,
}

// Fuzz record layout: each packet is described by fuzzRecLen bytes.
//
//	[0]     opcode: fuzzOpcodes[b % 32]
//	[1]     flags: 1 unknown QPN, 2 wrong P_Key, 4 bad ICRC, 8 AckReq,
//	        16 SE, 32 PSN delta in units of 2^16, 64 from a stranger,
//	        128 truncate to [14]&0x3F bytes
//	[2]     PSN delta from the expected PSN (int8)
//	[3]     key: low 3 bits 0 rw, 1 ro, 2 no remote rights, 3 stale,
//	        4 other PD, 5 rw with another key byte, 6 raw [4:8], 7 zero;
//	        bit 3: VA is 2^64-1 minus [4:8], not an offset into the region
//	[4:8]   VA offset into the region (int32, big-endian)
//	[8:12]  DMA length (big-endian)
//	[12]    payload length: b, or (b-240)*256 above 240
//	[13]    atomic operands and immediate seed
//	[14]    truncation length (with flag 128)
//	[15]    pad count override if non-zero (low 2 bits)
const (
	fuzzRecLen  = 16
	fuzzMaxRecs = 12
)

// decodeFuzzPacket turns record rec into a packet for the target, whose
// responder expects PSN epsn. It also returns the transport flags.
func (h *hostileTarget) decodeFuzzPacket(rec []byte, epsn psn.PSN) (p hostilePkt, badICRC, stranger bool, truncate int) {
	flags := rec[1]
	p.op = fuzzOpcodes[int(rec[0])%len(fuzzOpcodes)]
	p.qpn = h.qp.QPN()
	if flags&1 != 0 {
		p.qpn ^= 0x00F00F
	}
	p.pkey = verbs.DefaultPKey
	if flags&2 != 0 {
		p.pkey = 0x1234
	}
	badICRC = flags&4 != 0
	p.ackReq = flags&8 != 0
	p.se = flags&16 != 0
	delta := int32(int8(rec[2]))
	if flags&32 != 0 {
		delta <<= 16
	}
	p.psn = epsn.Add(uint32(delta))
	stranger = flags&64 != 0
	if flags&128 != 0 {
		truncate = int(rec[14]&0x3F) + 1
	}
	off := uint64(int64(int32(binary.BigEndian.Uint32(rec[4:8]))))
	base := h.rw
	switch rec[3] & 7 {
	case 0:
		p.rkey = h.rw.RKey()
	case 1:
		base, p.rkey = h.ro, h.ro.RKey()
	case 2:
		base, p.rkey = h.noRem, h.noRem.RKey()
	case 3:
		p.rkey = h.stale
	case 4:
		base, p.rkey = h.otherMR, h.otherMR.RKey()
	case 5:
		p.rkey = h.rw.RKey() ^ uint32(rec[13]|1)
	case 6:
		p.rkey = binary.BigEndian.Uint32(rec[4:8])
	case 7:
		p.rkey = 0
	}
	p.va = base.IOVA() + off
	if rec[3]&8 != 0 {
		p.va = ^uint64(0) - uint64(binary.BigEndian.Uint32(rec[4:8]))
	}
	p.dmaLen = binary.BigEndian.Uint32(rec[8:12])
	n := int(rec[12])
	if n > 240 {
		n = (n - 240) * 256
	}
	p.payload = make([]byte, n)
	for i := range p.payload {
		p.payload[i] = byte(i) ^ rec[13]
	}
	p.compare = uint64(rec[13])
	p.swap = uint64(rec[13]) << 8
	p.imm = uint32(rec[13])
	p.pad = wire.PadCount(n)
	if rec[15] != 0 {
		p.pad = rec[15] & 3
	}
	return p, badICRC, stranger, truncate
}

// FuzzHostileReceive delivers sequences of packets described by the input
// (see decodeFuzzPacket) as real datagrams to an established RC QP and
// checks after each one that: the device read it and its counters say
// what became of it (malformed, ICRC error, unknown QP, wrong source, or
// handled by the QP: dropped, NAKed, answered, executed); no byte of the
// Go allocation around and between the registered regions changed, nor a
// region the QP may not write; every READ response carries only bytes of
// the remotely readable region its request names; nothing panicked. At
// the end no goroutine is left behind.
func FuzzHostileReceive(f *testing.F) {
	// Registered first, so it runs after the device is closed.
	f.Cleanup(func() { checkNoDeviceGoroutines(f) })
	// A port of its own per process: fuzzing workers run side by side.
	port := uint16(20000 + os.Getpid()%20000)
	h := newHostileTarget(f, port)
	f.Add(make([]byte, fuzzRecLen))
	// READ requests of this and earlier inputs: an answer may arrive late,
	// during a later input; it is checked against its own request, which
	// the PSN, unique across inputs, identifies.
	var reads []readReq
	f.Fuzz(func(t *testing.T, data []byte) {
		h.reset(t, recvSlots)
		if len(reads) > 4096 {
			reads = append(reads[:0], reads[len(reads)-1024:]...)
		}
		for i := 0; i+fuzzRecLen <= len(data) && i/fuzzRecLen < fuzzMaxRecs; i += fuzzRecLen {
			epsn := h.snapshot().ExpectedPSN
			p, bad, stranger, trunc := h.decodeFuzzPacket(data[i:i+fuzzRecLen], epsn)
			b := p.build()
			if trunc > 0 && trunc < len(b) {
				b = b[:trunc]
			}
			fa := h.deliver(t, b, bad, stranger)
			h.checkAccounting(t, fa, epsn)
			if p.op == wire.RCRDMAReadRequest {
				reads = append(reads, h.newReadReq(p.psn, p.va, p.rkey, p.dmaLen))
			}
			pkts := h.peer.drain(t)
			if stray := h.other.drain(t); len(stray) != 0 {
				t.Fatalf("the device answered a stranger: %v", stray[0].BTH.Opcode())
			}
			h.checkReadResponses(t, pkts, reads)
			h.checkMemory(t)
		}
	})
}

// checkAccounting checks that the counters account for one datagram.
func (h *hostileTarget) checkAccounting(t testing.TB, f fate, epsn psn.PSN) {
	t.Helper()
	d, q := f.dev, f.qp
	if n := d.Malformed + d.ICRCErrors + d.RcvdPkts; n != 1 {
		t.Fatalf("device counted %d datagrams (malformed %d, ICRC %d, delivered %d), want 1", n, d.Malformed, d.ICRCErrors, d.RcvdPkts)
	}
	if d.RcvdPkts == 0 {
		return
	}
	// (The flipped QPN of an "unknown QP" record may be 1, QP 1's.)
	if n := d.DroppedUnknownQP + d.GSIDropped + d.GSIRcvd + d.DroppedWrongSource + q.RcvdPkts; n != 1 {
		t.Fatalf("delivered packet counted %d times (unknown QP %d, QP 1 %d+%d, wrong source %d, QP %d)", n,
			d.DroppedUnknownQP, d.GSIDropped, d.GSIRcvd, d.DroppedWrongSource, q.RcvdPkts)
	}
	if q.RcvdPkts == 0 {
		return
	}
	handled := q.DroppedPkts + q.DroppedBusy + q.OutOfSeqRequest + q.DuplicateRequest + q.SendRNRErr +
		q.SentNAKs + q.StaleResponses + q.RcvdNAKs + q.AckDeferred + q.SentPkts
	if handled == 0 && f.epsn == epsn {
		t.Fatalf("the QP took the packet without a trace in its counters: %+v", q)
	}
}

// checkNoDeviceGoroutines fails unless every goroutine of a device (its
// engine: receive loop and timers) has ended within 5 s. It looks for their
// frames rather than counting goroutines, because the fuzzing engine starts
// goroutines of its own meanwhile.
func checkNoDeviceGoroutines(t testing.TB) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(5 * time.Second)
	for {
		stacks := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "goroce/verbs.(*engine)") && !strings.Contains(stacks, "goroce/internal/netio.") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("device goroutines left behind:\n%s", stacks)
		}
		time.Sleep(time.Millisecond)
	}
}
