// Package rsocket is a stream socket over goroce: net.Conn and
// net.Listener (Dialer.DialContext, ListenConfig.Listen) whose bytes move
// by RDMA, wire-compatible with librdmacm's rsockets, so that a Go program
// and rstream, or a C program's sockets under librspreload, talk to each
// other.
//
// # The protocol, as rsockets speaks it
//
// Connection (dial.go, listen.go, endpoint.go): each side creates an RC QP
// (384 send and 384 receive work requests, every send signaled), a CQ, and
// registers three regions once: a send buffer, a receive buffer (128 KiB
// each unless Config says otherwise) and a target SGL ring of two 16-byte
// SGEs. It posts every receive, then connects through the RDMA CM (package
// cm) with struct rs_conn_data as private data, in the REQ and the REP
// (wire.go): version 1, flags, its receive credits (384), the ring's
// address and rkey, and the first half of its receive buffer, every field
// big-endian.
//
// Data (conn.go, flow.go): Write copies into the send buffer, a ring, and
// writes each message straight into the peer's advertised region by RDMA
// WRITE WITH IMMEDIATE; the immediate data is op << 29 | length
// (RS_OP_DATA). The sender may write while it has send work requests, 2 KiB
// of free send buffer, credits (its message count differs from the
// sequence number the peer allowed) and room in the peer's current region;
// a message ends at that region's end. The receiver's completions queue
// the messages' lengths; Read copies from the receive buffer, in order,
// wrapping at its end.
//
// Credits (flow.go, progress.go): when half of the receive buffer has been
// read, or half of the credits used, the receiver sends RS_OP_SGL with the
// sequence number the sender may reach (messages read plus 384), and with
// half a buffer free also writes that half's SGE into the sender's ring,
// entries 1, 0, 1, ... in turn: in the ring owner's byte order (the
// RS_CONN_FLAG_NET flag; goroce announces little-endian and writes to a
// big-endian peer big-endian). Control messages, at most four in flight,
// are zero-length writes with immediate data: RS_CTRL_SHUTDOWN for
// CloseWrite, RS_CTRL_DISCONNECT for Close, which then disconnects through
// the CM.
//
// Completions reach a connection through a verbs.CompletionSink, which
// queues them on the device's goroutine and wakes Read and Write; they
// apply them (rsockets' rs_process_cq) and return credits. A connection
// has no goroutine of its own.
//
// # Where goroce differs
//
// Messages are up to 256 KiB from a write's first byte (rsockets sends
// 2 KiB, doubling to 64 KiB, to overlap its copy with the transfer): a
// receiver takes any length its regions hold, and larger messages halve
// the per-message cost. Not implemented: the iWARP variant
// (RS_OPT_MSG_SEND: messages as SENDs), AF_IB addresses and datagram
// rsockets.
//
// # The iomap and keepalive
//
// iomap.go: Conn.IOMap is riomap (a buffer registered for the peer's
// writes, announced as an rs_iomap in the peer's iomap table, which
// follows its target SGL ring, with RS_OP_IOMAP_SGL), Conn.IOWrite is
// riowrite (plain RDMA WRITEs into the peer's mappings by offset, which
// the peer is not told of) and Conn.IOUnmap riounmap; Config.IOMapSize is
// RDMA_IOMAPSIZE, the entries this side offers the peer (none by
// default, as in rsockets). keepalive.go: Config.KeepAlive,
// Conn.SetKeepAlive and SetKeepAlivePeriod are SO_KEEPALIVE and
// TCP_KEEPIDLE: a zero-length RDMA WRITE every period, whose failure ends
// a connection whose peer vanished. A peer that breaks
// the protocol (more bytes or messages than its credits, reserved
// operations, a data message whose length differs from its write's) ends
// the connection with an error wrapping errProtocol; a request whose
// private data is not rs_conn_data version 1 is rejected and counted
// (Listener.Refused).
//
// # Devices
//
// A goroce device is bound to one IP address. Unless Dialer.Device or
// ListenConfig.Device names one, the package opens the device of the local
// address (Dialer.LocalAddr, the kernel's source address toward the
// peer, or the listening address) and shares it among the connections and
// listeners on that address, closing it a moment after the last is gone.
//
// # Kernel RDMA devices
//
// Built with cgo and the goroce_ibverbs tag, Dialer.Device and
// ListenConfig.Device may be a kernel RDMA device (verbs.OpenHardware: a
// NIC, rxe); cm then connects through librdmacm, and the listening
// address must be one of the device's. Such a CQ takes no completion
// sink: one goroutine per connection waits on it (CQ.Wait, parked in Go's
// poller) and queues its completions for Read and Write. The regions of
// IOMap work, but a NIC does not report the peer's stores into them
// (verbs.MR.WaitRemoteWrite is ErrNotSupported there).
package rsocket
