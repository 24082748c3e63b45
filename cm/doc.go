// Package cm is the RDMA connection manager of goroce: rdma_cm as the
// Linux kernel and librdmacm implement it on RoCE, so that goroce
// connects to rping, perftest -R, ucmatose, udaddy and the rest of
// librdmacm's world, and they to goroce. It speaks the InfiniBand CM
// (IBA vol. 1 chapter 12: REQ, REP, RTU, REJ, MRA, DREQ, DREP, SIDR_REQ,
// SIDR_REP) in 256-byte MADs to and from each device's QP 1, with
// rdma_cm's addressing (port spaces, service IDs, the header at the start
// of a REQ's private data).
//
// # Two APIs, one mechanism
//
// The net-like API connects a QP in a few calls:
//
//	// passive side
//	l, err := cm.Listen("192.0.2.1:7471")      // ":7471": every device of the process
//	req, err := l.Accept(ctx)
//	conn, err := req.Accept(ctx, qp, &cm.Params{PrivateData: myKeys})
//
//	// active side: from the QP's device
//	conn, err := cm.Dial(ctx, "192.0.2.1:7471", qp, &cm.Params{PrivateData: myKeys})
//	peerKeys := conn.Remote().PrivateData
//	<-conn.Done()                              // the peer disconnected, or Close
//
// DialUD and a listener of PortSpaceUDP (Request.AcceptUD) resolve UD
// services the same way.
//
// The event API is librdmacm's, for code ported from C and for the C
// library that implements librdmacm on goroce:
//
//	NewEventChannel                   rdma_create_event_channel
//	EventChannel.CreateID             rdma_create_id
//	ID.BindAddr, ResolveAddr,         rdma_bind_addr, rdma_resolve_addr,
//	  ResolveRoute                      rdma_resolve_route
//	ID.CreateQP, SetQP, DestroyQP     rdma_create_qp (or an external QP), rdma_destroy_qp
//	ID.Connect, Listen, Accept,       rdma_connect, rdma_listen, rdma_accept,
//	  Reject, RejectWith, Establish     rdma_reject(_ece), rdma_establish
//	ID.Disconnect, Notify             rdma_disconnect, rdma_notify
//	EventChannel.GetEvent, Event.Ack  rdma_get_cm_event, rdma_ack_cm_event
//	ID.InitQPAttr, Migrate, Destroy   rdma_init_qp_attr, rdma_migrate_id, rdma_destroy_id
//	ID.SetTOS, SetReuseAddr, ...      rdma_set_option
//
// Events have librdmacm's types and status values (EventType, Event.Status:
// a negative errno, a REJ's reason, a SIDR status), and a Go error
// (Event.Err) that matches this package's sentinels. The net-like API is
// built on the event API: Dial and Request.Accept wait on an ID's channel;
// an established Conn's events go to a handler, so no goroutine watches a
// connection. librdmacm's synchronous IDs (rdma_create_id without a
// channel, rdma_get_request) are an ID on a channel of its own with a wait
// after each call: the C library builds them that way, as librdmacm does.
//
// # Security
//
// Params.Security (the net-like API only) agrees keys for authenticated,
// encrypted RDMA between goroce peers in the REQ and REP: an X25519
// exchange authenticated by a pre-shared key, with forward secrecy, bound
// to the connection's GIDs, QPNs, starting PSNs and service ID (see
// Security and internal/seal). Each QP then seals its packets
// (verbs.QP.SetPacketKeys) and the connection's DREQs carry a tag, so that
// a DREQ forged by whoever learnt the comm IDs is refused and counted.
// A peer that does not offer (rxe, a NIC, librdmacm) gets plain RoCEv2,
// unless Security.Require refuses it; a mismatched key refuses the
// connection, and both sides' errors wrap ErrInsecure and say why. A
// passive application sees the offer in the last SecurityLen bytes of
// Request.PrivateData; Conn.Remote().PrivateData of a secured connection
// holds the peer's own bytes only. The CM's MADs themselves stay plain.
// A DREQ sent by Destroy without Close, or by the CM for a stale
// connection, has no tag: the peer of a secured connection ignores it and
// learns of the end from its QP's retries instead.
//
// # QPs
//
// rdma_cm's rules, which CreateQP, SetQP, Dial and Request.Accept follow:
// a connected QP given in RESET goes to INIT at once, with no remote
// rights yet; one given in INIT stays there, receives posted included.
// PrepareQP moves a QP to INIT that way beforehand, so that receives can
// be posted before Dial or Accept.
// When the connection's values are known, the QP gets the connection's
// rights by an INIT→INIT transition (REMOTE_WRITE, plus REMOTE_READ and
// REMOTE_ATOMIC when it serves READs and atomics), then RTR and RTS: the
// passive side before it sends the REP, the active side on the REP before
// the RTU, so each QP is in RTS before its peer may send to it. A UD QP
// goes to RTS at once with the Q_Key UDPQKey. Disconnect and a rejection
// move the QP to ERR; the CM never destroys a QP it did not create. The
// QP's values: path MTU from the active device (capped by
// Params.PathMTU), the ACK timeout the kernel's cm_ack_timeout derives
// (17 with rdma_cm's packet life time: 0.5 s), retry counts from the REQ,
// min_rnr_timer DefaultMinRNRTimer (the kernel's CM leaves 0, 655 ms,
// which stalls a sender on every RNR NAK), the address vector's flow
// label rdma_cm's, from which rxe and goroce derive the data QPs' UDP
// source port (see verbs). A QP number is not reused before its
// connection's timewait ends: devices hand QPNs out in sequence from a
// random start, and wrap only after 2^24 QPs.
//
// # Kernel RDMA devices
//
// Built with cgo and the goroce_ibverbs tag, the net-like API also connects
// QPs of kernel RDMA devices (verbs.OpenHardware: a NIC, rxe) through the
// kernel's rdma_cm and librdmacm: Dial from such a QP, and Listen on an
// address no goroce device of the process has but a kernel device does,
// return the same Listener, Request and Conn. The QP stays the
// application's; it moves with rdma_init_qp_attr's attributes (min_rnr_timer
// this package's). Private data, Reject's, Close and the peer's disconnect
// work as on goroce; so do UD services (DialUD, a ListenConfig with
// PortSpaceUDP, AcceptUD), through librdmacm's UDP port space.
// SelectiveRepeat and Security return verbs.ErrNotSupported; wildcard
// listeners stay on goroce devices. One goroutine per such connection,
// parked in Go's poller, watches its events.
//
// The event API works there too: an ID that binds an address of a kernel
// device, or resolves a destination for which no goroce device of the
// process has a route, gets an rdma_cm_id of librdmacm on a librdmacm
// channel of its EventChannel, whose events one goroutine per channel
// turns into this package's. Events, Ack, Migrate, Destroy, CreateQP,
// InitQPAttr, Establish, Reject (the consumer's reason, or
// RejectVendorOption), Disconnect, Notify and the options behave as on
// goroce; the ID's Device is the kernel device, opened once for the
// process. The QP stays the application's: the CM moves an ID's QP as
// librdmacm moves its own (INIT at CreateQP or SetQP, RTR and RTS before
// the REP is sent or once it has arrived, ERR on a REJ or Disconnect).
// Route is the kernel's path record (its MTU, hop limit, traffic class,
// flow label and packet life time are the kernel's), and SetCMTimeouts
// returns verbs.ErrNotSupported: the kernel's CM timers are its own.
//
// # Devices and addresses
//
// Every goroce device opened in the process gets the CM (an agent with
// one goroutine, driven by QP 1 and its timers) for as long as it is open:
// a REQ to a port nobody listens on is refused with REJ "invalid service
// ID". IDs name devices by IP address (one device per address); a
// wildcard listener takes requests on every device, those opened later
// included. Addresses are resolved as rdma_cm does: the device bound to
// the source address, or, for a wildcard, the one the kernel's routing
// picks as the source toward the destination (a local destination is
// reached through its own device); the kernel's routing must have a route
// from the device's address to the destination (a UDP connect, which
// sends nothing, tells). MADs go to UDP port 4791, or to the port of a
// goroce device of this process opened with another; they leave from the
// constant QP 1 source port rxe uses.
//
// # Wire protocol and timers
//
// Package internal/ibcm is the state machine (its documentation has the
// message flow, transaction IDs, and where goroce and the kernel differ);
// internal/mad the message layouts, byte-exact against rxe's captures.
// rdma_cm's values: CM response timeout 18 (2^(18-8) ms, about 1 s), 15
// retransmissions, doubling after the fourth, 70 s at most per message;
// packet life time 16; MRA service timeout 24 for duplicates; timewait
// 2^(ACK timeout - 8) ms. A REQ's private data starts with rdma_cm's 36-
// byte header (source port, source and destination address), leaving 56
// bytes to the application; a REP carries 196, a REJ 148, a SIDR_REQ 180
// after the header, a SIDR_REP 136. The wire has no length: receivers get
// the whole field, zero-padded.
//
// # Hostile peers
//
// The CM's state is bounded whatever peers send: malformed MADs are
// counted and dropped, duplicates create nothing, half-open requests are
// bounded per source and in total (the oldest evicted), a listener's
// backlog bounds the requests waiting for the application (beyond it REQs
// are dropped and their senders retransmit), and each device's queue of
// MADs waiting for its agent is bounded (a flood is dropped at the door).
package cm
