package rsocket

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/verbs"
)

// Conn is an rsocket stream connection: a net.Conn whose bytes move by
// RDMA WRITE WITH IMMEDIATE into the peer's receive buffer. One goroutine
// may Read while another Writes; Read, Write and the rest are safe for
// concurrent use, as net.Conn's are.
type Conn struct {
	ep      *endpoint
	cmc     *cm.Conn
	release func() // the device
	local   Addr
	remote  Addr
	peerBE  bool // the peer is big-endian: ring SGEs go to it byte-swapped
	sbuf    []byte
	rbuf    []byte
	tbuf    []byte

	cq  *completions
	wcs [32]verbs.WorkCompletion // progress's batch (mu)

	mu       sync.Mutex
	snd      sender
	rcv      receiver
	ctrlSeq  int // control messages posted
	ctrlMax  int // ... and allowed: completed plus ctrlSlots
	ctrlWR   verbs.SendWR
	ctrlSGE  [1]verbs.SGE
	recvWR   verbs.RecvWR
	rdEOF    bool // the peer shut its side down: reads end after the data queued
	wrShut   bool // CloseWrite or Close: no more writes
	peerGone bool // the peer disconnected: writes fail
	discSent bool // RS_CTRL_DISCONNECT went out
	closed   bool
	err      error // the connection broke
	rdDL     time.Time
	wrDL     time.Time
	rdWake   chan struct{}
	wrWake   chan struct{}

	rdMu    sync.Mutex // one Read at a time, and rdTimer
	rdTimer *time.Timer
	wrMu    sync.Mutex // one Write at a time, and what follows
	postMu  sync.Mutex // held from a message's reservation to its post (Close waits)
	wrTimer *time.Timer
	dataWR  verbs.SendWR
	dataSGE [2]verbs.SGE

	maps ioMaps
	ka   keepalive // guarded by mu

	closeOnce sync.Once
	closeErr  error

	// hwDone is closed when the goroutine that takes a kernel device's
	// completions (pollHardware) has stopped; nil on goroce devices.
	hwDone chan struct{}
}

var (
	_ net.Conn      = (*Conn)(nil)
	_ io.WriterTo   = (*Conn)(nil)
	_ io.ReaderFrom = (*Conn)(nil)
	// errReset is what a write finds once the peer disconnected.
	errReset = syscall.ECONNRESET
)

// newConn starts a connected endpoint's connection: the sender and
// receiver from the peer's announcement, the completion sink, and the
// first credits (rsockets returns the second half of its buffer at once).
func newConn(ep *endpoint, cmc *cm.Conn, release func(), peer *connData, cfg *Config) *Conn {
	c := &Conn{ep: ep, cmc: cmc, release: release,
		local: Addr{cmc.LocalAddr()}, remote: Addr{cmc.Remote().Addr},
		peerBE: peer.flags&connFlagNet != 0,
		sbuf:   ep.smr.Buf(), rbuf: ep.rmr.Buf(), tbuf: ep.tmr.Buf(),
		snd: newSender(ep.sq, ep.sbufSz, peer), rcv: newReceiver(ep.rq, ep.rbufSz, peer),
		ctrlMax: ctrlSlots, recvWR: verbs.RecvWR{WRID: recvFlag},
		rdWake: make(chan struct{}, 1), wrWake: make(chan struct{}, 1),
		rdTimer: stoppedTimer(), wrTimer: stoppedTimer()}
	c.cq = &completions{ring: make([]verbs.WorkCompletion, ep.sq+ep.rq), wake: c.wake}
	c.ctrlWR.SGList = c.ctrlSGE[:0]
	c.maps = newIOMaps(ep, peer)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ka.init(c, cfg.KeepAlive)
	if ep.dev.Hardware() {
		// A kernel device's CQ takes no sink: a goroutine waits on it
		// and queues every completion, the early ones included, in
		// order.
		c.hwDone = make(chan struct{})
		go c.pollHardware()
		return c
	}
	// Messages the peer wrote before the sink took over are in the CQ.
	if err := ep.cq.SetSink(c.cq); err != nil {
		c.err = err
		return c
	}
	for {
		n, err := ep.cq.Poll(c.wcs[:])
		if err != nil {
			c.err = err
		}
		for i := range c.wcs[:n] {
			c.complete(&c.wcs[i])
		}
		if n < len(c.wcs) {
			break
		}
	}
	c.updateCredits()
	return c
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// LocalAddr returns this side's address (an Addr).
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr returns the peer's address (an Addr).
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// opError wraps err as package net does.
func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "rdma", Source: c.local, Addr: c.remote, Err: err}
}

