package simnet

import (
	"math"
	"net/netip"
	"time"
)

// Partition cuts a and b off from each other, in both directions, until
// [Network.Heal]: every datagram between them sent from now on is dropped,
// and so is every one already in flight when it arrives. Traffic between
// either of them and other addresses is unaffected.
func (n *Network) Partition(a, b netip.AddrPort) {
	n.partitions[pairKey(a, b)] = math.MaxInt64
}

// PartitionUntil cuts a and b off from each other, like Partition, until the
// clock reaches until; datagrams arriving at or after until get through.
// It replaces any earlier partition of the pair.
func (n *Network) PartitionUntil(a, b netip.AddrPort, until time.Time) {
	n.partitions[pairKey(a, b)] = until.Sub(epoch)
}

// Heal ends a partition between a and b. Datagrams sent from now on get
// through, as do those in flight that arrive from now on.
func (n *Network) Heal(a, b netip.AddrPort) {
	delete(n.partitions, pairKey(a, b))
}

// Partitioned reports whether a and b are partitioned at the clock's current
// time.
func (n *Network) Partitioned(a, b netip.AddrPort) bool {
	return n.partitioned(a, b, n.clock.now)
}

func (n *Network) partitioned(a, b netip.AddrPort, now time.Duration) bool {
	if len(n.partitions) == 0 {
		return false
	}
	k := pairKey(a, b)
	until, ok := n.partitions[k]
	if !ok {
		return false
	}
	if now >= until {
		// Expired: forget it, so that the common case (no partitions)
		// goes back to skipping the lookup.
		delete(n.partitions, k)
		return false
	}
	return true
}

// pairKey names the unordered pair {a, b}: partitions cut both directions.
func pairKey(a, b netip.AddrPort) linkKey {
	if a.Compare(b) > 0 {
		a, b = b, a
	}
	return linkKey{a, b}
}
