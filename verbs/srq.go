package verbs

import (
	"sync"
	"unsafe"
)

// SRQInitAttr are the creation attributes of a shared receive queue (struct
// ibv_srq_init_attr's attr).
type SRQInitAttr struct {
	MaxWR  int // receive work requests the SRQ holds
	MaxSGE int // SGEs per receive work request; 0 means 1
	// SRQLimit, if non-zero, arms the limit at creation as rxe does (see
	// SRQ.Modify); libibverbs documents it as ignored by ibv_create_srq.
	SRQLimit int
}

// SRQAttr are the attributes of a shared receive queue (struct
// ibv_srq_attr).
type SRQAttr struct {
	MaxWR    int
	MaxSGE   int // read-only: ignored by Modify
	SRQLimit int // 0 when not armed
}

// SRQAttrMask selects the attributes Modify changes (enum ibv_srq_attr_mask).
type SRQAttrMask uint32

// SRQ attribute mask bits, with the libibverbs values.
const (
	SRQMaxWR SRQAttrMask = 1 << 0 // resize the SRQ
	SRQLimit SRQAttrMask = 1 << 1 // set (arm) the limit
)

// SRQ is a shared receive queue (struct ibv_srq): receive work requests
// consumed by every QP created with it, in posting order.
type SRQ struct {
	pd *PD
	id uint32 // names it in String (strings.go)

	mu     sync.Mutex
	closed bool
	rq     recvQueue
	limit  int // armed low watermark; 0 = disarmed
	users  int // QPs using the SRQ

	// limitEvents counts SRQ limit events (EventSRQLimitReached) raised.
	limitEvents uint64

	hw hwSRQ // the hardware backend's; nil on a goroce device
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(attr SRQInitAttr) (*SRQ, error) {
	const op = "CreateSRQ"
	if pd == nil {
		return nil, newError(op, "pd", ErrInvalidArgument, "nil")
	}
	d := pd.dev
	maxSGE := max(attr.MaxSGE, 1)
	switch {
	case attr.MaxWR < 1 || attr.MaxWR > d.attr.MaxSRQWR:
		return nil, errorf(op, "max_wr", ErrInvalidArgument, "%d outside 1..%d", attr.MaxWR, d.attr.MaxSRQWR)
	case attr.MaxSGE < 0 || attr.MaxSGE > d.attr.MaxSRQSGE:
		return nil, errorf(op, "max_sge", ErrInvalidArgument, "%d outside 1..%d", attr.MaxSGE, d.attr.MaxSRQSGE)
	case attr.SRQLimit < 0 || attr.SRQLimit > attr.MaxWR:
		return nil, errorf(op, "srq_limit", ErrInvalidArgument, "%d outside 0..max_wr", attr.SRQLimit)
	}
	if pd.hw != nil {
		return pd.hw.createSRQ(pd, &attr)
	}
	if err := pd.use(op); err != nil {
		return nil, err
	}
	if err := d.res.srq.acquire(op); err != nil {
		pd.unuse()
		return nil, err
	}
	srq := &SRQ{pd: pd, id: srqIDs.Add(1), rq: newRecvQueue(attr.MaxWR, maxSGE), limit: attr.SRQLimit}
	if err := d.register(op, func() { d.srqs[srq] = struct{}{} }); err != nil {
		d.res.srq.release()
		pd.unuse()
		return nil, err
	}
	return srq, nil
}

// PD returns the SRQ's protection domain.
func (s *SRQ) PD() *PD { return s.pd }

// Query returns the SRQ's attributes (ibv_query_srq).
func (s *SRQ) Query() (SRQAttr, error) {
	if s.hw != nil {
		return s.hw.query()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return SRQAttr{}, closedError("QuerySRQ", "srq")
	}
	return SRQAttr{MaxWR: s.rq.ring.cap(), MaxSGE: s.rq.maxSGE, SRQLimit: s.limit}, nil
}

// Modify changes the attributes selected by mask (ibv_modify_srq).
// SRQMaxWR resizes the SRQ, keeping the posted work requests; it fails if
// the new size is below the number posted or below an armed limit.
// SRQLimit arms the SRQ: when a QP takes a work request and fewer than
// SRQLimit remain, an SRQ limit event is raised and the limit disarms
// (reads back as 0). A limit of 0 disarms it. If any attribute is invalid
// nothing changes.
func (s *SRQ) Modify(attr *SRQAttr, mask SRQAttrMask) error {
	const op = "ModifySRQ"
	if attr == nil {
		return newError(op, "srq_attr", ErrInvalidArgument, "nil")
	}
	if s.hw != nil && mask&^(SRQMaxWR|SRQLimit) == 0 {
		return s.hw.modify(attr, mask)
	}
	if mask&^(SRQMaxWR|SRQLimit) != 0 {
		return errorf(op, "srq_attr_mask", ErrInvalidArgument, "unknown bits %#x", uint32(mask&^(SRQMaxWR|SRQLimit)))
	}
	maxSRQWR := s.pd.dev.attr.MaxSRQWR
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return closedError(op, "srq")
	}
	size, limit := s.rq.ring.cap(), s.limit
	if mask&SRQMaxWR != 0 {
		switch {
		case attr.MaxWR < 1 || attr.MaxWR > maxSRQWR:
			return errorf(op, "max_wr", ErrInvalidArgument, "%d outside 1..%d", attr.MaxWR, maxSRQWR)
		case attr.MaxWR < s.rq.ring.len():
			return errorf(op, "max_wr", ErrInvalidArgument, "%d is below the %d work requests posted", attr.MaxWR, s.rq.ring.len())
		}
		size = attr.MaxWR
	}
	if mask&SRQLimit != 0 {
		if attr.SRQLimit < 0 || attr.SRQLimit > size {
			return errorf(op, "srq_limit", ErrInvalidArgument, "%d outside 0..%d", attr.SRQLimit, size)
		}
		limit = attr.SRQLimit
	}
	if limit > size {
		return errorf(op, "max_wr", ErrInvalidArgument, "%d is below the armed limit %d", size, limit)
	}
	if size != s.rq.ring.cap() {
		s.rq = s.rq.resize(size)
	}
	s.limit = limit
	return nil
}

