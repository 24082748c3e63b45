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
	// Payload, when not nil, is the packet's payload where it lies in
	// registered memory, not copied (Output.SetZeroCopy): the packet is
	// then Bytes (BTH and extension headers), Payload, and the BTH's pad
	// count of zero bytes, and Bytes has spare capacity for the pad and
	// the ICRC. The memory stays pinned until the Output's Reset.
	Payload []byte
}

// AppendTo appends the whole packet, BTH through pad (without the ICRC), to
// b: Bytes, and with a Payload the payload and the pad's zero bytes.
func (p *OutPacket) AppendTo(b []byte) []byte {
	b = append(b, p.Bytes...)
	if p.Payload == nil || len(p.Bytes) < wire.BTHLen {
		return b
	}
	b = append(b, p.Payload...)
	return append(b, make([]byte, wire.BTH(p.Bytes).PadCount())...)
}

// Output collects the packets produced by QP calls. Every call appends to it;
// the caller sends Packets and then calls Reset. The packet buffers are kept
// across Reset and reused, so a steady state allocates nothing.
type Output struct {
	pkts     []OutPacket
	n        int
	zeroCopy bool
	refs     []Ref // pins of the Payloads and checked WQE memory, released by Reset
}

// Packets returns the packets appended since the last Reset. The slice and
// the bytes are valid until the next Reset.
func (o *Output) Packets() []OutPacket { return o.pkts[:o.n] }

// Len returns the number of packets appended since the last Reset.
func (o *Output) Len() int { return o.n }

// SetZeroCopy makes the QPs that build packets in o leave the payloads of
// requests (SEND, RDMA WRITE) in registered memory (OutPacket.Payload),
// pinned until Reset, instead of copying them into the packet buffers: the
// sender can gather them from there (one copy, the kernel's, instead of
// two). That is safe because the application may not change a request's
// buffer before its completion. A payload that spans scatter/gather
// elements and inline data are still copied, and so are READ responses:
// the memory they read may be written by the target's CPU meanwhile, and
// must not change between the ICRC and the send (continueRead).
func (o *Output) SetZeroCopy(on bool) { o.zeroCopy = on }

// appendZeroCopy appends a packet of headers h whose payload stays where it
// is (OutPacket.Payload), with room for the pad and the ICRC.
func (o *Output) appendZeroCopy(h *wire.Headers, payload []byte) *OutPacket {
	p := o.alloc(h.Len() + int(h.BTH.PadCount))
	p.Bytes = wire.AppendHeaders(p.Bytes, h)
	p.Payload = payload
	return p
}

// hold keeps r, the pin of a Payload or of a WQE's memory (checkLocal),
// until Reset.
func (o *Output) hold(r Ref) { o.refs = append(o.refs, r) }

// lastRef returns the pin the output took last, or nil.
func (o *Output) lastRef() Ref {
	if len(o.refs) == 0 {
		return nil
	}
	return o.refs[len(o.refs)-1]
}

// Reset empties the output, keeping its buffers for reuse, and releases
// the memory it pinned (hold).
func (o *Output) Reset() {
	for i := range o.pkts[:o.n] {
		o.pkts[i].Payload = nil
	}
	for i, r := range o.refs {
		r.Release()
		o.refs[i] = nil
	}
	o.refs = o.refs[:0]
	o.n = 0
}

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
	p.Payload = nil
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
