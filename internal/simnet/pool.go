package simnet

import "math/bits"

// minBufShift is log2 of the smallest pooled buffer.
const minBufShift = 6

// bufPool is a free list of datagram buffers in power-of-two size classes.
// Size classes keep a mix of small acknowledgements and MTU-sized data
// packets from trading buffers back and forth and reallocating: once the
// simulation has seen its largest burst, Send and Deliver allocate nothing.
//
// Unlike sync.Pool it never drops buffers behind the caller's back, which is
// what makes "no allocation in steady state" a property tests can assert.
type bufPool struct {
	free [64 - minBufShift][][]byte
}

// sizeClass returns the class whose buffers hold n bytes.
func sizeClass(n int) int {
	if n <= 1<<minBufShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minBufShift
}

// get returns a buffer of length n. Its contents are unspecified.
func (p *bufPool) get(n int) []byte {
	c := sizeClass(n)
	if l := len(p.free[c]); l > 0 {
		b := p.free[c][l-1]
		p.free[c][l-1] = nil
		p.free[c] = p.free[c][:l-1]
		return b[:n]
	}
	return make([]byte, n, 1<<(c+minBufShift))
}

// put returns a buffer obtained from get to the pool.
func (p *bufPool) put(b []byte) {
	c := sizeClass(cap(b))
	p.free[c] = append(p.free[c], b[:0])
}
