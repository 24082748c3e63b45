package simnet_test

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/goroce/goroce/internal/simnet"
)

// pinger is a sans-I/O endpoint: it is told the time and handed datagrams,
// and leaves what it wants to send in out and when it wants to be woken in
// deadline. It sends pings numbered 1 to last, one at a time, each
// retransmitted every rto until its pong arrives.
type pinger struct {
	last, seq   uint32
	rto         time.Duration
	deadline    time.Time // zero when nothing is outstanding
	out         []byte    // datagram to send, nil if none
	retransmits int
}

func (p *pinger) start(now time.Time) {
	p.seq = 1
	p.transmit(now)
}

func (p *pinger) transmit(now time.Time) {
	p.out = binary.BigEndian.AppendUint32(p.out[:0], p.seq)
	p.deadline = now.Add(p.rto)
}

func (p *pinger) done() bool { return p.deadline.IsZero() }

// receive handles a pong; stale and duplicate pongs are ignored.
func (p *pinger) receive(now time.Time, pong []byte) {
	if p.done() || len(pong) != 4 || binary.BigEndian.Uint32(pong) != p.seq {
		return
	}
	if p.seq == p.last {
		p.deadline = time.Time{}
		return
	}
	p.seq++
	p.transmit(now)
}

// timeout retransmits the outstanding ping if its deadline has passed.
func (p *pinger) timeout(now time.Time) {
	if !p.done() && !now.Before(p.deadline) {
		p.retransmits++
		p.transmit(now)
	}
}

// Example runs the intended harness loop: a client pings a server that
// echoes every ping, over a link that loses 30% of datagrams, and
// retransmits on a timer. Ten round trips of 2 ms with a 10 ms timeout take
// virtual time only, and the seed makes the run, and this output, exact.
func Example() {
	client := netip.MustParseAddrPort("127.0.0.1:4791")
	server := netip.MustParseAddrPort("127.0.0.2:4791")

	net := simnet.New(1)
	net.SetDefaultLink(simnet.LinkConfig{
		Delay:  time.Millisecond,
		Jitter: 100 * time.Microsecond,
		Loss:   0.3,
	})
	clk := net.Clock()

	p := &pinger{last: 10, rto: 10 * time.Millisecond}
	p.start(clk.Now())
	for !p.done() {
		if p.out != nil {
			net.Send(client, server, p.out)
			p.out = nil
		}
		next, ok := net.NextEvent()
		if !ok || p.deadline.Before(next) {
			next = p.deadline
		}
		clk.AdvanceTo(next)
		net.Deliver(clk.Now(), func(from, to netip.AddrPort, datagram []byte) {
			switch to {
			case server: // the echo server, answering inline
				net.Send(server, from, datagram)
			case client:
				p.receive(clk.Now(), datagram)
			}
		})
		p.timeout(clk.Now())
	}

	s := net.Stats()
	fmt.Printf("10 pongs after %v of virtual time\n", clk.Since(simnet.Epoch()))
	fmt.Printf("retransmissions: %d\n", p.retransmits)
	fmt.Printf("datagrams sent: %d, lost: %d, delivered: %d\n", s.Sent, s.Lost, s.Delivered)
	// Output:
	// 10 pongs after 90.929437ms of virtual time
	// retransmissions: 7
	// datagrams sent: 28, lost: 7, delivered: 21
}
