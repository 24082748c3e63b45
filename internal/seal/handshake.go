package seal

import (
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
)

// The handshake's messages, each HelloLen bytes: an offer in the REQ's
// private data, an answer in the REP's, laid out alike:
//
//	magic "GRS" (3) | suite (1) | X25519 public key (32) | tag (16)
//
// Suite 1 is X25519, HKDF-SHA256, AES-256-GCM, the only one.
const (
	HelloLen  = 4 + 32 + tagLen
	MinPSKLen = 16
	tagLen    = 16
	suite1    = 1
)

var magic = [3]byte{'G', 'R', 'S'}

// Errors of the handshake; the REJ codes (RejectCode) name them to the
// peer.
var (
	ErrNoOffer     = errors.New("seal: the peer did not offer encryption")
	ErrBadSuite    = errors.New("seal: the peer offered an unknown cipher suite")
	ErrKeyMismatch = errors.New("seal: the peer's handshake did not authenticate: the pre-shared keys differ")
	ErrBadShare    = errors.New("seal: the peer's X25519 key share is invalid")
)

// Present reports whether b begins with a handshake message (of any
// suite).
func Present(b []byte) bool {
	return len(b) >= HelloLen && [3]byte(b[:3]) == magic
}

// Transcript is what the session keys are bound to: the connection's
// identity as the REQ and REP carried it. Active is the side that sent
// the REQ.
type Transcript struct {
	ServiceID             uint64
	ActiveGID, PassiveGID [16]byte
	ActiveQPN, PassiveQPN uint32
	ActivePSN, PassivePSN uint32
	activeKey, passiveKey [32]byte
}