// PostRecv posts a receive work request to the SRQ (ibv_post_srq_recv). It
// fails with ErrInvalidArgument ("num_sge") when the request has more SGEs
// than the SRQ's max_sge and with ErrNoMemory ("srq") when the SRQ is full.
// The SGEs' keys are checked when a message arrives, as in hardware.
func (s *SRQ) PostRecv(wr *RecvWR) error {
	const op = "PostSRQRecv"
	if s.hw != nil {
		if wr == nil {
			return newError(op, "wr", ErrInvalidArgument, "nil")
		}
		_, err := hwPostSRQRecv(s, unsafe.Slice(wr, 1))
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return closedError(op, "srq")
	}
	if err := s.rq.checkRecv(op, "srq", wr); err != nil {
		return err
	}
	s.rq.post(wr)
	return nil
}

// checkLimitLocked fires the SRQ limit when the queue drops below the
// armed watermark, disarming it (IBA: one event per arm), and raises
// EventSRQLimitReached. The caller holds s.mu.
func (s *SRQ) checkLimitLocked() {
	if s.limit > 0 && s.rq.ring.len() < s.limit {
		s.limit = 0
		s.limitEvents++
		s.pd.dev.events().post(AsyncEvent{Type: EventSRQLimitReached, SRQ: s})
	}
}

// Destroy destroys the SRQ (ibv_destroy_srq). It fails with ErrBusy while
// QPs use it. Posted work requests are discarded.
func (s *SRQ) Destroy() error {
	const op = "DestroySRQ"
	if s.hw != nil {
		return s.hw.destroy(s)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return closedError(op, "srq")
	}
	if s.users > 0 {
		n := s.users
		s.mu.Unlock()
		return errorf(op, "srq", ErrBusy, "%d QPs use it", n)
	}
	s.closed = true
	s.rq = recvQueue{}
	s.mu.Unlock()
	d := s.pd.dev
	d.unregister(func() { delete(d.srqs, s) })
	d.res.srq.release()
	s.pd.unuse()
	return nil
}

// attach records a QP using the SRQ.
func (s *SRQ) attach(op string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return closedError(op, "srq")
	}
	s.users++
	return nil
}

// detach drops a QP recorded by attach.
func (s *SRQ) detach() {
	s.mu.Lock()
	s.users--
	s.mu.Unlock()
}
