//go:build linux && !goroce_portable

package netio

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// UDP segmentation offload (GSO) and receive offload (GRO).
//
// A 64 KiB RDMA WRITE at path MTU 4096 is 16 packets. Sent one datagram
// each, the kernel runs its whole UDP/IP output path, and on loopback the
// receiver's input path, 16 times; that per-packet cost, not copying,
// bounds the throughput. With UDP_SEGMENT the Sender hands the kernel one
// datagram holding consecutive packets of a flow back to back, and a
// segment size: the kernel builds one super-packet and cuts it into
// datagrams of that size as late as it can (in the NIC, when it offloads
// UDP segmentation; on loopback only when the receiving socket wants
// single datagrams). With UDP_GRO on the receive socket, the kernel may
// hand such a run over as one buffer with its segment size in a control
// message (on loopback, the super-packet as sent), and Serve splits it.
//
// # The IPv4 identification of segments
//
// The ICRC covers the IPv4 identification, so the sender must know the
// identification each segment will carry. Linux gives the super-packet
// the identification it gives any datagram of the socket (0: unconnected,
// DF set, see setSocketOptions), and the segmentation (inet_gso_segment,
// in software or as NICs do it in TSO style) numbers the segments on from
// it: segment i carries identification i. This was checked with tcpdump
// on a veth pair whose gso_max_segs was 1, which forces segmentation in
// software before the wire: a super-packet of 5 segments left as
// datagrams with identifications 0, 1, 2, 3, 4, all with DF. (On loopback,
// and on a veth that offloads segmentation, tcpdump shows the unsegmented
// super-packet with identification 0; segmentation then happens at the
// receiving socket, the same way.) So the Sender computes each segment's
// ICRC for identification i, and a receiver that reads the IP header, like
// rxe, finds it right. goroce's receiver, which cannot read it, predicts
// it: the identification after the previous packet's from the same source
// (see wire.ICRCChecker), which keeps a full 32-bit check.
//
// IPv6 has no identification: nothing changes between segments.
//
// # Limits and fallback
//
// A super-packet carries at most maxGSOSegments segments and maxGSOBytes
// bytes of UDP payload. All segments but the last have the same size; the
// last may be shorter, which fits a message's packets exactly (full-MTU
// packets, then the remainder). The kernel refuses UDP_SEGMENT when the
// segment does not fit the route's MTU (EINVAL), when the device cannot
// checksum (EIO), or when it does not know the option (kernels before
// 4.18: ENOPROTOOPT at the probe). A Sender whose send fails so stops
// using segmentation, counts it (Counters.GSOFallbacks) and resends the
// packets one datagram each, so the error, if any, is reported as without
// offload.

const (
	// maxGSOSegments is the most segments per super-packet: the kernel's
	// UDP_MAX_SEGMENTS (64 before Linux 6.9, 128 since).
	maxGSOSegments = 64
	// maxGSOBytes is the largest UDP payload of a super-packet: an IPv4
	// datagram's (65535 less the 20-byte IP and 8-byte UDP headers); an
	// IPv6 one could be 20 bytes larger.
	maxGSOBytes = 65535 - 20 - 8
	// groBufferSize is the receive buffer per datagram with UDP_GRO: a
	// coalesced datagram is at most one IP datagram's worth.
	groBufferSize = 65536
)

// gsoCmsgSpace is the control-message room of one UDP_SEGMENT message (a
// uint16 segment size).
var gsoCmsgSpace = unix.CmsgSpace(2)

// probeOffloads sets UDP_GRO on the receive socket and checks that the
// kernel knows UDP_SEGMENT, as far as cfg allows; it reports what the Conn
// may use. A kernel that refuses either option just goes without it.
func probeOffloads(rc syscall.RawConn, cfg *Config) (gso, gro bool) {
	_ = rc.Control(func(fd uintptr) {
		if !cfg.NoGSO {
			_, err := unix.GetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT)
			gso = err == nil
		}
		if !cfg.NoGRO {
			gro = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1) == nil
		}
	})
	return gso, gro
}

// putGSOCmsg writes a UDP_SEGMENT control message for segments of size
// bytes into b, which has gsoCmsgSpace bytes, and returns its length.
func putGSOCmsg(b []byte, size int) int {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = unix.SOL_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(b[unix.CmsgLen(0):], uint16(size))
	return gsoCmsgSpace
}

// recvControl returns what the control messages of a received datagram
// tell: the destination address (IP_PKTINFO or IPV6_PKTINFO; false when
// absent), the segment size of a coalesced datagram (UDP_GRO; 0 when
// absent) and the ECN field (IP_TOS or IPV6_TCLASS; ECNUnknown when
// absent). GRO coalesces only datagrams with the same TOS, so the ECN
// field holds for every segment.
func recvControl(oob []byte) (dst netip.Addr, haveDst bool, segSize int, ecn ECN) {
	ecn = ECNUnknown
	for len(oob) >= unix.SizeofCmsghdr {
		h, data, rest, err := unix.ParseOneSocketControlMessage(oob)
		if err != nil {
			break
		}
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			// struct in_pktinfo: ifindex, spec_dst (a local address
			// for replies), addr (the header's destination).
			dst, haveDst = netip.AddrFrom4([4]byte(data[8:12])), true
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			// struct in6_pktinfo: addr, ifindex.
			dst, haveDst = netip.AddrFrom16([16]byte(data[0:16])), true
		case h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && len(data) >= 4:
			// An int: the size of every segment but the last.
			segSize = int(binary.NativeEndian.Uint32(data[:4]))
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			// One byte: the TOS.
			ecn = ECN(data[0] & ecnMask)
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			// An int: the traffic class.
			ecn = ECN(binary.NativeEndian.Uint32(data[:4]) & ecnMask)
		}
		oob = rest
	}
	return dst, haveDst, segSize, ecn
}