// bytes encodes t for hashing, the public keys included.
func (t *Transcript) bytes() []byte {
	b := make([]byte, 0, 16+8+32+16+64)
	b = append(b, "goroce seal v1 T"...)
	b = binary.BigEndian.AppendUint64(b, t.ServiceID)
	b = append(b, t.ActiveGID[:]...)
	b = append(b, t.PassiveGID[:]...)
	for _, v := range [...]uint32{t.ActiveQPN, t.PassiveQPN, t.ActivePSN, t.PassivePSN} {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	b = append(b, t.activeKey[:]...)
	return append(b, t.passiveKey[:]...)
}

// SessionKeys are a connection's keys, as one side uses them.
type SessionKeys struct {
	Send, Recv [KeyLen]byte // the packet keys of each direction
	// Disconnect authenticates the DREQ and DREP of the connection.
	Disconnect [KeyLen]byte
}

// checkPSK refuses a key too short to be one.
func checkPSK(psk []byte) error {
	if len(psk) < MinPSKLen {
		return fmt.Errorf("seal: pre-shared key of %d bytes, want at least %d", len(psk), MinPSKLen)
	}
	return nil
}

// mac returns HMAC-SHA256(key, parts...) truncated to the tag length.
func mac(key []byte, parts ...[]byte) [tagLen]byte {
	h := hmac.New(sha256.New, key)
	for _, p := range parts {
		h.Write(p)
	}
	return [tagLen]byte(h.Sum(nil))
}

// offerKey is K_offer.
func offerKey(psk []byte) ([]byte, error) {
	return hkdf.Key(sha256.New, psk, nil, "goroce seal v1 offer", 32)
}

// hello encodes a handshake message.
func hello(pub []byte, tag [tagLen]byte) [HelloLen]byte {
	var m [HelloLen]byte
	copy(m[:3], magic[:])
	m[3] = suite1
	copy(m[4:36], pub)
	copy(m[36:], tag[:])
	return m
}

// parseHello splits a handshake message; it reports ErrNoOffer and
// ErrBadSuite.
func parseHello(b []byte) (pub []byte, tag []byte, err error) {
	switch {
	case !Present(b):
		return nil, nil, ErrNoOffer
	case b[3] != suite1:
		return nil, nil, ErrBadSuite
	}
	return b[4:36], b[36:HelloLen], nil
}

// derive computes the session keys, and K_confirm, from the X25519 secret.
func derive(dh, psk []byte, t *Transcript) (ap, pa, confirm, disc [KeyLen]byte, err error) {
	salt := sha256.Sum256(t.bytes())
	secret := append(append([]byte(nil), dh...), psk...)
	k, err := hkdf.Key(sha256.New, secret, salt[:], "goroce seal v1 keys", 4*KeyLen)
	clear(secret)
	if err != nil {
		return
	}
	ap, pa, confirm, disc = [KeyLen]byte(k), [KeyLen]byte(k[KeyLen:]), [KeyLen]byte(k[2*KeyLen:]), [KeyLen]byte(k[3*KeyLen:])
	clear(k)
	return
}

// Initiator is the active side of a handshake between its Offer and
// Finish.
type Initiator struct {
	psk  []byte
	priv *ecdh.PrivateKey
	pub  [32]byte
}

// NewInitiator starts a handshake with a fresh ephemeral key.
func NewInitiator(psk []byte) (*Initiator, error) {
	if err := checkPSK(psk); err != nil {
		return nil, err
	}
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return &Initiator{psk: append([]byte(nil), psk...), priv: priv, pub: [32]byte(priv.PublicKey().Bytes())}, nil
}

// Offer returns the offer for the REQ.
func (i *Initiator) Offer() ([HelloLen]byte, error) {
	k, err := offerKey(i.psk)
	if err != nil {
		return [HelloLen]byte{}, err
	}
	return hello(i.pub[:], offerTag(k, i.pub[:])), nil
}

// Finish checks the answer of the REP against t (whose public keys it
// fills in) and returns the active side's keys. The ephemeral key is
// forgotten.
func (i *Initiator) Finish(answer []byte, t *Transcript) (*SessionKeys, error) {
	pub, tag, err := parseHello(answer)
	if err != nil {
		return nil, err
	}
	peer, err := ecdh.X25519().NewPublicKey(pub)
	if err != nil {
		return nil, ErrBadShare
	}
	if i.priv == nil {
		return nil, errors.New("seal: handshake already finished")
	}
	dh, err := i.priv.ECDH(peer)
	if err != nil {
		return nil, ErrBadShare
	}
	i.priv = nil // forward secrecy: the ephemeral key is used once
	t.activeKey, t.passiveKey = i.pub, [32]byte(pub)
	ap, pa, confirm, disc, err := derive(dh, i.psk, t)
	if err != nil {
		return nil, err
	}
	want := mac(confirm[:], []byte("answer"), t.bytes())
	if subtle.ConstantTimeCompare(want[:], tag) != 1 {
		return nil, ErrKeyMismatch
	}
	return &SessionKeys{Send: ap, Recv: pa, Disconnect: disc}, nil
}

// offerTag is tag_a.
func offerTag(k, pub []byte) [tagLen]byte {
	return mac(k, magic[:], []byte{suite1}, pub)
}

// Respond checks the offer of a REQ and answers it: it returns the answer
// for the REP and the passive side's keys, bound to t (whose public keys
// it fills in). ErrNoOffer, ErrBadSuite, ErrKeyMismatch and ErrBadShare
// say why an offer is refused.
func Respond(psk, offer []byte, t *Transcript) ([HelloLen]byte, *SessionKeys, error) {
	var none [HelloLen]byte
	if err := checkPSK(psk); err != nil {
		return none, nil, err
	}
	pub, tag, err := parseHello(offer)
	if err != nil {
		return none, nil, err
	}
	k, err := offerKey(psk)
	if err != nil {
		return none, nil, err
	}
	if want := offerTag(k, pub); subtle.ConstantTimeCompare(want[:], tag) != 1 {
		return none, nil, ErrKeyMismatch
	}
	peer, err := ecdh.X25519().NewPublicKey(pub)
	if err != nil {
		return none, nil, ErrBadShare
	}
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return none, nil, err
	}
	dh, err := priv.ECDH(peer)
	if err != nil {
		return none, nil, ErrBadShare
	}
	own := priv.PublicKey().Bytes()
	t.activeKey, t.passiveKey = [32]byte(pub), [32]byte(own)
	ap, pa, confirm, disc, err := derive(dh, psk, t)
	if err != nil {
		return none, nil, err
	}
	answer := hello(own, mac(confirm[:], []byte("answer"), t.bytes()))
	return answer, &SessionKeys{Send: pa, Recv: ap, Disconnect: disc}, nil
}

