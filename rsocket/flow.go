package rsocket

// The flow control of an rsocket, apart from the verbs that carry it out:
// what the sender may write where, and when the receiver returns credits
// and buffer space (rs_can_send, rsend's segmentation, rs_give_credits,
// rs_send_credits, rrecv's accounting in librdmacm's rsocket.c). Sequence
// numbers are 16-bit and wrap, as rsockets' are.

// rsockets' constants.
const (
	sndLowat   = 2048    // RS_SNDLOWAT: free send buffer needed before a write
	maxMessage = 1 << 18 // the largest message written (see reserve)
	ctrlSlots  = 4       // RS_QP_CTRL_SIZE: control messages in flight
	sglSize    = 2       // RS_SGL_SIZE: entries of the target SGL ring
)

// sender is the sending half's state (the peer's receive buffer as this
// side knows it, and its own send buffer).
type sender struct {
	sqeAvail  int    // data work requests that may still be posted
	sbufSize  int    // the send buffer, a ring
	sbufAvail int    // bytes of it not held by posted writes
	sbufPos   int    // where the next message is copied
	seq       uint16 // messages sent (sseq_no)
	seqComp   uint16 // the peer lets messages be sent while seq != seqComp
	target    [sglSize]sge
	targetIdx int // the entry being filled
	nextSlot  int // the entry the peer's next SGE update writes
}

// newSender starts with the peer's announcement: its first region in
// entry 0, its credits; its updates then fill entries 1, 0, 1, ...
func newSender(sq, sbufSize int, peer *connData) sender {
	s := sender{sqeAvail: sq - ctrlSlots, sbufSize: sbufSize, sbufAvail: sbufSize, seqComp: peer.credits, nextSlot: 1}
	s.target[0] = peer.dataBuf
	return s
}

// canSend is rs_can_send.
func (s *sender) canSend() bool {
	return s.sqeAvail > 0 && s.sbufAvail >= sndLowat && s.seq != s.seqComp && s.target[s.targetIdx].length != 0
}

// segment is one message a write sends: n bytes copied into the send
// buffer at off (wrapping at its end), written to the peer at dst.
type segment struct {
	off, n int
	dst    sge
}

// reserve takes the next message of a write of left bytes, bounded by the
// free send buffer and the peer's current region. rsend starts a write
// with a 2 KiB message and doubles up to 64 KiB (RS_OLAP_START_SIZE,
// RS_MAX_TRANSFER), so that its copy into the send buffer overlaps the
// transmission; a receiver takes any length its regions hold, and here
// each message costs a work request, its packets' ACK and a completion
// on both sides, so messages are as large as maxMessage from the start:
// twice the bandwidth of rsend's sizes for 64 KiB writes on loopback.
// The caller checked canSend.
func (s *sender) reserve(left int) segment {
	n := min(left, maxMessage, s.sbufAvail, int(s.target[s.targetIdx].length))
	t := &s.target[s.targetIdx]
	seg := s.reserveOwn(n, true)
	seg.dst = sge{addr: t.addr, key: t.key, length: uint32(n)}
	t.addr += uint64(n)
	t.length -= uint32(n)
	if t.length == 0 {
		s.targetIdx = (s.targetIdx + 1) % sglSize
	}
	return seg
}

// reserveOwn takes n bytes of the send buffer (at most sbufAvail) and a
// work request for a write whose destination the caller sets: reserve's
// data, an iomap entry (rs_write_iomap) or a riowrite (rs_write_direct).
// A message that the peer receives takes a sequence number (counted):
// rsockets counts iomap entries so, although a receiver's credits count
// data messages only, and each costs the sender a credit for good.
func (s *sender) reserveOwn(n int, counted bool) segment {
	seg := segment{off: s.sbufPos, n: n}
	if counted {
		s.seq++
	}
	s.sqeAvail--
	s.sbufAvail -= n
	s.sbufPos = (s.sbufPos + n) % s.sbufSize
	return seg
}

