package netio

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/wire"
)

// Handler receives the packets a Conn accepts.
type Handler interface {
	// HandlePacket is called on the Serve goroutine for each packet that
	// parsed and passed the ICRC check, in arrival order. p and the bytes
	// it refers to are valid only until HandlePacket returns: the
	// receive buffer is reused for the next batch. The path MTU is not
	// checked (Parse ran with mtu 0): the QP checks it.
	HandlePacket(p *wire.Packet, from netip.AddrPort, info RecvInfo)
}

// HandlerFunc adapts a function to the Handler interface.
type HandlerFunc func(p *wire.Packet, from netip.AddrPort, info RecvInfo)

// HandlePacket calls f.
func (f HandlerFunc) HandlePacket(p *wire.Packet, from netip.AddrPort, info RecvInfo) {
	f(p, from, info)
}

// BatchEnder is implemented by a Handler that wants to know when the packets
// read by one system call have all been handed to it: it can then send
// what they caused (acknowledgements, further requests) together, in fewer
// and larger batches, instead of after each packet. EndBatch is called on
// the Serve goroutine after the last HandlePacket of each batch, and also
// after batches in which nothing was delivered. A long batch is ended early
// as well, after every Config.EndBatchEvery delivered packets, so that
// what the first packets caused does not wait for the last ones.
type BatchEnder interface {
	EndBatch()
}

// Unsealer is implemented by a Handler some of whose packets arrive sealed
// (internal/seal): their extension headers and payload are encrypted, so
// they do not parse until opened. Both methods run on the Serve goroutine.
type Unsealer interface {
	// Sealed reports whether udpPayload, a datagram not yet checked in
	// any way, is addressed to a destination that takes only sealed
	// packets. Such a datagram skips the parse, has its ICRC checked
	// and goes to Unseal.
	Sealed(udpPayload []byte) bool
	// Unseal authenticates and decrypts a sealed datagram whose ICRC
	// matched, in place, and returns the plain packet (BTH through an
	// ICRC-sized tail) to parse and hand to HandlePacket, or nil to drop
	// it, which the Unsealer counts.
	Unseal(udpPayload []byte, from netip.AddrPort) []byte
}

// RecvInfo describes how a packet arrived.
type RecvInfo struct {
	// Local is the address and port the packet was sent to.
	Local netip.AddrPort
	// IPID is the IPv4 identification the sender used, as recovered
	// from the ICRC: 0 for goroce peers and over IPv6.
	IPID uint16
	// IDRecovered reports that the ICRC matched only for a recovered
	// non-zero IPID, which makes it a 16-bit check (see
	// Config.StrictICRC).
	IDRecovered bool
}

// receiver holds everything the receive loop needs, allocated once: the
// recvmmsg headers, one buffer per datagram, their control-message space, a
// Packet to parse into and the ICRC checker, with its identification
// recovery cache and prediction.
type receiver struct {
	batch *mmsgBatch
	bufs  []byte // len(batch.hdrs) buffers of size bytes
	oob   []byte // len(batch.hdrs) control areas of oobSize bytes
	size  int
	pkt   wire.Packet
	icrc  wire.ICRCChecker

	// serve holds the running Serve's state for serveFn and pollFn, the
	// bound method values r.read and r.pollRead made once, so that a
	// Read or a Poll allocates no closure.
	serve   serveState
	serveFn func(uintptr) bool
	pollFn  func(uintptr)
	polled  uint64 // packets the last pollRead delivered
}

// newReceiver allocates the receive state for batchSize datagrams of up to
// size bytes each (with UDP_GRO, a coalesced datagram's size).
func newReceiver(batchSize, size int) *receiver {
	r := &receiver{
		batch: newMmsgBatch(batchSize, true),
		bufs:  make([]byte, batchSize*size),
		oob:   make([]byte, batchSize*oobSize),
		size:  size,
	}
	r.serveFn = r.read
	r.pollFn = r.pollRead
	for i := range r.batch.hdrs {
		r.batch.iovs[i].Base = &r.bufs[i*size]
		r.batch.hdrs[i].Hdr.Control = &r.oob[i*oobSize]
	}
	return r
}

// reset prepares the headers for the next recvmmsg: the kernel overwrites
// the lengths and flags of the ones it fills.
func (r *receiver) reset() {
	for i := range r.batch.hdrs {
		h := &r.batch.hdrs[i]
		h.Len = 0
		h.Hdr.Namelen = uint32(len(sockaddr{}))
		h.Hdr.SetControllen(oobSize)
		h.Hdr.Flags = 0
		r.batch.iovs[i].SetLen(r.size)
	}
}

// aLongTimeAgo is a deadline in the past, to wake a blocked read.
var aLongTimeAgo = time.Unix(1, 0)

