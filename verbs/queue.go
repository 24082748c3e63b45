package verbs

// Work queues.
//
// An SRQ is a fixed ring of receive work queue entries (WQEs) allocated when
// it is created, with the SGE arrays of all entries carved out of one
// allocation. Posting copies the work request into the next free entry and
// never allocates; a full ring fails with ErrNoMemory as in libibverbs. The
// QPs' responders take entries from the front in posting order (srqSource).
// A QP's own send and receive queues belong to its transport state machine.

// ring is a bounded FIFO of preallocated entries.
type ring[T any] struct {
	buf   []T
	head  int // oldest entry
	count int
}

func (r *ring[T]) len() int   { return r.count }
func (r *ring[T]) cap() int   { return len(r.buf) }
func (r *ring[T]) full() bool { return r.count == len(r.buf) }

// next returns the entry the next push will commit, for filling in place,
// or nil if the ring is full.
func (r *ring[T]) next() *T {
	if r.full() {
		return nil
	}
	return &r.buf[(r.head+r.count)%len(r.buf)]
}

// push commits the entry returned by next.
func (r *ring[T]) push() { r.count++ }

// front returns the oldest entry, or nil if the ring is empty.
func (r *ring[T]) front() *T {
	if r.count == 0 {
		return nil
	}
	return &r.buf[r.head]
}

// pop removes the oldest entry.
func (r *ring[T]) pop() {
	r.head = (r.head + 1) % len(r.buf)
	r.count--
}

// recvWQE is a posted receive work request.
type recvWQE struct {
	wrID   uint64
	sge    []SGE // len = the WR's num_sge; cap = the queue's max_sge
	length uint64
}

// recvQueue is the receive queue of an SRQ.
type recvQueue struct {
	ring   ring[recvWQE]
	maxSGE int
}

func newRecvQueue(maxWR, maxSGE int) recvQueue {
	q := recvQueue{ring: ring[recvWQE]{buf: make([]recvWQE, maxWR)}, maxSGE: maxSGE}
	sges := make([]SGE, maxWR*maxSGE)
	for i := range q.ring.buf {
		q.ring.buf[i].sge = sges[i*maxSGE : i*maxSGE : (i+1)*maxSGE]
	}
	return q
}

// checkRecv validates a receive work request against the queue (rxe's
// post_one_recv), naming the offending field; queue is "rq" or "srq".
func (q *recvQueue) checkRecv(op, queue string, wr *RecvWR) error {
	switch {
	case wr == nil:
		return newError(op, "wr", ErrInvalidArgument, "nil")
	case len(wr.SGList) > q.maxSGE:
		return errorf(op, "num_sge", ErrInvalidArgument, "%d exceeds the queue's max_sge %d", len(wr.SGList), q.maxSGE)
	case sgListLength(wr.SGList) >= maxMessageSize:
		return newError(op, "sg_list", ErrInvalidArgument, "total length reaches 2^31")
	case q.ring.full():
		return errorf(op, queue, ErrNoMemory, "all %d entries posted", q.ring.cap())
	}
	return nil
}

// post copies a checked receive work request into the queue.
func (q *recvQueue) post(wr *RecvWR) {
	w := q.ring.next()
	w.wrID = wr.WRID
	w.sge = append(w.sge[:0], wr.SGList...)
	w.length = sgListLength(wr.SGList)
	q.ring.push()
}

// resize returns a queue of maxWR entries holding q's entries in order; the
// caller has checked that they fit.
func (q *recvQueue) resize(maxWR int) recvQueue {
	nq := newRecvQueue(maxWR, q.maxSGE)
	for w := q.ring.front(); w != nil; w = q.ring.front() {
		d := nq.ring.next()
		d.wrID, d.length = w.wrID, w.length
		d.sge = append(d.sge[:0], w.sge...)
		nq.ring.push()
		q.ring.pop()
	}
	return nq
}