// sent is a data write's completion: its work request and buffer are free.
func (s *sender) sent(n int) {
	s.sqeAvail++
	s.sbufAvail += n
}

// credit applies the peer's RS_OP_SGL: the sequence number it allows, and,
// when the message wrote an SGE, the region it wrote into entry nextSlot.
func (s *sender) credit(seqComp uint16, region *sge) {
	s.seqComp = seqComp
	if region != nil {
		s.target[s.nextSlot] = *region
		s.nextSlot = (s.nextSlot + 1) % sglSize
	}
}

// receiver is the receiving half's state: this side's receive buffer, as
// regions advertised to the peer and messages waiting to be read.
type receiver struct {
	rbufSize  int
	rqSize    int
	avail     int    // bytes free and not advertised (rbuf_bytes_avail)
	freeOff   int    // the next region to advertise (rbuf_free_offset)
	readOff   int    // where unread data starts (rbuf_offset)
	seq       uint16 // messages read to their end (rseq_no)
	seqComp   uint16 // credits are due when seq reaches it (rseq_comp)
	queued    int    // bytes arrived and not read
	msgs      []int  // lengths of the messages not read, a ring
	head, len int    // msgs' first entry and count (head's length may be partly read)
	remote    sge    // the peer's target SGL ring
	slot      int    // the entry of it the next SGE update writes
}

// newReceiver starts as rs_init_bufs and rs_save_conn_data leave it: the
// first half of the buffer advertised in the connection data, the second
// free, the peer's ring written from entry 1 on.
func newReceiver(rq, rbufSize int, peer *connData) receiver {
	return receiver{rbufSize: rbufSize, rqSize: rq, avail: rbufSize / 2, freeOff: rbufSize / 2,
		seqComp: uint16(rq / 2), msgs: make([]int, rq), remote: peer.targetSGL, slot: 1}
}

// arrived queues a data message of n bytes. It refuses (false) what the
// peer had no right to send: more messages than receive credits allow,
// or more bytes than the regions it was given hold.
func (r *receiver) arrived(n int) bool {
	if n <= 0 || r.len == len(r.msgs) || r.queued+n > r.rbufSize-r.avail {
		return false
	}
	r.msgs[(r.head+r.len)%len(r.msgs)] = n
	r.len++
	r.queued += n
	return true
}

// consume records that n bytes were read from readOff on (at most
// queued): whole messages count towards credits.
func (r *receiver) consume(n int) {
	r.queued -= n
	r.avail += n
	r.readOff = (r.readOff + n) % r.rbufSize
	for n > 0 {
		m := &r.msgs[r.head]
		if n < *m {
			*m -= n
			return
		}
		n -= *m
		r.head = (r.head + 1) % len(r.msgs)
		r.len--
		r.seq++
	}
}

// creditsDue is rs_give_credits without the control window: half the
// buffer free again, or half the receive credits used.
func (r *receiver) creditsDue() bool {
	return r.avail >= r.rbufSize/2 || int16(r.seq-r.seqComp) >= 0
}

// credits is rs_send_credits: the message to send (RS_OP_SGL with the
// sequence number the peer may send up to), and when half the buffer is
// free, the region to advertise (its offset in the buffer) and where in
// the peer's ring to write it.
func (r *receiver) credits() (m uint32, region bool, off int, slotAddr uint64) {
	r.seqComp = r.seq + uint16(r.rqSize/2)
	m = msg(opSGL, uint32(r.seq)+uint32(r.rqSize))
	if r.avail < r.rbufSize/2 {
		return m, false, 0, 0
	}
	off = r.freeOff
	slotAddr = r.remote.addr + uint64(r.slot)*sgeLen
	r.avail -= r.rbufSize / 2
	r.freeOff = (r.freeOff + r.rbufSize/2) % r.rbufSize
	r.slot = (r.slot + 1) % int(r.remote.length)
	return m, true, off, slotAddr
}
