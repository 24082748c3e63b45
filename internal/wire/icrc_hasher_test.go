package wire

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// hasherCase is a packet as the send path holds it: headers and payload
// apart, the pad implied by the BTH.
type hasherCase struct {
	src, dst      netip.AddrPort
	id            uint16
	hdrs, payload []byte
}

// whole returns the transport (BTH through pad, zero pad) of c.
func (c *hasherCase) whole() []byte {
	pad := make([]byte, BTH(c.hdrs).PadCount())
	return append(append(bytes.Clone(c.hdrs), c.payload...), pad...)
}

// randomHasherCase draws a packet between a few addresses and ports, of
// the header and payload lengths the data path sends (the fold's threshold
// on both sides), with a random BTH (its pad count too).
func randomHasherCase(r *rand.Rand) hasherCase {
	addrs := []string{"10.0.0.1", "10.0.0.2", "192.168.7.9", "::ffff:10.0.0.3", "fd00::2"}
	a := func() netip.Addr { return netip.MustParseAddr(addrs[r.IntN(len(addrs))]) }
	ports := []uint16{4791, 49152, 49153, 61234}
	c := hasherCase{
		src: netip.AddrPortFrom(a(), ports[r.IntN(len(ports))]),
		dst: netip.AddrPortFrom(a(), ports[r.IntN(len(ports))]),
		id:  uint16(r.IntN(1 << 16)),
	}
	if r.IntN(2) == 0 {
		c.id = uint16(r.IntN(64)) // a GSO run's identifications
	}
	c.hdrs = make([]byte, BTHLen+[]int{0, 4, 16, 20, 28}[r.IntN(5)])
	for i := range c.hdrs {
		c.hdrs[i] = byte(r.Uint32())
	}
	// 511 and 512 straddle the fold's threshold (foldMin on amd64).
	sizes := []int{0, 1, 8, 63, 64, 65, 500, 511, 512, 1024, 4096}
	c.payload = make([]byte, sizes[r.IntN(len(sizes))])
	for i := range c.payload {
		c.payload[i] = byte(r.Uint32())
	}
	return c
}

// TestICRCHasherMatchesReference checks Addrs and AddrsParts against the
// ICRC over really built headers, for random packets in runs that share a
// key (the cached prefix) and runs that do not, IPv4 and IPv6, below and
// above the fold's threshold, with zero and non-zero pad bytes.
func TestICRCHasherMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h ICRCHasher
	calls := uint64(0) // of AddrsParts, the cache's path or not
	for i := range 20000 {
		c := randomHasherCase(r)
		run := 1 + r.IntN(8)
		for j := range run {
			c.id += uint16(j) // a run: same key, identifications going up
			whole := c.whole()
			calls++
			want := refICRCAddrs(c.src, c.dst, c.id, whole)
			if got := h.AddrsParts(c.src, c.dst, c.id, c.hdrs, c.payload); got != want {
				t.Fatalf("case %d.%d: AddrsParts %v→%v id %#x, %d+%d bytes: %#08x, want %#08x", i, j, c.src, c.dst, c.id, len(c.hdrs), len(c.payload), got, want)
			}
			if got := h.Addrs(c.src, c.dst, c.id, whole); got != want {
				t.Fatalf("case %d.%d: Addrs: %#08x, want %#08x", i, j, got, want)
			}
			if pad := BTH(c.hdrs).PadCount(); pad > 0 {
				// A peer's pad need not be zero.
				whole[len(whole)-1] = 0xA5
				if got, want := h.Addrs(c.src, c.dst, c.id, whole), refICRCAddrs(c.src, c.dst, c.id, whole); got != want {
					t.Fatalf("case %d.%d: Addrs with a non-zero pad: %#08x, want %#08x", i, j, got, want)
				}
			}
		}
	}
	// Runs of up to 8 share a key, and the cases draw few keys: far
	// fewer prefixes than packets if the cache serves them.
	if h.computed == 0 || h.computed > calls/2 {
		t.Fatalf("%d prefixes computed for %d packets: the cache did not run", h.computed, calls)
	}
}

