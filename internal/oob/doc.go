// Package oob speaks the out-of-band TCP exchanges that perftest (ib_write_bw,
// ib_read_lat, ...) and the rdma-core pingpong examples (ibv_rc_pingpong,
// ibv_uc_pingpong, ibv_ud_pingpong, ibv_srq_pingpong) run before any RDMA
// traffic, when they are not using rdma_cm: each side learns the other's QP
// number, starting PSN, GID and, for perftest, the rkey and address of its
// buffer. Both tools listen on TCP port 18515 ([DefaultPort]) by default and
// the client connects.
//
// The package does no RDMA itself. It turns local queue-pair descriptions
// into the exact bytes those programs write, parses theirs strictly, and runs
// the exchanges in the order the programs expect, so that a goroce program
// can be either peer of a real perftest or pingpong binary.
//
// # perftest
//
// [PerftestConn] wraps a connected net.Conn. Every exchange is a fixed-size
// block: the client writes its block and then reads the server's, the server
// reads first and then writes (perftest's ctx_xchg_data_ethernet and
// ctx_hand_shake). The blocks, in the order the test programs use them:
//
//   - the version, a 16-byte NUL-padded string ([PerftestConn.ExchangeVersions]);
//   - the page ("cycle buffer") and cache line sizes as big-endian 32-bit
//     integers ([PerftestConn.ExchangeSysData]);
//   - the port MTU as the decimal text of the ibv_mtu enum, "3\0" for 1024
//     ([PerftestConn.ExchangeMTU]);
//   - one key line per QP, "LID:OUT_READS:QPN:PSN:RKEY:VADDR:GID...:SRQN:"
//     in fixed-width lowercase hex ([Dest], [AppendKeyLine], [ParseKeyLine],
//     [PerftestConn.ExchangeDest]); the same line, re-sent, is perftest's
//     barrier ([PerftestConn.Barrier]);
//   - the bandwidth report, field by field in big-endian binary
//     ([BWReport], [PerftestConn.ExchangeBWReport]);
//   - a last barrier before closing, followed by "done\0" in perftest before
//     6.17 ([PerftestConn.Close]).
//
// Which blocks a test uses, and where the local work (creating the QPs,
// connecting them, running traffic) falls between them, depends on the test
// program; [PerftestSequence] lists the steps and [PerftestConn.Run] runs
// them with callbacks for the local work.
//
// The version a side announces decides what its peer sends later (the
// system data from 5.32, a 2-byte MTU from 5.31, 8-byte iteration counts
// from 5.33, and from 6.28 a binary parameter negotiation that embeds a raw
// struct ibv_device_attr). goroce announces [DefaultPerftestVersion], below
// 6.28, so that no perftest version skips the steps above or asks for the
// negotiation; see [PerftestConfig.Version].
//
// # Pingpong
//
// The pingpong examples exchange one 52-byte text message each way,
// "LID:QPN:PSN:GID\0" with the GID as 32 hex digits ([PingpongDest],
// [AppendPingpongDest], [ParsePingpongDest]); the client then writes
// "done\0". The server connects its QP to the client's before it answers
// ([PingpongServer], [PingpongClient]). ibv_srq_pingpong sends
// [PingpongSRQMaxQP] such messages each way, one per QP and zero ones for
// the rest ([PingpongSRQServer], [PingpongSRQClient]).
//
// # Errors and cancellation
//
// Every exchange takes a context: its deadline becomes the connection's
// deadline and cancelling it interrupts a blocked read or write. A peer that
// sends malformed bytes, stops half way or closes early yields a one-line
// error wrapping [ErrMalformed], [ErrIncompatibleVersion], io.EOF,
// io.ErrUnexpectedEOF or the context's error; after any error a
// PerftestConn refuses further exchanges, since the two byte streams are no
// longer in step.
package oob
