package rsocket

import (
	"net"
	"time"

	"github.com/goroce/goroce/verbs"
)

// Keepalive (rsockets' SO_KEEPALIVE, its period TCP_KEEPIDLE): when a
// period passes in which the connection posted nothing, it posts a
// zero-length RDMA WRITE without immediate data from a control slot, its
// work request marked RS_CTRL_KEEPALIVE (tcp_svc_send_keepalive). The
// peer's NIC acknowledges it and the peer's program sees nothing. A peer
// that is gone acknowledges nothing: the transport's retries run out
// (retry_cnt + 1 local ACK timeouts), the write completes in error and
// the connection fails, so a blocked Read or Write returns instead of
// waiting forever. rsockets probes every period, busy or not; probing
// only an idle connection is the same on the wire, since anything posted
// meanwhile finds a vanished peer out the same way.

// defaultKeepAlive is the period SetKeepAlive(true) uses unless set:
// package net's default.
const defaultKeepAlive = 15 * time.Second

// keepalive is a connection's probing state, guarded by its mu.
type keepalive struct {
	c      *Conn
	on     bool
	period time.Duration
	timer  *time.Timer
	seen   uint64 // c.posts at the last tick
}

// init starts probing every period, if positive.
func (k *keepalive) init(c *Conn, period time.Duration) {
	k.c, k.period = c, defaultKeepAlive
	if period > 0 {
		k.period, k.on = period, true
		k.arm()
	}
}

// arm schedules the next tick.
func (k *keepalive) arm() {
	if k.timer == nil {
		k.timer = time.AfterFunc(k.period, k.c.keepaliveTick)
		return
	}
	k.timer.Reset(k.period)
}

// stop ends probing.
func (k *keepalive) stop() {
	k.on = false
	if k.timer != nil {
		k.timer.Stop()
	}
}

// SetKeepAlive turns keepalive probes on or off (setsockopt SO_KEEPALIVE
// on an rsocket, net.TCPConn's SetKeepAlive): with them, a peer that
// vanished without disconnecting fails the connection within a period
// plus the transport's retries, instead of leaving Read waiting forever.
func (c *Conn) SetKeepAlive(on bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.opError("set", net.ErrClosed)
	}
	if !on {
		c.ka.stop()
		return nil
	}
	if !c.ka.on {
		c.ka.on, c.ka.seen = true, c.posts.Load()
		c.ka.arm()
	}
	return nil
}

// SetKeepAlivePeriod sets the idle time after which a probe is sent
// (TCP_KEEPIDLE on an rsocket); d <= 0 selects 15 s. It does not turn
// probes on.
func (c *Conn) SetKeepAlivePeriod(d time.Duration) error {
	if d <= 0 {
		d = defaultKeepAlive
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.opError("set", net.ErrClosed)
	}
	c.ka.period = d
	if c.ka.on {
		c.ka.arm()
	}
	return nil
}

// keepaliveTick runs on the timer: it probes if nothing was posted since
// the last tick, and schedules the next.
func (c *Conn) keepaliveTick() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ka.on || c.closed || c.err != nil || c.peerGone || c.discSent {
		return
	}
	if c.posts.Load() == c.ka.seen && c.ctrlSeq != c.ctrlMax {
		if err := c.postProbe(); err != nil {
			c.broken(err)
			c.wake()
			return
		}
	}
	c.ka.seen = c.posts.Load()
	c.ka.arm()
}

// postProbe posts the keepalive probe: a zero-length RDMA WRITE with no
// address and no key, which a responder accepts as it checks neither for
// a zero-length write (IBA C9-88). The caller holds mu.
func (c *Conn) postProbe() error {
	c.ctrlWR = verbs.SendWR{WRID: uint64(msg(opCtrl, ctrlKeepalive)), Opcode: verbs.WRRDMAWrite, SGList: c.ctrlSGE[:0]}
	c.ctrlSeq++
	c.posts.Add(1)
	return c.ep.qp.PostSend(&c.ctrlWR)
}
