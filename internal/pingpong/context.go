package pingpong

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"

	"github.com/goroce/goroce/internal/oob"
	"github.com/goroce/goroce/internal/tooldev"
	"github.com/goroce/goroce/verbs"
)

// Work request IDs, the examples': they are also the bits of
// pingpongCtx.pending.
const (
	recvWRID = 1
	sendWRID = 2
)

// QP attributes, the examples' (pp_connect_ctx).
const (
	minRNRTimer     = 12 // 0.64 ms
	ackTimeout      = 14 // 4.096 µs × 2^14 ≈ 67 ms
	retryCnt        = 7
	rnrRetry        = 7 // infinite
	maxDestRdAtomic = 1
	maxRdAtomic     = 1
	hopLimit        = 1  // RC, UC, SRQ: the QP's path
	hopLimitUD      = 64 // ibv_ud_pingpong's address handle
	// qkeyUD is ibv_ud_pingpong's Q_Key, in its QP and in every send.
	qkeyUD = 0x11111111
)

// Buffer contents: the examples fill their buffer with 0x7b
// (ibv_srq_pingpong: zeros) and, with -c, the client clears the first byte
// of every page before the first send.
const (
	fillByte    = 0x7b
	fillByteSRQ = 0
	markByte    = 0
)

// address is one side's QP as the pingpong message describes it.
type address oob.PingpongDest

// String formats the address as the examples print it.
func (a address) String() string {
	return fmt.Sprintf("LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %v", a.LID, a.QPN, a.PSN, verbs.GID(a.GID))
}

// localString formats a local address as t's example prints it:
// ibv_ud_pingpong has a colon before the GID.
func (a address) localString(t Transport) string {
	if t == UD {
		return fmt.Sprintf("LID 0x%04x, QPN 0x%06x, PSN 0x%06x: GID %v", a.LID, a.QPN, a.PSN, verbs.GID(a.GID))
	}
	return a.String()
}

// pingpongCtx is the examples' struct pingpong_context: the device and the
// objects of one side, and the state of its traffic loop.
type pingpongCtx struct {
	opts    *options
	dev     *verbs.Device
	channel *verbs.CompChannel
	pd      *verbs.PD
	buf     []byte
	mr      *verbs.MR
	cq      *verbs.CQ
	srq     *verbs.SRQ  // SRQ only
	qps     []*verbs.QP // one, or -q with SRQ
	ah      *verbs.AH   // UD only, once connected
	local   []address   // one per QP

	pageSize int
	gidIndex int // the GID sent from: -g, or picked for the device
	payload  int // offset of the message received in buf: GRHSize with UD, else 0
	sendOff  int // offset of the message sent: payload, but apart with SRQ
	msgLen   int // the message size
	fill     byte
	refill   int   // replenish the receives when no more than this many are left
	routs    int   // receives posted and not yet completed
	pending  []int // per QP, recvWRID|sendWRID: what it still waits for
	rcnt     int   // receives completed, all QPs
	scnt     int   // sends completed, all QPs
	events   int   // --events: completion events taken, acknowledged at the end

	sendWRs []verbs.SendWR // one per QP
	recvWR  verbs.RecvWR
	wc      []verbs.WorkCompletion
}

