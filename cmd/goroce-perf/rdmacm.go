package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/oob"
	"github.com/goroce/goroce/verbs"
)

// perftest's rdma_cm mode (-R, --rdma_cm), as the rxe capture
// write_bw_rdmacm.pcap shows it on the wire:
//
//  1. The client connects a control QP to the server's rdma_cm port (the
//     -p port, 18515): REQ, REP, RTU. Every out-of-band exchange of the
//     TCP mode (versions, system data, MTU, keys, barriers, reports) then
//     travels as one SEND per block on it, the client sending first; the
//     keys are the binary struct pingpong_dest (oob.KeyFormatRDMACM).
//  2. After the negotiation both sides meet at a barrier (a zero key),
//     the server listens again on the same port and the client connects
//     each data QP through the cm; another zero-key barrier follows
//     (perftest's create_rdma_cm_connection).
//  3. The keys are exchanged as in the TCP mode, but the QPs are already
//     connected: the cm chose their PSNs, MTU and READ depths.
//  4. After the closing barrier the data connections, then the control
//     connection, are disconnected (DREQ, DREP).
//
// ctrlConn is the control connection as the net.Conn oob.PerftestConn
// runs on: Write sends one message, Read returns the bytes of the
// messages received, in order.

// ctrlMsgMax bounds one control message: perftest's largest block is its
// parameter negotiation (a few hundred bytes), which goroce's version
// does not ask for.
const ctrlMsgMax = 4096

// cmDialRetries and cmDialDelay are perftest's (rdma_cm_client_connection):
// a server that is not listening yet refuses the REQ, and the client tries
// again.
const (
	cmDialRetries = 10
	cmDialDelay   = 100 * time.Millisecond
)

type ctrlConn struct {
	conn       *cm.Conn
	pd         *verbs.PD
	qp         *verbs.QP
	scq, rcq   *verbs.CQ
	smr, rmr   *verbs.MR
	in         []byte // the last message received
	pending    []byte // the part of in not read yet
	wc         [1]verbs.WorkCompletion
	closeOnce  sync.Once
	mu         sync.Mutex
	deadline   time.Time
	wake       chan struct{} // closed when the deadline changes
	localAddr  net.Addr
	remoteAddr net.Addr
}

// newCtrl creates the control QP on dev, in INIT with a receive posted.
func newCtrl(dev *verbs.Device) (*ctrlConn, error) {
	c := &ctrlConn{wake: make(chan struct{}), in: make([]byte, ctrlMsgMax)}
	err := c.create(dev)
	if err != nil {
		c.destroy()
		return nil, err
	}
	return c, nil
}

func (c *ctrlConn) create(dev *verbs.Device) error {
	var err error
	if c.pd, err = dev.AllocPD(); err != nil {
		return err
	}
	if c.scq, err = dev.CreateCQ(2, nil, 0); err != nil {
		return err
	}
	if c.rcq, err = dev.CreateCQ(2, nil, 0); err != nil {
		return err
	}
	if c.smr, err = c.pd.RegMR(make([]byte, ctrlMsgMax), verbs.AccessLocalWrite); err != nil {
		return err
	}
	if c.rmr, err = c.pd.RegMR(make([]byte, ctrlMsgMax), verbs.AccessLocalWrite); err != nil {
		return err
	}
	if c.qp, err = c.pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: c.scq, RecvCQ: c.rcq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return err
	}
	if err := c.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return err
	}
	return c.postRecv()
}

// toReset moves a QP a refused REQ left in ERR back to RESET, which the
// cm takes to INIT on the next Dial.
func toReset(qp *verbs.QP) error {
	return qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateReset}, verbs.QPAttrState)
}

// reset readies the control QP for another Dial: INIT, its flushed
// receive polled away and posted again.
func (c *ctrlConn) reset() error {
	if err := toReset(c.qp); err != nil {
		return err
	}
	for {
		n, err := c.rcq.Poll(c.wc[:])
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	if err := c.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return err
	}
	return c.postRecv()
}

func (c *ctrlConn) postRecv() error {
	return c.qp.PostRecv(&verbs.RecvWR{SGList: []verbs.SGE{c.rmr.SGE(0, ctrlMsgMax)}})
}

// connected records the connection and its addresses.
func (c *ctrlConn) connected(conn *cm.Conn) {
	c.conn = conn
	c.localAddr = net.TCPAddrFromAddrPort(conn.LocalAddr())
	c.remoteAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(conn.Remote().GID.Addr(), conn.LocalAddr().Port()))
}

