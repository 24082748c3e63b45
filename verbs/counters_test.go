package verbs

import (
	"net"
	"net/netip"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/wire"
)

// TestCountersEach: Each names every field of Counters exactly once, rxe's
// hw_counters first in rxe's order, and Add sums every field.
func TestCountersEach(t *testing.T) {
	var c Counters
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
		get  func(*Counters) uint64
	}{
		{"sent_pkts", func(c *Counters) uint64 { return c.SentPkts }},
		{"rcvd_rnr_err", func(c *Counters) uint64 { return c.RcvdRNRErr }},
		{"send_rnr_err", func(c *Counters) uint64 { return c.SendRNRErr }},
		{"retry_rnr_exceeded_err", func(c *Counters) uint64 { return c.RetryRNRExceededErr }},
		{"icrc_err", func(c *Counters) uint64 { return c.ICRCErrors }},
		{"dropped_unknown_qp", func(c *Counters) uint64 { return c.DroppedUnknownQP }},
		{"cq_overruns", func(c *Counters) uint64 { return c.CQOverruns }},
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
func quiesce(t *testing.T, a, b *rcEnd) (ca, cb Counters) {
	t.Helper()
	waitFor(t, "sent packets received", func() bool {
		ca, cb = a.dev.Counters(), b.dev.Counters()
		return ca.SentPkts == cb.RcvdPkts && cb.SentPkts == ca.RcvdPkts
	})
	return ca, cb
}

// TestCountersTraffic: a WRITE and a SEND move the packet counters of both
// devices and QPs consistently, and nothing is counted as an error.
func TestCountersTraffic(t *testing.T) {
	a, b := newPair(t, endOpts{}, endOpts{})
	const n = 3000 // three packets at the 1024-byte path MTU
	fill(a.buf[:n], 3)
	mustPostSend(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(0, n)},
		RDMA: RDMAParams{RemoteAddr: b.mr.IOVA() + dstOff, RKey: b.mr.RKey()}})
	if wc := waitWC(t, a.cq); wc.Status != WCSuccess {
		t.Fatalf("write completion %+v", wc)
	}
	ca, cb := quiesce(t, a, b)
	if ca.SentPkts < 3 || cb.SentPkts < 1 {
		t.Errorf("after a 3-packet WRITE: a sent %d, b sent %d packets", ca.SentPkts, cb.SentPkts)
	}
	if ca.SentBytes != cb.RcvdBytes || cb.SentBytes != ca.RcvdBytes || ca.SentBytes < n {
		t.Errorf("bytes: a sent %d, b received %d; b sent %d, a received %d", ca.SentBytes, cb.RcvdBytes, cb.SentBytes, ca.RcvdBytes)
	}

	mustPostRecv(t, b.qp, RecvWR{WRID: 2, SGList: []SGE{b.mr.SGE(recvOff, 100)}})
	mustPostSend(t, a.qp, SendWR{WRID: 3, Opcode: WRSend, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(0, 100)}})
	waitWC(t, a.cq)
	waitWC(t, b.cq)
	ca, cb = quiesce(t, a, b)

	// One QP per device: the device's packets are the QP's.
	qa, qb := a.qp.Counters(), b.qp.Counters()
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
	for _, c := range []Counters{ca, cb} {
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
	a, b := newEnd(t, "127.0.1.1", endOpts{}), newEnd(t, "127.0.1.2", endOpts{})
	la, lb := defaultLink(), defaultLink()
	la.rnrRetry, lb.minRNRTimer = 7, 1 // infinite retries, 0.01 ms apart
	connect(t, a, b, la, lb)
	mustPostSend(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, SendFlags: SendSignaled, SGList: []SGE{a.mr.SGE(0, 64)}})
	waitFor(t, "an RNR NAK", func() bool { return a.dev.Counters().RcvdRNRErr > 0 })
	mustPostRecv(t, b.qp, RecvWR{WRID: 2, SGList: []SGE{b.mr.SGE(recvOff, 64)}})
	if wc := waitWC(t, a.cq); wc.Status != WCSuccess {
		t.Fatalf("send completion %+v", wc)
	}
	waitWC(t, b.cq)
	ca, cb := quiesce(t, a, b)
	qa, qb := a.qp.Counters(), b.qp.Counters()
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
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: wireQPN(qpn), PSN: 5}}
	hdrs := wire.AppendHeaders(nil, &h)
	payload := []byte{1, 2, 3, 4}
	crc := wire.ICRCv4(src.Addr().As4(), dst.Addr().As4(), 0, src.Port(), dst.Port(), hdrs, payload)
	return wire.AppendICRC(append(hdrs, payload...), crc)
}

