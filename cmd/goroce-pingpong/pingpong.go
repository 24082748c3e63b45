package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/goroce/goroce/internal/oob"
	"github.com/goroce/goroce/verbs"
)

// Work request IDs, ibv_rc_pingpong's: they are also the bits of
// pingpongCtx.pending.
const (
	recvWRID = 1
	sendWRID = 2
)

// QP attributes, ibv_rc_pingpong's (pp_connect_ctx).
const (
	minRNRTimer     = 12 // 0.64 ms
	ackTimeout      = 14 // 4.096 µs × 2^14 ≈ 67 ms
	retryCnt        = 7
	rnrRetry        = 7 // infinite
	maxDestRdAtomic = 1
	maxRdAtomic     = 1
	hopLimit        = 1
)

// Buffer contents: ibv_rc_pingpong fills its buffer with 0x7b and, with -c,
// the client clears the first byte of every page before the first send.
const (
	fillByte = 0x7b
	markByte = 0
)

// address is one side's QP as the pingpong message describes it.
type address oob.PingpongDest

// String formats the address as ibv_rc_pingpong prints it.
func (a address) String() string {
	return fmt.Sprintf("LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %v", a.LID, a.QPN, a.PSN, verbs.GID(a.GID))
}

// pingpongCtx is ibv_rc_pingpong's struct pingpong_context: the device and
// the objects of one side, and the state of its traffic loop.
type pingpongCtx struct {
	opts    *options
	dev     *verbs.Device
	channel *verbs.CompChannel
	pd      *verbs.PD
	buf     []byte
	mr      *verbs.MR
	cq      *verbs.CQ
	qp      *verbs.QP
	local   address

	pageSize int
	routs    int // receives posted and not yet completed
	pending  int // recvWRID|sendWRID: what this iteration still waits for
	rcnt     int // receives completed
	scnt     int // sends completed
	events   int // --events: completion events taken, acknowledged at the end

	sendWR verbs.SendWR
	recvWR verbs.RecvWR
	wc     [2]verbs.WorkCompletion
}

// newPingpongCtx opens the device on addr, creates the objects as
// pp_init_ctx does, moves the QP to INIT and posts rx-depth receives (and
// arms the CQ with --events), so that the peer's first message finds a
// receive whenever it comes.
func newPingpongCtx(o *options, addr netip.Addr) (pp *pingpongCtx, err error) {
	dev, err := verbs.Open(verbs.DeviceConfig{Name: o.ibDev, Addr: addr})
	if err != nil {
		return nil, fmt.Errorf("couldn't open device %s on %v: %w", o.ibDev, addr, err)
	}
	pp = &pingpongCtx{opts: o, dev: dev, pageSize: os.Getpagesize()}
	defer func() {
		if err != nil {
			dev.Close() // and everything created on it
		}
	}()
	port, err := dev.QueryPort(o.ibPort)
	if err != nil {
		return nil, fmt.Errorf("couldn't get port info: %w", err)
	}
	gid, err := dev.QueryGID(o.ibPort, o.gidIndex)
	if err != nil {
		return nil, fmt.Errorf("can't read sgid of index %d: %w", o.gidIndex, err)
	}
	// A channel also when polling: see poll.
	if pp.channel, err = dev.CreateCompChannel(); err != nil {
		return nil, fmt.Errorf("couldn't create completion channel: %w", err)
	}
	if pp.pd, err = dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("couldn't allocate PD: %w", err)
	}
	pp.buf = make([]byte, o.size)
	for i := range pp.buf {
		pp.buf[i] = fillByte
	}
	if pp.mr, err = pp.pd.RegMR(pp.buf, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("couldn't register MR: %w", err)
	}
	if pp.cq, err = dev.CreateCQ(o.rxDepth+1, pp.channel, 0); err != nil {
		return nil, fmt.Errorf("couldn't create CQ: %w", err)
	}
	pp.qp, err = pp.pd.CreateQP(verbs.QPInitAttr{
		QPType: verbs.QPTypeRC, SendCQ: pp.cq, RecvCQ: pp.cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: o.rxDepth, MaxSendSGE: 1, MaxRecvSGE: 1},
	})
	if err != nil {
		return nil, fmt.Errorf("couldn't create QP: %w", err)
	}
	err = pp.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PKeyIndex: 0, PortNum: o.ibPort},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	if err != nil {
		return nil, fmt.Errorf("failed to modify QP to INIT: %w", err)
	}

	// One SGE over the whole buffer, for every send and receive.
	sge := []verbs.SGE{pp.mr.SGE(0, o.size)}
	pp.recvWR = verbs.RecvWR{WRID: recvWRID, SGList: sge}
	pp.sendWR = verbs.SendWR{WRID: sendWRID, SGList: sge, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled}
	if pp.routs = pp.postRecv(o.rxDepth); pp.routs < o.rxDepth {
		return nil, fmt.Errorf("couldn't post receive (%d)", pp.routs)
	}
	if o.events {
		if err = pp.cq.ReqNotify(false); err != nil {
			return nil, fmt.Errorf("couldn't request CQ notification: %w", err)
		}
	}
	pp.local = address{LID: port.LID, QPN: pp.qp.QPN(), PSN: rand.Uint32() & 0xffffff, GID: gid}
	return pp, nil
}