// wake tells a waiting Read and Write that something changed.
func (c *Conn) wake() {
	for _, ch := range []chan struct{}{c.rdWake, c.wrWake} {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// wait releases mu until wake is signalled or the deadline passes
// (os.ErrDeadlineExceeded), then takes mu again. A deadline already past
// returns at once.
func (c *Conn) wait(wake chan struct{}, t *time.Timer, deadline time.Time) error {
	if !deadline.IsZero() {
		d := time.Until(deadline)
		if d <= 0 {
			return os.ErrDeadlineExceeded
		}
		t.Reset(d)
	}
	c.mu.Unlock()
	var err error
	select {
	case <-wake:
	case <-t.C:
		err = os.ErrDeadlineExceeded
	}
	t.Stop()
	c.mu.Lock()
	c.progress()
	return err
}

// Read reads the data that arrived, up to len(b) bytes, waiting for some
// if there is none. After the peer's CloseWrite or Close it returns the
// data still queued, then io.EOF.
func (c *Conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.rdMu.Lock()
	defer c.rdMu.Unlock()
	n, off, err := c.arrived()
	if err != nil {
		return 0, err
	}
	// The queued bytes are the reader's: the peer writes there again only
	// once consume has returned them, so the copy needs no lock.
	n = min(n, len(b))
	k := copy(b[:n], c.rbuf[off:])
	copy(b[k:n], c.rbuf)
	c.consumed(n)
	return n, nil
}

// WriteTo writes the data arriving to w, straight from the registered
// receive buffer (one copy less than Read into a buffer of one's own, as
// io.Copy does), until the peer's CloseWrite or Close (then it returns
// nil) or an error.
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	c.rdMu.Lock()
	defer c.rdMu.Unlock()
	var total int64
	for {
		n, off, err := c.arrived()
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		// Up to the buffer's end; what wraps goes on the next round.
		k, werr := w.Write(c.rbuf[off : off+min(n, c.ep.rbufSz-off)])
		total += int64(k)
		c.consumed(k)
		if werr != nil {
			return total, werr
		}
	}
}

// arrived waits until data is queued and returns how much, from where in
// the receive buffer; or io.EOF once the peer shut its side down, or why
// no data will come. The caller holds rdMu.
func (c *Conn) arrived() (n, off int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.progress()
	for c.rcv.queued == 0 && !c.rdEOF && c.err == nil && !c.closed {
		if err := c.wait(c.rdWake, c.rdTimer, c.rdDL); err != nil {
			return 0, 0, c.opError("read", err)
		}
	}
	switch {
	case c.closed:
		return 0, 0, c.opError("read", net.ErrClosed)
	case c.rcv.queued == 0 && c.rdEOF:
		return 0, 0, io.EOF
	case c.rcv.queued == 0:
		return 0, 0, c.opError("read", c.err)
	}
	return c.rcv.queued, c.rcv.readOff, nil
}

// consumed returns n bytes read to the receive buffer, and credits to
// the peer when due. The caller holds rdMu.
func (c *Conn) consumed(n int) {
	c.mu.Lock()
	c.rcv.consume(n)
	c.updateCredits()
	c.mu.Unlock()
}

// Write writes b in messages of up to 256 KiB, each copied into the send
// buffer and written into the peer's receive buffer, waiting for buffer
// space and credits as the peer reads. It returns when every message is
// posted (the data is then the transport's to deliver, as a socket's send
// buffer is the kernel's).
func (c *Conn) Write(b []byte) (int, error) {
	c.wrMu.Lock()
	defer c.wrMu.Unlock()
	done := 0
	for done < len(b) {
		c.postMu.Lock()
		c.mu.Lock()
		if err := c.sendable(); err != nil {
			c.mu.Unlock()
			c.postMu.Unlock()
			return done, err
		}
		seg := c.snd.reserve(len(b) - done)
		c.mu.Unlock()
		err := c.postData(b[done:done+seg.n], seg)
		c.postMu.Unlock()
		if err != nil {
			c.fail(err)
			return done, c.opError("write", err)
		}
		done += seg.n
	}
	return done, nil
}

// ReadFrom writes what it reads from r until io.EOF, reading straight
// into the registered send buffer (one copy less than Write from a
// buffer of one's own, as io.Copy does): each Read of r becomes one
// message.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	c.wrMu.Lock()
	defer c.wrMu.Unlock()
	var total int64
	for {
		c.mu.Lock()
		if err := c.sendable(); err != nil {
			c.mu.Unlock()
			return total, err
		}
		// Room for one message, contiguous in the send buffer: what
		// reserve grants a write of that length, as long as the peer
		// keeps to the protocol (only completions change it meanwhile).
		room := min(c.snd.sbufAvail, c.ep.sbufSz-c.snd.sbufPos, int(c.snd.target[c.snd.targetIdx].length), maxMessage)
		pos := c.snd.sbufPos
		c.mu.Unlock()
		// Not under postMu: Close does not wait for r.
		n, rerr := r.Read(c.sbuf[pos : pos+room])
		if n > 0 {
			if err := c.postRead(n); err != nil {
				return total, err
			}
			total += int64(n)
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

// postRead sends the n bytes ReadFrom read into the send buffer.
func (c *Conn) postRead(n int) error {
	c.postMu.Lock()
	defer c.postMu.Unlock()
	c.mu.Lock()
	if err := c.writable(); err != nil {
		c.mu.Unlock()
		return c.opError("write", err)
	}
	seg := c.snd.reserve(n)
	c.mu.Unlock()
	err := c.postData(nil, seg)
	if err == nil && seg.n < n {
		err = fmt.Errorf("%w: the peer rewrote the region being filled", errProtocol)
	}
	if err != nil {
		c.fail(err)
		return c.opError("write", err)
	}
	return nil
}

// sendable waits until a message may be sent. The caller holds wrMu and
// mu.
func (c *Conn) sendable() error {
	if !c.snd.canSend() {
		c.progress()
	}
	for !c.snd.canSend() && c.writable() == nil {
		if err := c.wait(c.wrWake, c.wrTimer, c.wrDL); err != nil {
			return c.opError("write", err)
		}
	}
	if err := c.writable(); err != nil {
		return c.opError("write", err)
	}
	return nil
}

// writable says why no write may start, if one may not. The caller holds
// mu.
func (c *Conn) writable() error {
	switch {
	case c.closed:
		return net.ErrClosed
	case c.wrShut:
		return syscall.EPIPE
	case c.err != nil:
		return c.err
	case c.peerGone:
		return errReset
	}
	return nil
}

// postData copies p into the send buffer at seg.off (in two pieces if it
// wraps; nothing when p is nil: ReadFrom read the data there) and posts
// the write of seg.n bytes with its message.
func (c *Conn) postData(p []byte, seg segment) error {
	return c.postWrite(p, seg, msg(opData, uint32(seg.n)), true)
}

// postWrite is postData for any message m: the work request's ID, and
// with imm its immediate data (a riowrite has none: the peer is not told).
// The caller holds postMu.
func (c *Conn) postWrite(p []byte, seg segment, m uint32, imm bool) error {
	lkey := c.ep.smr.LKey()
	base := c.ep.smr.IOVA()
	k := min(seg.n, c.ep.sbufSz-seg.off)
	copy(c.sbuf[seg.off:seg.off+k], p)
	c.dataSGE[0] = verbs.SGE{Addr: base + uint64(seg.off), Length: uint32(k), LKey: lkey}
	c.dataWR.SGList = c.dataSGE[:1]
	if k < seg.n {
		copy(c.sbuf, p[k:])
		c.dataSGE[1] = verbs.SGE{Addr: base, Length: uint32(seg.n - k), LKey: lkey}
		c.dataWR.SGList = c.dataSGE[:2]
	}
	c.dataWR.WRID, c.dataWR.ImmData, c.dataWR.Opcode = uint64(m), m, verbs.WRRDMAWriteWithImm
	if !imm {
		c.dataWR.ImmData, c.dataWR.Opcode = 0, verbs.WRRDMAWrite
	}
	c.dataWR.RDMA = verbs.RDMAParams{RemoteAddr: seg.dst.addr, RKey: seg.dst.key}
	return c.ep.qp.PostSend(&c.dataWR)
}

// fail records that the connection broke, once, and wakes the waiters.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.wake()
}

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdDL, c.wrDL = t, t
	c.mu.Unlock()
	c.wake()
	return nil
}

// SetReadDeadline sets the deadline of Read calls, those blocked now
// included: past it they return an error wrapping os.ErrDeadlineExceeded.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdDL = t
	c.mu.Unlock()
	c.wake()
	return nil
}

