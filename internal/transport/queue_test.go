package transport

import (
	"math"
	"testing"
)

// TestRingsAcrossCounterWrap: the free-running head and tail counters wrap
// at 2^32 with entries in flight, for capacities that are and are not
// powers of two; each entry keeps a slot of its own, and a ring takes
// exactly its capacity.
func TestRingsAcrossCounterWrap(t *testing.T) {
	for _, n := range []int{1, 2, 3, 100, 128, 129} {
		sq := newSendRing(n, 1, 0)
		rq := newRecvRing(n, 1)
		start := uint32(math.MaxUint32 - n/2) // the counters wrap halfway
		sq.head, sq.tail, rq.head, rq.tail = start, start, start, start
		for round := range 3 {
			for i := range n {
				if sq.full() || rq.full() {
					t.Fatalf("capacity %d: full after %d entries", n, i)
				}
				id := uint64(round*1000 + i)
				sq.push(&SendWQE{WRID: id, SGL: []SGE{{Length: 1}}}, 1)
				rq.push(&RecvWQE{WRID: id, SGL: []SGE{{Length: 1}}})
			}
			if !sq.full() || !rq.full() {
				t.Fatalf("capacity %d: not full with %d entries", n, n)
			}
			for i := range n {
				want := uint64(round*1000 + i)
				if s := sq.at(sq.head); s.wqe.WRID != want {
					t.Fatalf("capacity %d, round %d: send entry %d (counter %#x) holds WR %d", n, round, want, sq.head, s.wqe.WRID)
				}
				if s := rq.at(rq.head); s.wrid != want {
					t.Fatalf("capacity %d, round %d: receive entry %d (counter %#x) holds WR %d", n, round, want, rq.head, s.wrid)
				}
				sq.head++
				rq.head++
			}
		}
	}
}
