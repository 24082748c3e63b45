// Command goroce-dump prints the RoCEv2 packets of pcap captures, one line per
// packet, and checks their invariant CRC. It is the tool for debugging
// interoperability with Linux rxe, rdma-core and perftest: what tshark shows
// for RoCEv2, plus ICRC validation (which tshark 4.0 does not do) and a
// --check mode for scripts.
//
// Usage:
//
//	goroce-dump [flags] FILE.pcap...
//
// A RoCEv2 packet is a UDP datagram to port 4791 (or --port). Each line
// gives the frame number, the time since the file's first frame, source
// address and UDP port → destination address, the opcode, destination QPN,
// PSN, the AckReq/Solicited/MigReq flags (A, S, M; '-' when clear), the
// payload length, the extension headers and the ICRC status, for example:
//
//	20    1.080996  10.99.0.2:49952       → 10.99.0.3        RC RDMA_WRITE_FIRST          qpn=0x000014 psn=0x4b7ae6 ---  pay=1024  va=0x561cb6110000 rkey=0x0000054c dlen=4096  icrc=ok
//	23    1.081380  10.99.0.2:49952       → 10.99.0.3        RC RDMA_WRITE_LAST           qpn=0x000014 psn=0x4b7ae9 A--  pay=1024  icrc=ok
//	32    1.082256  10.99.0.3:49952       → 10.99.0.2        RC ACKNOWLEDGE               qpn=0x000028 psn=0x4b7ae9 ---  pay=0     aeth=ACK msn=1  icrc=ok
//
// The extension headers appear as key=value tokens in wire order: DETH
// qkey= srcqp=; FETH placement= selectivity=; RETH va= rkey= dlen= (the DMA
// length of the whole message); AtomicETH va= rkey= and add= (FETCH_ADD) or
// swap= cmp= (COMPARE_SWAP); AETH aeth=ACK, aeth=RNR_NAK timer=CODE(µs) or
// aeth=NAK:CODE_NAME, then msn=; AtomicAckETH orig=; ImmDt imm=; IETH
// inv_rkey=; and mad=CM_REQ (REP, RTU, DREQ, ...) for management datagrams
// to QP1. FECN, BECN and a P_Key other than 0xffff are shown when present.
// The last token is icrc=ok or icrc=BAD(got 0x..., want 0x...).
//
// A packet that fails to parse prints "malformed: <reason>" instead of its
// headers, and the frame goes on to the next. Other frames (TCP, ARP, ICMP,
// UDP to other ports) are skipped. With --check, a last line sums up:
//
//	check: 40 RoCEv2 packets, 0 malformed, 0 bad ICRC, 39 other frames skipped: OK
//
// Flags:
//
//	-v          also print every header field, one header per line
//	--check     print a summary line and exit 1 if a RoCEv2 packet is
//	            malformed or has a bad ICRC
//	--port N    UDP destination port of RoCEv2 (default 4791)
//	--mtu N     check payload lengths against path MTU N (256..4096);
//	            off by default, as the MTU is not in the capture
//	--qpn LIST  only packets to these destination QPNs (0x-prefixed hex or
//	            decimal, comma-separated or repeated)
//
// Exit status: 0 when all is well, 1 when --check found a problem, 2 for a
// usage error or a file that cannot be read.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