// newPingpongCtx opens the device on addr, creates the objects as
// pp_init_ctx does, moves the QPs to INIT and posts rx-depth receives (and
// arms the CQ with --events), so that the peer's first message finds a
// receive whenever it comes.
func newPingpongCtx(o *options, addr netip.Addr) (pp *pingpongCtx, err error) {
	dev, err := tooldev.Open(o.hw, o.ibDev, verbs.DeviceConfig{Addr: addr}, verbs.Open)
	if err != nil {
		return nil, fmt.Errorf("couldn't open device %s on %v: %w", o.ibDev, addr, err)
	}
	t := o.transport
	pp = &pingpongCtx{opts: o, dev: dev, pageSize: os.Getpagesize(), fill: fillByte, refill: 1, gidIndex: o.gidIndex}
	defer func() {
		if err != nil {
			dev.Close() // and everything created on it
		}
	}()
	if o.gidAuto {
		if pp.gidIndex, err = tooldev.GIDIndex(dev, addr); err != nil {
			return nil, err
		}
	}
	port, err := dev.QueryPort(o.ibPort)
	if err != nil {
		return nil, fmt.Errorf("couldn't get port info: %w", err)
	}
	recvLen := o.size
	bufLen := recvLen
	switch t {
	case UD:
		// A datagram is one packet: ibv_ud_pingpong refuses a size above
		// the port's active MTU.
		if mtu := port.ActiveMTU.Bytes(); o.size > mtu {
			return nil, fmt.Errorf("requested size larger than port MTU (%d)", mtu)
		}
		pp.payload = verbs.GRHSize
		recvLen += verbs.GRHSize
		bufLen = recvLen
	case SRQ:
		pp.fill, pp.refill = fillByteSRQ, o.numQP
		// ibv_srq_pingpong sends and receives through one buffer on
		// all its QPs at once: here the device would be placing one
		// QP's message while it gathers another's, a data race. The
		// messages are zeros either way; sending from a second copy
		// keeps the wire the same without the race.
		bufLen = 2 * o.size
	}
	pp.sendOff, pp.msgLen = pp.payload, o.size
	if t == SRQ {
		pp.sendOff = recvLen
	}
	gid, err := dev.QueryGID(o.ibPort, pp.gidIndex)
	if err != nil {
		return nil, fmt.Errorf("can't read sgid of index %d: %w", pp.gidIndex, err)
	}
	// A channel also when polling: see poll.
	if pp.channel, err = dev.CreateCompChannel(); err != nil {
		return nil, fmt.Errorf("couldn't create completion channel: %w", err)
	}
	if pp.pd, err = dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("couldn't allocate PD: %w", err)
	}
	pp.buf = make([]byte, bufLen)
	for i := range pp.buf {
		pp.buf[i] = pp.fill
	}
	if pp.mr, err = pp.pd.RegMR(pp.buf, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("couldn't register MR: %w", err)
	}
	if pp.cq, err = dev.CreateCQ(o.rxDepth+o.numQP, pp.channel, 0); err != nil {
		return nil, fmt.Errorf("couldn't create CQ: %w", err)
	}
	if err := pp.createQPs(); err != nil {
		return nil, err
	}

	// One SGE for every receive: the buffer (GRH area included); one
	// for every send: the message.
	pp.recvWR = verbs.RecvWR{WRID: recvWRID, SGList: []verbs.SGE{pp.mr.SGE(0, recvLen)}}
	send := []verbs.SGE{pp.mr.SGE(pp.sendOff, o.size)}
	pp.wc = make([]verbs.WorkCompletion, 2)
	if t == SRQ {
		pp.wc = make([]verbs.WorkCompletion, o.numQP+o.rxDepth)
	}
	pp.pending = make([]int, len(pp.qps))
	for range pp.qps {
		pp.sendWRs = append(pp.sendWRs, verbs.SendWR{WRID: sendWRID, SGList: send, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled})
	}
	if pp.routs = pp.postRecv(o.rxDepth); pp.routs < o.rxDepth {
		return nil, fmt.Errorf("couldn't post receive (%d)", pp.routs)
	}
	if o.events {
		if err = pp.cq.ReqNotify(false); err != nil {
			return nil, fmt.Errorf("couldn't request CQ notification: %w", err)
		}
	}
	for _, qp := range pp.qps {
		pp.local = append(pp.local, address{LID: port.LID, QPN: qp.QPN(), PSN: rand.Uint32() & 0xffffff, GID: gid})
	}
	return pp, nil
}

