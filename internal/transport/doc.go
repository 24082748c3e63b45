// Package transport implements the reliable connected (RC) transport of a
// queue pair: the requester, the completer and the responder of IBTA
// chapter 9, split as in Linux rxe (rxe_req.c, rxe_comp.c, rxe_resp.c).
// The unreliable connected (UC) and unreliable datagram (UD) transports
// (Config.Type) reuse its queues and checks without acknowledgements,
// retries or responder resources (uc.go, ud.go).
//
// The package is sans I/O: it owns no sockets, starts no goroutines and
// never reads the clock. Every entry point of a QP takes the current time
// and appends the packets to send to a caller-provided Output; Deadline says
// when OnTimer is due. The caller (the verbs device with netio, or a
// simulated network in tests) parses and ICRC-checks incoming packets,
// hands them to HandlePacket, appends the ICRC to outgoing ones and sends
// them to the destination given to SetDest.
//
// # Boundaries
//
// Memory resolves keys to bytes (verbs implements it over its MR table), so
// that this package does not import verbs. The enums both sides use (work
// request and completion opcodes, completion statuses and flags, send and
// access flags, QP states and types) are internal/ibv's, with libibverbs'
// values, so they cross to verbs without a conversion. Work requests
// (SendWQE, RecvWQE) are copied into fixed slots of bounded rings at post
// time; completions (Completion) go to a CompletionQueue. A steady state
// allocates nothing: packet buffers are reused by Output, payload is copied
// once between registered memory and the packet.
//
// # Requester and completer
//
// The requester segments each work request by the path MTU and assigns its
// PSNs: SEND and WRITE as FIRST/MIDDLE/LAST or ONLY (RETH on the first,
// ImmDt or IETH on the last), a READ as one request consuming one PSN per
// response packet, an atomic as one request. It asks for an ACK on the last
// packet of every message and at least every 64 packets (SetAckEvery),
// keeps at most a window of PSNs unacknowledged (256 at most by default,
// SetMaxUnackedPSNs; it adapts, see below), at most max_rd_atomic READs
// and atomics outstanding, and holds a fenced work request until every
// earlier READ and atomic has completed.
//
// The completer retires work requests in posting order. A coalesced ACK
// completes every SEND and WRITE up to its PSN; a READ response or atomic
// ACK completes its READ or atomic and implicitly acknowledges what was
// sent before; an acknowledgement of a later request while a READ or atomic
// is unanswered means its response was lost and starts a retry, as rxe does.
// Retransmission is go-back-N from the oldest unacknowledged PSN: a partly
// acknowledged SEND or WRITE resumes at its first unacknowledged packet, a
// partly answered READ asks again for the missing bytes only, with an
// adjusted RETH, at the PSN of its first missing response.
//
// # Selective repeat between goroce peers
//
// SetSelectiveRepeat, which both QPs must be given (nothing on the wire
// negotiates it: verbs.QPAttr.SelectiveRepeat, set by the application or
// the connection's setup), replaces go-back-N (sr.go, rto.go):
//
//   - The responder keeps requests ahead of the expected PSN, whole, in a
//     buffer of four windows (srWindow: four times the QP's maximum
//     window rounded up to a power of two, at most 1,024 packets of
//     MTU+64 bytes, allocated once, at the first out-of-order packet) and
//     runs them through
//     respond, as if they had just arrived, when the PSNs before them have
//     been executed. Every rule of the in-sequence path holds unchanged:
//     receive WQEs in message order, WRITE placement from the FIRST's RETH,
//     READs and atomics executed once and in order, RNR and errors where
//     they would have stopped. The ACKs the replayed packets ask for
//     become one at the end.
//   - Instead of a sequence NAK it sends a SACK (wire.RCSACK, opcode 0xC0):
//     the first missing PSN and a bitmap of the PSNs held after it, when a
//     packet opens a new gap or asks for an ACK, and after a replay that
//     leaves a gap.
//   - The requester stamps every transmission with a counter. A SACK
//     acknowledges the PSNs before its own and marks the held ones; every
//     packet not held whose latest stamp is older than the first stamp of
//     a held one is lost and resent (RACK, RFC 8985, by transmission
//     order), before anything new. This spends no retry_cnt and does not
//     narrow the window. A lost READ response or atomic ACK still goes
//     back N (lostResponse).
//   - The window bounds the PSNs in flight that no SACK showed held
//     (RFC 6675's pipe, by PSN), within a span of four windows from the
//     oldest unacknowledged PSN (srBlocked): new packets keep flowing past
//     a hole while its resend travels, which on a path with more than a
//     window in its queues is what keeps a 1 % loss from stalling the
//     requester (TestSelectiveRepeatSendsPastAHole).
//   - The adaptive timeout (rto.go: RFC 6298 over the QP's own round
//     trips, Karn's rule, floor 1 ms, doubled per expiry, at most half the
//     IBTA timeout) probes the oldest unacknowledged packet and the newest
//     one when nothing was acknowledged for an RTO, spending no
//     retry_cnt; it is armed only while it expires before the IBTA timer,
//     which is unchanged. The IBTA
//     timer's first expiry since progress probes the same way; a second
//     one in a row forgets the SACKs and goes back N.
//
// A QP without it never holds a request nor sends a SACK, and treats a
// SACK it receives as a stale response: against rxe or a NIC the wire is
// IBTA's.
//
// # Congestion control
//
// SetCongestionControl (cc.go) turns on DCQCN's notification point
// (MarkCE: a CNP, at most one per interval, for packets the caller saw
// marked CE) and reaction point (dcqcn.go: a received CNP limits the
// QP's rate; pump paces its requests with a token bucket), and a
// Swift-style window from the measured round trips (swift.go). Both are
// per QP and read no clock: their timers are settled from the time of
// each call.
//
// # Responder
//
// HandlePacket runs the responder's checks in the order of rxe's state
// table: PSN (expected, duplicate, or ahead: a sequence NAK, repeated only
// for packets that ask for an ACK, until the expected PSN arrives), opcode
// sequence, operation enabled by the
// QP's access flags, resources (a receive WQE for SEND and WRITE with
// immediate, else an RNR NAK with min_rnr_timer), length (C9-92/C9-94, and
// against the RETH length and the receive buffer), rkey (Memory.Remote,
// before a byte moves; a zero-length READ or WRITE names no memory,
// C9-88), execute, acknowledge. Duplicate SENDs and WRITEs are
// re-acknowledged, duplicate READs answered again from memory, duplicate
// atomics from the responder resources ring (max_dest_rd_atomic entries),
// never executed twice. Atomics serialise on an AtomicLocks shared by the
// device. READ replies go out in bursts of 64 packets, so that no call
// produces more than that whatever the READ length; Deadline asks for an
// immediate OnTimer to send the next burst.
//
// # Behaviour chosen where rxe and IBTA leave room
//
//   - retry_cnt 7 means 7 retries (IBTA); only rnr_retry 7 is infinite.
//     A timeout and a PSN sequence NAK both spend one retry, as in rxe; a
//     NAK-started retry is not restarted by further NAKs until progress
//     (rxe's started_retry), and a sequence NAK during an RNR wait is left
//     to the retransmission that ends the wait. Any progress refills both
//     budgets.
//   - The first packet resent after a rewind asks for an ACK, so that a
//     retry round that gets through is acknowledged even if the rest of it
//     is lost again (IBTA allows AckReq on any packet), and goes out three
//     times (four after a second round without progress): a round then
//     stalls only if every copy or its answer is lost, about 5 % instead
//     of 36 % at 20 % loss. Duplicates are the responder's to absorb
//     (re-acknowledged, READs answered again, atomics replayed), so this is
//     safe with any compliant peer, rxe included.
//   - The requester's window adapts between a floor of 128 PSNs (rxe's
//     fixed window) and the maximum (SetMaxUnackedPSNs; by default 1 MiB
//     of PSNs at the path MTU, 256 at MTU 4096 up to 512 at smaller ones:
//     defaultWindow; the default window lets small packets, of at most
//     2 KiB, go on up to 512 PSNs at any MTU: windowFor).
//     Every go-back-N retry (retransmit timeout, sequence NAK, lost READ
//     response or atomic ACK) halves it, not below the floor; every 32
//     PSNs acknowledged after that widen it by one, up to the maximum. A
//     loss resends everything sent after it, so on a lossy path the
//     window stays near the floor and a loss costs half the resending,
//     while a clean path keeps the full maximum, which fast local links
//     need (on loopback, 64 KiB WRITEs at 256 PSNs run ~1.5 times as fast
//     as at 128). The rule is deterministic (no clock, no randomness).
//     Growth by one per acknowledged PSN (doubling per window) reopened
//     the window before the next loss and measured little better than a
//     fixed 256 in simulation; one per 8 to one per 32 measured alike, on
//     test/faults/loss.sh 1.3 to 1.9 times the throughput of a fixed 256
//     at 1 % and 5 % loss. While the window is narrowed, the requester
//     asks for an ACK proportionally more often (every 32 packets at half
//     the window, with the default 64 of SetAckEvery), so that a window
//     held as many packets that drew a repeated sequence NAK as before:
//     without that, WRITEs at 20 % loss waited for the retransmit timer
//     twice as often and lost half their throughput. (Measured when the
//     responder repeated its NAK for every packet asking for an ACK; it
//     now NAKs once per gap, so the extra requests only bring ACKs
//     sooner, and a lost NAK costs a timeout.) A maximum at or below
//     the floor is a fixed window. A new QP, RESET and SetMaxUnackedPSNs
//     start at the maximum.
//   - A READ response or atomic ACK beyond the expected PSN shows that an
//     earlier response was lost: the requester goes back at once without
//     spending retry_cnt, once per progress; a response PSN that is always
//     lost still ends in RETRY_EXC_ERR after retry_cnt+1 timeouts.
//     Responses are taken in PSN order only. A sequence NAK for a PSN
//     already acknowledged is stale and ignored.
//   - The responder sends one sequence NAK per PSN gap and drops the
//     out-of-sequence requests after it silently until the expected PSN
//     arrives, whatever they ask (IBTA 9.7.5.2.2, as rxe): a NAK per packet
//     asking for an ACK recovered a lost NAK sooner, but let forged packets
//     draw one NAK (and a go-back-N of the real peer) each. A lost NAK costs
//     the requester its retransmit timer. The requester goes back once per
//     gap: repeated NAKs before progress, and NAKs for acknowledged PSNs,
//     change nothing.
//   - A replayed READ starting inside the original range is answered with
//     FIRST (or ONLY) at the requested PSN, as a new request for that
//     range; the completer accepts both that and rxe's MIDDLE/LAST
//     continuation.
//   - A duplicate SEND or WRITE is re-acknowledged only when it asks for an
//     ACK (rxe acknowledges every one); retransmitted messages always end
//     with a packet that asks.
//   - Responder errors of IBTA classes A and C (invalid request, remote
//     access, remote operational) NAK the request and move the responder's
//     QP to ERR, as rxe does; a receive WQE the message held completes with
//     REM_INV_REQ_ERR, REM_ACCESS_ERR, LOC_LEN_ERR (SEND longer than the
//     buffer) or LOC_PROT_ERR (receive buffer not writable, answered with a
//     remote operational error NAK).
//   - A QP's access flags not allowing an operation give an invalid request
//     NAK (rxe), not a remote access error.
//   - Posting to a QP in ERR completes the request at once with
//     WR_FLUSH_ERR (IBTA C10-42, current rxe).
//   - A work request whose local memory is invalid fails with LOC_PROT_ERR
//     before any of its packets is sent, once every earlier request has
//     completed; the QP then goes to ERR.
//   - Responses leave in PSN order. Requests arriving while READ replies
//     are still being sent are executed at once; their READ replies and
//     atomic ACKs queue behind (max_dest_rd_atomic+1 entries; a READ or
//     atomic beyond that is dropped as if lost), and their ACK or NAK waits
//     until the queue has drained, the latest superseding earlier ones. A
//     duplicate READ restarts the queue at its PSN, since the requester went
//     back to it (go-back-N).
//   - Overflowing a completion queue moves the QP to ERR.
package transport
