package transport

import (
	"math/bits"
	"sync"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
)

// sendSlot is one entry of the send queue: a copy of the posted work request
// and the requester's and completer's progress on it.
type sendSlot struct {
	wqe    SendWQE // SGL and Inline alias sgl and inline below
	sgl    []SGE   // storage for max_sge elements
	inline []byte  // storage for max_inline_data bytes
	length uint32  // message length in bytes

	// started is set when the requester first transmits the WQE and
	// assigns its PSNs, [firstPSN, lastPSN]; retransmissions reuse them.
	started           bool
	firstPSN, lastPSN psn.PSN
	// readDone counts the bytes of a READ response placed so far, in
	// order; a retried READ asks only for the rest.
	readDone uint32
	// failed marks a WQE the requester could not transmit (a local
	// protection fault); it completes with status when it reaches the
	// head of the queue, after every earlier WQE.
	failed bool
	status ibv.WCStatus
}

// sendRing is the bounded send queue. head and tail are free-running
// counters: slots[head&mask] is the oldest uncompleted WQE and tail the
// next free position. It holds up to capacity WQEs in a power-of-two
// number of slots: the counters wrap at 2^32, which a power of two
// divides, so consecutive counters stay consecutive slots across the
// wrap (with a modulo of another length they jumped back to slot 0 and
// could land on a slot in use, after 2^32 posts: half an hour of a
// message-rate run); and a mask costs a cycle where the modulo's
// division cost about thirty per lookup.
type sendRing struct {
	slots      []sendSlot
	mask       uint32
	capacity   uint32
	head, tail uint32
}

func newSendRing(n, maxSGE, maxInline int) sendRing {
	slots := ringSlots(n)
	r := sendRing{slots: make([]sendSlot, slots), mask: uint32(slots - 1), capacity: uint32(n)}
	sgl := make([]SGE, slots*maxSGE)
	inl := make([]byte, slots*maxInline)
	for i := range r.slots {
		r.slots[i].sgl = sgl[i*maxSGE : (i+1)*maxSGE : (i+1)*maxSGE]
		r.slots[i].inline = inl[i*maxInline : (i+1)*maxInline : (i+1)*maxInline]
	}
	return r
}

