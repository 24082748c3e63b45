//go:build linux && !goroce_portable

package netio

import (
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/wire"
)

// batchedReceive says that this receive path reads batches (recvmmsg) and
// that Poll reads the socket.
const batchedReceive = true

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
	info  RecvInfo // pkt's, handed to the Handler with it
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
	if h := readHook.Load(); h != nil {
		(*h)(c)
	}
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

// deliverRead hands the datagrams of the last recvmmsg to
// deliverDatagram, with their source, destination (IP_PKTINFO) and GRO
// segment size; false means the Conn was closed meanwhile.
func (c *Conn) deliverRead(rx *receiver, h Handler, tl *rxTally, now time.Duration, polled bool) bool {
	for i := range rx.batch.n {
		if c.closing.Load() {
			return false
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
		a, ok, seg, ecn := recvControl(oob)
		if ok {
			local = netip.AddrPortFrom(a.Unmap(), c.local.Port())
		}
		if !c.deliverDatagram(rx, h, data, from, local, seg, ecn, tl, now, polled) {
			return false
		}
	}
	return true
}

// readSocket is Serve's wait for and reading of the receive socket: one
// RawConn.Read whose callback (read) reads and delivers batches until the
// socket is empty, waits for readiness, and returns what ended it.
func (c *Conn) readSocket(rx *receiver) error { return c.rc.Read(rx.serveFn) }

// pollSocket is Poll's read: one recvmmsg that does not wait, and the
// delivery of what it returned. It returns the packets delivered.
func (c *Conn) pollSocket(rx *receiver) (delivered int, busy bool) {
	rx.polled = 0
	_ = c.rc.Control(rx.pollFn)
	return int(rx.polled), false
}

// clearRead forgets the batch read last (delivered, or none before a fault
// tap's wake-up).
func (r *receiver) clearRead() { r.batch.n = 0 }
