// Package ibcm is the InfiniBand communication manager of IBA vol. 1
// chapter 12 as the Linux kernel's CM (drivers/infiniband/core/cm.c) and
// rdma_cm on top of it (cma.c) behave on the wire: the connection state
// machine, transaction IDs, retransmission, duplicate and stale
// detection, timewait, and SIDR for UD. Its MADs are package mad's.
//
// The package is sans I/O, like internal/transport: it owns no socket,
// starts no goroutine and never reads the clock. A Manager (one per
// device) takes the time in every call and appends the MADs to send and
// the events to report to a caller-provided Output; Deadline says when
// OnTimer is due. The driver (the public cm package with the device's
// QP 1) receives UD SEND Only packets to QP 1 with the GSI Q_Key, hands
// their 256-byte payload to HandleMAD with the sender's address, and sends
// each Output MAD from QP 1 to QP 1 of its destination.
//
// # Active side (rdma_connect)
//
//	driver                      Manager                     peer
//	Connect(params) ─────────►  REQ ──────────────────────► (retransmitted until answered;
//	                                                          an MRA extends the wait)
//	                            ◄────────────────────────── REP
//	◄── EventReply (REP, QPAttrs)
//	QP RTR→RTS with QPAttrs
//	Ready(private data) ──────► RTU ──────────────────────►
//	◄── EventEstablished
//
// Instead of a REP the peer may answer REJ (EventRejected: no listener is
// mad.RejectInvalidServiceID, the application's refusal
// mad.RejectConsumer with its private data) or nothing
// (EventTimeout after the retransmissions: REQ timeout
// 2 × 2^(PacketLifetime−8) + 2^(ResponseTimeout−8) ms, doubling after the
// fourth retry, 70 s at most, a REJ "timeout" to the peer at the end).
//
// # Passive side (rdma_listen, rdma_accept)
//
//	peer                        Manager                     driver
//	REQ ──────────────────────► Config.Listening(service ID, from, private data)
//	                              NoListener: REJ "invalid service ID"
//	                              Refuse: REJ "consumer defined"; Drop: nothing
//	                            ──► EventConnectRequest (REQ)
//	                                                        choose a QP
//	                            ◄── Accept(params) returns QPAttrs
//	                                                        QP INIT→RTR→RTS with them,
//	                                                        then transmit the Output
//	◄──────────────────────── REP (retransmitted until the RTU)
//	RTU ──────────────────────► ──► EventEstablished
//
// The driver may call Reject instead of Accept, and Established when the
// QP receives a packet before the RTU (the RTU was lost). A duplicate REQ
// meanwhile gets an MRA (service timeout 24, about 68 s), never a second
// connection.
//
// # Teardown
//
// Disconnect sends a DREQ (retransmitted) from ESTABLISHED; the peer's DREP
// gives EventDisconnected. A peer's DREQ gives EventDisconnectRequest, and
// Disconnect then sends the DREP. Crossing DREQs are answered at once.
// Both ends go to timewait for 2^(ACK timeout−8) ms (the QP's local ACK
// timeout: about 0.5 s with rdma_cm's defaults), then EventTimewaitExit.
// The driver moves the QP to ERR on EventDisconnectRequest, EventRejected,
// EventTimeout, EventStale and before Disconnect, and may reuse its QPN
// after EventTimewaitExit. Destroy abandons a connection in any state,
// sending what the kernel's cm_destroy_id sends.
//
// # SIDR
//
// SIDRRequest sends a SIDR_REQ; the answer is EventSIDRReply (status,
// QPN, Q_Key) or EventTimeout. A received SIDR_REQ that Listening accepts
// gives EventSIDRRequest, answered with SIDRReply; without a listener the
// Manager answers status "unsupported".
//
// # Transaction IDs
//
// REQ, DREQ and SIDR_REQ start a transaction: TIDHigh << 32 | the local
// comm ID with its bytes reversed (the kernel's cm_form_tid on x86; in
// rping.pcap, TID 0x272593d07 for comm ID 0x073d5972). REP, RTU, MRA and REJ of a connection carry its REQ's TID, a DREP its
// DREQ's, a SIDR_REP its SIDR_REQ's, answers to a message without a
// connection (REJ, DREP, SIDR_REP) that message's.
//
// # Hostile peers
//
// Nothing a peer sends makes the Manager hold more than Limits allow.
// Malformed MADs and duplicates create no state. Half-open passive
// requests (received, not yet established or answered) are bounded per
// source address (beyond: dropped) and in total (beyond: the oldest is
// evicted with EventAbandoned), and expire after Limits.AcceptTimeout; all
// records, timewait included, are bounded by Limits.Records (beyond: the
// oldest timewait record ends early).
//
// # Where goroce differs from the kernel
//
//   - Timewait remembers the connection: a REQ reusing its remote QPN or
//     comm ID with the same CA GUID gets REJ "stale connection" until
//     timewait ends, as IBA intends. The kernel removes the connection
//     from its remote-ID and remote-QPN tables on entering timewait
//     (cm_enter_timewait → cm_cleanup_timewait), so it detects stale and
//     duplicate REQs only for live connections.
//   - A REQ or REP that goes unanswered ends with a REJ "timeout" to the
//     peer (IBA); the kernel sends one only when the ID is destroyed while
//     waiting.
//   - A REP reusing the QPN of a connection we hold is refused with REJ
//     "stale" and our request ends (EventRejected, Local); the kernel
//     refuses the REP but keeps retransmitting its REQ.
//   - Crossing DREQs are answered by the Manager; rdma_cm answers on the
//     application's rdma_disconnect.
//   - A REQ for a transport other than RC or UC, or with a path MTU that
//     is not an IB MTU, is refused here with its IBA reason; the kernel
//     leaves that to rdma_cm and the QP modify.
//   - A LAP on an established connection is answered with APR
//     "unsupported"; the kernel drops LAP and APR on RoCE ports.
//   - Replies go to the address the request came from; the kernel's
//     passive side addresses the REQ's primary path GID (the same on
//     RoCE).
package ibcm
