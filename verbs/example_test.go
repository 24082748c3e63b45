package verbs_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// The lifecycle of the verbs objects: open a device, allocate a PD, register
// memory, create a CQ and an RC QP, and walk the QP through INIT, RTR and
// RTS with the attributes ibv_rc_pingpong uses.
func Example() {
	dev, err := verbs.Open(verbs.DeviceConfig{Addr: exampleAddr})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()

	pd, err := dev.AllocPD()
	if err != nil {
		log.Fatal(err)
	}
	buf := make([]byte, 4096)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		log.Fatal(err)
	}
	cq, err := dev.CreateCQ(16, nil, 0)
	if err != nil {
		log.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{
		QPType: verbs.QPTypeRC,
		SendCQ: cq,
		RecvCQ: cq,
		Cap:    verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1},
	})
	if err != nil {
		log.Fatal(err)
	}

	// The peer's QPN, PSN and GID come from an out-of-band exchange.
	gid, _ := dev.QueryGID(1, 1)
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
		{verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPNum: 0x1234, RQPSN: 0x100,
			MaxDestRdAtomic: 1, MinRNRTimer: 12,
			AHAttr: verbs.AddressVector{DGID: gid, SGIDIndex: 1, HopLimit: 1, IsGlobal: true, PortNum: 1}},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN |
				verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
		{verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: 0x200, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt |
				verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.attr, s.mask); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("QP state:", qp.State())

	// Post a receive and a signaled send. No QP 0x1234 answers, so the send
	// stays unacknowledged until the QP is moved to the error state, which
	// flushes both.
	if err := qp.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{mr.SGE(0, 2048)}}); err != nil {
		log.Fatal(err)
	}
	err = qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{mr.SGE(2048, 64)}})
	if err != nil {
		log.Fatal(err)
	}
	if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
		log.Fatal(err)
	}
	wc := make([]verbs.WorkCompletion, 4)
	n, _ := cq.Poll(wc)
	for _, c := range wc[:n] {
		fmt.Printf("wr %d: %v (%v)\n", c.WRID, c.Status, c.Opcode)
	}

	// Tear down in reverse order.
	for _, destroy := range []func() error{qp.Destroy, cq.Destroy, mr.Dereg, pd.Dealloc} {
		if err := destroy(); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// QP state: RTS
	// wr 2: Work Request Flushed Error (SEND)
	// wr 1: Work Request Flushed Error (RECV)
}

// Waiting for completions through a completion channel instead of polling.
func ExampleCompChannel_GetEvent() {
	dev, err := verbs.Open(verbs.DeviceConfig{Addr: exampleAddr})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	ch, _ := dev.CreateCompChannel()
	cq, _ := dev.CreateCQ(16, ch, 0)
	pd, _ := dev.AllocPD()
	qp, _ := pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxRecvWR: 4}})
	_ = qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)

	// Arm, then produce a completion (here: a receive flushed by the error
	// state), then wait for the event and poll.
	if err := cq.ReqNotify(false); err != nil {
		log.Fatal(err)
	}
	_ = qp.PostRecv(&verbs.RecvWR{WRID: 7})
	_ = qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)

	ev, err := ch.GetEvent(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	ev.AckEvents(1)
	wc := make([]verbs.WorkCompletion, 1)
	n, _ := ev.Poll(wc)
	fmt.Println(n, wc[0].WRID, wc[0].Status)
	// Output: 1 7 Work Request Flushed Error
}

// A one-sided mailbox: a peer WRITEs a message into a region, and the
// region's owner, which posts nothing, parks in WaitRemoteWrite until the
// bytes land instead of spinning on a flag.
func ExampleMR_WaitRemoteWrite() {
	owner, writer := openRCEnd(exampleAddr), openRCEnd(examplePeerAddr)
	defer owner.dev.Close()
	defer writer.dev.Close()
	owner.connect(writer)
	writer.connect(owner)

	seen := owner.mr.RemoteWrites()
	copy(writer.buf, "hello, mailbox")
	err := writer.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{writer.mr.SGE(0, 14)},
		RDMA:   verbs.RDMAParams{RemoteAddr: owner.mr.IOVA(), RKey: owner.mr.RKey()}})
	if err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := owner.mr.WaitRemoteWrite(ctx, seen); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", owner.buf[:14])
	// Output: hello, mailbox
}

// The examples' devices bind loopback addresses of this test process's
// own, so that two runs of the tests at once do not take each other's; a
// program binds the address of its network interface (192.0.2.1, say).
var exampleAddr, examplePeerAddr = testkit.Addr(1), testkit.Addr(2)

// rcEnd is one side of the examples' RC connections.
type rcEnd struct {
	dev *verbs.Device
	buf []byte
	mr  *verbs.MR
	qp  *verbs.QP
}

// openRCEnd opens a device on addr with a registered buffer and an RC QP.
func openRCEnd(addr netip.Addr) *rcEnd {
	dev, err := verbs.Open(verbs.DeviceConfig{Addr: addr})
	if err != nil {
		log.Fatal(err)
	}
	pd, _ := dev.AllocPD()
	e := &rcEnd{dev: dev, buf: make([]byte, 4096)}
	if e.mr, err = pd.RegMR(e.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		log.Fatal(err)
	}
	cq, _ := dev.CreateCQ(16, nil, 0)
	e.qp, err = pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		log.Fatal(err)
	}
	return e
}

// connect moves e's QP to RTS toward peer's (what an out-of-band exchange
// or rdma_cm would arrange).
func (e *rcEnd) connect(peer *rcEnd) {
	gid, _ := peer.dev.QueryGID(1, 1)
	for _, s := range []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: verbs.AccessRemoteWrite},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
		{verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPNum: peer.qp.QPN(), RQPSN: 0,
			MaxDestRdAtomic: 1, MinRNRTimer: 12,
			AHAttr: verbs.AddressVector{DGID: gid, SGIDIndex: 1, HopLimit: 64, IsGlobal: true, PortNum: 1}},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN |
				verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
		{verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt |
				verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic},
	} {
		if err := e.qp.Modify(&s.attr, s.mask); err != nil {
			log.Fatal(err)
		}
	}
}
