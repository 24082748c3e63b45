// Package pingpong is the implementation of goroce-pingpong,
// goroce-uc-pingpong, goroce-ud-pingpong and goroce-srq-pingpong: rdma-core's
// ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong on a
// goroce device, wire-compatible with those programs on any RoCEv2 device
// (rxe or hardware) in either role. Each command is [Run] with its
// [Transport].
//
//	goroce-pingpong [options]          start a server and wait for a client
//	goroce-pingpong [options] <host>   connect to the server at <host>
//
// The two sides meet over TCP (port 18515 by default) and trade their QP
// number, starting PSN and GID in the examples' 52-byte message, the client
// ending with "done" (ibv_srq_pingpong: 256 messages each way, one per QP
// and all-zero ones after them). Then, as in the examples, each side keeps
// rx-depth receives posted; the client sends first, and each side sends
// its next message on a QP only when its previous send there has completed
// and the peer's message has arrived, for --iters round trips. Each side
// prints its own and its peer's address, then the throughput and the time
// per iteration, in the examples' format:
//
//	  local address:  LID 0x0000, QPN 0x000025, PSN 0xce973c, GID ::ffff:10.99.0.2
//	  remote address: LID 0x0000, QPN 0x000011, PSN 0x2812e2, GID ::ffff:10.99.0.3
//	16384 bytes in 0.03 seconds = 4.87 Mbit/sec
//	4 iters in 0.03 seconds = 6731.75 usec/iter
//
// # Transports
//
//   - [RC] (goroce-pingpong, ibv_rc_pingpong): one RC QP, 4096-byte
//     messages by default.
//   - [UC] (goroce-uc-pingpong, ibv_uc_pingpong): one UC QP, moved to RTR
//     and RTS with only the attributes UC has (no timeout, retry or RNR
//     attributes). UC is unreliable: a lost packet loses its message and
//     the run waits for it until interrupted, as ibv_uc_pingpong does.
//   - [UD] (goroce-ud-pingpong, ibv_ud_pingpong): one UD QP with Q_Key
//     0x11111111 and an address handle toward the peer's GID (hop limit
//     64); 1024-byte messages by default, at most the port's active MTU, and
//     no -m. Every receive buffer has 40 bytes more for the GRH, and the
//     message is sent from after them, so that each side echoes what it
//     received. As in ibv_ud_pingpong, the local address line reads
//     "PSN 0x...: GID" (a colon, not a comma).
//   - [SRQ] (goroce-srq-pingpong, ibv_srq_pingpong): -q RC QPs (16 by
//     default, at most 255, no more than -r) receiving from one shared
//     receive queue holding -r receives, one line per QP for each address.
//     The buffer is zeros rather than 0x7b bytes, and messages are sent from
//     a second copy of it: ibv_srq_pingpong sends and receives through one
//     buffer on all its QPs at once, which in Go would be a data race
//     between the device placing one QP's message and gathering another's
//     (the bytes on the wire are the same zeros). As in ibv_srq_pingpong,
//     --iters counts the messages of all QPs together (each QP ping-pongs
//     on its own, and the run ends once both sides have sent and received
//     that many), so up to -q-1 messages more may be under way at the end.
//     Both sides must use the same -q: a difference is an error at the
//     exchange.
//
// # Options
//
// Those of the rdma-core examples that apply to a software RoCE device, with
// the same defaults, plus --bind and --counters:
//
//	-p, --port=PORT       TCP port to listen on or connect to (18515)
//	-d, --ib-dev=NAME     name of the local goroce device (goroce0)
//	-i, --ib-port=PORT    port of the device (1, its only port)
//	-s, --size=BYTES      message size (4096; UD 1024)
//	-m, --mtu=BYTES       path MTU: 256, 512, 1024, 2048 or 4096 (1024; not UD)
//	-q, --num-qp=N        SRQ only: number of QPs (16)
//	-r, --rx-depth=N      receives kept posted (500)
//	-n, --iters=N         round trips (1000)
//	-l, --sl=SL           service level (0)
//	-e, --events          sleep on completion events instead of polling
//	-g, --gid-idx=INDEX   local GID index (1: the GID of the device address;
//	                      with --hw the RoCE v2 GID of the local address,
//	                      else the first one of an IPv4 address)
//	-c, --chk             validate the received data
//	    --bind=ADDR       IP address of the local device
//	    --counters        print the device's counters at the end (not with
//	                      --hw: a kernel device's are zero)
//	    --hw              -d names a kernel RDMA device (rxe0, mlx5_0), opened
//	                      through libibverbs (verbs.OpenHardware; a build with
//	                      -tags goroce_ibverbs): the same program on hardware
//
// A goroce device is opened on an IP address, which is also its GID and the
// source of its RoCEv2 packets. Without --bind the client uses the address
// its TCP connection to the server goes out from, and the server the address
// the client reached it on, so the default works whenever the TCP peers can
// reach each other's RoCEv2 port (UDP 4791). With --bind the server listens
// on that address only. The server serves one client and exits, as the
// examples do.
//
// RoCE carries a GRH in every packet, so unlike the examples the default is
// to send a GID (index 1); an rdma-core peer must be run with -g and the
// index of its IPv4-mapped or IPv6 GID (usually 1 on rxe).
//
// With -c the client writes the examples' pattern before the first send
// (the buffer is 0x7b bytes, zeros with SRQ, with 0 at the start of each
// page) and both sides check that the last message received carries it: the
// examples' check (made by their server only), made on every byte. A page
// that differs is reported as "invalid data in page N" and makes the exit
// status 1.
//
// With --counters each side prints, after its report and once its device is
// closed, the device's counters (verbs.Counters), one "name value" line
// each, in rxe's hw_counters order and names (sent_pkts, rcvd_pkts,
// duplicate_request, ...) followed by goroce's own.
//
// Messages are received into and sent from one buffer, as in the examples,
// so each side echoes what it last received.
//
// Without -e, completions are polled as in the examples, but an empty CQ is
// not spun on: the program arms it and sleeps on its completion channel
// until the next completion. The device runs as goroutines of this process,
// and spinning would keep them from running (see pingpongCtx.poll). With -e
// the loop is the examples' event loop: wait for an event, re-arm, poll,
// and acknowledge all events at the end.
package pingpong