// SetWriteDeadline sets the deadline of Write calls, those blocked now
// included.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.wrDL = t
	c.mu.Unlock()
	c.wake()
	return nil
}

// closeTimeout bounds how long Close and CloseWrite wait for the
// messages already posted to complete.
const closeTimeout = 10 * time.Second

// CloseWrite shuts the sending side down (shutdown(SHUT_WR), rsockets'
// RS_CTRL_SHUTDOWN, or RS_CTRL_DISCONNECT once the peer's side is shut
// too): the peer reads the data already written, then io.EOF. It waits
// for the writes posted to complete.
func (c *Conn) CloseWrite() error {
	c.wrMu.Lock()
	defer c.wrMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.opError("close", net.ErrClosed)
	}
	if c.wrShut {
		return nil
	}
	c.wrShut = true
	ctrl := uint32(ctrlShutdown)
	if c.rdEOF {
		ctrl = ctrlDisconnect
	}
	return c.shutdown(ctrl, "close", c.wrTimer)
}

// shutdown posts a control message and waits for every send to complete,
// on timer t. The caller holds mu, and wrMu or postMu.
func (c *Conn) shutdown(ctrl uint32, op string, t *time.Timer) error {
	c.progress()
	if c.err != nil || c.peerGone {
		return nil
	}
	deadline := time.Now().Add(closeTimeout)
	for c.ctrlSeq == c.ctrlMax && c.err == nil && !c.peerGone {
		if err := c.wait(c.wrWake, t, deadline); err != nil {
			return c.opError(op, err)
		}
	}
	if c.err != nil || c.peerGone {
		return nil
	}
	if err := c.postCtrl(msg(opCtrl, ctrl), false, 0, 0); err != nil {
		return c.opError(op, err)
	}
	c.discSent = ctrl == ctrlDisconnect
	for !c.sendsDone() && c.err == nil {
		if err := c.wait(c.wrWake, t, deadline); err != nil {
			return c.opError(op, err)
		}
	}
	return nil
}

