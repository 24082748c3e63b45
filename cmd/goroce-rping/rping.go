package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/verbs"
)

// infoSize is the size of rping's struct rping_rdma_info: buf (u64), rkey
// (u32), size (u32), big-endian. Every SEND of rping is one of these, the
// server's go-aheads included (their content is not looked at).
const infoSize = 16

// sqDepth is rping's RPING_SQ_DEPTH: the send queue's depth, and half the
// CQ's.
const sqDepth = 16

// info is a buffer advertised in a SEND: where the peer may READ or WRITE.
type info struct {
	addr uint64
	rkey uint32
	size uint32
}

func (i info) put(b []byte) {
	binary.BigEndian.PutUint64(b[0:8], i.addr)
	binary.BigEndian.PutUint32(b[8:12], i.rkey)
	binary.BigEndian.PutUint32(b[12:16], i.size)
}

func parseInfo(b []byte) info {
	return info{addr: binary.BigEndian.Uint64(b[0:8]), rkey: binary.BigEndian.Uint32(b[8:12]),
		size: binary.BigEndian.Uint32(b[12:16])}
}

// errDisconnected ends a side's loop when the peer disconnects: rping
// treats it as the normal end.
var errDisconnected = errors.New("disconnected")

// logger serializes the output of the connections of a persistent server.
type logger struct {
	mu       sync.Mutex
	out, err io.Writer
	debug    bool
}

func (l *logger) printf(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.out, format, a...)
}

func (l *logger) errorf(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.err, format, a...)
}

func (l *logger) debugf(format string, a ...any) {
	if l.debug {
		l.printf(format, a...)
	}
}

// endpoint is one connection's resources, rping's: a receive buffer and a
// send buffer of one rping_rdma_info each, the rdma buffer (the server's
// READ lands there and its WRITE leaves from there; the client's receives
// the server's WRITE) and, on the client, the start buffer the server
// READs.
type endpoint struct {
	size    int
	cq      *verbs.CQ
	qp      *verbs.QP
	recvMR  *verbs.MR
	sendMR  *verbs.MR
	rdmaMR  *verbs.MR
	startMR *verbs.MR // client only
	conn    *cm.Conn
	wcs     [sqDepth * 2]verbs.WorkCompletion
	pending []verbs.WorkCompletion // polled, not yet handed out
	lg      *logger
}

// newEndpoint creates the resources on pd and posts the receive, so that
// the peer's first SEND finds it.
func newEndpoint(pd *verbs.PD, size int, client bool, lg *logger) (*endpoint, error) {
	e := &endpoint{size: size, lg: lg}
	var err error
	if e.cq, err = pd.Device().CreateCQ(sqDepth*2, nil, 0); err != nil {
		return nil, err
	}
	if e.qp, err = pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: verbs.QPCap{MaxSendWR: sqDepth, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		e.destroy()
		return nil, err
	}
	remote := verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	regs := []struct {
		mr     **verbs.MR
		n      int
		access verbs.AccessFlags
	}{{&e.recvMR, infoSize, verbs.AccessLocalWrite}, {&e.sendMR, infoSize, 0}, {&e.rdmaMR, size, remote}}
	if client {
		regs = append(regs, struct {
			mr     **verbs.MR
			n      int
			access verbs.AccessFlags
		}{&e.startMR, size, remote})
	}
	for _, r := range regs {
		if *r.mr, err = pd.RegMR(make([]byte, r.n), r.access); err != nil {
			e.destroy()
			return nil, err
		}
	}
	lg.debugf("allocated & registered buffers...\n")
	// Receives are posted in INIT, before connecting, as rping does.
	if err := e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		e.destroy()
		return nil, err
	}
	if err := e.postRecv(); err != nil {
		e.destroy()
		return nil, err
	}
	return e, nil
}

// destroy releases what newEndpoint created, the connection first.
func (e *endpoint) destroy() {
	if e.conn != nil {
		_ = e.conn.Close()
	}
	if e.qp != nil {
		_ = e.qp.Destroy()
	}
	for _, mr := range []*verbs.MR{e.recvMR, e.sendMR, e.rdmaMR, e.startMR} {
		if mr != nil {
			_ = mr.Dereg()
		}
	}
	if e.cq != nil {
		_ = e.cq.Destroy()
	}
}

