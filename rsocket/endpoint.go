package rsocket

import (
	"errors"
	"fmt"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/verbs"
)

// An endpoint is an rsocket's verbs objects, created before the connection
// as rs_create_ep does: one CQ for both queues, an RC QP with every send
// signaled, and three regions registered once for the connection's life:
// the send buffer (with control slots after it, for the SGEs that credit
// messages write), the receive buffer and the target SGL ring the peer
// writes SGEs into.
type endpoint struct {
	dev            *verbs.Device
	pd             *verbs.PD
	cq             *verbs.CQ
	qp             *verbs.QP
	smr, rmr, tmr  *verbs.MR
	sq, rq         int
	sbufSz, rbufSz int
	ioMaps         int // entries of this side's iomap table, after the ring in tmr
	// mapped holds this side's mappings (Conn.IOMap) by their index in
	// the peer's iomap table; guarded by the connection's mu.
	mapped []*verbs.MR
}

// Queue sizes: rsockets' defaults (def_sqsize, def_rqsize).
const (
	sqSize = 384
	rqSize = 384
)

// recvFlag marks receive work requests' IDs (RS_WR_ID_FLAG_RECV); a send's
// ID is its message.
const recvFlag = 1 << 63

// newEndpoint creates the objects, moves the QP to INIT and posts every
// receive: the peer may write as soon as it is connected.
func newEndpoint(dev *verbs.Device, cfg *Config) (_ *endpoint, err error) {
	e := &endpoint{dev: dev, sq: sqSize, rq: rqSize, sbufSz: cfg.sendBuffer(), rbufSz: cfg.receiveBuffer(), ioMaps: cfg.ioMapSize()}
	defer func() {
		if err != nil {
			e.destroy()
		}
	}()
	if e.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if e.cq, err = dev.CreateCQ(e.sq+e.rq, nil, 0); err != nil {
		return nil, err
	}
	e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq, SQSigAll: true,
		Cap: verbs.QPCap{MaxSendWR: e.sq, MaxRecvWR: e.rq, MaxSendSGE: 2, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	if e.smr, err = e.pd.RegMR(make([]byte, e.sbufSz+ctrlSlots*sgeLen), verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	remote := verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	if e.rmr, err = e.pd.RegMR(make([]byte, e.rbufSz), remote); err != nil {
		return nil, err
	}
	if e.tmr, err = e.pd.RegMR(make([]byte, sglSize*sgeLen+e.ioMaps*ioMapLen), remote); err != nil {
		return nil, err
	}
	if err = cm.PrepareQP(e.qp); err != nil {
		return nil, err
	}
	wr := verbs.RecvWR{WRID: recvFlag}
	for range e.rq {
		if err = e.qp.PostRecv(&wr); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// connData is what this side announces (rs_format_conn_data): a
// little-endian host (goroce writes ring SGEs little-endian whatever the
// machine), the size of its iomap table (which follows the ring), the
// target ring and the first half of the buffer.
func (e *endpoint) connData() []byte {
	c := connData{version: connVersion, flags: connFlagIOMap, credits: uint16(e.rq), iomapSize: toScale(e.ioMaps),
		targetSGL: sge{addr: e.tmr.IOVA(), key: e.tmr.RKey(), length: sglSize},
		dataBuf:   sge{addr: e.rmr.IOVA(), key: e.rmr.RKey(), length: uint32(e.rbufSz / 2)}}
	return c.append(make([]byte, 0, connDataLen))
}

// destroy releases what was created, QP first.
func (e *endpoint) destroy() error {
	var errs []error
	keep := func(err error) {
		if err != nil && !errors.Is(err, verbs.ErrClosed) {
			errs = append(errs, err)
		}
	}
	if e.qp != nil {
		keep(e.qp.Destroy())
	}
	for _, mr := range append([]*verbs.MR{e.smr, e.rmr, e.tmr}, e.mapped...) {
		if mr != nil {
			keep(mr.Dereg())
		}
	}
	if e.cq != nil {
		keep(e.cq.Destroy())
	}
	if e.pd != nil {
		keep(e.pd.Dealloc())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("rsocket: release endpoint: %w", err)
	}
	return nil
}