// exchange trades addresses with the peer over nc; the server connects its
// QP before answering, as pp_server_exch_dest does.
func (pp *pingpongCtx) exchange(ctx context.Context, nc net.Conn, o *options) (address, error) {
	var remote oob.PingpongDest
	var err error
	if o.server() {
		remote, err = oob.PingpongServer(ctx, nc, oob.PingpongDest(pp.local),
			func(_ context.Context, r oob.PingpongDest) error { return pp.connect(address(r)) })
	} else {
		remote, err = oob.PingpongClient(ctx, nc, oob.PingpongDest(pp.local))
	}
	return address(remote), err
}

// connect moves the QP to RTR and RTS toward remote with ibv_rc_pingpong's
// attributes (pp_connect_ctx).
func (pp *pingpongCtx) connect(remote address) error {
	o := pp.opts
	// ibv_rc_pingpong adds a GRH when the GID's interface identifier is
	// set; without one a RoCE QP cannot reach the peer at all.
	if [8]byte(remote.GID[8:]) == [8]byte{} {
		return fmt.Errorf("the peer sent no GID (GID %v): run it with -g and the index of its RoCE v2 GID", verbs.GID(remote.GID))
	}
	attr := verbs.QPAttr{
		QPState:         verbs.QPStateRTR,
		PathMTU:         o.mtu,
		DestQPNum:       remote.QPN,
		RQPSN:           remote.PSN,
		MaxDestRdAtomic: maxDestRdAtomic,
		MinRNRTimer:     minRNRTimer,
		AHAttr: verbs.AddressVector{
			DGID:      remote.GID,
			SGIDIndex: o.gidIndex,
			HopLimit:  hopLimit,
			SL:        uint8(o.sl),
			IsGlobal:  true,
			PortNum:   o.ibPort,
			DLID:      remote.LID,
		},
	}
	err := pp.qp.Modify(&attr, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|
		verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
	if err != nil {
		return fmt.Errorf("failed to modify QP to RTR: %w", err)
	}
	attr.QPState = verbs.QPStateRTS
	attr.Timeout = ackTimeout
	attr.RetryCnt = retryCnt
	attr.RNRRetry = rnrRetry
	attr.SQPSN = pp.local.PSN
	attr.MaxRdAtomic = maxRdAtomic
	err = pp.qp.Modify(&attr, verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|
		verbs.QPAttrRNRRetry|verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRdAtomic)
	if err != nil {
		return fmt.Errorf("failed to modify QP to RTS: %w", err)
	}
	return nil
}

// postRecv posts up to n receives and returns how many it posted, as
// pp_post_recv does.
func (pp *pingpongCtx) postRecv(n int) int {
	for i := range n {
		if pp.qp.PostRecv(&pp.recvWR) != nil {
			return i
		}
	}
	return n
}

func (pp *pingpongCtx) postSend() error {
	if err := pp.qp.PostSend(&pp.sendWR); err != nil {
		return fmt.Errorf("couldn't post send: %w", err)
	}
	return nil
}

// result is what one run measured.
type result struct {
	elapsed time.Duration
}

// run is ibv_rc_pingpong's traffic loop: the client starts with a send;
// every side then sends again once both its previous send and the peer's
// next message have completed, until iters of each completed. It returns
// when both counts are reached, on the first failed completion, or when ctx
// ends.
func (pp *pingpongCtx) run(ctx context.Context) (result, error) {
	o := pp.opts
	pp.pending = recvWRID
	if !o.server() {
		if o.chk {
			pp.writePattern()
		}
		if err := pp.postSend(); err != nil {
			return result{}, err
		}
		pp.pending |= sendWRID
	}
	start := time.Now()
	for pp.rcnt < o.iters || pp.scnt < o.iters {
		if o.events {
			if err := pp.waitEvent(ctx); err != nil {
				return result{}, err
			}
		}
		if err := pp.poll(ctx); err != nil {
			return result{}, err
		}
	}
	return result{elapsed: time.Since(start)}, nil
}

// poll takes completions from the CQ and accounts for them.
//
// After an event (--events) it takes everything the CQ holds: the CQ is
// armed again already, so a completion left behind would only be seen with
// the next event, which might never come.
//
// Otherwise it polls until there is at least one, but does not spin on an
// empty CQ as ibv_rc_pingpong does: it arms the CQ and sleeps on the
// completion channel instead. The device is goroutines of this process,
// whose receive path waits in the Go runtime's network poller; a goroutine
// spinning on Poll (yielding or not) keeps its processor from consulting the
// poller, so the packet it waits for is only noticed by the runtime's
// background monitor, up to 10 ms later. Measured on 2 cores between two
// processes, 64-byte round trips took 8 ms spinning with runtime.Gosched and
// 75 µs sleeping; spinning for a while before sleeping only made them slower.
func (pp *pingpongCtx) poll(ctx context.Context) error {
	for {
		n, err := pp.cq.Poll(pp.wc[:])
		if err != nil {
			return fmt.Errorf("poll CQ failed: %w", err)
		}
		for i := range n {
			if err := pp.complete(&pp.wc[i]); err != nil {
				return err
			}
		}
		switch {
		case pp.opts.events && n < len(pp.wc):
			return nil // drained
		case pp.opts.events:
			continue
		case n > 0:
			return nil
		}
		if err := pp.sleep(ctx); err != nil {
			return err
		}
	}
}

// sleep waits, when polling, until the CQ may hold a completion: it arms the
// CQ, and sleeps on its channel unless a completion arrived before the CQ
// was armed (which raises no event).
func (pp *pingpongCtx) sleep(ctx context.Context) error {
	if err := pp.cq.ReqNotify(false); err != nil {
		return fmt.Errorf("couldn't request CQ notification: %w", err)
	}
	n, err := pp.cq.Poll(pp.wc[:])
	if err != nil {
		return fmt.Errorf("poll CQ failed: %w", err)
	}
	for i := range n {
		if err := pp.complete(&pp.wc[i]); err != nil {
			return err
		}
	}
	if n > 0 {
		return nil
	}
	cq, err := pp.channel.GetEvent(ctx)
	if err != nil {
		return fmt.Errorf("failed to get cq_event: %w", err)
	}
	cq.AckEvents(1)
	return nil
}

// waitEvent sleeps until the CQ reports a completion event and re-arms it.
func (pp *pingpongCtx) waitEvent(ctx context.Context) error {
	cq, err := pp.channel.GetEvent(ctx)
	if err != nil {
		return fmt.Errorf("failed to get cq_event: %w", err)
	}
	pp.events++
	if cq != pp.cq {
		return errors.New("CQ event for unknown CQ")
	}
	if err := pp.cq.ReqNotify(false); err != nil {
		return fmt.Errorf("couldn't request CQ notification: %w", err)
	}
	return nil
}

// complete accounts for one completion (parse_single_wc): counts it,
// replenishes the receives when one is left, and posts the next send when
// the iteration is complete.
func (pp *pingpongCtx) complete(wc *verbs.WorkCompletion) error {
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("failed status %v (%d) for wr_id %d", wc.Status, int(wc.Status), wc.WRID)
	}
	switch wc.WRID {
	case sendWRID:
		pp.scnt++
	case recvWRID:
		pp.routs--
		if pp.routs <= 1 {
			pp.routs += pp.postRecv(pp.opts.rxDepth - pp.routs)
			if pp.routs < pp.opts.rxDepth {
				return fmt.Errorf("couldn't post receive (%d)", pp.routs)
			}
		}
		pp.rcnt++
	default:
		return fmt.Errorf("completion for unknown wr_id %d", wc.WRID)
	}
	pp.pending &^= int(wc.WRID)
	if pp.scnt < pp.opts.iters && pp.pending == 0 {
		if err := pp.postSend(); err != nil {
			return err
		}
		pp.pending = recvWRID | sendWRID
	}
	return nil
}

