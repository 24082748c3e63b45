package netio

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrNoReceiveGroups is OpenGroup's error for more than one Conn where
// receive sockets cannot share a port and divide its flows
// (ReusePortSpreads is false).
var ErrNoReceiveGroups = errors.New("netio: receive groups need Linux's SO_REUSEPORT")

// OpenGroup opens n Conns that receive on the same address and port
// (Config.ReusePort): a receive group, each Conn served by its own
// goroutine. Conn i receives the datagrams whose BTH destination QP
// number is i mod n (a socket filter the kernel runs on arrival, as a
// NIC's receive-side scaling steers by QP): the datagrams for one QP, from
// whatever source, reach the same Conn, in the order they arrived, and
// different QPs spread over the group as their numbers do. A datagram is
// steered whole: a GSO datagram or GRO run that holds packets for several
// QPs (a peer's coalesced ACKs) reaches the Conn of its first packet's QP,
// so a QP's packets may reach any Conn. n of 1 or less is Open.
//
// A port shared with SO_REUSEPORT is open to any socket of the same
// user that sets the option too, which would take a share of the flows.
// So OpenGroup first binds the port without the option, which fails if
// any other socket holds it, and only then opens the group; a socket of
// the same user that binds the port with SO_REUSEPORT in the moment
// between the two joins the group unnoticed.
//
// With cfg.Faults, Conn i's tap draws its faults with Seed+i: the group's
// taps are independent, each deterministic for what its Conn receives.
func OpenGroup(cfg Config, n int) ([]*Conn, error) {
	if n <= 1 {
		c, err := Open(cfg)
		if err != nil {
			return nil, err
		}
		return []*Conn{c}, nil
	}
	if !ReusePortSpreads {
		return nil, ErrNoReceiveGroups
	}
	full, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	local := netip.AddrPortFrom(full.Addr, full.Port)
	probe := full
	probe.ReusePort = false
	uc, _, err := listen(local, receiveSocket, &probe)
	if err != nil {
		return nil, fmt.Errorf("netio: open %v: %w", local, err)
	}
	uc.Close()
	conns := make([]*Conn, 0, n)
	for i := range n {
		ci := cfg
		ci.ReusePort = true
		if cfg.Faults != nil {
			f := *cfg.Faults
			f.Seed += uint64(i)
			ci.Faults = &f
		}
		c, err := Open(ci)
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, err
		}
		conns = append(conns, c)
	}
	// Attached once the group is whole, so that its indices are the
	// Conns'; until then, datagrams for a device opened a moment ago
	// are hashed by flow.
	if err := steerByDestQP(conns[0].rc, n); err != nil {
		for _, c := range conns {
			c.Close()
		}
		return nil, err
	}
	return conns, nil
}
