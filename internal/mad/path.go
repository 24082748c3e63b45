package mad

import (
	"encoding/hex"
	"net/netip"
)

// GID is a 128-bit global identifier. On RoCEv2 it is the port's IP
// address: an IPv6 address, or an IPv4 address as ::ffff:a.b.c.d (IPv4
// mapped). The REQ's path GIDs carry that form; the rdma_cm header does not
// (CMAHeader).
type GID [16]byte

// GIDFromAddr returns the RoCEv2 GID of a: IPv4 addresses map to
// ::ffff:a.b.c.d.
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// Addr returns g as an IP address, an IPv4-mapped GID as IPv4.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

func (g GID) String() string {
	a := g.Addr()
	if a.Is4() || g[0] != 0 || g[1] != 0 {
		return a.String()
	}
	return hex.EncodeToString(g[:])
}

// Path is one path of a REQ (primary at byte 52 of the message, alternate
// at 96; IBA vol. 1 table 106) or the alternate path of a LAP. "Local" is
// the sender of the message, "remote" its receiver.
type Path struct {
	LocalLID  uint16 // 0xFFFF (permissive) when the hop limit is above 1, as on RoCE
	RemoteLID uint16
	LocalGID  GID
	RemoteGID GID
	FlowLabel uint32 // 20 bits; rdma_cm on RoCEv2: RDMACMFlowLabel of the ports
	// PacketRate is the 6-bit IB rate enum (0 = the port's current rate).
	PacketRate   uint8
	TrafficClass uint8
	HopLimit     uint8
	SL           uint8 // 4 bits
	SubnetLocal  bool  // the kernel sets it when the hop limit is at most 1
	// LocalACKTimeout is the 5-bit ACK timeout the sender computed for the
	// path (4.096 µs × 2^t); the receiver derives its packet life time
	// from it.
	LocalACKTimeout uint8
}

// pathLayout is where the fields of a Path lie, relative to the path's
// first byte; the REQ primary path starts at 52, the alternate at 96.
type pathLayout struct {
	localLID, remoteLID         field
	localGID, remoteGID         span
	flowLabel, packetRate       field
	trafficClass, hopLimit      field
	sl, subnetLocal, ackTimeout field
}

func reqPathLayout(base int) pathLayout {
	return pathLayout{
		localLID:     field{base, 0, 16},
		remoteLID:    field{base + 2, 0, 16},
		localGID:     span{base + 4, 16},
		remoteGID:    span{base + 20, 16},
		flowLabel:    field{base + 36, 0, 20},
		packetRate:   field{base + 39, 2, 6},
		trafficClass: field{base + 40, 0, 8},
		hopLimit:     field{base + 41, 0, 8},
		sl:           field{base + 42, 0, 4},
		subnetLocal:  field{base + 42, 4, 1},
		ackTimeout:   field{base + 43, 0, 5},
	}
}

// LAP's alternate path: the same fields in another order (IBA vol. 1
// table 115), the traffic class before the hop limit and the rate after it.
var lapPath = pathLayout{
	localLID:     field{20, 0, 16},
	remoteLID:    field{22, 0, 16},
	localGID:     span{24, 16},
	remoteGID:    span{40, 16},
	flowLabel:    field{56, 0, 20},
	trafficClass: field{59, 0, 8},
	hopLimit:     field{60, 0, 8},
	packetRate:   field{61, 2, 6},
	sl:           field{62, 0, 4},
	subnetLocal:  field{62, 4, 1},
	ackTimeout:   field{63, 0, 5},
}

func (l *pathLayout) decode(b []byte, p *Path) {
	*p = Path{
		LocalLID:        uint16(l.localLID.get(b)),
		RemoteLID:       uint16(l.remoteLID.get(b)),
		LocalGID:        GID(l.localGID.of(b)),
		RemoteGID:       GID(l.remoteGID.of(b)),
		FlowLabel:       uint32(l.flowLabel.get(b)),
		PacketRate:      uint8(l.packetRate.get(b)),
		TrafficClass:    uint8(l.trafficClass.get(b)),
		HopLimit:        uint8(l.hopLimit.get(b)),
		SL:              uint8(l.sl.get(b)),
		SubnetLocal:     l.subnetLocal.get(b) != 0,
		LocalACKTimeout: uint8(l.ackTimeout.get(b)),
	}
}

func (l *pathLayout) encode(e *encoder, p *Path) {
	e.set(l.localLID, uint64(p.LocalLID), "LocalLID")
	e.set(l.remoteLID, uint64(p.RemoteLID), "RemoteLID")
	e.bytes(l.localGID, p.LocalGID[:], "LocalGID")
	e.bytes(l.remoteGID, p.RemoteGID[:], "RemoteGID")
	e.set(l.flowLabel, uint64(p.FlowLabel), "FlowLabel")
	e.set(l.packetRate, uint64(p.PacketRate), "PacketRate")
	e.set(l.trafficClass, uint64(p.TrafficClass), "TrafficClass")
	e.set(l.hopLimit, uint64(p.HopLimit), "HopLimit")
	e.set(l.sl, uint64(p.SL), "SL")
	e.flag(l.subnetLocal, p.SubnetLocal, "SubnetLocal")
	e.set(l.ackTimeout, uint64(p.LocalACKTimeout), "LocalACKTimeout")
}
