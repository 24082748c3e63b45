package verbs_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/goroce/goroce/internal/pcap"
	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/wire"
	"github.com/goroce/goroce/verbs"
)

// TestReplyPort runs WRITEs, a READ and an atomic and checks, on the
// requester's capture, the UDP source port of each response: by default the
// ACKs come from the responder's device port (several QPs' ACKs share a
// system call), with PerQPReplyPort from the QP's own; READ responses and
// ATOMIC_ACKNOWLEDGE always from the QP's. A sealed connection's ACKs
// share the device's port too (sealed into the batch). It also checks that
// the QPs hold no packet buffers once idle.
func TestReplyPort(t *testing.T) {
	for _, tc := range []struct {
		name          string
		perQP, sealed bool
	}{{"shared", false, false}, {"PerQPReplyPort", true, false}, {"shared-sealed", false, true}} {
		perQP := tc.perQP
		t.Run(tc.name, func(t *testing.T) {
			c := verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4}
			a := newEnd(t, 1, rdmatest.EndOptions{Cap: c})
			b := newEnd(t, 2, rdmatest.EndOptions{Cap: c, Device: verbs.DeviceConfig{PerQPReplyPort: perQP}})
			if tc.sealed {
				if err := a.QP.SetPacketKeys(&testKeys); err != nil {
					t.Fatal(err)
				}
				if err := b.QP.SetPacketKeys(mirror(testKeys)); err != nil {
					t.Fatal(err)
				}
			}
			rdmatest.Connect(t, a, b, rdmatest.DefaultLink(), rdmatest.DefaultLink())

			var capture bytes.Buffer
			if err := verbs.SetCapture(a.Dev, &capture); err != nil {
				t.Fatal(err)
			}
			const writes = 16
			for i := range writes {
				rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
					SGList: []verbs.SGE{a.MR.SGE(0, 3000)}, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}})
			}
			// The READ and the atomic after the WRITEs complete: had
			// they come in the WRITEs' receive batch, the WRITEs' ACKs
			// would have left before their responses, from the QP's
			// port (firstReply).
			for _, wc := range rdmatest.WaitN(t, a.CQ, writes) {
				if wc.Status != verbs.WCSuccess {
					t.Fatalf("WR %d: %v", wc.WRID, wc.Status)
				}
			}
			rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 100, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(4096, 2048)}, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}})
			rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 101, Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(8192, 8)}, Atomic: verbs.AtomicParams{RemoteAddr: b.MR.IOVA() + 8192, CompareAdd: 1, RKey: b.MR.RKey()}})
			for _, wc := range rdmatest.WaitN(t, a.CQ, 2) {
				if wc.Status != verbs.WCSuccess {
					t.Fatalf("WR %d: %v", wc.WRID, wc.Status)
				}
			}
			if err := verbs.SetCapture(a.Dev, nil); err != nil {
				t.Fatal(err)
			}

			devPort, qpPort := b.Dev.UDPPort(), verbs.QPSourcePort(b.QP)
			if devPort == qpPort {
				t.Fatalf("device and QP share port %d: the test cannot tell them apart", devPort)
			}
			ports := map[wire.Opcode]map[uint16]int{}
			r, err := pcap.NewReader(&capture)
			if err != nil {
				t.Fatal(err)
			}
			for {
				rec, err := r.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				f, err := pcap.DecodeFrame(r.LinkType(), rec.Data)
				if err != nil {
					t.Fatal(err)
				}
				if f.Dst != a.Dev.Addr() || len(f.UDPPayload) == 0 {
					continue // sent by a
				}
				op := wire.Opcode(f.UDPPayload[0])
				if ports[op] == nil {
					ports[op] = map[uint16]int{}
				}
				ports[op][f.SrcPort]++
			}
			acks := ports[wire.RCAcknowledge]
			switch {
			case len(acks) == 0:
				t.Fatal("no ACK captured")
			case perQP && (acks[devPort] != 0 || acks[qpPort] == 0):
				t.Errorf("ACK source ports %v, want only the QP's %d", acks, qpPort)
			case !perQP && (acks[devPort] == 0 || len(acks) > 2 || len(acks) == 2 && acks[qpPort] == 0):
				// A PostSend or the timer may send a pending ACK
				// from the QP's port; the end of a batch sends it
				// from the device's.
				t.Errorf("ACK source ports %v, want the device's %d (and the QP's %d)", acks, devPort, qpPort)
			}
			for _, op := range []wire.Opcode{wire.RCRDMAReadResponseFirst, wire.RCRDMAReadResponseMiddle,
				wire.RCRDMAReadResponseLast, wire.RCRDMAReadResponseOnly, wire.RCAtomicAcknowledge} {
				for p, n := range ports[op] {
					if p != qpPort {
						t.Errorf("%d %v from port %d, want the QP's %d", n, op.Info().Name(), p, qpPort)
					}
				}
			}
			if len(ports[wire.RCAtomicAcknowledge]) == 0 || len(ports[wire.RCRDMAReadResponseFirst])+len(ports[wire.RCRDMAReadResponseOnly]) == 0 {
				t.Errorf("READ response or ATOMIC ACKNOWLEDGE missing from the capture: %v", ports)
			}
			if d := a.Dev.Counters(); tc.sealed && (d.DroppedAuthFail != 0 || d.DroppedReplay != 0) {
				t.Errorf("sealed replies dropped: auth %d, replay %d", d.DroppedAuthFail, d.DroppedReplay)
			}

			// Idle QPs hold no packet buffers: they went back to
			// the engine's pool. The receive path returns one at the
			// end of its batch, after it delivered the completion
			// WaitN saw: wait for that.
			for _, e := range []*rdmatest.End{a, b} {
				testkit.WaitFor(t, fmt.Sprintf("idle QP %#x to return its Output", e.QP.QPN()), func() bool { return !verbs.QPHoldsOutput(e.QP) })
			}
		})
	}
}
