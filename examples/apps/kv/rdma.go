package kv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/verbs"
)

// recvDepth is how many PUT requests a server connection has receives
// posted for; a client has one PUT in flight, so a few suffice.
const recvDepth = 8

// maxTornReads bounds a GET's re-reads of one slot that a writer keeps
// tearing: a server rewriting one key without pause could starve a reader.
const maxTornReads = 10000

// RDMAServer serves a Table over RDMA: it registers the table for remote
// READs, so GETs never reach it, and applies the PUTs its connections SEND.
type RDMAServer struct {
	t   *Table
	pd  *verbs.PD
	mr  *verbs.MR
	put atomic.Uint64
	bad atomic.Uint64
	wg  sync.WaitGroup
}

// NewRDMAServer registers t's memory on dev (REMOTE_READ only: clients
// cannot write the table).
func NewRDMAServer(dev *verbs.Device, t *Table) (*RDMAServer, error) {
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, err
	}
	mr, err := pd.RegMR(t.Memory(), verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	if err != nil {
		pd.Dealloc()
		return nil, err
	}
	return &RDMAServer{t: t, pd: pd, mr: mr}, nil
}

// Puts returns how many PUTs the server's goroutines applied, and
// BadRequests how many messages they dropped as malformed. GETs are not
// counted: the server never sees them.
func (s *RDMAServer) Puts() uint64        { return s.put.Load() }
func (s *RDMAServer) BadRequests() uint64 { return s.bad.Load() }

// Serve accepts connections from l until ctx ends or l is closed, and
// serves each on a goroutine of its own until the peer disconnects or ctx
// ends. It returns the error that ended accepting.
func (s *RDMAServer) Serve(ctx context.Context, l *cm.Listener) error {
	for {
		req, err := l.Accept(ctx)
		if err != nil {
			return err
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = s.serveConn(ctx, req)
		}()
	}
}

// Close waits for the connections' goroutines, then deregisters the
// table. Call it after Serve returned and ctx ended.
func (s *RDMAServer) Close() error {
	s.wg.Wait()
	return errors.Join(s.mr.Dereg(), s.pd.Dealloc())
}

// endpoint is one side's RC QP with separate send and receive CQs and the
// memory its messages use.
type endpoint struct {
	qp             *verbs.QP
	sendCQ, recvCQ *verbs.CQ
	msgs           *verbs.MR
	wc             []verbs.WorkCompletion
}

func newEndpoint(pd *verbs.PD, depth, msgBytes int) (*endpoint, error) {
	dev := pd.Device()
	e := &endpoint{wc: make([]verbs.WorkCompletion, depth)}
	var err error
	if e.sendCQ, err = dev.CreateCQ(depth, nil, 0); err != nil {
		return nil, err
	}
	if e.recvCQ, err = dev.CreateCQ(depth, nil, 0); err != nil {
		e.close()
		return nil, err
	}
	if e.msgs, err = pd.RegMR(make([]byte, msgBytes), verbs.AccessLocalWrite); err != nil {
		e.close()
		return nil, err
	}
	e.qp, err = pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: e.sendCQ, RecvCQ: e.recvCQ,
		Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		e.close()
		return nil, err
	}
	if err := cm.PrepareQP(e.qp); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *endpoint) close() {
	if e.qp != nil {
		_ = e.qp.Destroy()
	}
	if e.msgs != nil {
		_ = e.msgs.Dereg()
	}
	for _, cq := range []*verbs.CQ{e.sendCQ, e.recvCQ} {
		if cq != nil {
			_ = cq.Destroy()
		}
	}
}

// send posts a signaled request and waits for its completion on the send
// CQ, which no one else waits on.
func (e *endpoint) send(ctx context.Context, wr *verbs.SendWR) error {
	wr.SendFlags |= verbs.SendSignaled
	if err := e.qp.PostSend(wr); err != nil {
		return err
	}
	if _, err := e.sendCQ.Wait(ctx, e.wc[:1]); err != nil {
		return err
	}
	return e.wc[0].Err()
}

// serveConn accepts req and applies its PUTs until the connection ends.
func (s *RDMAServer) serveConn(ctx context.Context, req *cm.Request) error {
	msgMax := headerLen + KeyMax + s.t.ValueMax
	e, err := newEndpoint(s.pd, recvDepth+1, recvDepth*msgMax+replyLen)
	if err != nil {
		_ = req.Reject(nil)
		return err
	}
	defer e.close()
	rwr := verbs.RecvWR{SGList: make([]verbs.SGE, 1)} // reused: PostRecv copies it
	recv := func(i int) error {
		rwr.WRID, rwr.SGList[0] = uint64(i), e.msgs.SGE(i*msgMax, msgMax)
		return e.qp.PostRecv(&rwr)
	}
	for i := range recvDepth {
		if err := recv(i); err != nil {
			_ = req.Reject(nil)
			return err
		}
	}
	hello, err := encodeHello(s.mr.Remote(), s.t.Geometry)
	if err != nil {
		_ = req.Reject(nil)
		return err
	}
	conn, err := req.Accept(ctx, e.qp, &cm.Params{PrivateData: hello, Access: verbs.AccessRemoteRead})
	if err != nil {
		return err
	}
	defer conn.Close()
	replyOff := recvDepth * msgMax
	reply := e.msgs.Buf()[replyOff : replyOff+replyLen]
	wr := verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{e.msgs.SGE(replyOff, replyLen)}}
	for {
		// The peer's disconnect moves the QP to ERR, which flushes the
		// posted receives: the loop ends on the first failed completion.
		n, err := e.recvCQ.Wait(ctx, e.wc[1:])
		if err != nil {
			return err
		}
		for _, wc := range e.wc[1 : 1+n] {
			if err := wc.Err(); err != nil {
				return err
			}
			i := int(wc.WRID)
			r, err := decodeRequest(e.msgs.Buf()[i*msgMax:i*msgMax+int(wc.ByteLen)], s.t.ValueMax)
			switch {
			case err != nil || r.op != opPut:
				s.bad.Add(1)
				err = fmt.Errorf("%w: not a PUT", errBadMessage)
			default:
				err = s.t.Put(r.key, r.value)
				s.put.Add(1)
			}
			if err := recv(i); err != nil {
				return err
			}
			reply[0] = statusOf(err)
			if err := e.send(ctx, &wr); err != nil {
				return err
			}
		}
	}
}