// sendsDone is rs_conn_all_sends_done.
func (c *Conn) sendsDone() bool {
	return c.ctrlMax-c.ctrlSeq+c.snd.sqeAvail == c.ep.sq
}

// Close sends the peer RS_CTRL_DISCONNECT (when the connection is still
// up), waits for the messages posted to complete, disconnects through the
// CM and releases the connection's verbs objects. Blocked Reads and
// Writes return net.ErrClosed. The peer reads the data it received, then
// io.EOF; data not read here is dropped.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.ka.stop()
		c.mu.Unlock()
		c.wake()
		c.postMu.Lock() // a message reserved is posted first
		c.mu.Lock()
		c.wrShut = true
		if !c.discSent {
			c.closeErr = c.shutdown(ctrlDisconnect, "close", stoppedTimer())
		}
		c.mu.Unlock()
		c.postMu.Unlock()
		if err := c.cmc.Close(); err != nil && c.closeErr == nil {
			c.closeErr = c.opError("close", err)
		}
		c.rdMu.Lock() // no Read copies from the buffer any more
		if err := c.ep.destroy(); err != nil && c.closeErr == nil {
			c.closeErr = c.opError("close", err)
		}
		c.rdMu.Unlock()
		if c.hwDone != nil {
			<-c.hwDone // its Wait ends with the CQ
		}
		c.release()
	})
	return c.closeErr
}