// writePattern writes the -c pattern over the fill: a zero at the start of
// each page (ibv_rc_pingpong writes i / page_size % sizeof(char), which
// is always 0).
func (pp *pingpongCtx) writePattern() {
	for i := 0; i < len(pp.buf); i += pp.pageSize {
		pp.buf[i] = markByte
	}
}

// invalidPages returns the pages of the buffer that do not hold the -c
// pattern. Every message carries it: the client writes it, and each side
// sends what it last received.
func (pp *pingpongCtx) invalidPages() []int {
	var bad []int
	for off := 0; off < len(pp.buf); off += pp.pageSize {
		page := pp.buf[off:min(off+pp.pageSize, len(pp.buf))]
		ok := page[0] == markByte
		for _, b := range page[1:] {
			ok = ok && b == fillByte
		}
		if !ok {
			bad = append(bad, off/pp.pageSize)
		}
	}
	return bad
}

// close acknowledges the completion events and destroys the objects in
// pp_close_ctx's order, then closes the device. It reports the first
// failure; the device is closed in any case. Closing twice does nothing.
func (pp *pingpongCtx) close() error {
	if pp.dev == nil {
		return nil
	}
	dev := pp.dev
	pp.dev = nil
	if pp.events > 0 {
		pp.cq.AckEvents(pp.events)
	}
	steps := []struct {
		what    string
		destroy func() error
	}{
		{"QP", pp.qp.Destroy},
		{"CQ", pp.cq.Destroy},
		{"MR", pp.mr.Dereg},
		{"PD", pp.pd.Dealloc},
		{"completion channel", pp.channel.Destroy},
	}
	var err error
	for _, s := range steps {
		if e := s.destroy(); e != nil {
			err = fmt.Errorf("couldn't destroy %s: %w", s.what, e)
			break
		}
	}
	if e := dev.Close(); err == nil && e != nil {
		err = fmt.Errorf("couldn't release device: %w", e)
	}
	return err
}