func (e *endpoint) postRecv() error {
	return e.qp.PostRecv(&verbs.RecvWR{SGList: []verbs.SGE{e.recvMR.SGE(0, infoSize)}})
}

// send posts rping's SEND of its send buffer.
func (e *endpoint) send() error {
	return e.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{e.sendMR.SGE(0, infoSize)}})
}

// rdma posts a READ of the peer's buffer at to into the rdma buffer, or a
// WRITE of n bytes of it there.
func (e *endpoint) rdma(op verbs.WROpcode, to info, n int) error {
	return e.qp.PostSend(&verbs.SendWR{Opcode: op, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{e.rdmaMR.SGE(0, n)}, RDMA: verbs.RDMAParams{RemoteAddr: to.addr, RKey: to.rkey}})
}

// next waits for the next completion rping acts on: a RECV (whose info it
// returns, after posting the receive again), an RDMA READ or an RDMA
// WRITE. SEND completions are passed over, as rping does. The peer's
// disconnection is errDisconnected.
func (e *endpoint) next(ctx context.Context) (verbs.WCOpcode, info, error) {
	for {
		if len(e.pending) == 0 {
			if err := e.wait(ctx); err != nil {
				return 0, info{}, err
			}
		}
		wc := e.pending[0]
		e.pending = e.pending[1:]
		switch {
		case wc.Status == verbs.WCWRFlushErr:
			// The QP is in ERR: the CM moved it there on the peer's
			// DREQ, which ends the connection.
			select {
			case <-e.conn.Done():
				return 0, info{}, e.ended()
			case <-ctx.Done():
				return 0, info{}, ctx.Err()
			}
		case wc.Status != verbs.WCSuccess:
			return 0, info{}, fmt.Errorf("cq completion failed status %d: %w", int(wc.Status), wc.Err())
		}
		switch wc.Opcode {
		case verbs.WCSend:
			e.lg.debugf("send completion\n")
		case verbs.WCRDMARead, verbs.WCRDMAWrite:
			e.lg.debugf("rdma %s completion\n", map[bool]string{true: "read", false: "write"}[wc.Opcode == verbs.WCRDMARead])
			return wc.Opcode, info{}, nil
		case verbs.WCRecv:
			e.lg.debugf("recv completion\n")
			if wc.ByteLen != infoSize {
				return 0, info{}, fmt.Errorf("received bogus data, size %d", wc.ByteLen)
			}
			in := parseInfo(e.recvMR.Buf())
			if err := e.postRecv(); err != nil {
				return 0, info{}, err
			}
			return verbs.WCRecv, in, nil
		default:
			return 0, info{}, fmt.Errorf("unexpected completion %v", wc.Opcode)
		}
	}
}

// wait fills pending with completions, or fails when the connection ends.
func (e *endpoint) wait(ctx context.Context) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-e.conn.Done():
			cancel()
		case <-wctx.Done():
		}
	}()
	n, err := e.cq.Wait(wctx, e.wcs[:])
	if err != nil {
		if ctx.Err() == nil {
			select {
			case <-e.conn.Done():
				// Completions may still be queued: flushed ones say
				// nothing new, anything else is reported.
				if n, _ := e.cq.Poll(e.wcs[:]); n > 0 {
					e.pending = e.wcs[:n]
					return nil
				}
				return e.ended()
			default:
			}
		}
		return err
	}
	e.pending = e.wcs[:n]
	return nil
}

// ended is the error of a connection that ended.
func (e *endpoint) ended() error {
	if errors.Is(e.conn.Err(), cm.ErrDisconnected) {
		return errDisconnected
	}
	return fmt.Errorf("connection lost: %w", e.conn.Err())
}

// expect waits for a completion of the opcode the state machine expects
// next; state names it in the error, with rping's state name.
func (e *endpoint) expect(ctx context.Context, want verbs.WCOpcode, state string) (info, error) {
	op, in, err := e.next(ctx)
	if err != nil {
		return in, err
	}
	if op != want {
		return in, fmt.Errorf("wait for %s: got a %v completion", state, op)
	}
	return in, nil
}

// cstring is b up to its first NUL, as printf's %s reads a buffer.
func cstring(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

func hostPort(c *config) string {
	return net.JoinHostPort(c.addr.String(), strconv.Itoa(c.port))
}
