//go:build !linux || goroce_portable

package netio

import (
	"net/netip"
	"time"

	"github.com/goroce/goroce/internal/wire"
)

// The portable receive path (every GOOS but Linux): one ReadMsgUDP per
// datagram through the net package, no recvmmsg batches, no UDP_GRO and no
// IP_PKTINFO. The socket is bound to one address, so the destination the
// ICRC covers is that address. Poll delivers nothing and reports Serve
// busy: a busy poller yields to Serve's goroutine (DeviceConfig.BusyPoll
// gains nothing here).

// batchedReceive says that this receive path reads one datagram at a time
// and that Poll delivers nothing (it reports Serve busy).
const batchedReceive = false

// groBufferSize is unused without UDP_GRO; startServing compares with it.
const groBufferSize = 0

// receiver holds what the receive loop needs, allocated once: one datagram
// buffer (a byte larger than the largest accepted datagram, so that a
// longer one is seen and counted as malformed), the last datagram's length
// and source, a Packet to parse into and the ICRC checker.
type receiver struct {
	buf  []byte
	n    int
	from netip.AddrPort
	pkt  wire.Packet
	info RecvInfo // pkt's, handed to the Handler with it
	icrc wire.ICRCChecker

	serve serveState
}

// newReceiver allocates the receive state for datagrams of up to size
// bytes; batches are of one datagram.
func newReceiver(_, size int) *receiver {
	return &receiver{buf: make([]byte, size+1)}
}

// readSocket is Serve's wait for and reading of the receive socket: it
// reads one datagram, delivers it and ends the batch, and returns (Serve
// then checks for closing, the context and the fault tap's deadline and
// reads again).
func (c *Conn) readSocket(rx *receiver) error {
	n, _, _, from, err := c.uc.ReadMsgUDPAddrPort(rx.buf, nil)
	if err != nil {
		return err
	}
	c.rxMu.Lock()
	defer c.rxMu.Unlock()
	rx.n, rx.from = n, from
	if _, ok := rx.deliverBatch(false); !ok {
		return nil // closing: Serve returns
	}
	return nil
}

// pollSocket is Poll's read, which this receive path does not have: it
// reports the running Serve busy, as the one that delivers, so that a
// spinning caller yields its processor to it.
func (c *Conn) pollSocket(*receiver) (delivered int, busy bool) { return 0, true }

// deliverRead hands the datagram readSocket read to deliverDatagram; false
// means the Conn was closed meanwhile.
func (c *Conn) deliverRead(rx *receiver, h Handler, tl *rxTally, now time.Duration, polled bool) bool {
	if !rx.from.IsValid() {
		return true // a fault tap's wake-up: nothing was read
	}
	data := rx.buf[:rx.n]
	from := netip.AddrPortFrom(rx.from.Addr().Unmap(), rx.from.Port())
	rx.clearRead()
	return c.deliverDatagram(rx, h, data, from, c.local, 0, ECNUnknown, tl, now, polled)
}

// clearRead forgets the datagram read last (delivered, or none before a
// fault tap's wake-up).
func (r *receiver) clearRead() { r.n, r.from = 0, netip.AddrPort{} }
