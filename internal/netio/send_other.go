//go:build !linux || goroce_portable

package netio

import (
	"net"
	"net/netip"

	"github.com/goroce/goroce/internal/racesync"
	"github.com/goroce/goroce/internal/wire"
)

// batchedSend: see BatchesSends.
const batchedSend = false

// The portable send path (every GOOS but Linux): one WriteToUDP per packet
// through the net package, no sendmmsg, no UDP_SEGMENT. A packet with a
// Payload is assembled in the Sender's scratch buffer (one copy; Linux
// gathers it from where it lies). Every packet's ICRC is computed for IPv4
// identification 0, which only some kernels send (see the package
// documentation, "Platforms").

// senderOS is a Sender's state of this send path: none.
//
//lint:ignore U1000 Sender embeds it on every path; this one keeps nothing
type senderOS struct{}

// SendBatch sends the packets of msgs in order, one datagram each, and
// returns how many were sent. It stops at the first packet that cannot be
// sent, returning its error; the packets before it were sent. Each Packet
// gets its ICRC appended as with Send.
func (s *Sender) SendBatch(msgs []Message) (int, error) {
	c := s.c
	if s.closedReply() {
		c.counters.SendErrors.Add(1)
		return 0, net.ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := c.tap.Load()
	for i := range msgs {
		m := &msgs[i]
		dst, err := c.destination(m.Dst)
		if err == nil {
			_, _, err = m.appendTail(&s.icrc, s.src, dst, 0)
		}
		if err != nil {
			c.counters.SendErrors.Add(1)
			return i, err
		}
		n := m.size() + wire.ICRCLen
		b := s.wholePacket(m, n)
		// The ICRC read the payload, which may be registered memory
		// the application reuses once the peer answers: tell the race
		// detector that the read comes before the packet leaves.
		racesync.Sync()
		c.counters.TxCalls.Add(1)
		if _, err := s.uc.WriteToUDPAddrPort(b, dst); err != nil {
			c.counters.SendErrors.Add(1)
			return i, err
		}
		c.counters.TxPackets.Add(1)
		c.counters.TxBytes.Add(uint64(n))
		if t != nil {
			t.record(&c.counters, s.src, dst, 0, b, true)
		}
	}
	return len(msgs), nil
}

// writeTo sends one datagram b to dst from the Sender's socket.
func (s *Sender) writeTo(b []byte, dst netip.AddrPort) error {
	_, err := s.uc.WriteToUDPAddrPort(b, dst)
	return err
}
