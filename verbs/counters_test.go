package verbs_test

import (
	"net"
	"net/netip"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/wire"
	"github.com/goroce/goroce/verbs"
)

// TestCountersEach: Each names every field of Counters exactly once, rxe's
// hw_counters first in rxe's order, and Add sums every field.
func TestCountersEach(t *testing.T) {
	var c verbs.Counters
	v := reflect.ValueOf(&c).Elem()
	for i := range v.NumField() {
		v.Field(i).SetUint(uint64(i + 1)) // distinct values locate the fields
	}
	seen := map[uint64]string{}
	var names []string
	c.Each(func(name string, val uint64) {
		if prev, dup := seen[val]; dup {
			t.Errorf("%s and %s report the same field", prev, name)
		}
		seen[val] = name
		names = append(names, name)
	})
	if len(names) != v.NumField() {
		t.Fatalf("Each reports %d counters, Counters has %d fields", len(names), v.NumField())
	}
	rxe := []string{"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err",
		"send_rnr_err", "rcvd_seq_err", "ack_deferred", "retry_exceeded_err", "retry_rnr_exceeded_err",
		"completer_retry_err", "send_err", "rdma_sends", "rdma_recvs"}
	if !reflect.DeepEqual(names[:len(rxe)], rxe) {
		t.Errorf("first names %q, want rxe's %q", names[:len(rxe)], rxe)
	}
	for _, tc := range []struct {
		name string
		get  func(*verbs.Counters) uint64
	}{
		{"sent_pkts", func(c *verbs.Counters) uint64 { return c.SentPkts }},
		{"rcvd_rnr_err", func(c *verbs.Counters) uint64 { return c.RcvdRNRErr }},
		{"send_rnr_err", func(c *verbs.Counters) uint64 { return c.SendRNRErr }},
		{"retry_rnr_exceeded_err", func(c *verbs.Counters) uint64 { return c.RetryRNRExceededErr }},
		{"icrc_err", func(c *verbs.Counters) uint64 { return c.ICRCErrors }},
		{"dropped_unknown_qp", func(c *verbs.Counters) uint64 { return c.DroppedUnknownQP }},
		{"cq_overruns", func(c *verbs.Counters) uint64 { return c.CQOverruns }},
	} {
		if got := seen[tc.get(&c)]; got != tc.name {
			t.Errorf("field of %s is reported as %s", tc.name, got)
		}
	}

	sum := c.Add(c)
	sv := reflect.ValueOf(sum)
	for i := range sv.NumField() {
		if got := sv.Field(i).Uint(); got != 2*uint64(i+1) {
			t.Errorf("Add: %s = %d, want %d", sv.Type().Field(i).Name, got, 2*(i+1))
		}
	}
}

// quiesce waits until each side has received every packet the other sent.
func quiesce(t *testing.T, a, b *rdmatest.End) (ca, cb verbs.Counters) {
	t.Helper()
	testkit.WaitFor(t, "sent packets received", func() bool {
		ca, cb = a.Dev.Counters(), b.Dev.Counters()
		return ca.SentPkts == cb.RcvdPkts && cb.SentPkts == ca.RcvdPkts
	})
	return ca, cb
}

// TestCountersTraffic: a WRITE and a SEND move the packet counters of both
// devices and QPs consistently, and nothing is counted as an error.
func TestCountersTraffic(t *testing.T) {
	a, b := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	const n = 3000 // three packets at the 1024-byte path MTU
	fill(a.Buf[:n], 3)
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, n)},
		RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA() + dstOff, RKey: b.MR.RKey()}})
	if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("write completion %+v", wc)
	}
	ca, cb := quiesce(t, a, b)
	if ca.SentPkts < 3 || cb.SentPkts < 1 {
		t.Errorf("after a 3-packet WRITE: a sent %d, b sent %d packets", ca.SentPkts, cb.SentPkts)
	}
	if ca.SentBytes != cb.RcvdBytes || cb.SentBytes != ca.RcvdBytes || ca.SentBytes < n {
		t.Errorf("bytes: a sent %d, b received %d; b sent %d, a received %d", ca.SentBytes, cb.RcvdBytes, cb.SentBytes, ca.RcvdBytes)
	}

	rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{b.MR.SGE(recvOff, 100)}})
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 100)}})
	rdmatest.WaitOne(t, a.CQ)
	rdmatest.WaitOne(t, b.CQ)
	ca, cb = quiesce(t, a, b)

	// One QP per device: the device's packets are the QP's.
	qa, qb := a.QP.Counters(), b.QP.Counters()
	if qa.SentPkts != ca.SentPkts || qa.RcvdPkts != ca.RcvdPkts || qb.SentPkts != cb.SentPkts || qb.RcvdPkts != cb.RcvdPkts {
		t.Errorf("QP packets a %d/%d b %d/%d, devices a %d/%d b %d/%d (sent/received)",
			qa.SentPkts, qa.RcvdPkts, qb.SentPkts, qb.RcvdPkts, ca.SentPkts, ca.RcvdPkts, cb.SentPkts, cb.RcvdPkts)
	}
	if qa.RDMASends != 1 || ca.RDMASends != 1 || qb.RDMARecvs != 1 || cb.RDMARecvs != 1 || qa.RDMARecvs != 0 || qb.RDMASends != 0 {
		t.Errorf("rdma_sends a %d (QP %d), rdma_recvs b %d (QP %d); want 1 each", ca.RDMASends, qa.RDMASends, cb.RDMARecvs, qb.RDMARecvs)
	}
	// The device-wide fields are not a QP's.
	if qa.SentBytes != 0 || qa.DroppedUnknownQP != 0 || qa.SendErr != 0 {
		t.Errorf("QP counters carry device fields: %+v", qa)
	}
	// A slow machine may retransmit (timeouts, duplicates), but nothing
	// here is an error.
	for _, c := range []verbs.Counters{ca, cb} {
		c.Each(func(name string, v uint64) {
			switch name {
			case "rcvd_rnr_err", "send_rnr_err", "retry_exceeded_err", "retry_rnr_exceeded_err", "send_err",
				"malformed", "icrc_err", "dropped_unknown_qp", "dropped_wrong_source", "dropped_pkts",
				"sent_naks", "rcvd_naks", "cq_overruns", "local_err", "capture_err":
				if v != 0 {
					t.Errorf("%s = %d after clean traffic", name, v)
				}
			}
		})
	}
}

