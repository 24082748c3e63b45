//go:build goroce_faults

package verbs

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"
)

// newFaultyTypedEnd is newTypedEnd on a device with fault injection f.
func newFaultyTypedEnd(t *testing.T, addr string, typ QPType, f *Faults) *rcEnd {
	t.Helper()
	e := &rcEnd{dev: openDevice(t, DeviceConfig{Addr: netip.MustParseAddr(addr), FaultInjection: f})}
	e.pd = mustPD(t, e.dev)
	cq, err := e.dev.CreateCQ(1024, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.cq = cq
	e.buf = make([]byte, 1<<20)
	e.mr = mustMR2(t, e.pd, e.buf, rcAccess)
	e.qp, err = e.pd.CreateQP(QPInitAttr{QPType: typ, SendCQ: cq, RecvCQ: cq,
		Cap: QPCap{MaxSendWR: 256, MaxRecvWR: 512, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestE2EUnreliableFaults sends UC messages of up to 4 packets and UD
// datagrams to a device that drops, corrupts, delays and reorders what it
// receives. Losses lose whole messages, silently; what is delivered is
// whole and right: every receive completes successfully, once, with the
// bytes its sender sent (its immediate data names the message), and UC
// keeps the order of what it delivers.
func TestE2EUnreliableFaults(t *testing.T) {
	const (
		msgs = 200
		slot = 4096
	)
	for _, typ := range []QPType{QPTypeUC, QPTypeUD} {
		t.Run(typ.String(), func(t *testing.T) {
			// No jitter: it reorders nearly every packet of a burst, and
			// UC, which has no retransmission, would lose nearly every
			// multi-packet message; Reorder holds a few back.
			f := Faults{Seed: 7, Drop: 0.05, Corrupt: 0.02, Reorder: 0.05}
			if typ == QPTypeUC {
				// UC ignores duplicates (PSN behind); UD, like rxe, has
				// no PSN check and would deliver them twice.
				f.Duplicate = 0.05
			}
			a := newFaultyTypedEnd(t, "127.0.1.15", typ, nil)
			b := newFaultyTypedEnd(t, "127.0.1.16", typ, &f)
			var ud UDParams
			if typ == QPTypeUC {
				linkUC(t, a.qp, b.qp, b.dev, MTU1024, 0x100, 0x200)
				linkUC(t, b.qp, a.qp, a.dev, MTU1024, 0x200, 0x100)
			} else {
				linkUD(t, a.qp, udQKey)
				linkUD(t, b.qp, udQKey)
				ud = UDParams{AH: ahTo(t, a, b), RemoteQPN: b.qp.QPN(), RemoteQKey: udQKey}
			}
			grh := map[QPType]int{QPTypeUD: GRHSize}[typ]
			const recvs = 256 // ring slots in b.buf, reposted as they complete
			for i := range recvs {
				mustPostRecv(t, b.qp, RecvWR{WRID: uint64(i), SGList: []SGE{b.mr.SGE(i*slot, slot)}})
			}
			size := func(i int) int {
				if typ == QPTypeUD {
					return 1 + i*7%1024
				}
				return 1 + i*97%(4*1024)
			}
			// Messages live at i*slot of a.buf (the first 256), filled
			// with a pattern of their number.
			for i := range msgs {
				src := a.buf[(i%256)*slot : (i%256)*slot+size(i)]
				for k := range src {
					src[k] = byte(i) ^ byte(k*31)
				}
				mustPostSend(t, a.qp, SendWR{WRID: uint64(i), Opcode: WRSendWithImm, ImmData: uint32(i), UD: ud,
					SGList: []SGE{a.mr.SGE((i%256)*slot, size(i))}})
				if i%32 == 31 {
					// Let the receiver keep up: it drops what finds no
					// receive, and this test is about the network.
					time.Sleep(2 * time.Millisecond)
				}
			}
			sent := a.qp.Counters().SentPkts
			waitFor(t, "every packet received or lost", func() bool {
				c, fc := b.dev.Counters(), b.dev.FaultCounters()
				return c.RcvdPkts+c.ICRCErrors+c.Malformed+fc.Dropped >= sent
			})
			wcs := pollAll(t, b.cq)
			seen := map[uint32]bool{}
			last := -1
			for _, wc := range wcs {
				if wc.Status != WCSuccess || wc.WCFlags&WCWithImm == 0 {
					t.Fatalf("receive completion %+v", wc)
				}
				i := int(wc.ImmData)
				if seen[wc.ImmData] || i >= msgs {
					t.Fatalf("message %d delivered twice or unknown", i)
				}
				seen[wc.ImmData] = true
				if typ == QPTypeUC && i < last {
					t.Fatalf("UC delivered message %d after %d", i, last)
				}
				last = max(last, i)
				if int(wc.ByteLen) != grh+size(i) {
					t.Fatalf("message %d: %d bytes, want %d", i, wc.ByteLen, grh+size(i))
				}
				got := b.buf[int(wc.WRID)*slot+grh : int(wc.WRID)*slot+grh+size(i)]
				want := make([]byte, size(i))
				for k := range want {
					want[k] = byte(i) ^ byte(k*31)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("message %d corrupted (first bytes % x)", i, got[:min(8, len(got))])
				}
				if typ == QPTypeUD {
					if src := b.buf[int(wc.WRID)*slot+20+12:]; binary.BigEndian.Uint32(src) != binary.BigEndian.Uint32(a.dev.Addr().AsSlice()) {
						t.Fatalf("message %d: GRH source % x", i, src[:4])
					}
				}
			}
			c, fc := b.dev.Counters(), b.dev.FaultCounters()
			t.Logf("%v: %d of %d messages delivered; faults %+v; dropped messages %d, no receive %d",
				typ, len(wcs), msgs, fc, c.DroppedMsgs, c.DroppedNoRecv)
			if len(wcs) == 0 || len(wcs) == msgs || fc.Dropped == 0 {
				t.Fatalf("%d of %d delivered with %d packets dropped: the faults did not bite", len(wcs), msgs, fc.Dropped)
			}
			if typ == QPTypeUC && c.DroppedMsgs == 0 {
				t.Fatal("no UC message counted as dropped")
			}
			if s := b.qp.State(); s != QPStateRTS {
				t.Fatalf("receiver in %v", s)
			}
		})
	}
}
