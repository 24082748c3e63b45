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
//	mr, _ := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
//	cq, _ := dev.CreateCQ(256, nil, 0)
//	qp, _ := pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
//		Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 1, MaxRecvSGE: 1}})
//	// connect qp to the peer's (package cm, or qp.Modify to INIT with
//	// QPAccessFlags AccessRemoteRead, then RTR and RTS), and give the peer
//	// mr.Remote(), marshaled in 16 bytes, to READ buf one-sidedly.
//	// The peer, holding remote (a RemoteRegion it unmarshaled):
//	wr, _ := remote.Read(0, mr.SGE(0, 4096))
//	_, err := qp.PostSendWait(ctx, &wr) // nil, or what went wrong and why
//	// Or post and wait for completions yourself:
//	_ = qp.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{mr.SGE(0, 4096)}})
//	wc := make([]verbs.WorkCompletion, 16)
//	n, _ := cq.Wait(ctx, wc) // blocks until at least one; cq.Poll does not block
//	for _, c := range wc[:n] {
//		if err := c.Err(); err != nil { ... }
//	}
//	// ... then qp.Destroy, cq.Destroy, mr.Dereg, pd.Dealloc
//
// # Remote access
//
// A peer's one-sided operation on this side's memory needs the right
// twice, and each omission fails differently:
//
//   - on the memory region (PD.RegMR's access, or a memory window's bind):
//     AccessRemoteRead, AccessRemoteWrite (which needs AccessLocalWrite
//     too) or AccessRemoteAtomic. Without it the peer's work request
//     completes with WCRemAccessErr (ErrRemoteAccess) and this side's QP
//     raises EventQPAccessErr;
//   - on the QP it arrives on (QPAttr.QPAccessFlags with QPAttrAccessFlags,
//     from INIT on; cm.Params.Access in package cm). Without it the peer's
//     work request completes with WCRemInvReqErr (ErrRemoteInvalidRequest,
//     as on rxe; hardware may report WCRemAccessErr) and this side's QP
//     raises EventQPReqErr.
//
// Either way this side's QP moves to ERR and the event's Refusal names the
// check and the request (QP.Refusal keeps it too). MR.Remote describes a
// region for the peer as a RemoteRegion (address, rkey, length; 16 bytes
// with MarshalBinary, small enough for connection private data), whose
// Read, Write, WriteImm, CompareSwap and FetchAdd build work requests with
// the bounds checked before anything is posted.
//
// # Completions and errors
//
// Every work request completes exactly once, in order per queue. CQ.Wait
// blocks until completions arrive; WorkCompletion.Err is nil on success
// and otherwise an error that wraps a sentinel per status
// (ErrRemoteAccess, ErrRetryExceeded, ErrFlushed, ...; errors.Is) and says
// what likely went wrong. A request that fails moves the QP to ERR, and
// every later one completes with WCWRFlushErr: the first failed completion
// has the cause. QP.PostSendWait posts one send work request and waits
// for its completion alone, even on a CQ shared with receives and other
// QPs: the simple synchronous path.
//
// # API conventions
//
// Verbs keep libibverbs' names, and the arguments follow these rules:
//
//   - Attributes go into Modify by pointer with a mask of the fields to
//     apply, as in ibv_modify_qp and ibv_modify_srq: QP.Modify(*QPAttr,
//     QPAttrMask), SRQ.Modify(*SRQAttr, SRQAttrMask). Queries return
//     attributes by value (QP.Query, SRQ.Query, Device.QueryPort).
//     Creation takes its attributes by value (PD.CreateQP(QPInitAttr),
//     PD.CreateSRQ, PD.CreateAH); PostSend and PostRecv take their work
//     requests by pointer, so that posting allocates nothing.
//   - A port number, where a verb takes one, comes first: QueryPort(port),
//     QueryGID(port, index), InitAHFromWC(port, wc, grh),
//     CreateAHFromWC(port, wc, grh) (libibverbs puts it last in
//     ibv_create_ah_from_wc).
//   - Blocking calls take a context: CQ.Wait, CompChannel.GetEvent,
//     Device.GetAsyncEvent, MR.WaitRemoteWrite.
//   - Nothing for tests only is on the public configuration: fault
//     injection (OpenWithFaults) exists only in binaries built with
//     -tags goroce_faults.
//
// # Addressing
//
// A device binds one IP address and UDP port (4791 by default). Its GID
// table has two RoCE v2 entries: index 0 a link-local GID derived from the
// device's node GUID, index 1 the GID of its address (IPv4-mapped for IPv4),
// which is the one to exchange with peers. Memory is addressed as in
// libibverbs: an MR's IOVA is the virtual address of its buffer (or 0 with
// AccessZeroBased), and lkey = rkey, a 32-bit value with no structure a
// peer can use (see Security); a window's rkey keeps libibverbs' one
// convention, a low byte its binds choose (ibv_inc_rkey, IncRKey).
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
// the window allows (posts that come faster than the kernel takes them
// wait for the device's doorbell, which sends them together); the device's receive goroutine runs the responder
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
//     got a NAK and completes its work request with WCRemAccessErr. The
//     event's Refusal says which check failed on which request, and its
//     String what to change.
//   - EventQPReqErr: likewise for an invalid request (a bad opcode
//     sequence, a length over 2^31 or not matching the payload, a payload
//     over the path MTU, a misaligned atomic, an operation the QP's access
//     flags do not enable), with its Refusal too.
//     A responder error that a receive work request is charged with (a SEND
//     longer than the buffer, a buffer the device cannot write, a WRITE with
//     immediate to a bad rkey) is reported by that receive's completion
//     instead, with no event; QP.Refusal has the details.
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
// # Security
//
// RoCE has no authentication: whoever can send a packet with a QP's peer's
// address, its QPN, a PSN the responder expects and a valid rkey can read
// or write registered memory. A goroce device makes each of these hard to
// guess for an attacker off the path, who does not see the traffic:
//
//   - Memory keys. A key is code<<8 | byte, the code the image of the
//     key's slot and epoch under a secret permutation of the 24-bit
//     numbers drawn from crypto/rand when the device opens (an 8-round
//     Feistel network with random 12-bit round tables), the byte a secret
//     permutation of the slot's generation. So live keys look like
//     distinct random 32-bit values: a blind guess names one of L live
//     keys with probability L/2^32 (2^-26 per guess with 64 regions), and
//     seeing keys (one's own, say) tells nothing of the others' codes.
//     Lookup stays O(1) and lock-free: the receive path inverts the
//     permutation (eight dependent table loads, tens of nanoseconds, once
//     per message: a QP remembers its last key's code) and compares the
//     whole key. A
//     region's key changes all its bits when Rereg or a new registration
//     takes its slot, and the same key comes back only after 3,072
//     handouts of that slot, each after 1,024 other deregistrations; a
//     window's code stays for its life (its low byte is the consumer key
//     of ibv_inc_rkey, so whoever held one of its rkeys finds the next in
//     256 tries) and comes back after 4 handouts of its slot. At most 2^20
//     regions and 2^20 windows (rxe: 2^18, 2^17).
//   - QP numbers are the images of a counter under another secret
//     permutation: 24 unpredictable bits (2^-24 per guess and live QP),
//     not reused before 2^24 more QPs. Starting PSNs are the application's
//     (package cm draws them at random, as librdmacm does: 24 bits; a PSN
//     need only fall within the responder's window).
//   - Peer pinning. A connected QP takes packets only from its peer's IP
//     address (Counters.DroppedWrongSource) and, from the first packet
//     after RTR, only from that packet's UDP source port, plus
//     ACKNOWLEDGEs from the peer's RoCE port, where goroce peers send
//     coalesced replies (Counters.DroppedWrongPort;
//     DeviceConfig.AnySourcePort turns it off). rxe and goroce send all of
//     a QP's packets from one port, derived from the flow label or the QP
//     numbers; a spoofer must match it as well, or win the race for the
//     first packet after RTR.
//   - No amplification. A PSN gap draws one sequence NAK, whatever comes
//     after it until the expected PSN arrives (IBTA 9.7.5.2.2), and a
//     requester goes back once per gap: forged out-of-sequence requests
//     make the device send nothing more.
//
// An attacker on the path of a plain connection sees QPNs, PSNs, ports and
// rkeys in the clear and can forge anything, as against rxe or a NIC.
// Between goroce peers a connection can be sealed instead (QP.SetPacketKeys,
// with keys agreed by package cm's Params.Security): every packet's
// extension headers and payload are encrypted and authenticated with
// AES-256-GCM, the BTH in the clear as associated data, with a
// per-direction transmit counter (retransmissions take a fresh one) and a
// replay window on receive (internal/seal documents the format). A packet
// that does not authenticate or repeats a counter is dropped before it is
// parsed (Counters.DroppedAuthFail, DroppedReplay): an attacker on the path
// can then read only the BTHs, and can neither write memory, nor complete,
// fail or replay work; it can still drop packets. A sealed packet is 24
// bytes longer than a plain one with the same IB MTU. Plain RoCEv2 stays
// the default, and the only mode rxe and NICs speak.
//
// # Memory consistency
//
// The device reads and writes registered memory on its own goroutines,
// while the target's CPU may be using the same bytes: as with a NIC's DMA,
// nothing orders the two, and a program that shares memory between its
// CPU and its peers must build its own checks. What goroce does:
//
//   - A remote READ of bytes the target's CPU is writing meanwhile may
//     return, for each byte, the old or the new value: a mixture of
//     versions, torn at any granularity. Not even an aligned 8-byte word
//     is read as a unit. Each response packet (up to the path MTU) is
//     copied in one piece, in no defined order within it (Go's copy on
//     amd64 reads the last 128 bytes of a block before the rest), into
//     its packet before the ICRC is computed: what leaves is what was
//     read, never a packet the requester would drop as corrupt. Packets go
//     out in ascending address order, but a lost one is read again later,
//     after the next response shows the gap or the local ACK timeout: so
//     the packets of one READ are not read in a defined order either.
//   - Requests on one QP execute in order at the target. A READ posted
//     after an earlier READ completed (PostSendWait does that; a
//     pipelined reader sets SendFence) reads memory after the earlier one
//     read it.
//   - Atomics (CompareSwap, FetchAdd, ATOMIC_WRITE) update an aligned
//     8-byte word as a unit with respect to each other, through one device
//     (AtomicHCA), not with respect to the target CPU's own accesses: do
//     not mix CPU stores and remote atomics on a word.
//   - A remote WRITE is stored packet by packet, in ascending address
//     order, each packet's bytes in no defined order (Go's copy stores the
//     first 32 and the last 128 bytes of a block after the middle). So
//     polling the last byte of a message proves nothing, and a Go loop
//     polling plain memory may never see a change at all. What proves
//     arrival: the receive completion of a WRITE with immediate (or of a
//     SEND posted after the WRITEs on the same QP), which comes after the
//     message's bytes are stored; MR.RemoteWrites and MR.WaitRemoteWrite,
//     which count each packet after its bytes are stored and order the
//     caller's later reads after them; a flag written by a later WRITE or
//     ATOMIC_WRITE on the same QP, read after RemoteWrites moved.
//
// To READ a record that the target's CPU updates, either check it in one
// READ or bracket it in three. Both are in verbs/consistency_test.go,
// whose test hammers them against an owner that rewrites records without
// pause and finds that no reader ever accepts a torn one:
//
//   - One READ with a check. Layout: version, payload, check =
//     CRC-64(version, payload). The owner stores the version odd, the
//     payload, the check of the next even version, then that version. The
//     reader READs the whole record and accepts it if the version is even
//     and the check matches, and READs again otherwise. A torn record
//     passes only if CRC-64 maps the mixture onto the check read with it
//     (probability 2^-64).
//   - A seqlock in three READs: the version, then the record, then the
//     version again, each posted after the previous one completed. The
//     reader accepts the record if both versions are the same even value;
//     the owner stores the version odd, the payload, then the version
//     even, with sync/atomic stores to keep that order. Exact, at three
//     round trips.
//
// A version at both ends of a record read in one READ is not enough:
// neither the order of the bytes nor the time of the packets of one READ
// is defined. A READ that races writes to the same bytes may also take a
// retry (an ICRC mismatch) and with it a local ACK timeout.
//
// Go's race detector reports a CPU store that races the device's copy of
// the same bytes as a data race, as it would any unsynchronised access:
// the checks above are for bytes the detector cannot vouch for, so run
// such code without -race, or keep the owner's stores and the READs apart
// in tests run with it.
//
// # Concurrency
//
// Every object is safe for concurrent use. Posting and polling do not
// allocate.
package verbs
