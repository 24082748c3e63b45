//go:build linux && cgo && goroce_ibverbs

package cm

import (
	"context"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// TestHardwareInitQPRights: QPs handed to Dial and Accept in INIT without
// remote rights (as rping does: receives are posted in INIT) get the
// connection's, as on goroce devices: each side READs and WRITEs the
// other's buffer. Before, Dial's QP never got remote rights on a kernel
// device (nor did Accept's, handed over in INIT), and the peer's READ
// failed (rxe: REM_INV_REQ_ERR).
func TestHardwareInitQPRights(t *testing.T) {
	l, name := hwListenTest(t)
	ce, se := hwEnd(t, name), hwEnd(t, name)
	for _, e := range []*rdmatest.End{ce, se} {
		if err := e.QP.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
			t.Fatal(err)
		}
		rdmatest.PostRecv(t, e.QP, verbs.RecvWR{WRID: 9, SGList: []verbs.SGE{e.MR.SGE(0, 64)}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Timeout)
	defer cancel()
	p := &Params{ResponderResources: 1, InitiatorDepth: 1}
	accepted := make(chan error, 1)
	go func() {
		req, err := l.Accept(ctx)
		if err == nil {
			var c *Conn
			if c, err = req.Accept(ctx, se.QP, p); err == nil {
				t.Cleanup(func() { _ = c.Close() })
			}
		}
		accepted <- err
	}()
	cc, err := Dial(ctx, l.Addr().String(), ce.QP, p)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	copy(ce.Buf[1000:], "client's")
	copy(se.Buf[1000:], "server's")
	for i, x := range []struct {
		from, to *rdmatest.End
		op       verbs.WROpcode
	}{{ce, se, verbs.WRRDMARead}, {se, ce, verbs.WRRDMARead}, {ce, se, verbs.WRRDMAWrite}, {se, ce, verbs.WRRDMAWrite}} {
		rdmatest.PostSend(t, x.from.QP, verbs.SendWR{WRID: uint64(i), Opcode: x.op, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{x.from.MR.SGE(2000+100*i, 8)}, RDMA: verbs.RDMAParams{RemoteAddr: x.to.MR.IOVA() + 1000, RKey: x.to.MR.RKey()}})
		if wc := rdmatest.WaitOne(t, x.from.CQ); wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("%v %d: %+v", x.op, i, wc)
		}
	}
	if string(ce.Buf[2000:2008]) != "server's" || string(se.Buf[2100:2108]) != "client's" {
		t.Fatalf("READs brought %q and %q", ce.Buf[2000:2008], se.Buf[2100:2108])
	}
}
