package verbs

import (
	"math/rand/v2"
	"testing"
)

// Guessing attacks against a live device's identifiers (issue 21). The
// device's secrets are drawn from a fixed seed, so that the test is the same
// every run: with secrets from crypto/rand, a guess hits with the
// probability the documentation gives ((live keys)/2^32 for a key), which
// for the tries below is about 10^-3, and a test must not fail by chance.

// seedDevice replaces a freshly opened device's secrets with seeded ones.
func seedDevice(t *testing.T, d *Device, seed byte) {
	t.Helper()
	if d.mrs.fresh != 0 || d.mws.fresh != 0 {
		t.Fatal("the device already handed out keys")
	}
	r := rand.NewChaCha8([32]byte{seed, 'g', 'o', 'r', 'o', 'c', 'e'})
	d.keys = newKeySecretFrom(r)
	d.mrs = newKeyTable[mrRegion](d.keys, 0, mrEpochs, keySlots)
	d.mws = newKeyTable[MW](d.keys, mwClassBase, mwEpochs, keySlots)
	d.qpnPerm = newPerm24From(r)
	d.qpnCounter = 0
}

// TestAttackGuessRKeys: an attacker holding one rkey of a device with 64
// regions and 16 windows tries the keys a sequential layout would give
// away: the seen key ± 32768, its code with every low byte, and the
// neighbouring codes (± 4096) with its low byte; then 2^16 random keys.
// None resolves (the receive path's lookup, as for a READ's RETH).
func TestAttackGuessRKeys(t *testing.T) {
	d := openDevice(t, 1)
	seedDevice(t, d, 1)
	pd := mustPD(t, d)
	live := map[uint32]bool{}
	var seen uint32
	for i := range 64 {
		mr := mustMR(t, pd, 64, AccessLocalWrite|AccessRemoteRead|AccessRemoteWrite)
		live[mr.RKey()] = true
		if i == 31 {
			seen = mr.RKey()
		}
	}
	for range 16 {
		mw, err := pd.AllocMW(MWType2)
		if err != nil {
			t.Fatal(err)
		}
		live[mw.RKey()] = true
	}
	var tries, hits int
	try := func(k uint32) {
		if k == seen {
			return
		}
		tries++
		if r := d.mrs.lookup(k); r != nil && r.key == k {
			hits++
			t.Errorf("guess %#x (seen %#x) resolves to a region", k, seen)
		}
		if mw := d.mws.lookup(k); mw != nil && mw.RKey() == k {
			hits++
			t.Errorf("guess %#x (seen %#x) names a window", k, seen)
		}
	}
	for i := uint32(1); i <= 1<<15; i++ {
		try(seen + i)
		try(seen - i)
	}
	for b := range uint32(256) {
		try(seen&^0xff | b)
	}
	for j := uint32(1); j <= 4096; j++ {
		try((seen>>8+j)<<8 | seen&0xff)
		try((seen>>8-j)<<8 | seen&0xff)
	}
	rng := rand.New(rand.NewPCG(2, 3))
	for range 1 << 16 {
		try(rng.Uint32())
	}
	if hits != 0 {
		t.Errorf("%d of %d guesses hit one of %d live keys", hits, tries, len(live))
	}
	// Every live key still resolves: the guesses missed for a reason.
	for k := range live {
		if d.lookupMR(k) == nil && (d.lookupMW(k) == nil || d.lookupMW(k).RKey() != k) {
			t.Errorf("live key %#x does not resolve", k)
		}
	}
}

// TestAttackGuessQPNs: QP numbers seen tell nothing of the others: of 64
// live QPs, none is within 4096 of another one's number.
func TestAttackGuessQPNs(t *testing.T) {
	d := openDevice(t, 1)
	seedDevice(t, d, 2)
	pd := mustPD(t, d)
	cq, err := d.CreateCQ(4, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var qpns []uint32
	for range 64 {
		qp, err := pd.CreateQP(QPInitAttr{QPType: QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		qpns = append(qpns, qp.QPN())
	}
	seen := qpns[0]
	var hits int
	for j := uint32(1); j <= 4096; j++ {
		for _, g := range []uint32{seen + j, seen - j} {
			if g&0xFFFFFF == g && d.lookupQP(g) != nil {
				hits++
			}
		}
	}
	if hits != 0 {
		t.Errorf("%d QP numbers within 4096 of a seen one (%#x): %#x", hits, seen, qpns)
	}
}
