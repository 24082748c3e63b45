package verbs

import (
	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/transport"
)

// QPType is a queue pair's transport service (enum ibv_qp_type). Its String
// method returns the type's name, e.g. "RC".
type QPType = ibv.QPType

// QP types, with the libibverbs values. RC, UC and UD are supported.
const (
	QPTypeRC        QPType = ibv.QPTypeRC        // IBV_QPT_RC: reliable connection
	QPTypeUC        QPType = ibv.QPTypeUC        // IBV_QPT_UC: unreliable connection
	QPTypeUD        QPType = ibv.QPTypeUD        // IBV_QPT_UD: unreliable datagram
	QPTypeRawPacket QPType = ibv.QPTypeRawPacket // IBV_QPT_RAW_PACKET (not supported)
	QPTypeXRCSend   QPType = ibv.QPTypeXRCSend   // IBV_QPT_XRC_SEND (not supported)
	QPTypeXRCRecv   QPType = ibv.QPTypeXRCRecv   // IBV_QPT_XRC_RECV (not supported)
	QPTypeDriver    QPType = ibv.QPTypeDriver    // IBV_QPT_DRIVER (not supported)
)

// QPCap are a QP's queue sizes (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR     int // send queue entries
	MaxRecvWR     int // receive queue entries (0 with an SRQ)
	MaxSendSGE    int // SGEs per send work request
	MaxRecvSGE    int // SGEs per receive work request (0 with an SRQ)
	MaxInlineData int // bytes of SendInline data per send work request
}

// QPInitAttr are the creation attributes of a QP (struct
// ibv_qp_init_attr).
type QPInitAttr struct {
	QPType QPType
	SendCQ *CQ  // completions of send work requests
	RecvCQ *CQ  // completions of receive work requests
	SRQ    *SRQ // if not nil, receives come from this SRQ
	Cap    QPCap
	// SQSigAll makes every send work request generate a completion, as if
	// each had SendSignaled.
	SQSigAll bool
	// RecvFeeder, if not nil, posts receives queued elsewhere before a
	// message is handled (see RecvFeeder).
	RecvFeeder RecvFeeder
}

// RecvFeeder lets a layer that queues receive work requests somewhere else
// first (goroce-nic keeps them in rings shared with another process until
// it posts them) hand over those queued before a message arrived, so that
// the message finds them, as a NIC finds a WQE whose doorbell was rung.
// FeedRecv is called on the goroutine that received a packet for the QP,
// just before the QP handles it, with no lock of the QP's held; it may post
// receive work requests on the QP or its SRQ. With several receive queues
// (DeviceConfig.ReceiveQueues) the FeedRecv of QPs that share an SRQ may
// run at the same time on different goroutines. It runs for every packet:
// when there is nothing to post it should cost a load or two.
type RecvFeeder interface {
	FeedRecv()
}

// CreateQP creates a queue pair in the RESET state (ibv_create_qp).
//
// The send and receive CQs are required and must belong to the PD's device.
// With an SRQ the receive capacities are ignored and read back as 0. Each
// capacity is checked against the device limits (max_qp_wr, max_sge,
// MaxInlineData); the QP gets exactly the capacities requested, which Cap
// returns. QP numbers are 24-bit, never 0 or 1, and unique among the
// device's live QPs.
func (pd *PD) CreateQP(init QPInitAttr) (*QP, error) {
	const op = "CreateQP"
	if pd == nil {
		return nil, newError(op, "pd", ErrInvalidArgument, "nil")
	}
	d := pd.dev
	c, err := d.checkQPInit(op, &init)
	if err != nil {
		return nil, err
	}
	if pd.hw != nil {
		return pd.hw.createQP(pd, &init)
	}
	rollback, err := pd.acquireQPResources(op, &init)
	if err != nil {
		return nil, err
	}
	qp := newQP(pd, &init, c)
	// The receive path finds the QP as soon as addQP publishes it; holding
	// xmu until tq is set makes it wait for a complete QP.
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	if err := d.addQP(op, qp); err != nil {
		rollback()
		return nil, err
	}
	qp.tq = transport.NewQP(qp.transportConfig())
	if qp.qpType != QPTypeUD {
		qp.tq.SetCongestionControl(d.cc)
	}
	if qp.qpType == QPTypeUD {
		// A UD QP has no path MTU attribute: a datagram is bounded
		// by the port's active MTU (rxe takes the port's too).
		_ = qp.tq.SetPathMTU(qp.udMTU.Bytes())
	}
	return qp, nil
}

