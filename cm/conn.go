package cm

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/goroce/goroce/verbs"
)

// RemoteInfo is what the peer announced about its side of a connection, in
// its REQ (seen by the passive side) or its REP (seen by the active side).
type RemoteInfo struct {
	// Addr is the peer's side-channel (TCP) address.
	Addr net.Addr

	QPType verbs.QPType
	QPN    uint32    // the peer's QP number: the local QP's dest_qp_num
	PSN    uint32    // the peer's starting send PSN: the local QP's rq_psn
	GID    verbs.GID // the peer's GID: the local QP's ah_attr.grh.dgid

	// UDPPort is the UDP port of the peer's device (4791 unless both ends
	// are goroce devices configured otherwise).
	UDPPort uint16

	// PathMTU, ResponderResources and InitiatorDepth are the peer's
	// proposal in a REQ, and the values it accepted in a REP.
	PathMTU            verbs.MTU
	ResponderResources int
	InitiatorDepth     int

	// The peer's own retry settings, for information: each side's
	// settings govern its own QP.
	RetryCount    uint8
	RNRRetryCount uint8
	MinRNRTimer   uint8
	Timeout       uint8

	// PrivateData is the application data of the REQ or REP.
	PrivateData []byte
}

// Conn is an established connection: a QP in RTS connected to the peer's,
// and the side channel that watches the peer. Close it when done.
type Conn struct {
	qp     *verbs.QP
	remote RemoteInfo
	nc     net.Conn

	done       chan struct{} // closed when the connection ends
	readerDone chan struct{} // closed when watchPeer returns
	closeOnce  sync.Once
	closeErr   error

	mu  sync.Mutex
	err error // why the connection ended; set once, before done closes
}

// newConn returns the connection for a QP now in RTS and starts watching
// the side channel.
func newConn(nc net.Conn, qp *verbs.QP, remote RemoteInfo) *Conn {
	c := &Conn{
		qp:         qp,
		remote:     remote,
		nc:         nc,
		done:       make(chan struct{}),
		readerDone: make(chan struct{}),
	}
	go c.watchPeer()
	return c
}

// QP returns the connected QP.
func (c *Conn) QP() *verbs.QP { return c.qp }

// Remote returns what the peer announced about its side. The PrivateData
// slice must not be modified.
func (c *Conn) Remote() RemoteInfo { return c.remote }

// Done returns a channel closed when the connection ends: the peer
// disconnected, the side channel failed (the peer's process died, the
// network broke; TCP keepalives notice a vanished host within minutes),
// or Close was called. Err says which.
//
// The QP is not touched when the peer goes away, as with rdma_cm's
// DISCONNECTED event: the application calls Close, which moves it to ERR.
// Until then, work requests to a peer that is gone end with a retry
// error once RetryCount retries have timed out.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns nil while the connection is up, then why it ended:
// ErrDisconnected when the peer closed it, net.ErrClosed after Close, a
// *RejectError when the passive side gave up just as the active side
// connected (its Request.Accept failed after sending the REP), or the side
// channel's failure.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// end records why the connection ended and closes Done, if it has not
// ended yet. It reports whether this call ended it.
func (c *Conn) end(why error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return false
	}
	c.err = why
	close(c.done)
	return true
}

// watchPeer reads the side channel until the peer disconnects or the
// channel fails. The only message allowed after the RTU is a DREQ.
func (c *Conn) watchPeer() {
	defer close(c.readerDone)
	m, err := readMessage(c.nc)
	var why error
	switch {
	case err == nil && m.typ == msgDREQ:
		why = ErrDisconnected
	case err == nil && m.typ == msgREJ:
		// The passive side gave up (its context ended) while the RTU
		// was on its way: the connection never existed for it.
		why = fmt.Errorf("cm: %v abandoned the connection: %w", c.remote.Addr, rejected(&m))
	case err == nil:
		why = fmt.Errorf("cm: %v sent %v on an established connection: %w", c.remote.Addr, m.typ, ErrProtocol)
	case errors.Is(err, io.EOF):
		why = fmt.Errorf("cm: side channel to %v closed without a DREQ: %w", c.remote.Addr, err)
	default:
		why = fmt.Errorf("cm: side channel to %v: %w", c.remote.Addr, err)
	}
	if c.end(why) {
		// The peer is gone: nothing more to send or receive.
		_ = c.nc.Close()
	}
}

// Close disconnects (rdma_disconnect): it moves the QP to ERR, which
// flushes its outstanding work requests with WCWRFlushErr, tells the peer
// with a DREQ (whose Done then closes), and closes the side channel.
// It does not destroy the QP. Close is idempotent; it returns the error of
// moving the QP to ERR, if any.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		if s := c.qp.State(); s != verbs.QPStateReset && s != verbs.QPStateErr {
			if err := moveToErr(c.qp); err != nil {
				c.closeErr = fmt.Errorf("cm: close: %w", err)
			}
		}
		if c.end(net.ErrClosed) {
			sendBestEffort(c.nc, &message{typ: msgDREQ})
		}
		_ = c.nc.Close()
		<-c.readerDone
	})
	return c.closeErr
}
