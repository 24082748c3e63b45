package netio

import "sync/atomic"

// Counters count what a Conn did, for diagnostics and tests. The fields are
// updated atomically while the Conn runs and may be read at any time.
//
// The send counters are up to date when the sending call returns. The
// receive loop adds its counts once per batch of datagrams (one recvmmsg),
// after it has handed the batch's packets to the Handler and before it
// ends the batch (BatchEnder.EndBatch, also when it ends a long batch
// early), RxPackets last. So a Handler's effects may be seen before the
// packet that caused them is counted, and a reader that needs a datagram
// counted waits for RxPackets to include it: from then on every other
// receive counter includes what the loop did with it. (The fault tap
// counts its faults as it applies them, so before RxPackets; a datagram it
// holds back is counted in RxPackets when it arrives, and as delivered or
// dropped when it is released.)
type Counters struct {
	// RxPackets and RxBytes count every packet read from the socket (a
	// datagram, or one segment of a coalesced datagram, see RxGRO) and
	// its UDP payload bytes, including the ones dropped below.
	RxPackets atomic.Uint64
	RxBytes   atomic.Uint64
	// Malformed counts datagrams dropped before the ICRC check: not a
	// well-formed RoCEv2 packet (wire.Packet.Parse failed), larger than the
	// receive buffer (Config.MaxDatagramSize), or from an unexpected
	// address family.
	Malformed atomic.Uint64
	// ICRCErrors counts packets dropped because no IPv4 identification
	// explains their ICRC (or, over IPv6 or with StrictICRC, because it
	// does not match).
	ICRCErrors atomic.Uint64
	// ICRCIDRecovered counts packets accepted after recovering a non-zero
	// IPv4 identification from the ICRC (a 16-bit check; see
	// Config.StrictICRC).
	ICRCIDRecovered atomic.Uint64
	// ICRCIDPredicted counts packets accepted with a non-zero IPv4
	// identification that is the one after the previous packet's from the
	// same source: the segments of a GSO send (Linux numbers them 0, 1,
	// 2, ...) and runs of packets from a sender that counts
	// identifications. The prediction makes it a full 32-bit check, so
	// these are not counted in ICRCIDRecovered.
	ICRCIDPredicted atomic.Uint64
	// Delivered counts packets handed to the Handler.
	Delivered atomic.Uint64
	// Polled counts the packets of Delivered that Poll delivered, on
	// its caller's goroutine, rather than Serve.
	Polled atomic.Uint64
	// RxGRO counts datagrams the kernel coalesced (UDP_GRO) and the
	// receive loop split back into packets, each counted in RxPackets.
	RxGRO atomic.Uint64

	// TxPackets and TxBytes count packets sent and their UDP payload
	// bytes, ICRC included.
	TxPackets atomic.Uint64
	TxBytes   atomic.Uint64
	// SendErrors counts packets the kernel refused (EMSGSIZE above the
	// path MTU, ENETUNREACH, ...) and packets the caller passed malformed.
	SendErrors atomic.Uint64
	// TxGSO counts datagrams sent with UDP segmentation offload
	// (UDP_SEGMENT): several packets of one flow handed to the kernel at
	// once, each counted in TxPackets.
	TxGSO atomic.Uint64
	// TxCalls counts the system calls that sent packets (sendmmsg,
	// or sendto on the portable path): TxPackets per TxCalls is how
	// well sends are batched.
	TxCalls atomic.Uint64
	// GSOFallbacks counts Senders that stopped using segmentation offload
	// because the kernel or the route refused it; they send one datagram
	// per packet from then on.
	GSOFallbacks atomic.Uint64

	// CaptureErrors counts packets the capture tap failed to write.
	CaptureErrors atomic.Uint64

	// The fault-injection tap (Config.Faults) counts the faults it
	// applied to received datagrams: datagrams dropped, duplicated (one
	// extra copy each), corrupted (one bit flipped; each such copy is then
	// counted in ICRCErrors or Malformed), of those held back (delayed or
	// reordered) the ones delivered when due (counted once the handler
	// returned) and the ones held, and ECN-capable datagrams marked CE.
	// They stay zero without the tap. FaultReleased comes before
	// FaultDelayed so that AddTo, which reads in this order, never sums
	// more released than held.
	FaultDropped    atomic.Uint64
	FaultDuplicated atomic.Uint64
	FaultCorrupted  atomic.Uint64
	FaultReleased   atomic.Uint64
	FaultDelayed    atomic.Uint64
	FaultMarkedCE   atomic.Uint64
}

// AddTo adds each of c's counts to the same field of sum, which is not
// shared yet: the counts of a receive group (OpenGroup) as one. Each
// field is read once, in the order of the fields' declaration.
func (c *Counters) AddTo(sum *Counters) {
	for _, f := range [...]struct{ from, to *atomic.Uint64 }{
		{&c.RxPackets, &sum.RxPackets}, {&c.RxBytes, &sum.RxBytes},
		{&c.Malformed, &sum.Malformed}, {&c.ICRCErrors, &sum.ICRCErrors},
		{&c.ICRCIDRecovered, &sum.ICRCIDRecovered}, {&c.ICRCIDPredicted, &sum.ICRCIDPredicted},
		{&c.Delivered, &sum.Delivered}, {&c.Polled, &sum.Polled}, {&c.RxGRO, &sum.RxGRO},
		{&c.TxPackets, &sum.TxPackets}, {&c.TxBytes, &sum.TxBytes},
		{&c.SendErrors, &sum.SendErrors}, {&c.TxGSO, &sum.TxGSO}, {&c.TxCalls, &sum.TxCalls},
		{&c.GSOFallbacks, &sum.GSOFallbacks}, {&c.CaptureErrors, &sum.CaptureErrors},
		{&c.FaultDropped, &sum.FaultDropped}, {&c.FaultDuplicated, &sum.FaultDuplicated},
		{&c.FaultCorrupted, &sum.FaultCorrupted}, {&c.FaultReleased, &sum.FaultReleased},
		{&c.FaultDelayed, &sum.FaultDelayed}, {&c.FaultMarkedCE, &sum.FaultMarkedCE},
	} {
		f.to.Add(f.from.Load())
	}
}
