// Package simnet is a deterministic, seeded, in-process datagram network with
// a virtual clock, for testing protocol state machines without sockets or
// wall-clock time.
//
// goroce's RC transport (requester, responder, completer) is sans-I/O: it
// takes packets and the current time and returns packets to send and the
// deadline of its next timer. simnet supplies the two things around it: a
// [Network] that carries datagrams between addresses with configurable delay,
// jitter, loss, duplication, corruption, reordering, MTU, bandwidth, queue
// limits and partitions ([LinkConfig]), and the [Clock] they all read. A
// second of retransmission timeouts costs no real time, and a run is fully
// reproducible: the same seed and the same sequence of calls give the same
// deliveries, byte for byte and nanosecond for nanosecond, so a failure found
// by a randomised test replays exactly.
//
// The package knows nothing of RoCE: datagrams are []byte and endpoints are
// [netip.AddrPort] values, the identity a device has on a real network.
//
// # The harness loop
//
// A test drives endpoints and network from one goroutine, jumping the clock
// from event to event. Endpoints live in a slice, not a map: the order of
// Send calls is part of what a seed reproduces, and map iteration order is
// random.
//
//	net := simnet.New(seed)
//	net.SetDefaultLink(simnet.LinkConfig{Delay: 5 * time.Microsecond, Loss: 0.01})
//	clk := net.Clock()
//	for !done() {
//		// 1. Hand what the endpoints emitted to the network.
//		for _, ep := range endpoints {
//			for _, p := range ep.Outgoing() {
//				net.Send(ep.Addr, p.To, p.Bytes)
//			}
//		}
//		// 2. The next event: a delivery, a timer of the clock, or an
//		//    endpoint's own deadline.
//		next, ok := net.NextEvent()
//		for _, ep := range endpoints {
//			if d, armed := ep.Deadline(); armed && (!ok || d.Before(next)) {
//				next, ok = d, true
//			}
//		}
//		if !ok {
//			break // idle: nothing in flight, no timer pending
//		}
//		// 3. Jump to it, deliver what is due, fire what expired.
//		clk.AdvanceTo(next)
//		net.Deliver(clk.Now(), func(from, to netip.AddrPort, b []byte) {
//			byAddr[to].Receive(clk.Now(), from, b)
//		})
//		for _, ep := range endpoints {
//			ep.OnTimer(clk.Now()) // no-op unless its deadline has passed
//		}
//	}
//
// The package example runs this loop for a ping-pong with retransmissions
// over a lossy link.
//
// The datagram passed to the receive function is only valid during the call;
// the network recycles its buffer, so that Send and Deliver allocate nothing
// once the simulation has warmed up. The sender's buffer, conversely, may be
// reused as soon as Send returns.
//
// Timers of the Clock ([Clock.AfterFunc]) are for the harness's own
// scripted events (partition a link at 5 ms, heal it at 20 ms); the clock
// fires them while advancing, and [Network.NextEvent] accounts for them.
//
// A [Tap] sees every datagram and its [Fate], for logging or for writing a
// pcap file; [Stats] counts the same per link and in total.
package simnet
