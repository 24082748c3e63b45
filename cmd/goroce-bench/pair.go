package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/verbs"
)

// side is one end of the benchmark's connection: a device with one
// registered buffer cut into slots of the largest message size.
type side struct {
	dev    *verbs.Device
	pd     *verbs.PD
	buf    []byte
	mr     *verbs.MR
	sendCQ *verbs.CQ
	recvCQ *verbs.CQ
	qp     *verbs.QP
	conn   *cm.Conn
}

// slot returns the first n bytes of slot i.
func (s *side) slot(i, stride, n int) []byte { return s.buf[i*stride : i*stride+n] }

// pair is the connected RC QP pair: req posts work requests, resp is the
// target of WRITEs and READs and receives SENDs.
type pair struct {
	req, resp *side
	depth     int
	stride    int // slot size: the largest message
	recvs     int // receive work requests kept posted at resp
	mtu       verbs.MTU
}

// access are the rights of both buffers: everything the tests use.
const access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite |
	verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// maxInline is the inline data capacity of the QPs, for the latency test's
// 8-byte WRITEs.
const maxInline = 64

// newSide opens a device on addr with a buffer of slots×stride bytes and an
// RC QP sized for depth sends and recvs receives, moved to INIT.
func newSide(addr netip.Addr, mtu verbs.MTU, slots, stride, depth, recvs int) (*side, error) {
	dev, err := verbs.Open(verbs.DeviceConfig{Addr: addr, MTU: mtu})
	if err != nil {
		return nil, err
	}
	s := &side{dev: dev}
	if err := s.setup(slots, stride, depth, recvs); err != nil {
		dev.Close()
		return nil, err
	}
	return s, nil
}

func (s *side) setup(slots, stride, depth, recvs int) error {
	var err error
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return err
	}
	s.buf = make([]byte, slots*stride)
	if s.mr, err = s.pd.RegMR(s.buf, access); err != nil {
		return err
	}
	ch, err := s.dev.CreateCompChannel()
	if err != nil {
		return err
	}
	if s.sendCQ, err = s.dev.CreateCQ(depth, ch, 0); err != nil {
		return err
	}
	if s.recvCQ, err = s.dev.CreateCQ(recvs, ch, 0); err != nil {
		return err
	}
	s.qp, err = s.pd.CreateQP(verbs.QPInitAttr{
		QPType: verbs.QPTypeRC, SendCQ: s.sendCQ, RecvCQ: s.recvCQ,
		Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: recvs, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: maxInline},
	})
	if err != nil {
		return err
	}
	// In INIT the QP takes receives, so the responder's are posted before
	// the connection exists and the first SEND finds one.
	return s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: access},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
}

// close disconnects and closes the device, which destroys everything on it.
func (s *side) close() {
	if s.conn != nil {
		s.conn.Close()
	}
	s.dev.Close()
}

// connect opens both devices and connects their QPs: resp listens on an
// ephemeral TCP port of its address, req dials it.
func connect(ctx context.Context, cfg *config) (p *pair, err error) {
	stride := slices.Max(cfg.sizes)
	p = &pair{depth: cfg.depth, stride: stride, recvs: recvCount(cfg.depth, stride), mtu: cfg.mtu}
	// Sources rotate over depth+1 slots, destinations over depth (WRITE,
	// READ) or the receives (SEND); see bandwidth.
	if p.req, err = newSide(cfg.a, cfg.mtu, cfg.depth+1, stride, cfg.depth, 1); err != nil {
		return nil, fmt.Errorf("device %v: %w", cfg.a, err)
	}
	if p.resp, err = newSide(cfg.b, cfg.mtu, p.recvs, stride, cfg.depth, p.recvs); err != nil {
		p.req.close()
		return nil, fmt.Errorf("device %v: %w", cfg.b, err)
	}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	for i := range p.recvs {
		if err := p.postRecv(i); err != nil {
			return nil, err
		}
	}

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := cm.Listen(net.JoinHostPort(cfg.b.String(), "0"))
	if err != nil {
		return nil, err
	}
	defer l.Close()
	params := &cm.Params{PathMTU: cfg.mtu}
	type accepted struct {
		conn *cm.Conn
		err  error
	}
	ch := make(chan accepted, 1)
	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			ch <- accepted{err: err}
			return
		}
		conn, err := req.Accept(ctx, p.resp.qp, params)
		ch <- accepted{conn, err}
	}()
	p.req.conn, err = cm.Dial(ctx, l.Addr().String(), p.req.qp, params)
	a := <-ch
	p.resp.conn = a.conn
	if err = errors.Join(err, a.err); err != nil {
		return nil, fmt.Errorf("connecting %v to %v: %w", cfg.a, cfg.b, err)
	}
	return p, nil
}

// postRecv posts the responder's receive into slot i, for a message of up
// to the largest size, whatever the current test's size.
func (p *pair) postRecv(i int) error {
	return p.resp.qp.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{p.resp.mr.SGE(i*p.stride, p.stride)}})
}

func (p *pair) close() {
	p.req.close()
	p.resp.close()
}

// Receives the responder keeps posted for the SEND test.
const (
	// targetRecvs is what perftest's ib_send_bw posts (rx_depth 512): a
	// receiver that falls behind by fewer messages never sends an RNR NAK,
	// which would stall the sender for min_rnr_timer (0.64 ms).
	targetRecvs = 512
	// maxRecvMemory bounds the memory behind those receives.
	maxRecvMemory = 256 << 20
)

// recvCount returns the number of receives the responder keeps posted:
// about targetRecvs, within maxRecvMemory, and at least 2×(depth+1)+1. It is
// always one more than a multiple of depth+1, the number of source slots,
// so consecutive messages landing in the same receive slot come from
// different source slots and the data check can tell them apart.
func recvCount(depth, stride int) int {
	m := (targetRecvs + depth) / (depth + 1) // ceil(targetRecvs / (depth+1))
	m = min(m, (maxRecvMemory/stride-1)/(depth+1))
	return max(m, 2)*(depth+1) + 1
}