// createQPs creates the QPs (and the SRQ) and moves them to INIT.
func (pp *pingpongCtx) createQPs() error {
	o := pp.opts
	init := verbs.QPInitAttr{
		QPType: verbs.QPTypeRC, SendCQ: pp.cq, RecvCQ: pp.cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: o.rxDepth, MaxSendSGE: 1, MaxRecvSGE: 1},
	}
	attr := verbs.QPAttr{QPState: verbs.QPStateInit, PKeyIndex: 0, PortNum: o.ibPort}
	mask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags
	switch o.transport {
	case UC:
		init.QPType = verbs.QPTypeUC
	case UD:
		init.QPType = verbs.QPTypeUD
		attr.QKey = qkeyUD
		mask = verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey
	case SRQ:
		srq, err := pp.pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: o.rxDepth, MaxSGE: 1})
		if err != nil {
			return fmt.Errorf("couldn't create SRQ: %w", err)
		}
		pp.srq = srq
		init.SRQ = srq
		init.Cap = verbs.QPCap{MaxSendWR: 1, MaxSendSGE: 1}
	}
	for i := range o.numQP {
		qp, err := pp.pd.CreateQP(init)
		if err != nil {
			return fmt.Errorf("couldn't create QP[%d]: %w", i, err)
		}
		pp.qps = append(pp.qps, qp)
	}
	for i, qp := range pp.qps {
		if err := qp.Modify(&attr, mask); err != nil {
			return fmt.Errorf("failed to modify QP[%d] to INIT: %w", i, err)
		}
	}
	return nil
}

// exchange trades addresses with the peer over nc; the server connects its
// QPs before answering, as pp_server_exch_dest does.
func (pp *pingpongCtx) exchange(ctx context.Context, nc net.Conn, o *options) ([]address, error) {
	if o.transport == SRQ {
		return pp.exchangeSRQ(ctx, nc, o)
	}
	var remote oob.PingpongDest
	var err error
	if o.server() {
		remote, err = oob.PingpongServer(ctx, nc, oob.PingpongDest(pp.local[0]),
			func(_ context.Context, r oob.PingpongDest) error { return pp.connect([]address{address(r)}) })
	} else {
		remote, err = oob.PingpongClient(ctx, nc, oob.PingpongDest(pp.local[0]))
	}
	return []address{address(remote)}, err
}

// exchangeSRQ is ibv_srq_pingpong's exchange: 256 addresses each way, of
// which the peer must have as many QPs as we have.
func (pp *pingpongCtx) exchangeSRQ(ctx context.Context, nc net.Conn, o *options) ([]address, error) {
	local := make([]oob.PingpongDest, len(pp.local))
	for i, l := range pp.local {
		local[i] = oob.PingpongDest(l)
	}
	ours := func(r []oob.PingpongDest) ([]address, error) {
		n := 0
		for n < len(r) && r[n] != (oob.PingpongDest{}) {
			n++
		}
		for _, d := range r[n:] {
			if d != (oob.PingpongDest{}) {
				return nil, fmt.Errorf("the peer's addresses have a gap at QP %d", n)
			}
		}
		if n != len(pp.qps) {
			return nil, fmt.Errorf("the peer has %d QPs and we have %d: run both sides with the same -q", n, len(pp.qps))
		}
		a := make([]address, n)
		for i := range a {
			a[i] = address(r[i])
		}
		return a, nil
	}
	var remote []address
	var err error
	if o.server() {
		_, err = oob.PingpongSRQServer(ctx, nc, local, func(_ context.Context, r []oob.PingpongDest) error {
			a, err := ours(r)
			if err != nil {
				return err
			}
			remote = a
			return pp.connect(a)
		})
		return remote, err
	}
	r, err := oob.PingpongSRQClient(ctx, nc, local)
	if err != nil {
		return nil, err
	}
	return ours(r)
}