// ringSlots is the number of slots of a ring holding n entries: the least
// power of two not below n (at least 1).
func ringSlots(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

func (r *sendRing) len() uint32           { return r.tail - r.head }
func (r *sendRing) full() bool            { return r.len() >= r.capacity }
func (r *sendRing) at(i uint32) *sendSlot { return &r.slots[i&r.mask] }

// push copies w into the next slot.
func (r *sendRing) push(w *SendWQE, length uint32) *sendSlot {
	s := r.at(r.tail)
	r.tail++
	// Field by field, in place: the caller has just built w field by
	// field, and a whole-struct copy (or a new sendSlot built on the
	// stack and copied in) reloaded those narrow stores with 16-byte
	// moves that waited for them (store-forwarding stalls): two thirds of
	// push's time, 5% of a client posting lists of small WRITEs.
	s.wqe.copyScalars(w)
	s.length = length
	s.started, s.firstPSN, s.lastPSN, s.readDone, s.failed, s.status = false, 0, 0, 0, false, 0
	sgl, inl := s.sgl, s.inline
	if w.Flags&ibv.SendInline != 0 {
		s.wqe.Inline = inl[:copy(inl[:len(w.Inline)], w.Inline)]
		s.wqe.SGL = nil
	} else {
		s.wqe.SGL = sgl[:copy(sgl[:len(w.SGL)], w.SGL)]
		s.wqe.Inline = nil
	}
	return s
}

// copyScalars copies every field of w but SGL and Inline into d.
// TestSendRingPushCopiesEveryField fails if a new field is left out.
func (d *SendWQE) copyScalars(w *SendWQE) {
	d.WRID, d.Opcode, d.RemoteAddr, d.RKey, d.Flags = w.WRID, w.Opcode, w.RemoteAddr, w.RKey, w.Flags
	d.CompareAdd, d.Swap, d.Imm, d.InvalidateRKey = w.CompareAdd, w.Swap, w.Imm, w.InvalidateRKey
	d.FlushLength, d.FlushType, d.FlushLevel = w.FlushLength, w.FlushType, w.FlushLevel
	d.Bind = w.Bind
	d.RemoteQPN, d.RemoteQKey, d.Dest = w.RemoteQPN, w.RemoteQKey, w.Dest
}

// recvSlot is one entry of a receive queue.
type recvSlot struct {
	wrid   uint64
	sgl    []SGE // aliases store
	store  []SGE
	length uint32
}

func (s *recvSlot) set(w *RecvWQE) {
	s.wrid = w.WRID
	s.sgl = s.store[:copy(s.store[:len(w.SGL)], w.SGL)]
	s.length = sglLength(w.SGL)
}

// recvRing is a bounded receive queue, with free-running counters and a
// power-of-two number of slots, as sendRing.
type recvRing struct {
	slots      []recvSlot
	mask       uint32
	capacity   uint32
	head, tail uint32
	maxSGE     int
}

func newRecvRing(n, maxSGE int) recvRing {
	slots := ringSlots(n)
	r := recvRing{slots: make([]recvSlot, slots), mask: uint32(slots - 1), capacity: uint32(n), maxSGE: maxSGE}
	store := make([]SGE, slots*maxSGE)
	for i := range r.slots {
		r.slots[i].store = store[i*maxSGE : (i+1)*maxSGE : (i+1)*maxSGE]
	}
	return r
}

func (r *recvRing) len() uint32           { return r.tail - r.head }
func (r *recvRing) full() bool            { return r.len() >= r.capacity }
func (r *recvRing) at(i uint32) *recvSlot { return &r.slots[i&r.mask] }

func (r *recvRing) push(w *RecvWQE) {
	r.at(r.tail).set(w)
	r.tail++
}

// SRQ is a shared receive queue: a bounded ring of receive work requests that
// several QPs take from. Unlike a QP it is safe for concurrent use, because
// the QPs that share it are driven independently.
type SRQ struct {
	mu   sync.Mutex
	ring recvRing
}

// NewSRQ returns a shared receive queue holding up to maxWR work requests of
// up to maxSGE elements each.
func NewSRQ(maxWR, maxSGE int) *SRQ {
	if maxWR < 1 {
		maxWR = 1
	}
	if maxSGE < 1 {
		maxSGE = 1
	}
	return &SRQ{ring: newRecvRing(maxWR, maxSGE)}
}

// PostRecv copies w to the queue. It fails with ErrSRQFull when max_wr
// requests are queued and ErrTooManySGE when w has more than max_sge
// elements.
func (q *SRQ) PostRecv(w *RecvWQE) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(w.SGL) > q.ring.maxSGE {
		return ErrTooManySGE
	}
	if q.ring.full() {
		return ErrSRQFull
	}
	q.ring.push(w)
	return nil
}

// Len returns the number of queued receive work requests.
func (q *SRQ) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return int(q.ring.len())
}

// TakeRecv moves the oldest work request into w, reporting false if the
// queue is empty (SharedRecvQueue).
func (q *SRQ) TakeRecv(w *RecvWQE) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ring.len() == 0 {
		return false
	}
	s := q.ring.at(q.ring.head)
	w.WRID = s.wrid
	w.SGL = append(w.SGL[:0], s.sgl...)
	q.ring.head++
	return true
}

// MaxRecvSGE returns the most SGEs a work request of the queue has
// (SharedRecvQueue).
func (q *SRQ) MaxRecvSGE() int { return q.ring.maxSGE }

func sglLength(sgl []SGE) uint32 {
	var n uint64
	for _, s := range sgl {
		n += uint64(s.Length)
	}
	if n > 1<<32-1 {
		return 1<<32 - 1
	}
	return uint32(n)
}