// RDMAClient is one connection to an RDMAServer: GETs READ the table,
// PUTs SEND a request and wait for the reply. One goroutine at a time.
type RDMAClient struct {
	e      *endpoint
	conn   *cm.Conn
	remote verbs.RemoteRegion
	g      Geometry
	slot   *verbs.MR // where READs land
	torn   uint64

	// The work requests, built once.
	getWR, putWR verbs.SendWR
	replyWR      verbs.RecvWR
}

// DialRDMA connects to the RDMA server at addr ("ip:port", the rdma_cm
// port) from pd's device.
func DialRDMA(ctx context.Context, pd *verbs.PD, addr string) (*RDMAClient, error) {
	e, err := newEndpoint(pd, 2, replyLen)
	if err != nil {
		return nil, err
	}
	conn, err := cm.Dial(ctx, addr, e.qp, nil)
	if err != nil {
		e.close()
		return nil, err
	}
	c := &RDMAClient{e: e, conn: conn}
	if c.remote, c.g, err = decodeHello(conn.Remote().PrivateData); err != nil {
		_ = c.Close()
		return nil, err
	}
	// The READ target and the request buffer, registered once: a slot,
	// then the largest request.
	if c.slot, err = pd.RegMR(make([]byte, c.g.SlotSize()+headerLen+KeyMax+c.g.ValueMax), verbs.AccessLocalWrite); err != nil {
		_ = c.Close()
		return nil, err
	}
	c.getWR = verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{c.slot.SGE(0, c.g.SlotSize())}}
	c.putWR = verbs.SendWR{Opcode: verbs.WRSend, SGList: make([]verbs.SGE, 1)}
	c.replyWR = verbs.RecvWR{SGList: []verbs.SGE{c.e.msgs.SGE(0, replyLen)}}
	return c, nil
}

// TornReads returns how many READs the client discarded as torn.
func (c *RDMAClient) TornReads() uint64 { return c.torn }

// Get appends the value stored under key to dst[:0], reading the
// server's table one-sidedly: one READ per slot of the key's probe
// sequence until the key or an empty slot, again for a torn one.
func (c *RDMAClient) Get(ctx context.Context, key, dst []byte) ([]byte, error) {
	if len(key) == 0 || len(key) > KeyMax {
		return dst, ErrTooLarge
	}
	home := c.g.Home(key)
	n := c.g.SlotSize()
	buf := c.slot.Buf()[:n]
	for p := range MaxProbe {
		off := ((home + p) & (c.g.Slots - 1)) * n
		for torn := 0; ; torn++ {
			c.getWR.RDMA = verbs.RDMAParams{RemoteAddr: c.remote.Addr + uint64(off), RKey: c.remote.RKey}
			if err := c.e.send(ctx, &c.getWR); err != nil {
				return dst, err
			}
			val, st := lookup(buf, key)
			switch st {
			case slotHit:
				return append(dst[:0], val...), nil
			case slotEmpty:
				return dst, ErrNotFound
			case slotTorn:
				c.torn++
				if torn < maxTornReads {
					continue
				}
				return dst, fmt.Errorf("kv: slot %d torn %d times in a row", off/n, torn+1)
			}
			break // another key's slot: probe the next
		}
	}
	return dst, ErrNotFound
}

// Put stores value under key: a SEND to the server's goroutine, which
// writes the slot and replies.
func (c *RDMAClient) Put(ctx context.Context, key, value []byte) error {
	if len(key) == 0 || len(key) > KeyMax || len(value) > c.g.ValueMax {
		return ErrTooLarge
	}
	reply := c.e.msgs
	if err := c.e.qp.PostRecv(&c.replyWR); err != nil {
		return err
	}
	off := c.g.SlotSize()
	m := appendRequest(c.slot.Buf()[off:off], opPut, key, value)
	c.putWR.SGList[0] = c.slot.SGE(off, len(m))
	if err := c.e.send(ctx, &c.putWR); err != nil {
		return err
	}
	if _, err := c.e.recvCQ.Wait(ctx, c.e.wc[1:2]); err != nil {
		return err
	}
	if err := c.e.wc[1].Err(); err != nil {
		return err
	}
	return errOf(reply.Buf()[0])
}

// Close disconnects and releases the client's resources.
func (c *RDMAClient) Close() error {
	err := c.conn.Close()
	c.e.close()
	if c.slot != nil {
		err = errors.Join(err, c.slot.Dereg())
	}
	return err
}
