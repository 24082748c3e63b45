package netio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/goroce/goroce/internal/wire"
)

// A socket's source port is the port it is bound to, so sending from the
// per-QP source port a QP uses (see SourcePortForFlow) takes a socket bound
// to that port. Senders are those sockets: created on demand, shared by the
// QPs whose ports coincide, reference counted, and closed by the last
// Release. They stay unconnected (see setSocketOptions) and only send;
// replies come back to the Conn's receive port.

// Sender sends RoCEv2 packets from one UDP source port of a Conn. It is
// safe for concurrent use.
type Sender struct {
	c    *Conn
	src  netip.AddrPort // local address and bound port
	req  uint16         // the port asked for, if the bind moved on to src's
	uc   *net.UDPConn   // nil for a send socket outside the poller (Linux: rc is a sendSock)
	rc   syscall.RawConn
	refs int // guarded by c.mu

	mu sync.Mutex // serialises SendBatch, which owns senderOS, scratch and icrc
	//lint:ignore U1000 empty on the portable path, which keeps no batch
	senderOS
	scratch []byte          // a packet with a Payload assembled for the capture tap
	icrc    wire.ICRCHasher // SendBatch's: a batch's packets share their headers

	gso atomic.Bool // segmentation offload in use (see gso_linux.go)
}

// BatchesSends reports whether a SendBatch of many packets is one system
// call (Linux's sendmmsg with GSO), or one per packet (the portable path:
// see "Platforms" in the package documentation); Counters.TxCalls counts
// either.
const BatchesSends = batchedSend

// maxPortProbes bounds the search for a free source port: the whole dynamic
// range.
const maxPortProbes = MaxSourcePort - MinSourcePort + 1

// Sender returns a Sender for source port port, opening its socket if no
// other user holds it; call Release when done. When the port is taken by
// another program (an ephemeral port of some connection, say) and lies in
// the dynamic range 0xC000-0xFFFF, the next free port of the range is used
// instead, and later requests for port get the same socket while it is
// held: a QP keeps one source port for its lifetime, the only property
// that matters (receivers accept any source port). Sender.Port tells the
// port used.
func (c *Conn) Sender(port uint16) (*Sender, error) {
	if port == 0 {
		return nil, errors.New("netio: source port 0")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, net.ErrClosed
	}
	if s := c.senders[port]; s != nil {
		s.refs++
		return s, nil
	}
	if p, ok := c.aliases[port]; ok {
		s := c.senders[p]
		s.refs++
		return s, nil
	}
	probes := 1
	if port >= MinSourcePort {
		probes = maxPortProbes
	}
	p := port
	for range probes {
		s, err := c.openSender(p)
		if err == nil {
			s.req = port
			s.refs = 1
			c.senders[p] = s
			if p != port {
				c.aliases[port] = p
			}
			return s, nil
		}
		if !isAddrInUse(err) {
			return nil, fmt.Errorf("netio: open source port %d: %w", p, err)
		}
		// Only ports of the range are probed, wrapping around at the
		// top; ports this Conn already holds fail the bind too.
		if p == MaxSourcePort {
			p = MinSourcePort
		} else {
			p++
		}
	}
	return nil, fmt.Errorf("netio: no free source port from %d on %v", port, c.local.Addr())
}

func (c *Conn) openSender(port uint16) (*Sender, error) {
	src := netip.AddrPortFrom(c.local.Addr(), port)
	uc, rc, err := openSenderSocket(src, &c.cfg)
	if err != nil {
		return nil, err
	}
	s := &Sender{c: c, src: src, uc: uc, rc: rc}
	s.gso.Store(c.gso)
	return s, nil
}

// ReplySender returns a Sender on the Conn's own socket: what it sends
// leaves from the address and port the Conn receives on (4791 by
// default), not from a per-QP source port. It is meant for the small
// single-packet responses of many QPs (acknowledgements), which can then
// share one sendmmsg, and one GSO datagram per destination, where each
// QP's own port would cost a system call per QP: see "Replies" in the
// package documentation for what that changes on the wire. The Sender is
// the Conn's: Release does nothing, and Close closes its socket.
func (c *Conn) ReplySender() *Sender {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reply == nil {
		// refs stays 0, which makes Release a no-op.
		c.reply = &Sender{c: c, src: c.local, req: c.local.Port(), uc: c.uc, rc: c.rc}
		c.reply.gso.Store(c.gso)
	}
	return c.reply
}

// closedReply reports that s is the ReplySender of a closed Conn. Its
// socket is the receive socket, which Close leaves to a running Serve to
// close (see Conn.Close): until then it would still send.
func (s *Sender) closedReply() bool {
	return s.uc == s.c.uc && s.c.closing.Load()
}

// Port returns the UDP source port the Sender sends from.
func (s *Sender) Port() uint16 { return s.src.Port() }

// Release drops the caller's hold on the Sender; the last Release closes its
// socket. The Sender must not be used after its Release.
func (s *Sender) Release() {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.refs <= 0 {
		return // the ReplySender, or released more often than acquired
	}
	s.refs--
	if s.refs > 0 || c.closed {
		return // Close closes the socket of a closed Conn
	}
	delete(c.senders, s.src.Port())
	if s.req != s.src.Port() {
		delete(c.aliases, s.req)
	}
	s.closeSocket()
}