// Serve runs the receive loop on the calling goroutine: it reads datagrams
// in batches (recvmmsg), parses each as a RoCEv2 packet, checks its ICRC,
// and calls h for each one that passes; the others are dropped and counted
// (Counters). It returns nil when the Conn is closed, ctx.Err() when ctx is
// done, and the error otherwise. Serve may be called again after it
// returned for ctx; only one Serve runs at a time. If h is a BatchEnder,
// its EndBatch is called after each batch.
//
// The loop does not allocate per packet.
func (c *Conn) Serve(ctx context.Context, h Handler) error {
	rx, err := c.startServing()
	if err != nil {
		return err
	}
	defer c.stopServing()
	if ctx.Done() != nil {
		// Cancel by expiring the read deadline, which wakes a blocked
		// read; undo it when leaving so a later Serve can read.
		fired := make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			c.uc.SetReadDeadline(aLongTimeAgo)
			close(fired)
		})
		defer func() {
			if !stop() {
				<-fired
			}
			c.uc.SetReadDeadline(time.Time{})
		}()
	}
	ft := c.faults
	if ft != nil {
		ft.disarm()
	}
	c.rxMu.Lock()
	rx.serve = serveState{c: c, ctx: ctx, h: h, ft: ft}
	rx.serve.be, _ = h.(BatchEnder)
	rx.serve.un, _ = h.(Unsealer)
	c.serveRx = rx
	c.rxMu.Unlock()
	defer func() {
		c.rxMu.Lock()
		rx.serve = serveState{}
		c.serveRx = nil
		c.rxMu.Unlock()
	}()
	for {
		if ft != nil {
			// Wake the read when the next held datagram is due.
			err := ft.arm(ctx, c)
			// Checked after arm, which may have replaced the
			// expired deadline by which Close wakes Serve (see
			// receiver.read).
			if c.closing.Load() {
				return nil
			}
			if err != nil {
				return err
			}
		}
		rx.serve.err = nil
		err := c.rc.Read(rx.serveFn)
		switch {
		case c.closing.Load():
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case rx.serve.err != nil:
			return rx.serve.err
		case ft != nil && errors.Is(err, os.ErrDeadlineExceeded):
			// The fault tap's deadline: deliver what is due.
			ft.disarm()
			c.rxMu.Lock()
			rx.batch.n = 0
			_, ok := rx.deliverBatch(false)
			c.rxMu.Unlock()
			if !ok {
				return nil
			}
		case err != nil:
			return err
		}
	}
}

// serveState is what the RawConn.Read callback of Serve (receiver.read)
// needs: the arguments of the running Serve, and the error that ended the
// callback's work.
type serveState struct {
	c   *Conn
	ctx context.Context
	h   Handler
	be  BatchEnder
	un  Unsealer
	ft  *faultTap
	err error
}

// read is the RawConn.Read callback of Serve. It reads a batch, delivers it
// and ends it (EndBatch) itself, and reads again at once only when the
// batch was full; after a shorter batch it returns false, so that the
// RawConn waits for readability without first reading the empty socket
// once more. It returns true to end the Read: the Conn is closing, the
// context is done, or rx.serve.err says what failed.
//
// Why waiting after a short batch loses no datagram: Go registers the
// socket with epoll edge-triggered. internal/poll's RawRead resets the
// descriptor's ready flag (runtime poll_runtime_pollReset) only once,
// before its first callback; afterwards, between callbacks, it calls
// waitRead (runtime poll_runtime_pollWait, netpollblock), which first
// consumes the ready flag if netpoll set it. A short batch means recvmmsg
// found the receive queue empty (it returns fewer than asked only when the
// next read would block, or with an error pending, which the kernel also
// signals to epoll). A datagram queued after that makes the queue
// non-empty and raises an edge; netpoll records it as ready, or wakes the
// parked waiter, so it is seen whatever the order. An edge raised for a
// datagram this batch already took costs one recvmmsg that finds nothing
// (EAGAIN), never a missed wakeup. A full batch gives no such proof, and
// the kernel may raise no further edge while the queue stays non-empty, so
// the queue is read again before waiting. Serve's old loop, which returned
// from Read after every batch, paid one EAGAIN recvmmsg per wakeup because
// of that reset.
func (r *receiver) read(fd uintptr) bool {
	for {
		more, stop := r.readBatch(fd)
		if stop {
			return true
		}
		if !more {
			return false
		}
	}
}

