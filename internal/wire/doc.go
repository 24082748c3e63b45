// Package wire is the RoCEv2 wire format: typed views over packet bytes, the
// opcode table, a parser, append-style builders and the invariant CRC. It
// holds no state of its own (an ICRCChecker's cache belongs to its caller,
// like a Packet) and does no I/O; everything is bit-compatible with Linux
// rxe, checked against real captures.
//
// # Packet layout
//
// A RoCEv2 packet is an InfiniBand transport packet carried in UDP to port
// 4791 (RoCEv2Port):
//
//	Ethernet | IPv4 (20, DF) or IPv6 (40) | UDP (8) | BTH (12) | extension headers | payload | pad (0-3) | ICRC (4)
//
// The base transport header (BTH) names the opcode, the destination QP and
// the PSN. The opcode decides which extension headers follow, always in the
// same relative order (see Hdr): DETH (UD), FETH (FLUSH), RETH (RDMA WRITE
// first/only, READ request, FLUSH, ATOMIC_WRITE), AtomicETH (COMPARE_SWAP,
// FETCH_ADD), AETH (acknowledgements and read responses), AtomicAckETH
// (ATOMIC_ACKNOWLEDGE), ImmDt (*_WITH_IMMEDIATE) and IETH
// (SEND_*_WITH_INVALIDATE). The pad brings the payload to a multiple of 4
// bytes; the ICRC, a CRC-32 over the invariant fields of the IP, UDP and
// transport headers and the payload, ends the packet least significant byte
// first.
//
// # What the package provides
//
//   - Views: BTH, RETH, AETH, AtomicETH, AtomicAckETH, DETH, ImmDt, IETH and
//     FETH are []byte types with a getter and a setter per field, Fields to
//     read them all and Encode to write them all (reserved bits included, so
//     that a parsed header re-encodes byte for byte). IPv4, IPv6 and UDP views
//     and SplitIPUDP serve tools that read whole frames.
//   - The opcode table: Opcode.Info gives the transport, the extension
//     headers, their length, the payload rule and the kind of operation of
//     every RC, UC and UD opcode and of CNP.
//   - Packet.Parse: splits a UDP payload into views without copying or
//     allocating, and checks what the wire format alone determines (header
//     version, opcode, lengths, pad, payload length rules).
//   - Builders: the *Fields types append their header to a byte slice;
//     AppendHeaders writes a BTH and the opcode's extension headers from a
//     Headers value; PadCount, AppendPad and AppendICRC finish a packet.
//   - ICRC: ICRC, ICRCParts and CheckICRC over real headers; ICRCv4,
//     ICRCv6, ICRCAddrs and ICRCAddrsParts from addresses and ports, for a
//     sender on a UDP socket, where the kernel writes the IP and UDP headers
//     (IPUDPHeaders builds the same headers, for captures).
//   - The receive-side check for a UDP socket, which does not show the IPv4
//     identification the ICRC covers: ICRCChecker predicts it per source or
//     recovers it from the ICRC by solving a small linear system over GF(2)
//     (icrc_recv.go).
//
// # What it does not do
//
// It does not validate anything that needs state: P_Key and Q_Key, whether
// the destination QP exists, PSN order, opcode sequences, RETH lengths against
// memory regions. Those are the transport's checks. It does not check the
// ICRC during Parse (the IP header is not part of its input); callers use
// CheckICRC. It does not support reliable datagram (RD) or XRC opcodes, nor
// native InfiniBand (LRH/GRH) framing.
//
// PSNs are in package psn; QPN and MSN are the 24-bit scalars defined here.
package wire
