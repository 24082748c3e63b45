package simnet

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
	"testing"
	"time"
)

// FuzzNetwork runs a script of network operations decoded from the fuzzer's
// bytes and checks the invariants that must survive any sequence of them:
// every copy is accounted for, no datagram arrives before it was sent, an
// uncorrupted copy is byte for byte what was sent and a corrupted one differs
// in exactly one bit, and a drained network is empty.
//
// Each operation is one opcode byte and up to two argument bytes; a script
// that runs out of bytes ends.
func FuzzNetwork(f *testing.F) {
	f.Add(int64(1), []byte("\x00\x01\x10\x00\x02\x20\x01\x05\x02"))
	f.Fuzz(func(t *testing.T, seed int64, script []byte) {
		addrs := []netip.AddrPort{addrA, addrB, addrC}
		n := New(seed)
		clk := n.Clock()

		var originals [][]byte // by id, the first four bytes
		var sentAt []time.Duration
		// consistent reports whether some datagram already sent could have
		// become b: the same length, and differing from it in exactly one
		// bit if corrupted, in none otherwise. A flipped bit may be in the
		// id, so the neighbours of b's id are candidates too.
		consistent := func(b []byte, corrupted bool) bool {
			if len(b) < 4 {
				return false
			}
			want := 0
			if corrupted {
				want = 1
			}
			id := binary.BigEndian.Uint32(b)
			for bit := -1; bit < 32; bit++ {
				cand := id
				if bit >= 0 {
					cand ^= 1 << bit
				}
				if cand >= uint32(len(originals)) || len(originals[cand]) != len(b) || sentAt[cand] > clk.now {
					continue
				}
				d := 0
				for i, c := range originals[cand] {
					d += bits.OnesCount8(b[i] ^ c)
				}
				if d == want {
					return true
				}
			}
			return false
		}
		n.SetTap(func(at time.Time, from, to netip.AddrPort, b []byte, fate Fate) {
			outcomes := fate &^ (FateDuplicate | FateCorrupted)
			if bits.OnesCount8(uint8(outcomes)) != 1 {
				t.Fatalf("fate %v has not exactly one outcome", fate)
			}
			if at.Sub(Epoch()) != clk.now {
				t.Fatalf("tap at %v, clock at %v", at.Sub(Epoch()), clk.now)
			}
			if !consistent(b, fate&FateCorrupted != 0) {
				t.Fatalf("%v copy %x matches nothing sent", fate, b)
			}
		})
		delivered := uint64(0)
		recv := func(from, to netip.AddrPort, b []byte) { delivered++ }

		for len(script) >= 3 {
			op, x, y := script[0], script[1], script[2]
			script = script[3:]
			a, b := addrs[x%3], addrs[(x/3)%3]
			switch op % 8 {
			case 0, 1: // send
				d := make([]byte, 4+int(y)*5)
				binary.BigEndian.PutUint32(d, uint32(len(originals)))
				for i := 4; i < len(d); i++ {
					d[i] = byte(i) ^ d[3]
				}
				originals = append(originals, d)
				sentAt = append(sentAt, clk.now)
				n.Send(a, b, d)
			case 2:
				clk.Advance(time.Duration(y) * 10 * time.Microsecond)
			case 3:
				n.Deliver(clk.Now().Add(time.Duration(y)*10*time.Microsecond), recv)
			case 4:
				if y&1 == 0 {
					n.Partition(a, b)
				} else {
					n.PartitionUntil(a, b, clk.Now().Add(time.Duration(y)*10*time.Microsecond))
				}
			case 5:
				n.Heal(a, b)
			case 6: // configure a link from the argument bits
				cfg := LinkConfig{
					Delay:      time.Duration(y&3) * 100 * time.Microsecond,
					Jitter:     time.Duration(y>>2&1) * 100 * time.Microsecond,
					Loss:       float64(y>>3&1) * 0.3,
					Duplicate:  float64(y>>4&1) * 0.3,
					Corrupt:    float64(y>>5&1) * 0.3,
					MTU:        int(y>>6&1) * 300,
					Bandwidth:  int64(y>>7&1) * 1e6,
					QueueLimit: int(x >> 6),
				}
				if x&0x20 != 0 {
					cfg.Reorder, cfg.ReorderDelay = 0.3, 200*time.Microsecond
				}
				if x&0x10 != 0 {
					n.SetDefaultLink(cfg)
				} else {
					n.SetLink(a, b, cfg)
				}
			case 7:
				n.ClearLink(a, b)
			}
			checkConservation(t, n.Stats())
		}
		drain(n, recv)
		s := n.Stats()
		t.Logf("%+v", s)
		checkConservation(t, s)
		if s.InFlight != 0 || n.InFlight() != 0 {
			t.Fatalf("drained network has %d (%d) in flight", s.InFlight, n.InFlight())
		}
		if s.Sent != uint64(len(originals)) || s.Delivered != delivered {
			t.Fatalf("stats say sent %d delivered %d; script sent %d, received %d",
				s.Sent, s.Delivered, len(originals), delivered)
		}
	})
}
