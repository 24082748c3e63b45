package cm

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/goroce/goroce/verbs"
)

// Conn is an established connection of the net-like API: a QP in RTS
// connected to the peer's. Its ID's events go to a handler instead of a
// queue: no goroutine per connection watches the peer.
type Conn struct {
	id     *ID     // nil on a kernel RDMA device
	hw     *hwConn // librdmacm's side on a kernel RDMA device, else nil
	qp     *verbs.QP
	remote RemoteInfo
	local  netip.AddrPort

	done      chan struct{}
	closeOnce sync.Once

	mu      sync.Mutex
	err     error // why the connection ended; set once, before done closes
	closing bool
}

// newConn hands an established ID over to a Conn: the ID moves from ch,
// its waiting channel, which is closed, to a handler channel.
func newConn(id *ID, ch *EventChannel, qp *verbs.QP, remote RemoteInfo) *Conn {
	c := &Conn{id: id, qp: qp, remote: remote, local: id.LocalAddr(), done: make(chan struct{})}
	hch := NewEventChannel()
	hch.handler = c.handle
	_ = id.Migrate(hch) // events queued meanwhile move along
	_ = ch.Close()
	return c
}

// QP returns the connected QP.
func (c *Conn) QP() *verbs.QP { return c.qp }

// Remote returns what the peer announced about its side.
func (c *Conn) Remote() RemoteInfo { return c.remote }

// LocalAddr returns the local address and rdma_cm port of the connection.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// Done returns a channel closed when the connection ends: the peer
// disconnected (its DREQ; the QP is then moved to ERR and the DREP sent,
// so work requests still queued complete with WCWRFlushErr), Close was
// called, the device closed, or the peer's CM refused the connection
// afterwards (a stale connection). Err says which.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns nil while the connection is up, then why it ended:
// ErrDisconnected (the peer's disconnect), net.ErrClosed (Close),
// ErrDeviceRemoved, a *RejectError, or ErrTimeout (our DREQ went
// unanswered: the peer vanished).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// end records why the connection ended and closes Done, once.
func (c *Conn) end(why error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = why
	close(c.done)
}

// handle takes the ID's events (the handler channel's), outside the CM's
// lock, one at a time.
func (c *Conn) handle(ev *Event) {
	_ = ev.Ack() // nothing of ev is kept
	switch ev.Type {
	case EventDisconnected:
		c.mu.Lock()
		closing := c.closing
		c.mu.Unlock()
		switch {
		case ev.Err != nil && closing:
			c.end(net.ErrClosed)
		case ev.Err != nil:
			c.end(fmt.Errorf("cm: connection to %v: %w", c.remote.Addr, ev.Err))
		case closing:
			c.end(net.ErrClosed)
		default:
			// The peer's DREQ: answer it (the QP to ERR, the DREP).
			c.end(fmt.Errorf("cm: connection to %v: %w", c.remote.Addr, ErrDisconnected))
			_ = c.id.Disconnect()
		}
	case EventRejected, EventUnreachable, EventConnectError:
		c.end(fmt.Errorf("cm: connection to %v: %w", c.remote.Addr, ev.Err))
		c.release()
	case EventDeviceRemoval:
		c.end(fmt.Errorf("cm: connection to %v: %w", c.remote.Addr, ErrDeviceRemoved))
		c.release()
	case EventTimewaitExit:
		c.release()
	}
}

// release destroys the ID once nothing more can happen to it: after
// timewait, a rejection, or its device's removal. Its channel has no ID
// left then and is closed.
func (c *Conn) release() {
	ch := c.id.Channel()
	if err := c.id.Destroy(); err != nil && !errors.Is(err, ErrClosed) {
		return
	}
	_ = ch.Close()
}

// Close disconnects (rdma_disconnect): it moves the QP to ERR, which
// flushes its outstanding work requests with WCWRFlushErr, and sends the
// peer a DREQ, whose Done then closes. It does not wait for the peer's
// answer, nor destroy the QP; the CM keeps the connection's record
// through timewait, then lets it go. Close is idempotent; it returns the
// error of moving the QP to ERR, if any.
func (c *Conn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		if c.hw != nil {
			err = c.hwClose()
			return
		}
		c.mu.Lock()
		c.closing = true
		c.mu.Unlock()
		if derr := c.id.Disconnect(); derr != nil && !errors.Is(derr, ErrClosed) &&
			!errors.Is(derr, ErrDeviceRemoved) && !errors.Is(derr, verbs.ErrInvalidState) {
			err = derr
		}
		// Without a connection record left (timewait over, the device
		// gone) Disconnect touched nothing: the QP still goes to ERR.
		if qerr := qpToErr(c.qp); qerr != nil && err == nil && !errors.Is(qerr, verbs.ErrClosed) {
			err = fmt.Errorf("cm: close: %w", qerr)
		}
		c.end(net.ErrClosed)
	})
	return err
}