// connect moves the QPs to RTR and RTS toward remote (one address per QP)
// with the example's attributes (pp_connect_ctx); with UD it creates the
// address handle.
func (pp *pingpongCtx) connect(remote []address) error {
	o := pp.opts
	if len(remote) != len(pp.qps) {
		return fmt.Errorf("%d remote addresses for %d QPs", len(remote), len(pp.qps))
	}
	// The examples add a GRH when the GID's interface identifier is set
	// (ibv_srq_pingpong looks at the first QP's); without one a RoCE QP
	// cannot reach the peer at all.
	if [8]byte(remote[0].GID[8:]) == [8]byte{} {
		return fmt.Errorf("the peer sent no GID (GID %v): run it with -g and the index of its RoCE v2 GID", verbs.GID(remote[0].GID))
	}
	if o.transport == UD {
		return pp.connectUD(remote[0])
	}
	for i, qp := range pp.qps {
		r := remote[i]
		attr := verbs.QPAttr{
			QPState:   verbs.QPStateRTR,
			PathMTU:   o.mtu,
			DestQPNum: r.QPN,
			RQPSN:     r.PSN,
			AHAttr: verbs.AddressVector{
				DGID:      remote[0].GID,
				SGIDIndex: pp.gidIndex,
				HopLimit:  hopLimit,
				SL:        uint8(o.sl),
				IsGlobal:  true,
				PortNum:   o.ibPort,
				DLID:      r.LID,
			},
		}
		rtr := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
		rts := verbs.QPAttrState | verbs.QPAttrSQPSN
		if o.transport != UC {
			attr.MaxDestRdAtomic = maxDestRdAtomic
			attr.MinRNRTimer = minRNRTimer
			attr.Timeout = ackTimeout
			attr.RetryCnt = retryCnt
			attr.RNRRetry = rnrRetry
			attr.MaxRdAtomic = maxRdAtomic
			rtr |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
			rts |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
		}
		if err := qp.Modify(&attr, rtr); err != nil {
			return fmt.Errorf("failed to modify QP[%d] to RTR: %w", i, err)
		}
		attr.QPState = verbs.QPStateRTS
		attr.SQPSN = pp.local[i].PSN
		if err := qp.Modify(&attr, rts); err != nil {
			return fmt.Errorf("failed to modify QP[%d] to RTS: %w", i, err)
		}
	}
	return nil
}

// connectUD moves the UD QP to RTR and RTS (no path: every send names its
// destination) and creates the address handle toward remote.
func (pp *pingpongCtx) connectUD(remote address) error {
	o := pp.opts
	qp := pp.qps[0]
	if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR}, verbs.QPAttrState); err != nil {
		return fmt.Errorf("failed to modify QP to RTR: %w", err)
	}
	if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: pp.local[0].PSN}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
		return fmt.Errorf("failed to modify QP to RTS: %w", err)
	}
	ah, err := pp.pd.CreateAH(verbs.AddressVector{
		DGID:      remote.GID,
		SGIDIndex: pp.gidIndex,
		HopLimit:  hopLimitUD,
		SL:        uint8(o.sl),
		IsGlobal:  true,
		PortNum:   o.ibPort,
		DLID:      remote.LID,
	})
	if err != nil {
		return fmt.Errorf("failed to create AH: %w", err)
	}
	pp.ah = ah
	pp.sendWRs[0].UD = verbs.UDParams{AH: ah, RemoteQPN: remote.QPN, RemoteQKey: qkeyUD}
	return nil
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
	type step struct {
		what    string
		destroy func() error
	}
	var steps []step
	for i, qp := range pp.qps {
		steps = append(steps, step{fmt.Sprintf("QP[%d]", i), qp.Destroy})
	}
	if pp.srq != nil {
		steps = append(steps, step{"SRQ", pp.srq.Destroy})
	}
	steps = append(steps, step{"CQ", pp.cq.Destroy}, step{"MR", pp.mr.Dereg})
	if pp.ah != nil {
		steps = append(steps, step{"AH", pp.ah.Destroy})
	}
	steps = append(steps, step{"PD", pp.pd.Dealloc}, step{"completion channel", pp.channel.Destroy})
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