// readBatch is one pass of read, under the Conn's rxMu (see Poll): it reads
// a batch and delivers and ends it. more reports a full batch, after which
// the socket must be read again before waiting; stop ends the Read.
func (r *receiver) readBatch(fd uintptr) (more, stop bool) {
	st := &r.serve
	c := st.c
	c.rxMu.Lock()
	defer c.rxMu.Unlock()
	r.reset()
	r.batch.n = 0
	if !r.batch.recvmmsg(fd) {
		return false, false // nothing queued: wait
	}
	if r.batch.errno != 0 {
		st.err = os.NewSyscallError("recvmmsg", r.batch.errno)
		return false, true
	}
	full := r.batch.n == len(r.batch.hdrs)
	if _, ok := r.deliverBatch(false); !ok {
		return false, true
	}
	if c.closing.Load() || st.ctx.Err() != nil {
		return false, true
	}
	if st.ft != nil {
		if err := st.ft.arm(st.ctx, c); err != nil {
			st.err = err
			return false, true
		}
		// Close stores closing before it expires the deadline: if
		// closing is still false after arm set its deadline, Close's
		// comes later and wins.
		if c.closing.Load() {
			return false, true
		}
	}
	return full, false
}

// Poll reads what the receive socket holds, without waiting, and hands it
// to the running Serve's Handler on the calling goroutine, as Serve would
// have (EndBatch included). It returns the number of packets delivered. It
// lets a goroutine that busy-polls for the packets' effects (a CQ) receive
// them itself, without needing a processor for Serve's goroutine. While
// Serve or another Poll is reading, Poll returns 0 and busy at once: they
// deliver (a spinning caller should yield its processor then, in case the
// reader is a goroutine waiting for one). It also returns 0 when no Serve
// runs, when the Conn is closing and under a fault tap (which only Serve
// drives).
//
// Serve needs no other wake-up for what Poll leaves behind: it reads until
// the socket is empty after every readiness edge, and a datagram queued
// after its last read raises one (see read); a Poll that takes the datagram
// an edge announced only costs Serve an empty read.
func (c *Conn) Poll() (delivered int, busy bool) {
	if c.faults != nil || c.closing.Load() {
		return 0, false
	}
	if !c.rxMu.TryLock() {
		return 0, true
	}
	defer c.rxMu.Unlock()
	rx := c.serveRx
	if rx == nil {
		return 0, false
	}
	rx.polled = 0
	_ = c.rc.Control(rx.pollFn)
	return int(rx.polled), false
}

// pollRead is Poll's RawConn.Control callback, under the Conn's rxMu: one
// read that does not wait, and the delivery of what it returned.
func (r *receiver) pollRead(fd uintptr) {
	r.reset()
	r.batch.n = 0
	// An error from recvmmsg (none is expected: the socket is unconnected
	// and does not set IP_RECVERR) is dropped here; Serve would have
	// ended on it.
	if !r.batch.recvmmsg(fd) || r.batch.errno != 0 {
		return
	}
	r.polled, _ = r.deliverBatch(true)
}

// deliverBatch hands the datagrams just read to the running Serve's
// Handler and ends the batch (EndBatch); it returns deliver's results.
// polled says that Poll is delivering.
func (r *receiver) deliverBatch(polled bool) (delivered uint64, ok bool) {
	st := &r.serve
	delivered, ok = st.c.deliver(r, st.h, polled)
	if ok && st.be != nil {
		st.be.EndBatch()
	}
	return delivered, ok
}

func (c *Conn) startServing() (*receiver, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, net.ErrClosed
	case c.serving:
		return nil, ErrServing
	}
	c.serving = true
	if c.rx == nil {
		size := c.cfg.MaxDatagramSize
		if c.gro {
			size = max(size, groBufferSize)
		}
		c.rx = newReceiver(c.cfg.BatchSize, size)
	}
	return c.rx, nil
}

// stopServing ends a Serve; it closes the receive socket if Close was
// called meanwhile, which left that to it.
func (c *Conn) stopServing() {
	c.mu.Lock()
	c.serving = false
	closed := c.closed
	c.mu.Unlock()
	if closed {
		c.uc.Close()
	}
}

// rxTally counts what the receive loop did since it last added its counts
// to the Counters: at the end of each batch, and when it ends a long batch
// early: one atomic add per counter per batch, where counting each packet
// as it goes would cost several locked instructions per packet.
type rxTally struct {
	rxPackets, rxBytes, gro, malformed, icrcErrors, recovered, predicted, delivered uint64

	// batchDelivered is the number of packets delivered earlier in the
	// batch, whose counts are already added.
	batchDelivered uint64
}

// add adds the tally to ctr, the packets delivered to Polled as well when
// polled, and clears it. RxPackets comes last: a reader that sees it
// include a datagram sees the other counters include what was done with
// it (see Counters).
func (tl *rxTally) add(ctr *Counters, polled bool) {
	ctr.RxBytes.Add(tl.rxBytes)
	ctr.RxGRO.Add(tl.gro)
	ctr.Malformed.Add(tl.malformed)
	ctr.ICRCErrors.Add(tl.icrcErrors)
	ctr.ICRCIDRecovered.Add(tl.recovered)
	ctr.ICRCIDPredicted.Add(tl.predicted)
	if polled {
		ctr.Polled.Add(tl.delivered)
	}
	ctr.Delivered.Add(tl.delivered)
	ctr.RxPackets.Add(tl.rxPackets)
	*tl = rxTally{batchDelivered: tl.batchDelivered + tl.delivered}
}

