package transport

import (
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/wire"
)

// TestZeroCopyRequests sends WRITEs and SENDs from an Output with zero copy
// on (Output.SetZeroCopy): every packet whose payload lies in one
// scatter/gather element leaves it in the registered memory (the Payload
// aliases the source buffer, which stays pinned until Reset); a packet
// whose payload spans two elements, and inline data, are copied; the
// responder receives the same bytes either way, also through a
// go-back-N retransmission, and no pin outlives the Outputs.
func TestZeroCopyRequests(t *testing.T) {
	o := defaultOpts()
	a, b := newPair(t, o)
	a.out.SetZeroCopy(true)
	l := newLink(t, a, b)
	const mtu = 1024
	src := pattern(4*mtu+600, 3)
	srcKey := a.mem.register(pd, src, 0x10000, ibv.AccessLocalWrite)
	dst := make([]byte, len(src))
	dstKey := b.mem.register(pd, dst, 0x90000, ibv.AccessLocalWrite|ibv.AccessRemoteWrite)

	// One element: every packet zero-copy, aliasing src.
	l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled,
		SGL: []SGE{{Addr: 0x10000, Length: 3*mtu + 7, LKey: srcKey}}, RemoteAddr: 0x90000, RKey: dstKey})
	pkts := a.out.Packets()
	if len(pkts) != 4 {
		t.Fatalf("%d packets, want 4", len(pkts))
	}
	for i, p := range pkts {
		if p.Payload == nil || &p.Payload[0] != &src[i*mtu] {
			t.Fatalf("packet %d: payload not taken from the source buffer", i)
		}
		if cap(p.Bytes)-len(p.Bytes) < int(wire.BTH(p.Bytes).PadCount())+wire.ICRCLen {
			t.Fatalf("packet %d: no room for the pad and the ICRC", i)
		}
	}
	if a.mem.refs != 4 {
		t.Errorf("%d pins before the Output is reset, want 4", a.mem.refs)
	}
	l.run(0)
	wantBytes(t, "written", dst[:3*mtu+7], src[:3*mtu+7])
	if a.mem.refs != 0 {
		t.Errorf("%d pins left after Reset", a.mem.refs)
	}

	// Two elements: the packet that spans them is copied.
	clear(dst)
	l.post(a, SendWQE{WRID: 2, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled,
		SGL:        []SGE{{Addr: 0x10000, Length: mtu + 100, LKey: srcKey}, {Addr: 0x10000 + mtu + 100, Length: 2 * mtu, LKey: srcKey}},
		RemoteAddr: 0x90000, RKey: dstKey})
	pkts = a.out.Packets()
	if len(pkts) != 4 || pkts[0].Payload == nil || pkts[1].Payload != nil || pkts[2].Payload == nil {
		t.Fatalf("spanning write: %d packets, payload kept %v %v %v; want 4, true false true",
			len(pkts), pkts[0].Payload != nil, pkts[1].Payload != nil, pkts[2].Payload != nil)
	}
	l.run(0)
	wantBytes(t, "written across elements", dst[:3*mtu+100], src[:3*mtu+100])

	// Inline: copied.
	l.post(a, SendWQE{WRID: 3, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled | ibv.SendInline,
		Inline: src[:100], RemoteAddr: 0x90000, RKey: dstKey})
	if p := a.out.Packets(); len(p) != 1 || p[0].Payload != nil {
		t.Fatal("inline write: payload not copied")
	}
	l.run(0)

	// A SEND whose first transmission is lost: the go-back-N resend
	// (with its repeated head packet) is zero-copy too.
	rbuf := make([]byte, 4*mtu)
	rKey := b.mem.register(pd, rbuf, 0xA0000, ibv.AccessLocalWrite)
	l.recv(b, 9, SGE{Addr: 0xA0000, Length: uint32(len(rbuf)), LKey: rKey})
	lost := 0
	l.drop = func(from *endpoint, p *wire.Packet) bool {
		if from == a && lost < 2 {
			lost++
			return true
		}
		return false
	}
	l.post(a, SendWQE{WRID: 4, Opcode: ibv.WRSend, Flags: ibv.SendSignaled,
		SGL: []SGE{{Addr: 0x10000 + 5, Length: 2*mtu + 1, LKey: srcKey}}})
	l.run(time.Minute)
	wantBytes(t, "sent after a retransmission", rbuf[:2*mtu+1], src[5:5+2*mtu+1])
	if got := a.scq.take(); len(got) != 4 {
		t.Errorf("%d send completions, want 4: %+v", len(got), got)
	}
	if a.mem.refs != 0 || b.mem.refs != 0 {
		t.Errorf("pins left: %d, %d", a.mem.refs, b.mem.refs)
	}
}

// TestZeroCopyReadResponsesCopied: with zero copy on, READ responses are
// still copied into their packets, pinning nothing past the call: the
// target's CPU may write the memory while the responses wait to be sent,
// and a packet must carry the bytes its ICRC was computed over. Memory
// changed after the responses were built does not change them.
func TestZeroCopyReadResponsesCopied(t *testing.T) {
	o := defaultOpts()
	a, b := newPair(t, o)
	b.out.SetZeroCopy(true)
	l := newLink(t, a, b)
	const mtu = 1024
	src := pattern(3*mtu+7, 9)
	want := append([]byte(nil), src...)
	srcKey := b.mem.register(pd, src, 0x50000, ibv.AccessRemoteRead)
	dst := make([]byte, len(src))
	dstKey := a.mem.register(pd, dst, 0x60000, ibv.AccessLocalWrite)
	l.post(a, SendWQE{WRID: 1, Opcode: ibv.WRRDMARead, Flags: ibv.SendSignaled,
		SGL: []SGE{{Addr: 0x60000, Length: uint32(len(dst)), LKey: dstKey}}, RemoteAddr: 0x50000, RKey: srcKey})
	// Deliver the READ request to b by hand, to look at b's replies.
	p := l.parse(a, a.out.Packets()[0].Bytes)
	b.qp.HandlePacket(p, l.now, &b.out)
	a.out.Reset()
	replies := b.out.Packets()
	if len(replies) != 4 {
		t.Fatalf("%d READ responses, want 4", len(replies))
	}
	for i, r := range replies {
		if r.Payload != nil {
			t.Fatalf("response %d left its payload in memory", i)
		}
	}
	if b.mem.refs != 0 {
		t.Errorf("%d pins before Reset, want 0", b.mem.refs)
	}
	// The target's CPU writes the region before the responses leave.
	for i := range src {
		src[i] ^= 0xff
	}
	l.run(time.Second)
	wantBytes(t, "read", dst, want)
	if b.mem.refs != 0 || a.mem.refs != 0 {
		t.Errorf("pins left: %d, %d", a.mem.refs, b.mem.refs)
	}
	if got := a.scq.take(); len(got) != 1 || got[0].Status != ibv.WCSuccess {
		t.Errorf("completions %+v", got)
	}
}