// TestCountersRNR: a SEND without a posted receive is RNR NAKed until the
// receive comes: the responder counts send_rnr_err, the requester
// rcvd_rnr_err.
func TestCountersRNR(t *testing.T) {
	a, b := newEnd(t, 1, rdmatest.EndOptions{}), newEnd(t, 2, rdmatest.EndOptions{})
	la, lb := rdmatest.DefaultLink(), rdmatest.DefaultLink()
	la.RNRRetry, lb.MinRNRTimer = 7, 1 // infinite retries, 0.01 ms apart
	rdmatest.Connect(t, a, b, la, lb)
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 64)}})
	testkit.WaitFor(t, "an RNR NAK", func() bool { return a.Dev.Counters().RcvdRNRErr > 0 })
	rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{b.MR.SGE(recvOff, 64)}})
	if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("send completion %+v", wc)
	}
	rdmatest.WaitOne(t, b.CQ)
	ca, cb := quiesce(t, a, b)
	qa, qb := a.QP.Counters(), b.QP.Counters()
	if ca.RcvdRNRErr == 0 || qa.RcvdRNRErr != ca.RcvdRNRErr || cb.SendRNRErr != ca.RcvdRNRErr || qb.SendRNRErr != cb.SendRNRErr {
		t.Errorf("RNR NAKs: requester received %d (QP %d), responder sent %d (QP %d); want equal and > 0",
			ca.RcvdRNRErr, qa.RcvdRNRErr, cb.SendRNRErr, qb.SendRNRErr)
	}
	if ca.SendRNRErr != 0 || cb.RcvdRNRErr != 0 || ca.RetryRNRExceededErr != 0 {
		t.Errorf("RNR counted on the wrong side: %+v / %+v", ca, cb)
	}
}

// rawPacket is a SEND_ONLY to qpn from src to dst, with a 4-byte payload
// and the ICRC a Linux sender with IP ID 0 gives it.
func rawPacket(src, dst netip.AddrPort, qpn uint32) []byte {
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: wire.QPN(qpn & wire.QPNMask), PSN: 5}}
	hdrs := wire.AppendHeaders(nil, &h)
	payload := []byte{1, 2, 3, 4}
	crc := wire.ICRCv4(src.Addr().As4(), dst.Addr().As4(), 0, src.Port(), dst.Port(), hdrs, payload)
	return wire.AppendICRC(append(hdrs, payload...), crc)
}

// TestCountersDrops: a packet whose ICRC does not match counts as an ICRC
// error, one for a QP number the device does not have as dropped for an
// unknown QP; neither reaches a QP.
func TestCountersDrops(t *testing.T) {
	d := rdmatest.OpenDevice(t, verbs.DeviceConfig{Addr: testkit.Addr(1)})
	uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(testkit.Addr(3), 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	src := uc.LocalAddr().(*net.UDPAddr).AddrPort()
	dst := netip.AddrPortFrom(d.Addr(), d.UDPPort())

	bad := rawPacket(src, dst, 0x123456)
	bad[wire.BTHLen+1] ^= 0x10 // one payload bit: no IP ID explains it
	if _, err := uc.WriteToUDPAddrPort(bad, dst); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "an ICRC error", func() bool { return d.Counters().ICRCErrors == 1 })

	if _, err := uc.WriteToUDPAddrPort(rawPacket(src, dst, 0x123456), dst); err != nil {
		t.Fatal(err)
	}
	// The receive path counts the drop as it happens, the socket counts
	// the datagram (rcvd_pkts) once its batch has been handled: wait for
	// both.
	testkit.WaitFor(t, "an unknown QP drop", func() bool {
		c := d.Counters()
		return c.DroppedUnknownQP >= 1 && c.RcvdPkts >= 1
	})

	c := d.Counters()
	if c.ICRCErrors != 1 || c.DroppedUnknownQP != 1 || c.RcvdPkts != 1 || c.Malformed != 0 || c.SentPkts != 0 {
		t.Errorf("counters %+v: want one ICRC error, one unknown QP drop, one packet received", c)
	}
}

