// Package cm establishes RDMA connections: it connects an RC or UC QP to a
// peer's and brings both to RTS, as librdmacm does for C programs, over a
// TCP side channel.
//
// The active side calls Dial with its QP; the passive side calls Listen,
// then Listener.Accept for each connection request, and answers it with
// Request.Accept (with its own QP) or Request.Reject. Both ends then hold a
// Conn: the QP is ready for work requests, Conn.Remote tells what the peer
// announced (including its private data, typically an rkey and an
// address), Conn.Done reports the peer's departure, and Conn.Close
// disconnects.
//
//	// passive side
//	l, err := cm.Listen(":7471")
//	req, err := l.Accept(ctx)
//	conn, err := req.Accept(ctx, qp, &cm.Params{PrivateData: myKeys})
//
//	// active side
//	conn, err := cm.Dial(ctx, "server:7471", qp, &cm.Params{PrivateData: myKeys})
//	peerKeys := conn.Remote().PrivateData
//
// # Exchange
//
// The messages are those of the IB connection manager (IBA vol. 1
// chapter 12), in a compact versioned binary form (see message.go):
//
//	active                                 passive
//	QP → INIT
//	REQ  ─────────────────────────────────▶  Listener.Accept returns the Request
//	     (QP type, QPN, PSN, GID, UDP port,
//	      path MTU, responder resources,
//	      initiator depth, retry settings,
//	      private data)
//	                                         Request.Accept: QP → INIT → RTR → RTS
//	     ◀─────────────────────────────────  REP (the same fields, negotiated)
//	QP → RTR → RTS                               or REJ (reason, private data)
//	RTU  ─────────────────────────────────▶  Request.Accept returns
//	...
//	DREQ ─────────────────────────────────▶  Done closes (either side may send it)
//
// Each side's RTR takes the peer's QPN as dest_qp_num, the peer's starting
// PSN as rq_psn and the peer's GID as the address vector's dgid; its RTS
// takes its own random starting PSN as sq_psn. The path MTU is the minimum
// of both proposals, max_dest_rd_atomic the minimum of the local
// ResponderResources and the peer's InitiatorDepth, max_rd_atomic the
// minimum of the local InitiatorDepth and the peer's ResponderResources.
// The retry settings and the RNR timer are each side's own (Params).
//
// A side that cannot accept what it receives (another protocol version,
// QP types that differ, an invalid MTU) answers with a REJ giving the
// reason, and both sides report the problem: ErrVersion or ErrMismatch.
//
// # Contexts and failures
//
// Every blocking call takes a context and returns once it ends, with an
// error wrapping ctx.Err(); a peer that sends garbage or stays silent
// produces a one-line error, never a hang. A Listener reads its peers'
// requests in the background, each within ListenConfig.HandshakeTimeout,
// so one silent peer does not hold up the others.
//
// # Limits
//
// The side channel is plain TCP; librdmacm peers, which speak the IB CM on
// QP1, are not reachable this way. Each side's device UDP port is exchanged
// and put in the QP's address vector, so goroce peers may run devices on
// another port than 4791 (RoCE peers always use 4791).
package cm
