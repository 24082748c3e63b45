package cm

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// TestReceiveQueuesDial: connections through the cm between devices with
// four receive queues (DeviceConfig.ReceiveQueues), whose QPs take the
// queues in turn while QP 1's MADs take one of them: four RC connections
// come up, carry a WRITE and a SEND each at the same time, and go down
// with nothing left behind.
func TestReceiveQueuesDial(t *testing.T) {
	checkLeaks(t)
	const n = 4
	a := newHostConfig(t, verbs.DeviceConfig{Addr: testkit.Addr(1), ReceiveQueues: n})
	b := newHostConfig(t, verbs.DeviceConfig{Addr: testkit.Addr(2), ReceiveQueues: n})
	type conn struct {
		ca, cb *Conn
		qa, qb *verbs.QP
	}
	conns := make([]conn, n)
	for i := range conns {
		c := &conns[i]
		c.ca, c.cb, c.qa, c.qb = dialPair(t, a, b, nil, nil)
	}
	const slot = 1024
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := i * slot
			msg := fmt.Appendf(nil, "connection %d", i)
			copy(a.buf[off:], msg)
			if err := c.qb.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{b.mr.SGE(32*1024+off, slot)}}); err != nil {
				errs <- err
				return
			}
			w := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.mr.SGE(off, slot)}, RDMA: verbs.RDMAParams{RemoteAddr: b.mr.IOVA() + uint64(off), RKey: b.mr.RKey()}}
			s := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(off, slot)}}
			if _, err := c.qa.PostSendList([]verbs.SendWR{w, s}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Each CQ takes the completions of all four connections.
	for _, cq := range []*verbs.CQ{a.cq, b.cq} {
		want := 2 * n
		if cq == b.cq {
			want = n
		}
		for range want {
			if wc := rdmatest.WaitOne(t, cq); wc.Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
		}
	}
	for i := range conns {
		off := i * slot
		msg := fmt.Appendf(nil, "connection %d", i)
		if !bytes.HasPrefix(b.buf[off:], msg) || !bytes.HasPrefix(b.buf[32*1024+off:], msg) {
			t.Errorf("connection %d: WRITE placed %q, SEND %q", i, b.buf[off:off+16], b.buf[32*1024+off:32*1024+off+16])
		}
	}
	for _, c := range conns {
		if err := c.ca.Close(); err != nil {
			t.Fatal(err)
		}
		<-c.cb.Done()
		_ = c.cb.Close()
	}
	testkit.WaitFor(t, "timewait", func() bool { return records(a.dev) == 0 && records(b.dev) == 0 })
}