// Read returns the next message, which must fill b exactly: each of
// perftest's blocks is one SEND, and a message of another size means the
// two sides disagree on the exchange (perftest would read garbage). A
// disconnected peer is io.EOF.
func (c *ctrlConn) Read(b []byte) (int, error) {
	if len(c.pending) == 0 {
		wc, err := c.wait(c.rcq)
		if err != nil {
			return 0, err
		}
		n := copy(c.in, c.rmr.Buf()[:wc.ByteLen])
		if err := c.postRecv(); err != nil {
			return 0, err
		}
		if n != len(b) {
			return 0, fmt.Errorf("%w: a message of %d bytes where perftest's block has %d", oob.ErrMalformed, n, len(b))
		}
		c.pending = c.in[:n]
	}
	n := copy(b, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// Write sends b as one message and waits until the peer has it.
func (c *ctrlConn) Write(b []byte) (int, error) {
	if len(b) > ctrlMsgMax {
		return 0, fmt.Errorf("control message of %d bytes, above %d", len(b), ctrlMsgMax)
	}
	copy(c.smr.Buf(), b)
	if err := c.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{c.smr.SGE(0, len(b))}}); err != nil {
		return 0, err
	}
	if _, err := c.wait(c.scq); err != nil {
		return 0, err
	}
	return len(b), nil
}

// wait returns cq's next completion, which must be a success, until the
// deadline; a flushed one means the connection is gone: io.EOF.
func (c *ctrlConn) wait(cq *verbs.CQ) (verbs.WorkCompletion, error) {
	for {
		c.mu.Lock()
		dl, wake := c.deadline, c.wake
		c.mu.Unlock()
		if n, err := cq.Poll(c.wc[:]); err != nil || n == 1 {
			return c.completed(err)
		}
		if !dl.IsZero() && !time.Now().Before(dl) {
			return verbs.WorkCompletion{}, os.ErrDeadlineExceeded
		}
		ctx, cancel := context.WithCancel(context.Background())
		if !dl.IsZero() {
			ctx, cancel = context.WithDeadline(context.Background(), dl)
		}
		go func() {
			select {
			case <-wake:
			case <-c.conn.Done():
			case <-ctx.Done():
			}
			cancel()
		}()
		n, err := cq.Wait(ctx, c.wc[:])
		cancel()
		if n == 1 {
			return c.completed(nil)
		}
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			return verbs.WorkCompletion{}, err
		}
		select {
		case <-c.conn.Done():
			if n, err := cq.Poll(c.wc[:]); err != nil || n == 1 {
				return c.completed(err)
			}
			return verbs.WorkCompletion{}, io.EOF
		default:
		}
	}
}

func (c *ctrlConn) completed(err error) (verbs.WorkCompletion, error) {
	wc := c.wc[0]
	switch {
	case err != nil:
		return wc, err
	case wc.Status == verbs.WCWRFlushErr:
		return wc, io.EOF
	case wc.Status != verbs.WCSuccess:
		return wc, wc.Err()
	}
	return wc, nil
}

// Close disconnects (DREQ) and releases the control QP's resources.
func (c *ctrlConn) Close() error {
	c.closeOnce.Do(func() {
		if c.conn != nil {
			_ = c.conn.Close()
		}
		c.destroy()
	})
	return nil
}

func (c *ctrlConn) destroy() {
	if c.qp != nil {
		_ = c.qp.Destroy()
	}
	for _, mr := range []*verbs.MR{c.smr, c.rmr} {
		if mr != nil {
			_ = mr.Dereg()
		}
	}
	for _, cq := range []*verbs.CQ{c.scq, c.rcq} {
		if cq != nil {
			_ = cq.Destroy()
		}
	}
	if c.pd != nil {
		_ = c.pd.Dealloc()
	}
}

func (c *ctrlConn) LocalAddr() net.Addr  { return c.localAddr }
func (c *ctrlConn) RemoteAddr() net.Addr { return c.remoteAddr }

func (c *ctrlConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	close(c.wake)
	c.wake = make(chan struct{})
	c.mu.Unlock()
	return nil
}

func (c *ctrlConn) SetReadDeadline(t time.Time) error  { return c.SetDeadline(t) }
func (c *ctrlConn) SetWriteDeadline(t time.Time) error { return c.SetDeadline(t) }

