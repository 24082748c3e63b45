package rsocket

import (
	"net"
	"time"

	"github.com/goroce/goroce/verbs"
)

// Keepalive (rsockets' SO_KEEPALIVE, its period TCP_KEEPIDLE): every
// period the connection posts a zero-length RDMA WRITE without immediate
// data from a control slot, its work request marked RS_CTRL_KEEPALIVE
// (tcp_svc_send_keepalive). The peer's NIC acknowledges it and the peer's
// program sees nothing. A peer that is gone acknowledges nothing: the
// transport's retries run out (retry_cnt + 1 local ACK timeouts), the
// write completes in error and the connection fails, so a blocked Read
// or Write returns instead of waiting forever. As rsockets, it probes
// busy connections too: a probe is one small packet and its ACK per
// period, and on an idle connection the only traffic.

// defaultKeepAlive is the period SetKeepAlive(true) uses unless set:
// package net's default.
const defaultKeepAlive = 15 * time.Second

// keepalive is a connection's probing state, guarded by its mu.
type keepalive struct {
	c      *Conn
	on     bool
	period time.Duration
	timer  *time.Timer
	probes uint64 // probes posted
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
		c.ka.on = true
		c.ka.arm()
	}
	return nil
}

// SetKeepAlivePeriod sets the time between probes (TCP_KEEPIDLE on an
// rsocket); d <= 0 selects 15 s. It does not turn probes on.
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

// keepaliveTick runs on the timer: it probes, unless the control slots
// are all in flight (then the peer is answering, or they will fail), and
// schedules the next.
func (c *Conn) keepaliveTick() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ka.on || c.closed || c.err != nil || c.peerGone || c.discSent {
		return
	}
	if c.ctrlSeq != c.ctrlMax {
		if err := c.postProbe(); err != nil {
			c.broken(err)
			c.wake()
			return
		}
		c.ka.probes++
	}
	c.ka.arm()
}

// postProbe posts the keepalive probe: a zero-length RDMA WRITE with no
// address and no key, which a responder accepts as it checks neither for
// a zero-length write (IBA C9-88). The caller holds mu.
func (c *Conn) postProbe() error {
	c.ctrlWR = verbs.SendWR{WRID: uint64(msg(opCtrl, ctrlKeepalive)), Opcode: verbs.WRRDMAWrite, SGList: c.ctrlSGE[:0]}
	c.ctrlSeq++
	return c.ep.qp.PostSend(&c.ctrlWR)
}
