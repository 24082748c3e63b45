package seal

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goroce/goroce/internal/wire"
)

var testKey = [KeyLen]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}

// writeFirst returns the headers of an RDMA WRITE First, or Only with a
// pad (BTH and RETH).
func writeFirst(pad int) []byte {
	h := make([]byte, wire.BTHLen+wire.RETHLen)
	h[0] = byte(wire.RCRDMAWriteFirst)
	if pad > 0 {
		h[0] = byte(wire.RCRDMAWriteOnly)
	}
	h[1] = byte(pad) << 4
	h[2], h[3] = 0xFF, 0xFF
	h[4], h[5], h[6], h[7] = 0xC0, 0x12, 0x34, 0x56 // FECN/BECN set, QPN
	h[11] = 9
	for i := wire.BTHLen; i < len(h); i++ {
		h[i] = byte(i)
	}
	return h
}

// seal1 seals one packet into a fresh slice with its ICRC room, as verbs
// does.
func seal1(s *Sealer, hdrs, payload []byte, pad int) []byte {
	b := s.Append(nil, hdrs, payload, pad)
	return append(b, 0, 0, 0, 0) // the ICRC's place
}

func TestSealOpenRoundTrip(t *testing.T) {
	s, o := NewSealer(&testKey), NewOpener(&testKey)
	payload := bytes.Repeat([]byte("secret payload!!"), 16)
	for _, pad := range []int{0, 3} {
		h := writeFirst(pad)
		pkt := seal1(s, h, payload[:len(payload)-pad], pad)
		if len(pkt) != len(h)+len(payload)+Overhead+wire.ICRCLen {
			t.Fatalf("sealed length %d", len(pkt))
		}
		if bytes.Contains(pkt, payload[:16]) || bytes.Contains(pkt, h[wire.BTHLen:]) {
			t.Fatal("plaintext visible in the sealed packet")
		}
		if !bytes.Equal(pkt[:wire.BTHLen], h[:wire.BTHLen]) {
			t.Fatal("BTH not in the clear")
		}
		pkt[4] &^= 0xC0 // the network clears ECN bits: still authentic
		plain, err := o.Open(pkt)
		if err != nil {
			t.Fatalf("pad %d: %v", pad, err)
		}
		var p wire.Packet
		if err := p.Parse(plain, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(p.Payload, payload[:len(payload)-pad]) || !bytes.Equal(p.RETH, h[wire.BTHLen:]) || len(p.Pad) != pad {
			t.Fatalf("pad %d: opened packet differs", pad)
		}
	}
}

// TestSealMiddle: a packet without extension headers or pad is encrypted
// straight from its payload, which stays unchanged.
func TestSealMiddle(t *testing.T) {
	s, o := NewSealer(&testKey), NewOpener(&testKey)
	h := writeFirst(0)[:wire.BTHLen]
	h[0] = byte(wire.RCRDMAWriteMiddle)
	payload := bytes.Repeat([]byte("middle!!"), 128)
	orig := bytes.Clone(payload)
	pkt := seal1(s, h, payload, 0)
	if !bytes.Equal(payload, orig) || bytes.Contains(pkt, payload[:8]) {
		t.Fatal("the payload was changed, or sent in clear")
	}
	plain, err := o.Open(pkt)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(plain[:wire.BTHLen], h) || !bytes.Equal(plain[wire.BTHLen:len(plain)-wire.ICRCLen], orig) {
		t.Fatal("opened MIDDLE packet differs")
	}
}

func TestOpenRefusesReplayAndForgery(t *testing.T) {
	s, o := NewSealer(&testKey), NewOpener(&testKey)
	h := writeFirst(0)
	orig := seal1(s, h, []byte("abcdefgh"), 0)
	replay := bytes.Clone(orig)
	if _, err := o.Open(orig); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Open(replay); !errors.Is(err, ErrReplay) {
		t.Fatalf("replay: %v", err)
	}
	for _, at := range []int{0, 5, 11, wire.BTHLen, wire.BTHLen + 9, MinSealedLen} {
		pkt := seal1(s, h, []byte("abcdefgh"), 0)
		pkt[at] ^= 1
		if _, err := o.Open(pkt); err == nil {
			t.Fatalf("flip at %d accepted", at)
		}
	}
	// A refused packet did not burn its counter: the genuine one still opens.
	pkt := seal1(s, h, []byte("abcdefgh"), 0)
	good := bytes.Clone(pkt)
	pkt[len(pkt)-6] ^= 0x80
	if _, err := o.Open(pkt); !errors.Is(err, ErrForged) {
		t.Fatalf("forged tag: %v", err)
	}
	if _, err := o.Open(good); err != nil {
		t.Fatalf("genuine after forgery: %v", err)
	}
	if _, err := NewOpener(&[KeyLen]byte{9}).Open(seal1(s, h, nil, 0)); !errors.Is(err, ErrForged) {
		t.Fatalf("wrong key: %v", err)
	}
	if _, err := o.Open(make([]byte, MinSealedLen-1)); !errors.Is(err, ErrShort) {
		t.Fatalf("short: %v", err)
	}
}

func TestWindow(t *testing.T) {
	var w Window
	accept := func(c uint64) bool {
		if !w.Fresh(c) {
			return false
		}
		w.Mark(c)
		return true
	}
	for _, c := range []uint64{0, 2, 1, 5, 1000} {
		if !accept(c) {
			t.Fatalf("%d refused", c)
		}
	}
	for _, c := range []uint64{0, 1, 2, 5, 1000} {
		if accept(c) {
			t.Fatalf("replayed %d accepted", c)
		}
	}
	if !accept(3) || !accept(999) {
		t.Fatal("reordered counters inside the window refused")
	}
	if !accept(1000 + WindowSize) {
		t.Fatal("slide refused")
	}
	if accept(1000) || accept(999) {
		t.Fatal("counter outside the window accepted")
	}
	if !accept(1001) { // inside the window, never seen: its slot was cleared by the slide
		t.Fatal("fresh counter in the window refused")
	}
	if !accept(1<<40) || accept(1<<40-WindowSize-1) || !accept(1<<40-1) {
		t.Fatal("long jump mishandled")
	}
}

func TestSealOpenNoAlloc(t *testing.T) {
	s, o := NewSealer(&testKey), NewOpener(&testKey)
	h := writeFirst(0)
	payload := make([]byte, 4096)
	buf := make([]byte, 0, 8192)
	pkt := make([]byte, 0, 8192)
	n := testing.AllocsPerRun(100, func() {
		buf = s.Append(buf[:0], h, payload, 0)
		pkt = append(append(pkt[:0], buf...), 0, 0, 0, 0)
		if _, err := o.Open(pkt); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Fatalf("%v allocations per sealed and opened packet", n)
	}
}

func testTranscript() Transcript {
	return Transcript{ServiceID: 0x0106_0000_0000_4e20, ActiveGID: [16]byte{15: 1}, PassiveGID: [16]byte{15: 2},
		ActiveQPN: 0x12, PassiveQPN: 0x34, ActivePSN: 100, PassivePSN: 200}
}

func TestHandshake(t *testing.T) {
	psk := []byte("0123456789abcdef-shared")
	i, err := NewInitiator(psk)
	if err != nil {
		t.Fatal(err)
	}
	offer, err := i.Offer()
	if err != nil {
		t.Fatal(err)
	}
	tp, ta := testTranscript(), testTranscript()
	answer, pk, err := Respond(psk, offer[:], &tp)
	if err != nil {
		t.Fatal(err)
	}
	ak, err := i.Finish(answer[:], &ta)
	if err != nil {
		t.Fatal(err)
	}
	if ak.Send != pk.Recv || ak.Recv != pk.Send || ak.Disconnect != pk.Disconnect || ak.Send == ak.Recv {
		t.Fatal("the sides derived different keys")
	}
	if _, err := i.Finish(answer[:], &ta); err == nil {
		t.Fatal("second Finish accepted: the ephemeral key was not forgotten")
	}

	// A different PSK: the passive side refuses the offer.
	if _, _, err := Respond([]byte("another key of 16+ bytes"), offer[:], &tp); !errors.Is(err, ErrKeyMismatch) {
		t.Fatalf("mismatched PSK: %v", err)
	}
	// A transcript that differs (an altered PSN in the REP): the active side refuses.
	i2, _ := NewInitiator(psk)
	offer2, _ := i2.Offer()
	tp2 := testTranscript()
	answer2, _, err := Respond(psk, offer2[:], &tp2)
	if err != nil {
		t.Fatal(err)
	}
	ta2 := testTranscript()
	ta2.PassivePSN++
	if _, err := i2.Finish(answer2[:], &ta2); !errors.Is(err, ErrKeyMismatch) {
		t.Fatalf("altered transcript: %v", err)
	}
	if _, _, err := Respond(psk, make([]byte, 56), &tp); !errors.Is(err, ErrNoOffer) {
		t.Fatalf("no offer: %v", err)
	}
	bad := offer
	bad[3] = 9
	if _, _, err := Respond(psk, bad[:], &tp); !errors.Is(err, ErrBadSuite) {
		t.Fatalf("bad suite: %v", err)
	}
	if _, err := NewInitiator([]byte("short")); err == nil {
		t.Fatal("short PSK accepted")
	}
	for _, c := range []RejectCode{RejectNoOffer, RejectKeyMismatch, RejectBadOffer} {
		if got, ok := ParseReject(append(RejectData(c), make([]byte, 100)...)); !ok || got != c {
			t.Fatalf("reject code %d round trip: %d %v", c, got, ok)
		}
	}
	d := append(DisconnectData(&ak.Disconnect, 0x12, 0x34), make([]byte, 200)...)
	if !CheckDisconnect(&pk.Disconnect, d, 0x12, 0x34) || CheckDisconnect(&pk.Disconnect, d, 0x34, 0x12) ||
		CheckDisconnect(&testKey, d, 0x12, 0x34) || CheckDisconnect(&pk.Disconnect, make([]byte, 220), 0x12, 0x34) {
		t.Fatal("disconnect tags")
	}
	if _, ok := ParseReject(make([]byte, 148)); ok {
		t.Fatal("zero REJ data parsed as a code")
	}
}
