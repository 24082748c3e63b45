//go:build linux && !goroce_portable

package netio

import (
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/racesync"
	"github.com/goroce/goroce/internal/wire"
)

// batchedSend: see BatchesSends.
const batchedSend = true

// senderOS is a Sender's state of this send path, guarded by its mu.
type senderOS struct {
	batch *mmsgBatch // made by the first SendBatch
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
		if _, ok := s.rc.(*sendSock); ok {
			s.batch.sendFlags = unix.MSG_DONTWAIT
		}
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
// has message headers) and returns how many packets went out: it prepares
// the batch's message headers, sends them and accounts for what left.
func (s *Sender) sendChunk(msgs []Message) (int, error) {
	b := s.batch
	b.stage, b.stageTail = stages.get(len(b.hdrs)*stageSlot), false
	nh, nv, prepErr := s.prepare(msgs)
	// The ICRCs prepare computed read the payloads, which may be
	// registered memory the application reuses once the peer answers:
	// tell the race detector that these reads come before the packets
	// leave.
	racesync.Sync()
	doneH, done, fallback, err := s.write(nh)
	stages.put(b.stage)
	b.stage = nil
	for i := range nv {
		b.iovs[i].Base = nil // do not keep the caller's buffers reachable
	}
	for j := range nh {
		b.hdrs[j].Hdr.Iov = nil
	}
	s.account(msgs, doneH, done)
	if fallback {
		// Resent by SendBatch one datagram each, with the ICRC for
		// identification 0; a packet that failed to prepare fails again.
		if s.gso.CompareAndSwap(true, false) {
			s.c.counters.GSOFallbacks.Add(1)
		}
		return done, nil
	}
	if err == nil {
		err = prepErr
	}
	return done, err
}

// prepare fills the batch's message headers and I/O vectors for the first
// packets of msgs, as many as fit, and returns how many headers and
// vectors it filled; prepErr is the error of the first packet that could
// not be prepared, which ends the batch.
//
// With segmentation offload, consecutive packets to one destination whose
// sizes allow it (all equal, except a shorter last one) share one message
// header: one datagram with a UDP_SEGMENT control message, whose segment i
// the kernel sends with IPv4 identification i (see gso_linux.go), so that
// is the identification each packet's ICRC is computed for. The packets
// are copied to the staging buffer (stage_linux.go), a datagram's packets
// one I/O vector; a packet that does not fit is one vector, or three with
// a Payload (headers, payload, pad and ICRC). The kernel cuts a datagram
// into segments by length, whatever the vectors.
func (s *Sender) prepare(msgs []Message) (nh, nv int, prepErr error) {
	c, b := s.c, s.batch
	gso := s.gso.Load()
	k := min(len(msgs), len(b.hdrs))
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
			head, tail, err = m.appendTail(&s.icrc, s.src, dst, id)
		}
		if err != nil {
			// Send what is ready, then report this packet.
			prepErr = err
			break
		}
		b.dsts[i] = dst
		first := nv
		var payload []byte
		if tail != nil {
			payload = m.Payload
		}
		nv = b.stagePacket(nv, join, head, payload, tail)
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
	return nh, nv, prepErr
}

// write sends the batch's first nh message headers and returns how many
// headers and packets went out. fallback reports a kernel that refused a
// segmented datagram (no GSO on the path), err any other failure.
func (s *Sender) write(nh int) (doneH, done int, fallback bool, err error) {
	b := s.batch
	for doneH < nh {
		b.off, b.cnt = doneH, nh-doneH
		s.c.counters.TxCalls.Add(1)
		if werr := s.rc.Write(b.fn); werr != nil {
			return doneH, done, false, werr
		}
		if b.errno != 0 {
			// The call failed on its first header.
			if b.segs[doneH] > 1 && gsoRefused(b.errno) {
				return doneH, done, true, nil
			}
			return doneH, done, false, os.NewSyscallError("sendmmsg", b.errno)
		}
		if b.n == 0 {
			return doneH, done, false, io.ErrShortWrite // cannot happen on a blocking send; do not spin
		}
		for j := doneH; j < doneH+b.n; j++ {
			done += b.segs[j]
		}
		doneH += b.n
	}
	return doneH, done, false, nil
}

// account counts the packets of the first doneH headers, done packets, as
// sent, and hands them to the capture tap.
func (s *Sender) account(msgs []Message, doneH, done int) {
	c, b := s.c, s.batch
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

// writeTo sends one datagram b to dst from the Sender's socket.
func (s *Sender) writeTo(b []byte, dst netip.AddrPort) error {
	if k, ok := s.rc.(*sendSock); ok {
		return k.sendto(b, dst, s.c.v6)
	}
	_, err := s.uc.WriteToUDPAddrPort(b, dst)
	return err
}
