package rsocket

import "testing"

// peerData is a peer announcing 384 credits and a 64 KiB first region.
var peerData = connData{version: 1, credits: 384, targetSGL: sge{addr: 0x1000, key: 7, length: 2},
	dataBuf: sge{addr: 0x100000, key: 9, length: 64 << 10}}

// Messages end at the peer's region and at the free send buffer; then
// nothing is sent until the peer's next region arrives in entry 1.
func TestSenderSegments(t *testing.T) {
	s := newSender(384, 48<<10, &peerData)
	var sizes []int
	for left := 200 << 10; left > 0 && s.canSend(); {
		seg := s.reserve(left)
		sizes = append(sizes, seg.n)
		left -= seg.n
		if seg.n == 48<<10 {
			s.sent(seg.n) // the first message completes: the send buffer is free again
		}
	}
	// 48 KiB: the send buffer; 16 KiB: the rest of the peer's 64 KiB region.
	if len(sizes) != 2 || sizes[0] != 48<<10 || sizes[1] != 16<<10 {
		t.Fatalf("messages %v, want [49152 16384]", sizes)
	}
	if s.targetIdx != 1 || s.canSend() {
		t.Fatalf("after the first region: entry %d, canSend %v", s.targetIdx, s.canSend())
	}
	s.credit(400, &sge{addr: 0x200000, key: 9, length: 64 << 10})
	if !s.canSend() || s.nextSlot != 0 {
		t.Fatal("the peer's second region did not enable sending")
	}
	// The send buffer wraps: this message starts at 16 KiB.
	seg := s.reserve(1000)
	if seg.dst.addr != 0x200000 || seg.off != 16<<10 {
		t.Fatalf("segment %+v", seg)
	}
}

// Credits run out after 384 messages whatever the buffer.
func TestSenderCredits(t *testing.T) {
	s := newSender(1000, 1<<20, &connData{credits: 3, dataBuf: sge{length: 1 << 20}})
	for range 3 {
		if !s.canSend() {
			t.Fatal("cannot send within credits")
		}
		s.reserve(1)
	}
	if s.canSend() {
		t.Fatal("sends beyond the peer's credits")
	}
	s.credit(10, nil)
	if !s.canSend() {
		t.Fatal("credits did not enable sending")
	}
}

// rs_give_credits: the second half of the buffer at once, then a region
// each time half the buffer is read, and bare credits after half the
// receive credits.
func TestReceiverCredits(t *testing.T) {
	r := newReceiver(384, 128<<10, &peerData)
	if !r.creditsDue() {
		t.Fatal("the second half is not advertised at once")
	}
	m, region, off, slot := r.credits()
	if !region || off != 64<<10 || slot != 0x1000+sgeLen || msgOp(m) != opSGL || msgData(m) != 384 {
		t.Fatalf("first credits: %#x %v %d %#x", m, region, off, slot)
	}
	if r.creditsDue() {
		t.Fatal("credits due with nothing read")
	}
	if r.arrived(128<<10 + 1) {
		t.Fatal("took more bytes than advertised")
	}
	for range 2 {
		if !r.arrived(32 << 10) {
			t.Fatal("refused data within the regions")
		}
	}
	r.consume(64<<10 - 1)
	if r.creditsDue() {
		t.Fatal("credits due before half the buffer was read")
	}
	r.consume(1)
	if !r.creditsDue() {
		t.Fatal("no credits after half the buffer was read")
	}
	m, region, off, slot = r.credits()
	if !region || off != 0 || slot != 0x1000 || msgData(m) != 2+384 {
		t.Fatalf("second credits: %#x %v %d %#x", m, region, off, slot)
	}
	// 192 one-byte messages read: half the credits, bare.
	for range 192 {
		if !r.arrived(1) {
			t.Fatal("refused a message within credits")
		}
		r.consume(1)
	}
	if !r.creditsDue() {
		t.Fatal("no credits after half of them were used")
	}
	if m, region, _, _ = r.credits(); region || msgData(m) != 194+384 {
		t.Fatalf("bare credits: %#x %v", m, region)
	}
}

// More messages than receive work requests is the peer's fault.
func TestReceiverMessageBound(t *testing.T) {
	r := newReceiver(16, 1<<20, &peerData)
	n := 0
	for r.arrived(1) {
		n++
	}
	if n != 16 {
		t.Fatalf("queued %d messages, want 16", n)
	}
}