// checkQPInit checks the creation attributes against the device and
// returns the capacities the QP gets: init.Cap, with no receive queue
// when an SRQ replaces it.
func (d *Device) checkQPInit(op string, init *QPInitAttr) (QPCap, error) {
	switch init.QPType {
	case QPTypeRC, QPTypeUC, QPTypeUD:
	case QPTypeRawPacket, QPTypeXRCSend, QPTypeXRCRecv, QPTypeDriver:
		return QPCap{}, errorf(op, "qp_type", ErrNotSupported, "%v", init.QPType)
	default:
		return QPCap{}, errorf(op, "qp_type", ErrInvalidArgument, "%v", init.QPType)
	}
	switch {
	case init.SendCQ == nil:
		return QPCap{}, newError(op, "send_cq", ErrInvalidArgument, "missing")
	case init.RecvCQ == nil:
		return QPCap{}, newError(op, "recv_cq", ErrInvalidArgument, "missing")
	case init.SendCQ.dev != d:
		return QPCap{}, newError(op, "send_cq", ErrInvalidArgument, "belongs to another device")
	case init.RecvCQ.dev != d:
		return QPCap{}, newError(op, "recv_cq", ErrInvalidArgument, "belongs to another device")
	case init.SRQ != nil && init.SRQ.pd.dev != d:
		return QPCap{}, newError(op, "srq", ErrInvalidArgument, "belongs to another device")
	}
	c := init.Cap
	if init.SRQ != nil {
		c.MaxRecvWR, c.MaxRecvSGE = 0, 0
	}
	limits := []struct {
		field string
		val   int
		max   int
	}{
		{"max_send_wr", c.MaxSendWR, d.attr.MaxQPWR},
		{"max_recv_wr", c.MaxRecvWR, d.attr.MaxQPWR},
		{"max_send_sge", c.MaxSendSGE, d.attr.MaxSGE},
		{"max_recv_sge", c.MaxRecvSGE, d.attr.MaxSGE},
		{"max_inline_data", c.MaxInlineData, d.attr.MaxInlineData},
	}
	for _, l := range limits {
		if l.val < 0 || l.val > l.max {
			return QPCap{}, errorf(op, l.field, ErrInvalidArgument, "%d outside 0..%d", l.val, l.max)
		}
	}
	return c, nil
}

// acquireQPResources takes what a QP holds for its lifetime (a use of the
// PD, a slot of max_qp, its CQs and SRQ), in that order. On failure it
// gives back what it took; on success rollback gives it all back.
func (pd *PD) acquireQPResources(op string, init *QPInitAttr) (rollback func(), err error) {
	d := pd.dev
	var undo []func()
	rollback = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	if err := pd.use(op); err != nil {
		return nil, err
	}
	undo = append(undo, pd.unuse)
	if err := d.res.qp.acquire(op); err != nil {
		rollback()
		return nil, err
	}
	undo = append(undo, d.res.qp.release)
	if err := init.SendCQ.attach(op, "send_cq"); err != nil {
		rollback()
		return nil, err
	}
	undo = append(undo, init.SendCQ.detach)
	if err := init.RecvCQ.attach(op, "recv_cq"); err != nil {
		rollback()
		return nil, err
	}
	undo = append(undo, init.RecvCQ.detach)
	if init.SRQ != nil {
		if err := init.SRQ.attach(op); err != nil {
			rollback()
			return nil, err
		}
		undo = append(undo, init.SRQ.detach)
	}
	return rollback, nil
}

// newQP returns the QP object, in RESET, with capacities c and its
// scratch buffers; it has no number and no transport yet.
func newQP(pd *PD, init *QPInitAttr, c QPCap) *QP {
	d := pd.dev
	udMTU := d.mtu.get()
	return &QP{
		dev:      d,
		pd:       pd,
		qpType:   init.QPType,
		sendCQ:   init.SendCQ,
		recvCQ:   init.RecvCQ,
		srq:      init.SRQ,
		sqSigAll: init.SQSigAll,
		feeder:   init.RecvFeeder,
		cap:      c,
		attr: QPAttr{
			// UD has no PATH_MTU attribute; its messages are bounded by
			// the port's active MTU, which is the default here.
			PathMTU: udMTU,
			PortNum: 1,
		},
		udMTU:      udMTU,
		timerIndex: -1,
		sgl:        make([]transport.SGE, 0, max(c.MaxSendSGE, c.MaxRecvSGE, 1)),
		inline:     make([]byte, 0, c.MaxInlineData),
	}
}

// transportConfig is what the QP's transport state machines are created
// with: its number and capacities, and the verbs objects they reach
// through the adapters of datapath.go.
func (qp *QP) transportConfig() transport.Config {
	qp.sendSink = qpCQ{cq: qp.sendCQ, qp: qp}
	qp.recvSink = qpCQ{cq: qp.recvCQ, qp: qp}
	c := qp.cap
	cfg := transport.Config{
		Type:        qp.qpType,
		QPN:         qp.qpn,
		MaxSendWR:   c.MaxSendWR,
		MaxRecvWR:   c.MaxRecvWR,
		MaxSGE:      max(c.MaxSendSGE, c.MaxRecvSGE),
		MaxInline:   c.MaxInlineData,
		Memory:      (*qpMemory)(qp),
		SendCQ:      &qp.sendSink,
		RecvCQ:      &qp.recvSink,
		SQSigAll:    qp.sqSigAll,
		AtomicLocks: &qp.dev.eng.atomics,
		// The state an application queries after polling an error
		// completion is ERR already, as on a NIC; the asynchronous
		// events follow in noteTransportErrorLocked. The packets the
		// QP corked leave first (doorbell.go): the flush completions
		// that follow hand their buffers back to the application.
		EnteringError: func() {
			qp.state.Store(int32(QPStateErr))
			qp.dev.eng.doorbell.drain(qp)
		},
	}
	if qp.srq != nil {
		cfg.SRQ = (*srqSource)(qp.srq)
	}
	return cfg
}