// cmParams are perftest's connection parameters: READ depths for the
// READ and atomic tests, its retry counts, the -u ACK timeout and, on the
// active side, the path MTU.
func (s *side) cmParams(data bool) *cm.Params {
	p := &cm.Params{Timeout: uint8(s.cfg.qpTimeout), RetryCount: defRetryCount, RNRRetryCount: defRNRRetry}
	if s.cfg.psk != nil {
		p.Security = &cm.Security{PSK: s.cfg.psk, Require: true}
	}
	if data {
		p.SelectiveRepeat = s.cfg.sr && s.cfg.conn == "RC" // offered, or granted if offered
		if v := s.cfg.test.verb; v == verbRead || v == verbAtomic {
			p.ResponderResources, p.InitiatorDepth = s.outs, s.outs
		}
		p.PathMTU = s.mtu
	}
	return p
}

// acceptCtrl accepts the control connection on l, which it closes: the
// data connections come to a listener of their own on the same port.
func (s *side) acceptCtrl(ctx context.Context, l *cm.Listener) (net.Conn, error) {
	defer l.Close()
	s.cmPort = int(l.Addr().Port())
	req, err := l.Accept(ctx)
	if err != nil {
		return nil, err
	}
	c, err := newCtrl(s.dev)
	if err != nil {
		_ = req.Reject(nil)
		return nil, err
	}
	conn, err := req.Accept(ctx, c.qp, s.cmParams(false))
	if err != nil {
		c.destroy()
		return nil, fmt.Errorf("rdma_cm control connection: %w", err)
	}
	c.connected(conn)
	return c, nil
}

// dialCtrl connects the control QP to the server's rdma_cm port.
func (s *side) dialCtrl(ctx context.Context, host string) (net.Conn, error) {
	s.cmPort = s.cfg.port
	c, err := newCtrl(s.dev)
	if err != nil {
		return nil, err
	}
	conn, err := s.cmDial(ctx, host, c.qp, s.cmParams(false), c.reset)
	if err != nil {
		c.destroy()
		return nil, fmt.Errorf("rdma_cm control connection: %w", err)
	}
	c.connected(conn)
	return c, nil
}

// cmDial is cm.Dial tried again, as perftest does, while the server
// refuses for want of a listener; the refusal moved the QP to ERR, and
// reset makes it ready again.
func (s *side) cmDial(ctx context.Context, host string, qp *verbs.QP, p *cm.Params, reset func() error) (*cm.Conn, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(s.cmPort))
	for i := 0; ; i++ {
		dctx, cancel := context.WithTimeout(ctx, dialTimeout)
		conn, err := cm.Dial(dctx, addr, qp, p)
		cancel()
		if err == nil || !errors.Is(err, cm.ErrNoListener) || i == cmDialRetries-1 {
			return conn, err
		}
		if err := reset(); err != nil {
			return nil, err
		}
		select {
		case <-time.After(cmDialDelay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// connectCM connects the data QPs through the cm between two zero-key
// barriers (perftest's create_rdma_cm_connection), then takes the values
// the cm gave them: the starting PSNs the keys carry, the path MTU and
// the READ depth.
func (s *side) connectCM(ctx context.Context, host string) error {
	var l *cm.Listener
	if s.role == oob.Server {
		// Listening before the barrier spares the client perftest's
		// retries.
		var err error
		if l, err = cm.Listen(net.JoinHostPort(s.addr.String(), strconv.Itoa(s.cmPort))); err != nil {
			return err
		}
		defer l.Close()
	}
	if err := s.barrier(ctx); err != nil {
		return err
	}
	c, cancel := s.ctx(ctx)
	defer cancel()
	for i, qp := range s.qps {
		var conn *cm.Conn
		var err error
		if l != nil {
			var req *cm.Request
			if req, err = l.Accept(c); err == nil {
				conn, err = req.Accept(c, qp, s.cmParams(true))
			}
		} else {
			conn, err = s.cmDial(c, host, qp, s.cmParams(true), func() error { return toReset(qp) })
		}
		if err != nil {
			return fmt.Errorf("rdma_cm connection of QP %d: %w", i, err)
		}
		s.cmConns = append(s.cmConns, conn)
	}
	if err := s.barrier(ctx); err != nil {
		return err
	}
	for i, qp := range s.qps {
		a, _, err := qp.Query(verbs.QPAttrSQPSN | verbs.QPAttrPathMTU | verbs.QPAttrMaxQPRdAtomic)
		if err != nil {
			return err
		}
		s.local[i].PSN, s.mtu = a.SQPSN, a.PathMTU
		if s.outs > 1 {
			s.outs = max(1, a.MaxRdAtomic)
		}
	}
	return nil
}

// closeCM disconnects the data connections.
func (s *side) closeCM() {
	for _, c := range s.cmConns {
		_ = c.Close()
	}
	s.cmConns = nil
}