// TestCountersSurviveDestroy: destroying a QP keeps its counters in the
// device's totals, exactly, and in its own Counters.
func TestCountersSurviveDestroy(t *testing.T) {
	a, b := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	for i := range 3 {
		rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{b.MR.SGE(recvOff, 200)}})
		// Only the last SEND is signaled: rdma_sends counts all three,
		// as rxe does.
		var flags verbs.SendFlags
		if i == 2 {
			flags = verbs.SendSignaled
		}
		rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: flags, SGList: []verbs.SGE{a.MR.SGE(0, 200)}})
	}
	rdmatest.WaitN(t, a.CQ, 1)
	rdmatest.WaitN(t, b.CQ, 3)
	ca, cb := quiesce(t, a, b)
	qa, qb := a.QP.Counters(), b.QP.Counters()
	if ca.RDMASends != 3 || cb.RDMARecvs != 3 {
		t.Fatalf("rdma_sends %d, rdma_recvs %d before Destroy; want 3", ca.RDMASends, cb.RDMARecvs)
	}
	for _, e := range []*rdmatest.End{a, b} {
		if err := e.QP.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.Dev.Counters(); got != ca {
		t.Errorf("device a after Destroy:\n%+v\nbefore:\n%+v", got, ca)
	}
	if got := b.Dev.Counters(); got != cb {
		t.Errorf("device b after Destroy:\n%+v\nbefore:\n%+v", got, cb)
	}
	if got := a.QP.Counters(); got != qa {
		t.Errorf("QP a after Destroy %+v, before %+v", got, qa)
	}
	if got := b.QP.Counters(); got != qb {
		t.Errorf("QP b after Destroy %+v, before %+v", got, qb)
	}
	// And after the device is closed.
	if err := a.Dev.Close(); err != nil {
		t.Fatal(err)
	}
	if got := a.Dev.Counters(); got != ca {
		t.Errorf("device a after Close:\n%+v\nbefore:\n%+v", got, ca)
	}
}

// TestCountersConcurrent reads the device's counters while QPs carry
// traffic and are destroyed: every counter only grows from one reading to
// the next (a QP counted twice, or lost between live and destroyed, would
// show as a jump up and back), and nothing is lost in the end.
func TestCountersConcurrent(t *testing.T) {
	a, b := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	// Two more connections between the same devices.
	extra := make([][2]*verbs.QP, 2)
	for i := range extra {
		qa, err := a.PD.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: a.CQ, RecvCQ: a.CQ, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		qb, err := b.PD.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: b.CQ, RecvCQ: b.CQ, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		rdmatest.LinkQP(t, qa, rdmatest.DefaultLink(), 0x10, rdmatest.PeerOf(t, qb, 0x20))
		rdmatest.LinkQP(t, qb, rdmatest.DefaultLink(), 0x20, rdmatest.PeerOf(t, qa, 0x10))
		extra[i] = [2]*verbs.QP{qa, qb}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var readings int
	wg.Add(1)
	go func() {
		defer wg.Done()
		prev := b.Dev.Counters()
		for {
			select {
			case <-stop:
				return
			default:
			}
			cur := b.Dev.Counters()
			pv, cv := reflect.ValueOf(prev), reflect.ValueOf(cur)
			for i := range cv.NumField() {
				if cv.Field(i).Uint() < pv.Field(i).Uint() {
					t.Errorf("%s went down from %d to %d", cv.Type().Field(i).Name, pv.Field(i).Uint(), cv.Field(i).Uint())
				}
			}
			prev = cur
			readings++
			time.Sleep(100 * time.Microsecond)
		}
	}()

	const writes = 20
	for _, pair := range append(extra, [2]*verbs.QP{a.QP, b.QP}) {
		for i := range writes {
			rdmatest.PostSend(t, pair[0], verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(0, 1500)}, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA() + dstOff, RKey: b.MR.RKey()}})
			rdmatest.WaitOne(t, a.CQ)
		}
		// Destroy the responder while the device is being read.
		_, cb := quiesce(t, a, b)
		before := pair[1].Counters()
		if err := pair[1].Destroy(); err != nil {
			t.Fatal(err)
		}
		if got := b.Dev.Counters(); got != cb {
			t.Errorf("device totals changed by Destroy: %+v, before %+v", got, cb)
		}
		if before.RcvdPkts < 2*writes {
			t.Errorf("responder received %d packets for %d 2-packet WRITEs", before.RcvdPkts, writes)
		}
	}
	close(stop)
	wg.Wait()
	if readings == 0 {
		t.Error("no concurrent reading")
	}
	c := b.Dev.Counters()
	if c.RcvdPkts < 3*2*writes || c.SentPkts < 3 {
		t.Errorf("totals after destroying every QP: %+v", c)
	}
}
