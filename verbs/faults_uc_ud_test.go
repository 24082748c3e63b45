//go:build goroce_faults

package verbs_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// newFaultyTypedEnd is newTypedEnd on a device with fault injection f
// (none if nil), with one SGE per work request and a buffer of 1 MiB.
func newFaultyTypedEnd(t *testing.T, host int, typ verbs.QPType, f *verbs.Faults) *rdmatest.End {
	t.Helper()
	o := rdmatest.EndOptions{Type: typ, CQE: 1024, BufSize: 1 << 20,
		Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 512, MaxSendSGE: 1, MaxRecvSGE: 1}}
	if f != nil {
		o.Open = withFaults(*f)
	}
	return newEnd(t, host, o)
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
	for _, typ := range []verbs.QPType{verbs.QPTypeUC, verbs.QPTypeUD} {
		t.Run(typ.String(), func(t *testing.T) {
			// No jitter: it reorders nearly every packet of a burst, and
			// UC, which has no retransmission, would lose nearly every
			// multi-packet message; Reorder holds a few back.
			f := verbs.Faults{Seed: 7, Drop: 0.05, Corrupt: 0.02, Reorder: 0.05}
			if typ == verbs.QPTypeUC {
				// UC ignores duplicates (PSN behind); UD, like rxe, has
				// no PSN check and would deliver them twice.
				f.Duplicate = 0.05
			}
			a := newFaultyTypedEnd(t, 15, typ, nil)
			b := newFaultyTypedEnd(t, 16, typ, &f)
			var ud verbs.UDParams
			if typ == verbs.QPTypeUC {
				linkUC(t, a.QP, b.QP, verbs.MTU1024, 0x100, 0x200)
				linkUC(t, b.QP, a.QP, verbs.MTU1024, 0x200, 0x100)
			} else {
				linkUD(t, a.QP, rdmatest.UDQKey)
				linkUD(t, b.QP, rdmatest.UDQKey)
				ud = verbs.UDParams{AH: ahTo(t, a, b), RemoteQPN: b.QP.QPN(), RemoteQKey: rdmatest.UDQKey}
			}
			grh := map[verbs.QPType]int{verbs.QPTypeUD: verbs.GRHSize}[typ]
			const recvs = 256 // ring slots in b.Buf, reposted as they complete
			for i := range recvs {
				rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{b.MR.SGE(i*slot, slot)}})
			}
			size := func(i int) int {
				if typ == verbs.QPTypeUD {
					return 1 + i*7%1024
				}
				return 1 + i*97%(4*1024)
			}
			// Messages live at i*slot of a.Buf (the first 256), filled
			// with a pattern of their number.
			for i := range msgs {
				src := a.Buf[(i%256)*slot : (i%256)*slot+size(i)]
				for k := range src {
					src[k] = byte(i) ^ byte(k*31)
				}
				rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSendWithImm, ImmData: uint32(i), UD: ud,
					SGList: []verbs.SGE{a.MR.SGE((i%256)*slot, size(i))}})
				if i%32 == 31 {
					// Let the receiver keep up: it drops what finds no
					// receive, and this test is about the network.
					time.Sleep(2 * time.Millisecond)
				}
			}
			sent := a.QP.Counters().SentPkts
			testkit.WaitFor(t, "every packet received or lost", func() bool {
				c, fc := b.Dev.Counters(), b.Dev.FaultCounters()
				return c.RcvdPkts+c.ICRCErrors+c.Malformed+fc.Dropped >= sent
			})
			wcs := rdmatest.Poll(t, b.CQ)
			seen := map[uint32]bool{}
			last := -1
			for _, wc := range wcs {
				if wc.Status != verbs.WCSuccess || wc.WCFlags&verbs.WCWithImm == 0 {
					t.Fatalf("receive completion %+v", wc)
				}
				i := int(wc.ImmData)
				if seen[wc.ImmData] || i >= msgs {
					t.Fatalf("message %d delivered twice or unknown", i)
				}
				seen[wc.ImmData] = true
				if typ == verbs.QPTypeUC && i < last {
					t.Fatalf("UC delivered message %d after %d", i, last)
				}
				last = max(last, i)
				if int(wc.ByteLen) != grh+size(i) {
					t.Fatalf("message %d: %d bytes, want %d", i, wc.ByteLen, grh+size(i))
				}
				got := b.Buf[int(wc.WRID)*slot+grh : int(wc.WRID)*slot+grh+size(i)]
				want := make([]byte, size(i))
				for k := range want {
					want[k] = byte(i) ^ byte(k*31)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("message %d corrupted (first bytes % x)", i, got[:min(8, len(got))])
				}
				if typ == verbs.QPTypeUD {
					if src := b.Buf[int(wc.WRID)*slot+20+12:]; binary.BigEndian.Uint32(src) != binary.BigEndian.Uint32(a.Dev.Addr().AsSlice()) {
						t.Fatalf("message %d: GRH source % x", i, src[:4])
					}
				}
			}
			c, fc := b.Dev.Counters(), b.Dev.FaultCounters()
			t.Logf("%v: %d of %d messages delivered; faults %+v; dropped messages %d, no receive %d",
				typ, len(wcs), msgs, fc, c.DroppedMsgs, c.DroppedNoRecv)
			if len(wcs) == 0 || len(wcs) == msgs || fc.Dropped == 0 {
				t.Fatalf("%d of %d delivered with %d packets dropped: the faults did not bite", len(wcs), msgs, fc.Dropped)
			}
			if typ == verbs.QPTypeUC && c.DroppedMsgs == 0 {
				t.Fatal("no UC message counted as dropped")
			}
			if s := b.QP.State(); s != verbs.QPStateRTS {
				t.Fatalf("receiver in %v", s)
			}
		})
	}
}
