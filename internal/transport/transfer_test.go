package transport

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/wire"
)

// sizes returns the message sizes the MTU boundary tests use.
func sizes(mtu int) []int {
	return []int{0, 1, mtu - 1, mtu, mtu + 1, 3*mtu + 7}
}

// splitSGL registers buf in two halves (two regions, two SGEs) so that
// every transfer crosses an SGE boundary.
func splitSGL(m *testMemory, buf []byte, va uint64, access ibv.AccessFlags) []SGE {
	h := len(buf) / 2
	k1 := m.register(pd, buf[:h], va, access)
	k2 := m.register(pd, buf[h:], va+0x10000, access)
	return []SGE{{Addr: va, Length: uint32(h), LKey: k1}, {Addr: va + 0x10000, Length: uint32(len(buf) - h), LKey: k2}}
}

func packetsFor(n, mtu int) int {
	if n == 0 {
		return 1
	}
	return (n + mtu - 1) / mtu
}

// countOps counts delivered packets of one direction whose opcode name
// contains sub.
func countOps(log []string, from, sub string) int {
	n := 0
	for _, s := range log {
		if strings.HasPrefix(s, from+">") && strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

func TestWriteSizes(t *testing.T) {
	for _, mtu := range []int{256, 1024, 4096} {
		for _, n := range sizes(mtu) {
			for _, op := range []ibv.WROpcode{ibv.WRRDMAWrite, ibv.WRRDMAWriteWithImm} {
				t.Run(fmt.Sprintf("mtu%d/%d/op%d", mtu, n, op), func(t *testing.T) {
					o := defaultOpts()
					o.mtu = mtu
					a, b := newPair(t, o)
					l := newLink(t, a, b)
					src := pattern(n, byte(n))
					sgl := splitSGL(a.mem, src, 0x1000, ibv.AccessLocalWrite)
					dst := make([]byte, n+16)
					rkey := b.mem.register(pd, dst, 0x8000, ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
					if op == ibv.WRRDMAWriteWithImm {
						l.recv(b, 77)
					}
					l.post(a, SendWQE{WRID: 9, Opcode: op, Flags: ibv.SendSignaled, SGL: sgl,
						RemoteAddr: 0x8008, RKey: rkey, Imm: 0xCAFEBABE})
					l.run(time.Second)

					wantBytes(t, "target", dst[8:8+n], src)
					for _, x := range append(dst[:8:8], dst[8+n:]...) {
						if x != 0 {
							t.Fatal("bytes outside the target range were written")
						}
					}
					wantCompletions(t, a.scq.take(), Completion{WRID: 9, Opcode: ibv.WCRDMAWrite, ByteLen: uint32(n), QPN: qpnA,
						Flags: map[bool]ibv.WCFlags{true: ibv.WCWithImm}[op == ibv.WRRDMAWriteWithImm]})
					if op == ibv.WRRDMAWriteWithImm {
						wantCompletions(t, b.rcq.take(), Completion{WRID: 77, Opcode: ibv.WCRecvRDMAWithImm, ByteLen: uint32(n),
							Imm: 0xCAFEBABE, QPN: qpnB, SrcQP: qpnA, Flags: ibv.WCWithImm})
					} else if len(b.rcq.c) != 0 {
						t.Fatalf("plain WRITE produced a receive completion: %+v", b.rcq.c)
					}
					if got, want := countOps(l.log, "a", "WRITE"), packetsFor(n, mtu); got != want {
						t.Errorf("%d WRITE packets, want %d: %v", got, want, l.log)
					}
					if got := countOps(l.log, "b", "ACKNOWLEDGE"); got != 1 {
						t.Errorf("%d ACKs, want 1 (coalesced): %v", got, l.log)
					}
					checkIdle(t, a, b)
				})
			}
		}
	}
}

// checkIdle checks that both QPs finished cleanly: nothing outstanding, no
// timer armed, every Ref released.
func checkIdle(t *testing.T, eps ...*endpoint) {
	t.Helper()
	for _, e := range eps {
		s := e.qp.Snapshot()
		if s.State != ibv.QPStateRTS || s.SQDepth != 0 || s.TimerArmed || s.RdAtomicOut != 0 || s.CompPSN != s.NextPSN {
			t.Errorf("%s not idle: %+v", e.name, s)
		}
		if e.mem.refs != 0 {
			t.Errorf("%s: %d Refs not released", e.name, e.mem.refs)
		}
	}
}

func TestSendSizes(t *testing.T) {
	ops := []struct {
		op    ibv.WROpcode
		flags ibv.WCFlags
	}{{ibv.WRSend, 0}, {ibv.WRSendWithImm, ibv.WCWithImm}, {ibv.WRSendWithInv, ibv.WCWithInv}}
	for _, mtu := range []int{256, 1024, 4096} {
		for _, n := range sizes(mtu) {
			for _, o := range ops {
				for _, srq := range []bool{false, true} {
					t.Run(fmt.Sprintf("mtu%d/%d/op%d/srq=%v", mtu, n, o.op, srq), func(t *testing.T) {
						opts := defaultOpts()
						opts.mtu, opts.srq = mtu, srq
						a, b := newPair(t, opts)
						l := newLink(t, a, b)
						src := pattern(n, 3)
						sgl := splitSGL(a.mem, src, 0x1000, 0)
						dst := make([]byte, n+100)
						rsgl := splitSGL(b.mem, dst, 0x4000, ibv.AccessLocalWrite)
						inv := b.mem.register(pd, make([]byte, 8), 0x9000, ibv.AccessRemoteWrite)
						if srq {
							must(t, b.qp.srq.(*SRQ).PostRecv(&RecvWQE{WRID: 55, SGL: rsgl}))
							if err := b.qp.PostRecv(&RecvWQE{WRID: 1}); err != ErrHasSRQ {
								t.Fatalf("PostRecv on an SRQ QP: %v", err)
							}
						} else {
							l.recv(b, 55, rsgl...)
						}
						l.post(a, SendWQE{WRID: 4, Opcode: o.op, Flags: ibv.SendSignaled | ibv.SendSolicited, SGL: sgl,
							Imm: 0x01020304, InvalidateRKey: inv})
						l.run(time.Second)

						wantBytes(t, "received", dst[:n], src)
						wantCompletions(t, a.scq.take(), Completion{WRID: 4, Opcode: ibv.WCSend, ByteLen: uint32(n), QPN: qpnA,
							Flags: o.flags & ibv.WCWithImm})
						want := Completion{WRID: 55, Opcode: ibv.WCRecv, ByteLen: uint32(n), QPN: qpnB, SrcQP: qpnA,
							Flags: o.flags, Solicited: true}
						switch o.op {
						case ibv.WRSendWithImm:
							want.Imm = 0x01020304
						case ibv.WRSendWithInv:
							want.InvalidatedRKey = inv
							if len(b.mem.invalidated) != 1 || b.mem.invalidated[0] != inv {
								t.Errorf("invalidated %v, want [%#x]", b.mem.invalidated, inv)
							}
						}
						wantCompletions(t, b.rcq.take(), want)
						if got, want := countOps(l.log, "a", "SEND"), packetsFor(n, mtu); got != want {
							t.Errorf("%d SEND packets, want %d", got, want)
						}
						checkIdle(t, a, b)
					})
				}
			}
		}
	}
}

func TestReadSizes(t *testing.T) {
	for _, mtu := range []int{256, 1024, 4096} {
		for _, n := range sizes(mtu) {
			t.Run(fmt.Sprintf("mtu%d/%d", mtu, n), func(t *testing.T) {
				o := defaultOpts()
				o.mtu = mtu
				a, b := newPair(t, o)
				l := newLink(t, a, b)
				src := pattern(n+8, 9)
				rkey := b.mem.register(pd, src, 0x70000, ibv.AccessRemoteRead)
				dst := make([]byte, n)
				sgl := splitSGL(a.mem, dst, 0x2000, ibv.AccessLocalWrite)
				l.post(a, SendWQE{WRID: 3, Opcode: ibv.WRRDMARead, Flags: ibv.SendSignaled, SGL: sgl, RemoteAddr: 0x70004, RKey: rkey})
				l.run(time.Second)
				wantBytes(t, "read", dst, src[4:4+n])
				wantCompletions(t, a.scq.take(), Completion{WRID: 3, Opcode: ibv.WCRDMARead, ByteLen: uint32(n), QPN: qpnA})
				if got, want := countOps(l.log, "b", "READ_RESPONSE"), packetsFor(n, mtu); got != want {
					t.Errorf("%d READ responses, want %d", got, want)
				}
				if got := countOps(l.log, "b", "ACKNOWLEDGE"); got != 0 {
					t.Errorf("a READ got %d ACKs", got)
				}
				checkIdle(t, a, b)
			})
		}
	}
}

func TestAtomics(t *testing.T) {
	tests := []struct {
		name             string
		op               ibv.WROpcode
		initial, cmp, sw uint64
		wantMem          uint64
	}{
		{"cas-hit", ibv.WRAtomicCmpAndSwp, 5, 5, 9, 9},
		{"cas-miss", ibv.WRAtomicCmpAndSwp, 5, 6, 9, 5},
		{"fadd", ibv.WRAtomicFetchAndAdd, 1 << 40, 3, 0, 1<<40 + 3},
		{"fadd-wrap", ibv.WRAtomicFetchAndAdd, ^uint64(0), 2, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newPair(t, defaultOpts())
			l := newLink(t, a, b)
			target := make([]byte, 24)
			binary.NativeEndian.PutUint64(target[8:], tc.initial)
			rkey := b.mem.register(pd, target, 0x100, ibv.AccessRemoteAtomic)
			res := make([]byte, 8)
			lkey := a.mem.register(pd, res, 0x500, ibv.AccessLocalWrite)
			l.post(a, SendWQE{WRID: 1, Opcode: tc.op, Flags: ibv.SendSignaled, SGL: []SGE{{0x500, 8, lkey}},
				RemoteAddr: 0x108, RKey: rkey, CompareAdd: tc.cmp, Swap: tc.sw})
			l.run(time.Second)
			if got := binary.NativeEndian.Uint64(target[8:]); got != tc.wantMem {
				t.Errorf("target = %#x, want %#x", got, tc.wantMem)
			}
			if got := binary.NativeEndian.Uint64(res); got != tc.initial {
				t.Errorf("original value = %#x, want %#x", got, tc.initial)
			}
			wantCompletions(t, a.scq.take(), Completion{WRID: 1, Opcode: wcOpcode(tc.op), ByteLen: 8, QPN: qpnA})
			if got := countOps(l.log, "b", "ATOMIC_ACKNOWLEDGE"); got != 1 {
				t.Errorf("%d atomic ACKs", got)
			}
			checkIdle(t, a, b)
		})
	}
}

func TestInlineAndSignaling(t *testing.T) {
	o := defaultOpts()
	o.mtu = 256
	a, b := newPair(t, o)
	l := newLink(t, a, b)
	dst := make([]byte, 1024)
	rkey := b.mem.register(pd, dst, 0, ibv.AccessRemoteWrite)
	inline := pattern(200, 1)
	w := SendWQE{WRID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendInline, Inline: inline, RKey: rkey}
	l.post(a, w)
	inline[0] ^= 0xFF // the WQE was copied at post time
	w.WRID, w.Flags, w.RemoteAddr = 2, ibv.SendInline|ibv.SendSignaled, 512
	l.post(a, w)
	w.WRID, w.Flags, w.RemoteAddr, w.Inline = 3, ibv.SendInline, 800, inline[:10]
	l.post(a, w)
	l.run(time.Second)
	inline[0] ^= 0xFF
	wantBytes(t, "first", dst[:200], inline)
	inline[0] ^= 0xFF
	wantBytes(t, "second", dst[512:712], inline)
	// Only the signaled WQE reports, and only after the earlier one.
	wantCompletions(t, a.scq.take(), Completion{WRID: 2, Opcode: ibv.WCRDMAWrite, ByteLen: 200, QPN: qpnA})
	checkIdle(t, a, b)

	if err := a.qp.PostSend(&SendWQE{Opcode: ibv.WRSend, Flags: ibv.SendInline, Inline: make([]byte, 257)}, l.now, &a.out); err != ErrInlineTooLong {
		t.Errorf("oversized inline: %v", err)
	}
}

func TestSQSigAll(t *testing.T) {
	o := defaultOpts()
	o.sqSigAll = true
	a, b := newPair(t, o)
	l := newLink(t, a, b)
	rkey := b.mem.register(pd, make([]byte, 64), 0, ibv.AccessRemoteWrite)
	for i := range 3 {
		l.post(a, SendWQE{WRID: uint64(i), Opcode: ibv.WRRDMAWrite, Flags: ibv.SendInline, Inline: []byte{1, 2}, RKey: rkey})
	}
	l.run(time.Second)
	wantCompletions(t, a.scq.take(),
		Completion{WRID: 0, Opcode: ibv.WCRDMAWrite, ByteLen: 2, QPN: qpnA},
		Completion{WRID: 1, Opcode: ibv.WCRDMAWrite, ByteLen: 2, QPN: qpnA},
		Completion{WRID: 2, Opcode: ibv.WCRDMAWrite, ByteLen: 2, QPN: qpnA})
}

// TestPacketHeaders checks the header fields of a multi-packet SEND:
// opcodes, PSNs across the 24-bit wrap, AckReq on the last packet and every
// AckEvery packets, SE on the last, pad counts.
func TestPacketHeaders(t *testing.T) {
	o := defaultOpts()
	o.mtu = 256
	a, b := newPair(t, o)
	must(t, a.qp.SetAckEvery(4))
	l := newLink(t, a, b)
	n := 9*256 + 3
	src := pattern(n, 0)
	key := a.mem.register(pd, src, 0, 0)
	dst := make([]byte, n)
	l.recv(b, 1, SGE{0, uint32(n), b.mem.register(pd, dst, 0, ibv.AccessLocalWrite)})
	l.post(a, SendWQE{Opcode: ibv.WRSendWithImm, Flags: ibv.SendSolicited, SGL: []SGE{{0, uint32(n), key}}, Imm: 7})
	pkts := a.out.Packets()
	if len(pkts) != 10 {
		t.Fatalf("%d packets, want 10", len(pkts))
	}
	for i, op := range pkts {
		p := l.parse(a, op.Bytes)
		if op.Dest != "a" || op.QPN != qpnA {
			t.Errorf("packet %d tagged %v/%#x", i, op.Dest, op.QPN)
		}
		wantOp := wire.RCSendMiddle
		switch i {
		case 0:
			wantOp = wire.RCSendFirst
		case 9:
			wantOp = wire.RCSendLastWithImmediate
		}
		bth := p.BTH
		if bth.Opcode() != wantOp || bth.PSN() != o.psnA.Add(uint32(i)) || uint32(bth.DestQP()) != qpnB || bth.PKey() != 0xFFFF {
			t.Errorf("packet %d: %v psn %v dqp %v", i, bth.Opcode(), bth.PSN(), bth.DestQP())
		}
		wantAck := i == 9 || i%4 == 3
		if bth.AckReq() != wantAck || bth.SolicitedEvent() != (i == 9) {
			t.Errorf("packet %d: AckReq %v SE %v", i, bth.AckReq(), bth.SolicitedEvent())
		}
		wantPad := uint8(0)
		if i == 9 {
			wantPad = 1
		}
		if bth.PadCount() != wantPad {
			t.Errorf("packet %d: pad %d", i, bth.PadCount())
		}
	}
	l.run(time.Second)
	wantBytes(t, "payload", dst, src)
	// ACKs answer AckReq packets only, and the three of one output
	// coalesce into the last (coalesceAck).
	if got := countOps(l.log, "b", "ACKNOWLEDGE"); got != 1 {
		t.Errorf("%d ACKs, want 1", got)
	}
	if c := b.qp.Counters(); c.AckDeferred != 9 {
		t.Errorf("AckDeferred = %d, want 9", c.AckDeferred)
	}
}
