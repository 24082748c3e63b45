// Package netio moves RoCEv2 packets between goroce's transport and the
// network through ordinary UDP sockets: no raw sockets, no kernel module,
// no privileges (larger socket buffers are used when the process has
// CAP_NET_ADMIN).
//
// A [Conn] owns one socket bound to the device's address and UDP port
// (4791 by default) on which every packet for the device arrives, and a pool
// of send sockets, one per UDP source port in use: RoCEv2 senders keep one
// source port per QP in 0xC000-0xFFFF ([SourcePortForFlow],
// [SourcePortForQPN]), and a socket sends from the port it is bound to.
// [Conn.Sender] hands out those sockets, reference counted. On Linux they
// stay out of Go's network poller (nothing reads them): a socket in the
// runtime's epoll instance has the kernel wake that instance for every
// datagram it sent, as its send buffer drains, and with more than one
// processor that woke an idle thread in epoll_wait per datagram; see
// openSendSocket.
//
// Sending ([Sender.Send], [Sender.SendBatch] with sendmmsg) takes a packet
// from the BTH through the pad and appends its ICRC, computed over the IP
// and UDP headers the kernel will build. Receiving ([Conn.Serve]) reads
// batches with recvmmsg into buffers allocated once, parses each datagram
// with wire.Packet.Parse, checks its ICRC and calls the [Handler] inline on
// the receive goroutine: no channel hop and no allocation per packet. A
// Handler that is a [BatchEnder] learns when a batch ends, to send what it
// caused at once.
//
// # Replies
//
// [Conn.ReplySender] sends from the Conn's own socket, so from its port
// (4791), rather than from a per-QP port. goroce's devices use it for the
// acknowledgements (ACK, NAK, RNR NAK) the QPs of one receive batch make:
// with many active QPs, each QP's acknowledgement from its own socket was a
// sendmmsg of its own, where one socket sends them all in one call, as one
// GSO datagram per peer, which the peer's GRO receives as one buffer. The
// source port means nothing to receivers (rxe finds the QP from the BTH and
// checks the addresses), and requests and READ responses keep the QP's
// port, so only the ECMP spreading of acknowledgements is lost; see
// verbs/engine_send.go for the ordering argument and
// verbs.DeviceConfig.PerQPReplyPort for the switch that keeps them on the
// QP's port.
//
// # Segmentation and receive offload
//
// The per-packet cost of the kernel's UDP path, not copying, bounds the
// throughput of MTU-sized datagrams, so SendBatch hands consecutive packets
// of a flow to the kernel as one datagram with UDP_SEGMENT (GSO), which is
// cut into the packets as late as possible (by the NIC, by the kernel before
// a device that cannot, or, on loopback, at the receiving socket), and the
// receive socket sets UDP_GRO, so that such runs may arrive as one buffer,
// which Serve splits. Every packet on the wire is an ordinary RoCEv2 packet;
// see gso_linux.go for the IPv4 identification each segment gets (0, 1, 2,
// ... within a super-packet) and the fallback. Config.NoGSO and
// Config.NoGRO turn either off.
//
// # The IPv4 identification and the ICRC
//
// The ICRC covers the IPv4 identification field. On transmit, Linux sends
// identification 0 from an unconnected socket with DF set (IP_PMTUDISC_DO),
// so every goroce socket is unconnected and sets DF, and the ICRC is computed
// for 0; a connect()ed socket would count identifications and rxe would drop
// its packets. The segments of a GSO datagram are numbered on from there:
// segment i carries identification i, and its ICRC is computed for i. On
// receive, a UDP socket does not reveal the identification, and rxe counts
// it per socket; the receive loop recovers it from the ICRC itself by
// solving a small linear system over GF(2) (wire.ICRCChecker, in
// internal/wire/icrc_recv.go). A packet sent with
// identification 0, or with the one after the previous packet's from the
// same source (GSO segments, runs from a counting sender), gets a full
// 32-bit check; one sent with another identification a 16-bit check
// (Config.StrictICRC refuses those). DF is assumed set and IPv4 options
// absent, as every RoCEv2 sender does. IPv6 has no identification: its
// header is rebuilt whole and checked on 32 bits.
//
// # Capture
//
// [Conn.SetCapture] writes every packet sent or accepted to a pcap file
// with the IP and UDP headers rebuilt, for tshark and goroce-dump.
//
// # Fault injection
//
// For tests, Config.Faults drops, duplicates, corrupts, delays and reorders
// received datagrams before they are parsed, deterministically from a seed;
// corrupted datagrams are then dropped by the ICRC check like any damaged
// packet. The tap is compiled only with the goroce_faults build tag: without
// it Open refuses Faults ([ErrFaultsNotBuilt]).
//
// # Platforms
//
// On Linux the sockets use recvmmsg and sendmmsg, UDP_GRO and UDP_SEGMENT,
// IP_PKTINFO, IP_PMTUDISC_DO, UDP_NO_CHECK6_RX and a socket filter on the
// send sockets (socket_linux.go, mmsg_linux.go, gso_linux.go,
// recv_linux.go, send_linux.go). Every other GOOS (macOS, FreeBSD,
// Windows), and Linux built with the goroce_portable tag (so that the
// portable path is tested on Linux too), takes plain UDP through the net
// package (recv_other.go, send_other.go, socket_other.go), which differs:
//
//   - one system call per datagram each way, no offloads: a fraction of
//     Linux's throughput for MTU-sized packets; a packet with a Payload is
//     copied once into the Sender's scratch buffer;
//   - no receive groups ([OpenGroup] of more than one Conn fails with
//     [ErrNoReceiveGroups]; [ReusePortSpreads] is false);
//   - [Conn.Poll] delivers nothing and reports Serve busy (busy polling
//     gains nothing; the poller yields to Serve), and a batch (for
//     [BatchEnder]) is one datagram;
//   - no DF: a packet larger than the path MTU is fragmented by the
//     kernel instead of refused with EMSGSIZE;
//   - the ICRC is computed for IPv4 identification 0, which Linux sends
//     with DF set, but which other kernels need not: IPv4 packets then
//     reach goroce peers (which recover the identification) but may be
//     dropped by strict receivers (rxe, NICs). IPv6 has no identification
//     and is unaffected;
//   - the destination address of a datagram is the bound address (no
//     IP_PKTINFO), which it always is for a socket bound to one address;
//     IPv6 datagrams with UDP checksum 0 (rxe's) may be dropped by the
//     kernel.
package netio
