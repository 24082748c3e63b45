package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"slices"

	"github.com/goroce/goroce/internal/wire"
)

// Sizes of the framing.
const (
	KeyLen     = 32 // AES-256
	CounterLen = 8
	TagLen     = 16
	// Overhead is what sealing adds to a packet: the counter and the tag.
	Overhead = CounterLen + TagLen
	// MinSealedLen is the shortest sealed packet: a BTH, the counter, the
	// tag and the ICRC (an ACKNOWLEDGE's AETH makes real ones longer).
	MinSealedLen = wire.BTHLen + Overhead + wire.ICRCLen
)

// Why Open refuses a packet.
var (
	ErrShort  = errors.New("seal: packet shorter than a sealed packet")
	ErrReplay = errors.New("seal: counter already seen or older than the replay window")
	ErrForged = errors.New("seal: authentication failed")
)

// newGCM returns AES-256-GCM under key with 12-byte nonces.
func newGCM(key *[KeyLen]byte) cipher.AEAD {
	b, err := aes.NewCipher(key[:])
	if err != nil {
		panic(err) // unreachable: the key has a valid length
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		panic(err) // unreachable: AES has a 16-byte block
	}
	return g
}

// maskedBTH copies the BTH of pkt into aad with byte 4 zeroed: FECN, BECN
// and the reserved bits, which the network may change and the ICRC masks.
func maskedBTH(aad *[wire.BTHLen]byte, pkt []byte) {
	copy(aad[:], pkt[:wire.BTHLen])
	aad[4] = 0
}

// A Sealer seals the packets of one direction of a connection. It is not
// safe for concurrent use (verbs uses it under the QP's lock) and does
// not allocate once its buffers have grown.
type Sealer struct {
	aead  cipher.AEAD
	next  uint64 // the counter of the next packet
	nonce [12]byte
	aad   [wire.BTHLen]byte
}

// NewSealer returns a Sealer under key, its counter at 0.
func NewSealer(key *[KeyLen]byte) *Sealer { return &Sealer{aead: newGCM(key)} }

// Append appends to dst the sealed form of a packet whose BTH and extension
// headers are hdrs (at least a BTH), followed by payload and pad zero
// bytes, and returns the extended slice, with room for the ICRC in its
// capacity. The payload is copied: it may be registered memory, which the
// cipher must not write.
func (s *Sealer) Append(dst, hdrs, payload []byte, pad int) []byte {
	n := len(dst)
	plain := len(hdrs) - wire.BTHLen + len(payload) + pad
	dst = slices.Grow(dst, wire.BTHLen+Overhead+plain+wire.ICRCLen)
	dst = dst[:n+wire.BTHLen+CounterLen+plain]
	copy(dst[n:], hdrs[:wire.BTHLen])
	ctr := s.next
	s.next++
	binary.BigEndian.PutUint64(dst[n+wire.BTHLen:], ctr)
	at := n + wire.BTHLen + CounterLen
	body := dst[at:]
	binary.BigEndian.PutUint64(s.nonce[4:], ctr)
	maskedBTH(&s.aad, hdrs)
	plaintext := body
	if len(hdrs) == wire.BTHLen && pad == 0 && len(payload) > 0 {
		// A MIDDLE packet, most of a long message: encrypt straight
		// from the payload, one pass over it instead of two.
		plaintext = payload
	} else {
		k := copy(body, hdrs[wire.BTHLen:])
		k += copy(body[k:], payload)
		clear(body[k:])
	}
	sealed := s.aead.Seal(body[:0], s.nonce[:], plaintext, s.aad[:])
	return dst[:at+len(sealed)]
}

// Sent returns how many packets s has sealed.
func (s *Sealer) Sent() uint64 { return s.next }

// An Opener authenticates and decrypts the packets of one direction of a
// connection, and refuses replays. It is not safe for concurrent use (the
// device's receive loop is its only user) and does not allocate.
type Opener struct {
	aead  cipher.AEAD
	win   Window
	nonce [12]byte
	aad   [wire.BTHLen]byte
}

// NewOpener returns an Opener under key that has seen no counter.
func NewOpener(key *[KeyLen]byte) *Opener { return &Opener{aead: newGCM(key)} }

// Open authenticates and decrypts pkt, a sealed packet with its ICRC (which
// the caller checked), in place. It returns the plain packet as
// wire.Packet.Parse takes it: the BTH, extension headers, payload and pad,
// then 4 bytes where an ICRC would be (not a valid one: the ICRC covered
// the sealed packet). The result is a subslice of pkt. A packet that is
// too short (ErrShort), replayed or too old (ErrReplay), or fails
// authentication (ErrForged) is refused and changes nothing the next
// packets depend on; pkt's bytes are then unspecified.
func (o *Opener) Open(pkt []byte) ([]byte, error) {
	if len(pkt) < MinSealedLen {
		return nil, ErrShort
	}
	ctr := binary.BigEndian.Uint64(pkt[wire.BTHLen:])
	if !o.win.Fresh(ctr) {
		return nil, ErrReplay
	}
	binary.BigEndian.PutUint64(o.nonce[4:], ctr)
	maskedBTH(&o.aad, pkt)
	at := wire.BTHLen + CounterLen
	body := pkt[at : len(pkt)-wire.ICRCLen]
	plain, err := o.aead.Open(body[:0], o.nonce[:], body, o.aad[:])
	if err != nil {
		return nil, ErrForged
	}
	o.win.Mark(ctr)
	// Slide the BTH up against the plaintext.
	copy(pkt[CounterLen:at], pkt[:wire.BTHLen])
	return pkt[CounterLen : at+len(plain)+wire.ICRCLen], nil
}
