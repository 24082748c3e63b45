package seal

import (
	"bytes"
	"crypto/ecdh"
	"testing"
)

// FuzzOpen feeds arbitrary bytes to an Opener. It must never panic, what
// it accepts must lie inside the packet, and a sealed packet with any byte
// changed but the masked ECN byte must be refused.
func FuzzOpen(f *testing.F) {
	s := NewSealer(&testKey)
	f.Add(seal1(s, writeFirst(0), []byte("payload!"), 0), 0, byte(0))
	f.Add(seal1(s, writeFirst(0)[:12], nil, 0), 20, byte(1))
	f.Add(make([]byte, MinSealedLen), 3, byte(0x80))
	f.Fuzz(func(t *testing.T, data []byte, at int, flip byte) {
		o := NewOpener(&testKey)
		fresh := NewOpener(&testKey)
		if plain, err := o.Open(bytes.Clone(data)); err == nil && len(plain) != len(data)-Overhead {
			t.Fatalf("opened %d bytes of %d", len(plain), len(data))
		}
		if len(data) < 12 {
			return
		}
		pkt := seal1(NewSealer(&testKey), data[:12], data[12:], 0)
		if at < 0 {
			at = -at
		}
		at %= len(pkt) - 4 // the ICRC's place is not authenticated
		pkt[at] ^= flip
		_, err := fresh.Open(pkt)
		if tampered := flip != 0 && at != 4; tampered == (err == nil) {
			t.Fatalf("flip %#x at %d: %v", flip, at, err)
		}
	})
}

// FuzzRespond feeds arbitrary offers to the passive side of the
// handshake: it must never panic and never accept an offer not made with
// the PSK.
func FuzzRespond(f *testing.F) {
	psk := []byte("0123456789abcdef")
	// A fixed ephemeral key: the fuzzing workers rebuild the same offer.
	priv, _ := ecdh.X25519().NewPrivateKey(bytes.Repeat([]byte{7}, 32))
	i := &Initiator{psk: psk, priv: priv, pub: [32]byte(priv.PublicKey().Bytes())}
	offer, _ := i.Offer()
	f.Add(offer[:])
	f.Add(make([]byte, HelloLen))
	f.Add(append([]byte("GRS\x01"), make([]byte, 48)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr := testTranscript()
		_, _, err := Respond(psk, b, &tr)
		if err == nil && !bytes.Equal(b[:HelloLen], offer[:]) {
			t.Fatal("a forged offer was accepted")
		}
		_, _ = ParseReject(b)
		if CheckDisconnect(&testKey, b, 1, 2) && !bytes.Equal(b[:DisconnectLen], DisconnectData(&testKey, 1, 2)) {
			t.Fatal("a forged disconnect tag was accepted")
		}
	})
}
