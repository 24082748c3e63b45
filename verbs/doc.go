// Package verbs is the public API of goroce: the RDMA verbs programming model
// of libibverbs (rdma-core), in Go, for a software RoCEv2 device.
//
// The objects and their verbs follow libibverbs one to one, so its man pages
// and rdma-core's tests describe them:
//
//	Open / Device.Close             ibv_open_device / ibv_close_device
//	Device.Query, QueryPort,        ibv_query_device, ibv_query_port,
//	  QueryGID, GIDTable, QueryPKey   ibv_query_gid(_table), ibv_query_pkey
//	Device.AllocPD / PD.Dealloc     ibv_alloc_pd / ibv_dealloc_pd
//	PD.RegMR, RegMRIOVA,            ibv_reg_mr, ibv_reg_mr_iova,
//	  MR.Rereg, MR.Dereg              ibv_rereg_mr, ibv_dereg_mr
//	Device.CreateCompChannel        ibv_create_comp_channel
//	Device.CreateCQ, CQ.Poll,       ibv_create_cq, ibv_poll_cq,
//	  ReqNotify, Resize, Destroy      ibv_req_notify_cq, ibv_resize_cq, ...
//	CompChannel.GetEvent,           ibv_get_cq_event,
//	  CQ.AckEvents                    ibv_ack_cq_events
//	PD.CreateSRQ, SRQ.Modify, ...   ibv_create_srq, ibv_modify_srq, ...
//	PD.CreateAH / AH.Destroy        ibv_create_ah / ibv_destroy_ah
//	PD.CreateQP, QP.Modify, Query,  ibv_create_qp, ibv_modify_qp,
//	  PostSend, PostRecv, Destroy     ibv_query_qp, ibv_post_send, ...
//	Device.GetAsyncEvent            ibv_get_async_event
//
// Constants keep the libibverbs values (AccessRemoteWrite is
// IBV_ACCESS_REMOTE_WRITE = 2, QPAttrAV is IBV_QP_AV = 1<<7, WCRecv is
// IBV_WC_RECV = 128, ...), so numbers exchanged with C peers or seen in
// captures mean the same thing. Errors are *Error values naming the verb and
// the rdma-core name of the offending field, and wrap one of the sentinel
// errors (ErrInvalidArgument, ErrInvalidState, ErrNoMemory, ErrResourceLimit,
// ErrBusy, ErrNotSupported, ErrClosed) for errors.Is.
//
// A typical lifecycle (errors elided; see the package example for a
// complete one):
//
//	dev, _ := verbs.Open(verbs.DeviceConfig{Addr: netip.MustParseAddr("192.0.2.1")})
//	defer dev.Close()
//	pd, _ := dev.AllocPD()
//	mr, _ := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
//	cq, _ := dev.CreateCQ(256, nil, 0)
//	qp, _ := pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
//		Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 1, MaxRecvSGE: 1}})
//	// exchange QPN, PSN, GID, rkey and mr.IOVA() with the peer, then
//	// qp.Modify to INIT, RTR and RTS
//	_ = qp.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{mr.SGE(0, 4096)}})
//	wc := make([]verbs.WorkCompletion, 16)
//	n, _ := cq.Poll(wc)
//	// ... then qp.Destroy, cq.Destroy, mr.Dereg, pd.Dealloc
//
// # Addressing
//
// A device binds one IP address and UDP port (4791 by default). Its GID
// table has two RoCE v2 entries: index 0 a link-local GID derived from the
// device's node GUID, index 1 the GID of its address (IPv4-mapped for IPv4),
// which is the one to exchange with peers. Memory is addressed as in
// libibverbs: an MR's IOVA is the virtual address of its buffer (or 0 with
// AccessZeroBased), and lkey = rkey = index<<8 | key byte.
//
// Every device also has QP 1, the general services interface, which is
// not a QP object: it carries the management datagrams of the
// connection manager (package cm), as UD SEND Only packets to and from
// QP 1 with the GSI Q_Key 0x80010000, from a constant UDP source port per
// device (that of rxe's QP 1). A connected QP whose address vector has a
// flow label sends from the port the kernel derives from the label
// (rdma_get_udp_sport), as rdma_cm connections do; otherwise from the one
// derived from both QP numbers.
//
// # Data movement
//
// A device is a software RoCEv2 NIC bound to a UDP socket. PostSend (and
// PostSendList) runs the requester on the caller's goroutine and sends what
// the window allows; the device's receive goroutine runs the responder
// (remote READ, WRITE, atomics, FLUSH and ATOMIC_WRITE on registered memory
// and memory windows, with no call from the target application) and the
// completer inline, and a timer goroutine retransmits. Completions arrive on
// the CQs (Poll, Wait, or a completion channel). RC, UC (no
// acknowledgements: a lost packet drops its message) and UD (one packet per
// message, Q_Keys, the 40-byte GRH ahead of the received data) are
// supported.
//
// A send's payload goes from the registered memory straight into the
// kernel (the MR stays pinned until the packet has left): post only memory
// that the work request owns until its completion, as with a NIC. Two
// goroce extensions fit Go's scheduler: MR.WaitRemoteWrite parks until a
// peer's WRITE or atomic lands in a region (where a C program would spin
// on a flag byte), and DeviceConfig.BusyPoll lets a goroutine that spins on
// CQ.Poll receive the device's packets itself.
//
// # Asynchronous events
//
// Device.GetAsyncEvent returns the device's asynchronous events in the
// order they were raised (AsyncEventType has the values of enum
// ibv_event_type). goroce raises:
//
//   - EventQPAccessErr: the QP's responder refused a remote access (bad or
//     stale rkey, a region of another PD, a missing right, a range out of
//     bounds) in a request no receive work request is charged with: a
//     WRITE, a READ, an atomic (IBTA C9-222.1.1, and the rxe patch "Generate
//     async error for r_key violations"). The QP is in ERR; the requester
//     got a NAK and completes its work request with WCRemAccessErr.
//   - EventQPReqErr: likewise for an invalid request (a bad opcode
//     sequence, a length over 2^31 or not matching the payload, a payload
//     over the path MTU, a misaligned atomic, an operation the QP's access
//     flags do not enable).
//     A responder error that a receive work request is charged with (a SEND
//     longer than the buffer, a buffer the device cannot write, a WRITE with
//     immediate to a bad rkey) is reported by that receive's completion
//     instead, with no event.
//   - EventCQErr: a CQ overran (see CQ). EventQPFatal: a QP whose
//     completion the CQ refused; it is in ERR.
//   - EventSRQLimitReached: an armed SRQ (SRQ.Modify with SRQLimit) fell
//     below its limit; the limit is disarmed.
//   - EventQPLastWQEReached: a QP attached to an SRQ entered ERR, by Modify
//     or by an error: no further receive of the SRQ will be consumed by it.
//   - EventCommEst: an RC or UC QP in RTR received its first packet from
//     its peer (IBA 11.6.3, communication established), once per
//     connection (each move to RTR with an address vector). rxe does not
//     raise it; hardware does. The connection manager (package cm) is
//     told of a connection's first packet whether the QP is in RTR or
//     already in RTS: it is how a passive side whose RTU was lost knows
//     the connection is up.
//
// Requester errors are reported by completions only, as in libibverbs.
// Port, GID, P_Key and path migration events never occur on a
// goroce device. At most 256 events wait to be read; newer ones are
// dropped and counted (Device.AsyncEventsDropped), so that an application
// that ignores them cannot stall the receive path or grow its memory.
//
// # Hostile peers
//
// The receive path takes any datagram: malformed ones, bad ICRCs, unknown
// QPs, other sources than a QP's peer, packets for QP 1 that are not
// well-formed management datagrams, foreign P_Keys and opcodes of
// another transport are dropped and counted (Counters); requests outside
// the PSN window are NAKed once (ahead) or treated as duplicates (behind)
// and never executed twice; every memory access is checked against the
// QP's PD, the region's rights and bounds (with no overflow) before a byte
// moves, and a READ answers only with bytes of its region. Per-QP state is
// fixed at Modify time, so a flood of requests costs no memory.
//
// # Concurrency
//
// Every object is safe for concurrent use. Posting and polling do not
// allocate. The lookups the receive path needs (memory keys, QP numbers) are
// lock-free.
package verbs