// TestICRCHasherRun checks that a GSO run of small packets (one key,
// identifications 0 to 63) computes its header prefix once.
func TestICRCHasherRun(t *testing.T) {
	src, dst := netip.MustParseAddrPort("10.0.0.1:49152"), netip.MustParseAddrPort("10.0.0.2:4791")
	hdrs := transportOf(RCRDMAWriteOnly, 0)
	payload := bytes.Repeat([]byte{7}, 64)
	var h ICRCHasher
	for id := range uint16(64) {
		if got, want := h.AddrsParts(src, dst, id, hdrs, payload), refICRCAddrs(src, dst, id, append(bytes.Clone(hdrs), payload...)); got != want {
			t.Fatalf("id %d: %#08x, want %#08x", id, got, want)
		}
	}
	if h.computed != 1 {
		t.Fatalf("%d prefixes computed for one run of 64 packets, want 1", h.computed)
	}
	if n := testing.AllocsPerRun(100, func() { h.AddrsParts(src, dst, 5, hdrs, payload) }); n != 0 {
		t.Fatalf("AddrsParts allocates %v times", n)
	}
}

// FuzzICRCHasher checks the hasher against ICRCAddrs on arbitrary
// transports, twice in a row (the second from the cached prefix).
func FuzzICRCHasher(f *testing.F) {
	f.Add(transportOf(RCRDMAWriteOnly, 64), uint16(0), false)
	f.Add(transportOf(RCSendOnly, 5), uint16(9), false)
	f.Add(transportOf(RCAcknowledge, 0), uint16(1), true)
	f.Add(transportOf(RCRDMAWriteMiddle, 1024), uint16(3), false)
	f.Fuzz(func(t *testing.T, transport []byte, id uint16, v6 bool) {
		if len(transport) < BTHLen || len(transport) < BTHLen+int(BTH(transport).PadCount()) {
			return
		}
		src, dst := netip.MustParseAddrPort("10.99.0.2:49952"), netip.MustParseAddrPort("10.99.0.3:4791")
		if v6 {
			src, dst = netip.MustParseAddrPort("[fd00::2]:49952"), netip.MustParseAddrPort("[fd00::3]:4791")
		}
		var h ICRCHasher
		want := ICRCAddrs(src, dst, id, transport)
		for range 2 {
			if got := h.Addrs(src, dst, id, transport); got != want {
				t.Fatalf("Addrs %#08x, want %#08x", got, want)
			}
		}
		end := len(transport) - int(BTH(transport).PadCount())
		for _, split := range []int{BTHLen, end} {
			if nonZero(transport[end:]) {
				break // AddrsParts hashes a zero pad
			}
			if got := h.AddrsParts(src, dst, id, transport[:split], transport[split:end]); got != want {
				t.Fatalf("AddrsParts split at %d: %#08x, want %#08x", split, got, want)
			}
		}
	})
}

func nonZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return true
		}
	}
	return false
}

// BenchmarkICRCSmallWrite compares the plain and cached ICRC of a 64-byte
// WRITE's packet, as the send path computes it.
func BenchmarkICRCSmallWrite(b *testing.B) {
	src, dst := netip.MustParseAddrPort("10.0.0.1:49152"), netip.MustParseAddrPort("10.0.0.2:4791")
	hdrs := transportOf(RCRDMAWriteOnly, 0)
	payload := bytes.Repeat([]byte{7}, 64)
	b.Run("plain", func(b *testing.B) {
		for i := range b.N {
			ICRCAddrsParts(src, dst, uint16(i&63), hdrs, payload)
		}
	})
	b.Run("hasher", func(b *testing.B) {
		var h ICRCHasher
		for i := range b.N {
			h.AddrsParts(src, dst, uint16(i&63), hdrs, payload)
		}
	})
}
