package netio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/racesync"
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
	uc   *net.UDPConn
	rc   syscall.RawConn
	refs int // guarded by c.mu

	mu      sync.Mutex // serialises SendBatch, which owns batch and scratch
	batch   *mmsgBatch // made by the first SendBatch
	scratch []byte     // a packet with a Payload assembled for the capture tap

	gso atomic.Bool // segmentation offload in use (see gso_linux.go)
}

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
	uc, rc, err := listen(src, sendSocket, &c.cfg)
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
	s.uc.Close()
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
	b, err := appendICRC(s.src, dst, 0, pkt)
	if err != nil {
		c.counters.SendErrors.Add(1)
		return err
	}
	if _, err := s.uc.WriteToUDPAddrPort(b, dst); err != nil {
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
	// it lies (the kernel gathers it: no copy into Packet). The packet is
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
// identification id: it appends the ICRC (and, with a Payload, the pad
// before it) in Packet's spare capacity and returns the packet's pieces:
// head (Packet through the ICRC, or Packet alone with a Payload) and tail
// (the pad and ICRC after a Payload; nil without one).
func (m *Message) appendTail(src, dst netip.AddrPort, id uint16) (head, tail []byte, err error) {
	if len(m.Payload) == 0 {
		head, err = appendICRC(src, dst, id, m.Packet)
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
	binary.LittleEndian.PutUint32(tail[pad:], wire.ICRCAddrsParts(src, dst, id, m.Packet, m.Payload))
	return m.Packet, tail, nil
}

// SendBatch sends the packets of msgs in order, with as few sendmmsg system
// calls as Config.BatchSize allows, and returns how many were sent. It stops
// at the first packet that cannot be sent, returning its error; the packets
// before it were sent. Each Packet gets its ICRC appended as with Send, but
// consecutive packets to one destination may leave as one GSO datagram
// (see gso_linux.go), in which case the ICRC is computed for the IPv4
// identification the kernel gives each segment.
func (s *Sender) SendBatch(msgs []Message) (int, error) {
	if s.closedReply() {
		s.c.counters.SendErrors.Add(1)
		return 0, net.ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.batch == nil {
		s.batch = newMmsgBatch(s.c.cfg.BatchSize, false)
	}
	sent := 0
	for sent < len(msgs) {
		n, err := s.sendChunk(msgs[sent:])
		sent += n
		if err != nil {
			s.c.counters.SendErrors.Add(1)
			return sent, err
		}
	}
	return sent, nil
}

// sendChunk sends up to one batch of msgs (as many packets as the batch
// has message headers) and returns how many packets went out.
//
// With segmentation offload, consecutive packets to one destination whose
// sizes allow it (all equal, except a shorter last one) share one message
// header: one datagram with a UDP_SEGMENT control message, whose segment i
// the kernel sends with IPv4 identification i (see gso_linux.go), so that
// is the identification each packet's ICRC is computed for. A packet is
// one I/O vector, or three with a Payload (headers, payload, pad and
// ICRC); the kernel cuts a datagram into segments by length, whatever
// the vectors.
func (s *Sender) sendChunk(msgs []Message) (int, error) {
	c, b := s.c, s.batch
	gso := s.gso.Load()
	k := min(len(msgs), len(b.hdrs))
	var prepErr error
	nh := 0      // message headers filled
	nv := 0      // I/O vectors filled
	segSize := 0 // segment size of header nh-1; 0 when it takes no more packets
	total := 0   // UDP payload bytes of header nh-1
	for i := range k {
		m := &msgs[i]
		dst, err := c.destination(m.Dst)
		size := m.size() + wire.ICRCLen
		join := err == nil && gso && segSize > 0 && dst == b.dsts[i-1] && size <= segSize &&
			b.segs[nh-1] < maxGSOSegments && total+size <= maxGSOBytes
		var id uint16
		if join {
			id = uint16(b.segs[nh-1])
		}
		var head, tail []byte
		if err == nil {
			head, tail, err = m.appendTail(s.src, dst, id)
		}
		if err != nil {
			// Send what is ready, then report this packet.
			k, prepErr = i, err
			break
		}
		b.dsts[i] = dst
		first := nv
		b.iovs[nv].Base = &head[0]
		b.iovs[nv].SetLen(len(head))
		nv++
		if tail != nil {
			b.iovs[nv].Base = &m.Payload[0]
			b.iovs[nv].SetLen(len(m.Payload))
			b.iovs[nv+1].Base = &tail[0]
			b.iovs[nv+1].SetLen(len(tail))
			nv += 2
		}
		if join {
			b.segs[nh-1]++
			b.niov[nh-1] += nv - first
			total += size
			if size < segSize {
				segSize = 0 // a shorter segment is the last
			}
			continue
		}
		h := &b.hdrs[nh].Hdr
		h.Namelen = b.names[nh].encode(dst, c.v6)
		h.Iov = &b.iovs[first]
		h.Control, h.Controllen, h.Flags = nil, 0, 0
		b.segs[nh] = 1
		b.niov[nh] = nv - first
		nh++
		segSize, total = size, size
	}
	for j, i := 0, 0; j < nh; j++ {
		h := &b.hdrs[j].Hdr
		h.SetIovlen(b.niov[j])
		if b.segs[j] > 1 {
			// The segment size is the datagram's first packet's.
			ctrl := b.ctrl[j*gsoCmsgSpace : (j+1)*gsoCmsgSpace]
			h.Control = &ctrl[0]
			h.SetControllen(putGSOCmsg(ctrl, msgs[i].size()+wire.ICRCLen))
		}
		i += b.segs[j]
	}

	// The ICRCs above read the payloads, which may be registered memory
	// the application reuses once the peer answers: tell the race
	// detector that these reads come before the packets leave.
	racesync.Sync()

	doneH, done := 0, 0 // headers and packets sent
	var err error
	fallback := false
	for doneH < nh {
		b.off, b.cnt = doneH, nh-doneH
		if werr := s.rc.Write(b.fn); werr != nil {
			err = werr
			break
		}
		if b.errno != 0 {
			// The call failed on its first header.
			if b.segs[doneH] > 1 && gsoRefused(b.errno) {
				fallback = true
			} else {
				err = os.NewSyscallError("sendmmsg", b.errno)
			}
			break
		}
		if b.n == 0 {
			err = io.ErrShortWrite // cannot happen on a blocking send; do not spin
			break
		}
		for j := doneH; j < doneH+b.n; j++ {
			done += b.segs[j]
		}
		doneH += b.n
	}
	for i := range nv {
		b.iovs[i].Base = nil // do not keep the caller's buffers reachable
	}
	for j := range nh {
		b.hdrs[j].Hdr.Iov = nil
	}

	t := c.tap.Load()
	var bytes, gsoSent uint64
	for j, i := 0, 0; j < doneH; j++ {
		if b.segs[j] > 1 {
			gsoSent++
		}
		for seg := range b.segs[j] {
			m := &msgs[i]
			n := m.size() + wire.ICRCLen
			bytes += uint64(n)
			if t != nil {
				t.record(&c.counters, s.src, b.dsts[i], uint16(seg), s.wholePacket(m, n), true)
			}
			i++
		}
	}
	c.counters.TxPackets.Add(uint64(done))
	c.counters.TxBytes.Add(bytes)
	c.counters.TxGSO.Add(gsoSent)
	if fallback {
		// Resent by SendBatch one datagram each, with the ICRC for
		// identification 0; a packet that failed to prepare fails again.
		if s.gso.CompareAndSwap(true, false) {
			c.counters.GSOFallbacks.Add(1)
		}
		return done, nil
	}
	if err == nil {
		err = prepErr
	}
	return done, err
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

// gsoRefused reports whether errno, from sending a datagram with
// UDP_SEGMENT, means the kernel or the route cannot segment it (see
// gso_linux.go) rather than that its packets cannot be sent.
func gsoRefused(errno syscall.Errno) bool {
	switch errno {
	case unix.EIO, unix.EINVAL, unix.ENOPROTOOPT, unix.EOPNOTSUPP, unix.EMSGSIZE:
		return true
	}
	return false
}

// appendICRC appends the ICRC of pkt, sent from src to dst with IPv4
// identification id (ignored over IPv6), in pkt's spare capacity.
func appendICRC(src, dst netip.AddrPort, id uint16, pkt []byte) ([]byte, error) {
	n := len(pkt)
	if n < wire.BTHLen || n < wire.BTHLen+int(wire.BTH(pkt).PadCount()) {
		return nil, ErrShortPacket
	}
	if cap(pkt)-n < wire.ICRCLen {
		return nil, ErrNoICRCRoom
	}
	crc := wire.ICRCAddrs(src, dst, id, pkt)
	pkt = pkt[:n+wire.ICRCLen]
	binary.LittleEndian.PutUint32(pkt[n:], crc)
	return pkt, nil
}