// TestCountersDrops: a packet whose ICRC does not match counts as an ICRC
// error, one for a QP number the device does not have as dropped for an
// unknown QP; neither reaches a QP.
func TestCountersDrops(t *testing.T) {
	d := openDevice(t, DeviceConfig{Addr: netip.MustParseAddr("127.0.1.1")})
	uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.1.3:0")))
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
	waitFor(t, "an ICRC error", func() bool { return d.Counters().ICRCErrors == 1 })

	if _, err := uc.WriteToUDPAddrPort(rawPacket(src, dst, 0x123456), dst); err != nil {
		t.Fatal(err)
	}
	// The receive path counts the drop as it happens, the socket counts
	// the datagram (rcvd_pkts) once its batch has been handled: wait for
	// both.
	waitFor(t, "an unknown QP drop", func() bool {
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
	a, b := newPair(t, endOpts{}, endOpts{})
	for i := range 3 {
		mustPostRecv(t, b.qp, RecvWR{WRID: uint64(i), SGList: []SGE{b.mr.SGE(recvOff, 200)}})
		// Only the last SEND is signaled: rdma_sends counts all three,
		// as rxe does.
		var flags SendFlags
		if i == 2 {
			flags = SendSignaled
		}
		mustPostSend(t, a.qp, SendWR{WRID: uint64(i), Opcode: WRSend, SendFlags: flags, SGList: []SGE{a.mr.SGE(0, 200)}})
	}
	waitN(t, a.cq, 1)
	waitN(t, b.cq, 3)
	ca, cb := quiesce(t, a, b)
	qa, qb := a.qp.Counters(), b.qp.Counters()
	if ca.RDMASends != 3 || cb.RDMARecvs != 3 {
		t.Fatalf("rdma_sends %d, rdma_recvs %d before Destroy; want 3", ca.RDMASends, cb.RDMARecvs)
	}
	for _, e := range []*rcEnd{a, b} {
		if err := e.qp.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.dev.Counters(); got != ca {
		t.Errorf("device a after Destroy:\n%+v\nbefore:\n%+v", got, ca)
	}
	if got := b.dev.Counters(); got != cb {
		t.Errorf("device b after Destroy:\n%+v\nbefore:\n%+v", got, cb)
	}
	if got := a.qp.Counters(); got != qa {
		t.Errorf("QP a after Destroy %+v, before %+v", got, qa)
	}
	if got := b.qp.Counters(); got != qb {
		t.Errorf("QP b after Destroy %+v, before %+v", got, qb)
	}
	// And after the device is closed.
	if err := a.dev.Close(); err != nil {
		t.Fatal(err)
	}
	if got := a.dev.Counters(); got != ca {
		t.Errorf("device a after Close:\n%+v\nbefore:\n%+v", got, ca)
	}
}

// TestCountersConcurrent reads the device's counters while QPs carry
// traffic and are destroyed: every counter only grows from one reading to
// the next (a QP counted twice, or lost between live and destroyed, would
// show as a jump up and back), and nothing is lost in the end.
func TestCountersConcurrent(t *testing.T) {
	a, b := newPair(t, endOpts{}, endOpts{})
	// Two more connections between the same devices.
	extra := make([][2]*QP, 2)
	for i := range extra {
		qa, err := a.pd.CreateQP(QPInitAttr{QPType: QPTypeRC, SendCQ: a.cq, RecvCQ: a.cq, Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		qb, err := b.pd.CreateQP(QPInitAttr{QPType: QPTypeRC, SendCQ: b.cq, RecvCQ: b.cq, Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		linkQP(t, qa, qb, b.dev, defaultLink(), 0x10, 0x20)
		linkQP(t, qb, qa, a.dev, defaultLink(), 0x20, 0x10)
		extra[i] = [2]*QP{qa, qb}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var readings int
	wg.Add(1)
	go func() {
		defer wg.Done()
		prev := b.dev.Counters()
		for {
			select {
			case <-stop:
				return
			default:
			}
			cur := b.dev.Counters()
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
	for _, pair := range append(extra, [2]*QP{a.qp, b.qp}) {
		for i := range writes {
			mustPostSend(t, pair[0], SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, SendFlags: SendSignaled,
				SGList: []SGE{a.mr.SGE(0, 1500)}, RDMA: RDMAParams{RemoteAddr: b.mr.IOVA() + dstOff, RKey: b.mr.RKey()}})
			waitWC(t, a.cq)
		}
		// Destroy the responder while the device is being read.
		_, cb := quiesce(t, a, b)
		before := pair[1].Counters()
		if err := pair[1].Destroy(); err != nil {
			t.Fatal(err)
		}
		if got := b.dev.Counters(); got != cb {
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
	c := b.dev.Counters()
	if c.RcvdPkts < 3*2*writes || c.SentPkts < 3 {
		t.Errorf("totals after destroying every QP: %+v", c)
	}
}
