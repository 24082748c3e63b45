package verbs

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net/netip"
	"strconv"
)

// GID is a 128-bit global identifier (union ibv_gid), in wire (network) byte
// order. For RoCEv2 a GID is an IPv6 address, or an IPv4-mapped IPv6 address
// (::ffff:a.b.c.d) for an IPv4 endpoint.
type GID [16]byte

// GIDFromAddr returns the GID of an IP address: the IPv4-mapped form for an
// IPv4 address, the address itself for IPv6. The zone, if any, is dropped.
func GIDFromAddr(a netip.Addr) GID {
	return GID(a.As16())
}

// Addr returns the IP address the GID stands for: an IPv4 address for an
// IPv4-mapped GID (rxe sends IPv4 packets to such a GID), otherwise the IPv6
// address.
func (g GID) Addr() netip.Addr {
	return netip.AddrFrom16(g).Unmap()
}

// IsZero reports whether g is the all-zero GID (an unused table entry).
func (g GID) IsZero() bool { return g == GID{} }

// isIPv4Mapped reports whether g carries an IPv4 address.
func (g GID) isIPv4Mapped() bool { return netip.AddrFrom16(g).Is4In6() }

// String returns the GID in IPv6 text form, e.g. "fe80::250:56ff:fea7:7d03"
// or "::ffff:10.1.16.62", as ibv_devinfo -v prints it.
func (g GID) String() string {
	return netip.AddrFrom16(g).String()
}

// GIDType is the type of a GID table entry (enum ibv_gid_type).
type GIDType int

// GID types, with the libibverbs values.
const (
	GIDTypeIB     GIDType = 0 // IBV_GID_TYPE_IB
	GIDTypeRoCEv1 GIDType = 1 // IBV_GID_TYPE_ROCE_V1
	GIDTypeRoCEv2 GIDType = 2 // IBV_GID_TYPE_ROCE_V2
)

// String returns the name ibv_devinfo prints, e.g. "RoCE v2".
func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return "GIDType(" + strconv.Itoa(int(t)) + ")"
}

// GIDEntry is one entry of a port's GID table (struct ibv_gid_entry).
type GIDEntry struct {
	GID   GID
	Index int     // index in the table
	Port  int     // port number; always 1
	Type  GIDType // always GIDTypeRoCEv2
}

// GUID is a 64-bit EUI-64 identifier such as a node GUID. The value is the
// big-endian interpretation of the eight wire bytes.
type GUID uint64

// String formats the GUID as ibv_devinfo does: four groups of four hex
// digits, e.g. "0250:56ff:fea7:7d03".
func (g GUID) String() string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", uint16(g>>48), uint16(g>>32), uint16(g>>16), uint16(g))
}

// interfaceID derives a modified EUI-64 interface identifier for a device.
//
// rxe takes its node GUID and its link-local GID from the netdev's MAC
// address. A goroce device has no MAC, so it makes one up: a stable FNV-1a
// hash of the bound IP address and UDP port, turned into a locally
// administered unicast MAC (second-lowest bit of the first byte set, lowest
// bit clear), then expanded to EUI-64 the standard way (ff:fe in the middle,
// universal/local bit inverted). The result is the same on every run for the
// same address and port, and differs between devices sharing an address on
// different ports.
func interfaceID(a netip.Addr, udpPort uint16) [8]byte {
	h := fnv.New64a()
	a16 := a.As16()
	h.Write(a16[:])
	var p [2]byte
	binary.BigEndian.PutUint16(p[:], udpPort)
	h.Write(p[:])
	sum := h.Sum64()

	var mac [6]byte
	for i := range mac {
		mac[i] = byte(sum >> (8 * i))
	}
	mac[0] = mac[0]&^0x01 | 0x02

	return [8]byte{mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
}

// buildGIDTable returns the device's GID table for port 1: index 0 is the
// link-local GID fe80::/64 with the device's interface identifier (what the
// kernel derives from the MAC), index 1 is the GID of the bound address
// (IPv4-mapped for IPv4). Both are RoCE v2 GIDs.
func buildGIDTable(a netip.Addr, ifid [8]byte) []GIDEntry {
	var ll GID
	ll[0], ll[1] = 0xfe, 0x80
	copy(ll[8:], ifid[:])
	return []GIDEntry{
		{GID: ll, Index: 0, Port: 1, Type: GIDTypeRoCEv2},
		{GID: GIDFromAddr(a), Index: 1, Port: 1, Type: GIDTypeRoCEv2},
	}
}