// deliver processes the datagrams of the last recvmmsg (and, with the fault
// tap, the held datagrams now due), adds their counts, and returns how many
// packets it handed to h; ok false means the Conn was closed meanwhile and
// the rest was dropped. polled says that Poll is delivering.
func (c *Conn) deliver(rx *receiver, h Handler, polled bool) (delivered uint64, ok bool) {
	var tl rxTally
	defer func() {
		tl.add(&c.counters, polled)
		delivered = tl.batchDelivered
	}()
	ft := c.faults
	var now time.Duration
	if ft != nil {
		// Held datagrams due by now arrived before this batch.
		now = ft.now()
		if !ft.release(c, rx, h, &tl, now) {
			return 0, false
		}
	}
	for i := range rx.batch.n {
		if c.closing.Load() {
			return 0, false
		}
		m := &rx.batch.hdrs[i]
		data := rx.bufs[i*rx.size : i*rx.size+min(int(m.Len), rx.size)]
		from, ok := rx.batch.names[i].decode(m.Hdr.Namelen)
		if !ok || m.Hdr.Flags&unix.MSG_TRUNC != 0 {
			tl.rxPackets++
			tl.rxBytes += uint64(len(data))
			tl.malformed++
			continue
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		local := c.local
		oob := rx.oob[i*oobSize : i*oobSize+min(int(m.Hdr.Controllen), oobSize)]
		a, ok, seg := recvControl(oob)
		if ok {
			local = netip.AddrPortFrom(a.Unmap(), c.local.Port())
		}
		if seg <= 0 || seg >= len(data) {
			seg = len(data) // one packet
		} else {
			tl.gro++
		}
		// A coalesced datagram holds packets of seg bytes, the last
		// one possibly shorter: each is a datagram of its own to the
		// checks below and to the fault tap.
		for off := 0; ; {
			if off > 0 && c.closing.Load() {
				return 0, false
			}
			end := min(off+seg, len(data))
			pkt := data[off:end]
			tl.rxPackets++
			tl.rxBytes += uint64(len(pkt))
			switch {
			case len(pkt) > c.cfg.MaxDatagramSize:
				tl.malformed++
			case ft != nil:
				ft.admit(c, rx, h, pkt, from, local, &tl, now)
			default:
				c.accept(rx, h, pkt, from, local, &tl)
				c.endBatchEarly(rx, &tl, polled)
			}
			if off = end; off >= len(data) {
				break
			}
		}
	}
	return 0, true
}

// endBatchEarly ends the batch being delivered (EndBatch), after adding
// its counts so far, when it has delivered Config.EndBatchEvery packets
// since it began or was last ended.
func (c *Conn) endBatchEarly(rx *receiver, tl *rxTally, polled bool) {
	be := rx.serve.be
	every := c.cfg.EndBatchEvery
	if be == nil || every <= 0 || tl.delivered < uint64(every) {
		return
	}
	tl.add(&c.counters, polled)
	be.EndBatch()
}

// accept parses one datagram received from from on local, checks its ICRC
// and hands it to h, or counts why it was dropped.
func (c *Conn) accept(rx *receiver, h Handler, data []byte, from, local netip.AddrPort, tl *rxTally) {
	if from.Addr().Is6() != local.Addr().Is6() {
		tl.malformed++
		return
	}
	// A sealed packet parses once opened, after its ICRC check: damage
	// in transit counts as an ICRC error, not as a forgery.
	un := rx.serve.un
	sealed := un != nil && un.Sealed(data)
	if !sealed && rx.pkt.Parse(data, 0) != nil {
		tl.malformed++
		return
	}
	info := RecvInfo{Local: local}
	res, id := rx.icrc.Check(from, local, data, c.cfg.StrictICRC)
	switch res {
	case wire.ICRCBad:
		tl.icrcErrors++
		return
	case wire.ICRCIDPredicted:
		tl.predicted++
		info.IPID = id
	case wire.ICRCIDRecovered:
		tl.recovered++
		info.IPID, info.IDRecovered = id, true
	}
	if tap := c.tap.Load(); tap != nil {
		tap.record(&c.counters, from, local, info.IPID, data, false)
	}
	if sealed {
		plain := un.Unseal(data, from)
		if plain == nil {
			return
		}
		if rx.pkt.Parse(plain, 0) != nil {
			tl.malformed++
			return
		}
	}
	tl.delivered++
	h.HandlePacket(&rx.pkt, from, info)
}
