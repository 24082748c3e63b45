package transport

import "github.com/goroce/goroce/internal/wire"

// OutPacket is a packet a QP wants sent.
type OutPacket struct {
	// QPN is the local QP that produced the packet.
	QPN uint32
	// Dest is the opaque destination given to QP.SetDest: the caller's
	// handle on the peer's address.
	Dest any
	// Bytes are the transport bytes, BTH through pad, without the ICRC:
	// the I/O layer appends it, since the ICRC covers the IP and UDP
	// headers that layer builds. Bytes always has at least wire.ICRCLen
	// bytes of spare capacity for it, so appending never reallocates.
	Bytes []byte
}

// Output collects the packets produced by QP calls. Every call appends to it;
// the caller sends Packets and then calls Reset. The packet buffers are kept
// across Reset and reused, so a steady state allocates nothing.
type Output struct {
	pkts []OutPacket
	n    int
}

// Packets returns the packets appended since the last Reset. The slice and
// the bytes are valid until the next Reset.
func (o *Output) Packets() []OutPacket { return o.pkts[:o.n] }

// Len returns the number of packets appended since the last Reset.
func (o *Output) Len() int { return o.n }

// Reset empties the output, keeping its buffers for reuse.
func (o *Output) Reset() { o.n = 0 }

// minPacketCap is the smallest buffer given to a packet, enough for any
// header-only packet, so that buffers used for ACKs are rarely regrown.
const minPacketCap = 128

// alloc returns the next packet with an empty Bytes of capacity at least
// size.
func (o *Output) alloc(size int) *OutPacket {
	if o.n == len(o.pkts) {
		o.pkts = append(o.pkts, OutPacket{})
	}
	p := &o.pkts[o.n]
	o.n++
	if cap(p.Bytes) < size+wire.ICRCLen {
		p.Bytes = make([]byte, 0, max(size+wire.ICRCLen, minPacketCap))
	}
	p.Bytes = p.Bytes[:0]
	return p
}

// grow extends b by n bytes, which the caller overwrites, within its
// capacity when possible.
func grow(b []byte, n int) ([]byte, []byte) {
	l := len(b)
	if cap(b)-l < n {
		nb := make([]byte, l, l+n)
		copy(nb, b)
		b = nb
	}
	b = b[:l+n]
	return b, b[l:]
}
