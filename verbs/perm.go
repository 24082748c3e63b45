package verbs

import (
	"crypto/rand"
	"io"
)

// perm24 is a secret permutation of the 24-bit numbers, drawn when a device
// opens: it makes the identifiers the device hands out (QP numbers, the
// upper 24 bits of memory keys) unpredictable while a counter behind them
// keeps them unique and lets the receive path map one back to its table
// slot in O(1) without a lock.
//
// It is a balanced Feistel network on two 12-bit halves whose round
// functions are tables of random 12-bit values, not derived from a shorter
// key. With random round functions Luby and Rackoff's bounds apply (and
// Patarin's for more rounds): eight rounds are far more than an attacker
// who sees a few identifiers, with no encryption oracle, can exploit; what
// keeps the identifiers secret is the 64 KiB drawn from crypto/rand, not
// the construction. Both directions cost eight table loads.
type perm24 struct {
	f [permRounds][1 << 12]uint16
}

const permRounds = 8

// newPerm24 draws a permutation from crypto/rand.
func newPerm24() *perm24 { return newPerm24From(rand.Reader) }

// newPerm24From draws a permutation from r: crypto/rand's Reader, or a
// seeded generator in tests that need the same identifiers every run.
func newPerm24From(r io.Reader) *perm24 {
	p := new(perm24)
	var b [2 << 12]byte
	for i := range p.f {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			panic("perm24: " + err.Error()) // crypto/rand never fails (Go 1.24)
		}
		for j := range p.f[i] {
			p.f[i][j] = (uint16(b[2*j]) | uint16(b[2*j+1])<<8) & 0xfff
		}
	}
	return p
}

// encrypt maps x (24 bits; higher bits are ignored) to its image.
func (p *perm24) encrypt(x uint32) uint32 {
	l, r := x>>12&0xfff, x&0xfff
	for i := range permRounds {
		l, r = r, l^uint32(p.f[i][r])
	}
	return l<<12 | r
}

// decrypt is encrypt's inverse.
func (p *perm24) decrypt(y uint32) uint32 {
	l, r := y>>12&0xfff, y&0xfff
	for i := permRounds - 1; i >= 0; i-- {
		l, r = r^uint32(p.f[i][l]), l
	}
	return l<<12 | r
}
