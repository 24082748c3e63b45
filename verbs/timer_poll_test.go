//go:build linux && !goroce_portable

package verbs_test

import (
	"testing"

	"github.com/goroce/goroce/internal/netio"
	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
)

// TestRetransmitTimerReadsWaitingAck: when a QP's retransmission timer
// fires while the ACK that answers its request waits unread in the
// device's socket, the timer reads the socket first, and the request
// completes on that ACK. This happens when the process has not run for a
// while: the runtime may run the timer goroutine before it notices that
// the socket is readable (seen in the rxe interop under load, a resend
// 240 ms after rxe's ACK had arrived). Here a's receive goroutine is held
// back before every batch it reads, so only the timer can read a's socket:
// without that read, a retransmits until RETRY_EXC_ERR. (Only Linux's
// receive path has the hook, and Poll: elsewhere the timer cannot read.)
func TestRetransmitTimerReadsWaitingAck(t *testing.T) {
	a := newEnd(t, 1, rdmatest.EndOptions{})
	b := newEnd(t, 2, rdmatest.EndOptions{})
	la := rdmatest.DefaultLink()
	la.Timeout = 16 // 268 ms: b has retry_cnt+1 of them to answer under load
	rdmatest.Connect(t, a, b, la, rdmatest.DefaultLink())

	addr := a.Dev.Addr()
	hold := make(chan struct{})
	netio.SetReadHook(func(c *netio.Conn) {
		if c.LocalAddr().Addr() == addr {
			<-hold
		}
	})
	t.Cleanup(func() {
		close(hold)
		netio.SetReadHook(nil)
	})

	copy(a.Buf, "written while the receive goroutine was held")
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 7, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 64)}, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}})
	if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess || wc.WRID != 7 {
		t.Fatalf("WRITE: %+v", wc)
	}
	if string(b.Buf[:44]) != string(a.Buf[:44]) {
		t.Fatalf("b holds %q", b.Buf[:44])
	}
}
