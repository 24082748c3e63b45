//go:build linux && !goroce_portable

package netio

import "sync"

// Gathering a datagram before the kernel copies it.
//
// A socket without MSG_ZEROCOPY copies every byte it sends, so a packet
// with a Payload given to the kernel in place (three I/O vectors: headers,
// payload, pad and ICRC) saves no copy: it only moves the copy into the
// kernel, which pays for each vector. Measured on the veth path at link
// MTU 1500 (a C sender of 63 KB UDP_SEGMENT datagrams of 1,056-byte
// segments to a UDP_GRO receiver, 3 GB): 0.35 s of sender CPU per GB with
// three vectors per segment, 0.29 with one per segment, 0.16 with one per
// datagram, and 0.22 with one per datagram gathered by memcpy first, the
// copy included; at 4,128-byte segments 0.25 against 0.23. In goroce's
// 64 KiB WRITEs the kernel's copy was 16 % of both ends' CPU, four times
// TCP's per byte.
//
// So the Sender copies each packet, headers, payload and tail, into a
// staging buffer, after its ICRC has read the payload (the bytes are then
// in the cache), and a GSO datagram's packets, back to back there, are
// one I/O vector. A packet that does not fit what is left of the buffer
// is sent in place, as before.

// stageSlot is a packet's room in a staging buffer: the largest RoCEv2
// packet (a 4096-byte payload and at most 60 bytes of headers, 3 of pad
// and the ICRC), rounded up.
const stageSlot = 4096 + 128

// stagePool keeps the staging buffers of the Senders that are not
// sending. A buffer is a Sender's only while it prepares and sends one
// batch, so a process holds about one per concurrent sender, not one per
// source port (a thousand QPs may each have a Sender).
type stagePool struct {
	mu   sync.Mutex
	free [][]byte // empty slices, cap at least the size asked for
}

// maxFreeStages bounds the buffers the pool keeps.
const maxFreeStages = 16

var stages = stagePool{free: make([][]byte, 0, maxFreeStages)}

// get returns an empty buffer with capacity of at least size bytes.
func (p *stagePool) get(size int) []byte {
	p.mu.Lock()
	for n := len(p.free); n > 0; n = len(p.free) {
		b := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		if cap(b) >= size {
			p.mu.Unlock()
			return b
		}
		// Made for a smaller batch: drop it.
	}
	p.mu.Unlock()
	return make([]byte, 0, size)
}

// put returns b to the pool.
func (p *stagePool) put(b []byte) {
	p.mu.Lock()
	if len(p.free) < maxFreeStages {
		p.free = append(p.free, b[:0])
	}
	p.mu.Unlock()
}

// stagePacket adds the packet head, payload, tail (payload and tail may
// be empty) as the next I/O vector of the batch, vector nv, and returns
// the number of vectors in use: copied to the staging buffer when it fits,
// and then, when join says the packet continues the datagram of the last
// vector and that vector ends where the copy starts, one vector with it;
// else in place, one vector per piece.
func (b *mmsgBatch) stagePacket(nv int, join bool, head, payload, tail []byte) int {
	n := len(head) + len(payload) + len(tail)
	if off := len(b.stage); off+n <= cap(b.stage) {
		b.stage = append(append(append(b.stage, head...), payload...), tail...)
		if join && b.stageTail {
			b.iovs[nv-1].SetLen(int(b.iovs[nv-1].Len) + n)
			return nv
		}
		b.iovs[nv].Base = &b.stage[off]
		b.iovs[nv].SetLen(n)
		b.stageTail = true
		return nv + 1
	}
	b.stageTail = false
	for _, p := range [3][]byte{head, payload, tail} {
		if len(p) > 0 {
			b.iovs[nv].Base = &p[0]
			b.iovs[nv].SetLen(len(p))
			nv++
		}
	}
	return nv
}