// closeSocket closes the Sender's socket.
func (s *Sender) closeSocket() {
	if s.uc != nil {
		s.uc.Close()
	} else if c, ok := s.rc.(io.Closer); ok {
		c.Close()
	}
}

// Send sends one RoCEv2 packet to dst. pkt holds the packet from the BTH
// through the pad, and must have at least 4 bytes of spare capacity: Send
// computes the ICRC (for IPv4 identification 0, which the kernel sends, see
// setSocketOptions) and appends it there, overwriting
// pkt[len(pkt):len(pkt)+4]. The packet is sent as one UDP datagram whose
// destination port is dst's port: 4791 for everyone but goroce peers
// configured otherwise.
func (s *Sender) Send(dst netip.AddrPort, pkt []byte) error {
	c := s.c
	if s.closedReply() {
		c.counters.SendErrors.Add(1)
		return net.ErrClosed
	}
	dst, err := c.destination(dst)
	if err != nil {
		c.counters.SendErrors.Add(1)
		return err
	}
	b, err := appendICRC(nil, s.src, dst, 0, pkt) // nil: Send does not hold mu
	if err != nil {
		c.counters.SendErrors.Add(1)
		return err
	}
	c.counters.TxCalls.Add(1)
	if err := s.writeTo(b, dst); err != nil {
		c.counters.SendErrors.Add(1)
		return err
	}
	c.counters.TxPackets.Add(1)
	c.counters.TxBytes.Add(uint64(len(b)))
	if t := c.tap.Load(); t != nil {
		t.record(&c.counters, s.src, dst, 0, b, true)
	}
	return nil
}

// Message is one packet of a SendBatch.
type Message struct {
	// Dst is the destination address and UDP port.
	Dst netip.AddrPort
	// Packet is the packet from the BTH through the pad, with 4 bytes of
	// spare capacity for the ICRC, as for Send; or, with a Payload, the
	// BTH and extension headers only.
	Packet []byte
	// Payload, when not empty, is the packet's payload, sent from where
	// it lies, never copied into Packet (Linux's SendBatch gathers it
	// with its headers into a staging buffer, see stage_linux.go, for
	// the kernel's one copy; the portable path into a scratch buffer).
	// It must stay unchanged until SendBatch returns. The packet is
	// then Packet, Payload and the BTH's pad count of zero bytes, which
	// SendBatch writes with the ICRC into Packet's spare capacity (at
	// least the pad count plus 4 bytes).
	Payload []byte
}

// size returns the packet's length from the BTH through the pad.
func (m *Message) size() int {
	if len(m.Payload) == 0 || len(m.Packet) < wire.BTHLen {
		return len(m.Packet)
	}
	return len(m.Packet) + len(m.Payload) + int(wire.BTH(m.Packet).PadCount())
}

// appendTail prepares m for sending from src to dst with IPv4
// identification id: it appends the ICRC, computed by h (and, with a
// Payload, the pad before it) in Packet's spare capacity and returns the
// packet's pieces: head (Packet through the ICRC, or Packet alone with a
// Payload) and tail (the pad and ICRC after a Payload; nil without one).
func (m *Message) appendTail(h *wire.ICRCHasher, src, dst netip.AddrPort, id uint16) (head, tail []byte, err error) {
	if len(m.Payload) == 0 {
		head, err = appendICRC(h, src, dst, id, m.Packet)
		return head, nil, err
	}
	n := len(m.Packet)
	if n < wire.BTHLen {
		return nil, nil, ErrShortPacket
	}
	pad := int(wire.BTH(m.Packet).PadCount())
	if cap(m.Packet)-n < pad+wire.ICRCLen {
		return nil, nil, ErrNoICRCRoom
	}
	tail = m.Packet[n : n+pad+wire.ICRCLen]
	clear(tail[:pad])
	binary.LittleEndian.PutUint32(tail[pad:], h.AddrsParts(src, dst, id, m.Packet, m.Payload))
	return m.Packet, tail, nil
}

// wholePacket returns the n bytes (ICRC included) of the sent packet m in
// one piece, for the capture tap: m's own buffer, or, for a packet with a
// Payload, a copy in the Sender's scratch buffer (valid until the next
// call).
func (s *Sender) wholePacket(m *Message, n int) []byte {
	if len(m.Payload) == 0 {
		return m.Packet[:n]
	}
	tail := m.Packet[len(m.Packet) : n-len(m.Payload)] // pad and ICRC
	s.scratch = append(append(append(s.scratch[:0], m.Packet...), m.Payload...), tail...)
	return s.scratch
}

// appendICRC appends the ICRC of pkt, sent from src to dst with IPv4
// identification id (ignored over IPv6), in pkt's spare capacity; h
// computes it, or wire.ICRCAddrs when h is nil.
func appendICRC(h *wire.ICRCHasher, src, dst netip.AddrPort, id uint16, pkt []byte) ([]byte, error) {
	n := len(pkt)
	if n < wire.BTHLen || n < wire.BTHLen+int(wire.BTH(pkt).PadCount()) {
		return nil, ErrShortPacket
	}
	if cap(pkt)-n < wire.ICRCLen {
		return nil, ErrNoICRCRoom
	}
	var crc uint32
	if h != nil {
		crc = h.Addrs(src, dst, id, pkt)
	} else {
		crc = wire.ICRCAddrs(src, dst, id, pkt)
	}
	pkt = pkt[:n+wire.ICRCLen]
	binary.LittleEndian.PutUint32(pkt[n:], crc)
	return pkt, nil
}