// Reject codes: what a side that refuses a handshake puts in its REJ's
// private data (RejectData), so that the other side's error says why.
type RejectCode uint8

const (
	RejectNoOffer     RejectCode = 1 // encryption required, none offered
	RejectKeyMismatch RejectCode = 2 // the offer did not authenticate
	RejectBadOffer    RejectCode = 3 // unknown suite or invalid key share
)

// rejectMagic marks a REJ's private data as the handshake's.
var rejectMagic = [4]byte{'G', 'R', 'S', 'R'}

// RejectData returns the REJ private data for code.
func RejectData(code RejectCode) []byte {
	return append(rejectMagic[:], byte(code))
}

// ParseReject returns the code in a REJ's private data, if it holds one.
func ParseReject(b []byte) (RejectCode, bool) {
	if len(b) < 5 || [4]byte(b[:4]) != rejectMagic || b[4] == 0 || b[4] > byte(RejectBadOffer) {
		return 0, false
	}
	return RejectCode(b[4]), true
}

// CodeOf returns the reject code for a handshake error.
func CodeOf(err error) RejectCode {
	switch {
	case errors.Is(err, ErrNoOffer):
		return RejectNoOffer
	case errors.Is(err, ErrKeyMismatch):
		return RejectKeyMismatch
	}
	return RejectBadOffer
}

// String says what the peer refused, for the dialer's error.
func (c RejectCode) String() string {
	switch c {
	case RejectNoOffer:
		return "the peer requires encryption (Params.Security) and none was offered"
	case RejectKeyMismatch:
		return "the peer's pre-shared key differs (Params.Security.PSK)"
	case RejectBadOffer:
		return "the peer refused the encryption offer (unknown suite or invalid key share)"
	}
	return fmt.Sprintf("reject code %d", uint8(c))
}

// disconnectMagic marks a DREQ's or DREP's private data as carrying a
// disconnect tag.
var disconnectMagic = [4]byte{'G', 'R', 'S', 'D'}

// DisconnectLen is the size of DisconnectData.
const DisconnectLen = 4 + tagLen

// DisconnectData returns the private data that authenticates a DREQ (or
// DREP) sent from QP from to QP to under the connection's disconnect key:
// the magic and HMAC-SHA256(key, "disconnect" | from | to), truncated.
// It is the same for every DREQ of the connection in that direction: a
// replay can only repeat a disconnect the peer asked for.
func DisconnectData(key *[KeyLen]byte, from, to uint32) []byte {
	var qpns [8]byte
	binary.BigEndian.PutUint32(qpns[:], from)
	binary.BigEndian.PutUint32(qpns[4:], to)
	t := mac(key[:], []byte("disconnect"), qpns[:])
	return append(disconnectMagic[:], t[:]...)
}

// CheckDisconnect reports whether the private data of a DREQ holds the
// tag of DisconnectData(key, from, to).
func CheckDisconnect(key *[KeyLen]byte, privateData []byte, from, to uint32) bool {
	if len(privateData) < DisconnectLen {
		return false
	}
	want := DisconnectData(key, from, to)
	return subtle.ConstantTimeCompare(want, privateData[:DisconnectLen]) == 1
}
