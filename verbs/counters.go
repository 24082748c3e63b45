package verbs

// Counters are event counts of a device or of one QP, in the spirit of
// rxe's hw_counters (/sys/class/infiniband/rxe0/ports/1/hw_counters): the
// fields that have an rxe counter carry its name and meaning, the others
// describe what goroce's software NIC sees besides. Counters only grow; a
// difference of two readings counts what happened in between.
//
// Device.Counters adds the counters of every QP of the device, live or
// destroyed, to those of its socket and receive path; QP.Counters returns
// one QP's share, in which the device-wide fields (marked "device only")
// are zero.
//
// Each lists the counters by name in a fixed order, rxe's first.
type Counters struct {
	// SentPkts counts packets sent (sent_pkts). For a device, the packets
	// the socket took; for a QP, the packets its transport produced,
	// including any the socket then refused (SendErr).
	SentPkts uint64
	// RcvdPkts counts packets received (rcvd_pkts). For a device, the
	// packets that parsed and passed the ICRC check, including those then
	// dropped for an unknown QP or a wrong source; for a QP, the packets
	// handed to its transport. A packet is counted here after the device
	// handled it: once RcvdPkts includes it, the drop counters include
	// what became of it (they may run ahead of RcvdPkts meanwhile).
	RcvdPkts uint64
	// DuplicateRequest counts requests behind the expected PSN, which the
	// responder acknowledges or answers again (duplicate_request).
	DuplicateRequest uint64
	// OutOfSeqRequest counts requests ahead of the expected PSN: a packet
	// was lost (out_of_seq_request).
	OutOfSeqRequest uint64
	// RcvdRNRErr counts RNR NAKs the requester received (rcvd_rnr_err).
	RcvdRNRErr uint64
	// SendRNRErr counts RNR NAKs the responder sent for want of a posted
	// receive (send_rnr_err).
	SendRNRErr uint64
	// RcvdSeqErr counts PSN sequence error NAKs the requester received
	// (rcvd_seq_err).
	RcvdSeqErr uint64
	// AckDeferred counts requests the responder accepted without an
	// immediate ACK, coalescing the acknowledgement with a later one. rxe's
	// ack_deferred counts deferred completer runs instead; both measure
	// work postponed under load.
	AckDeferred uint64
	// RetryExceededErr counts work requests completed with
	// WCRetryExcErr: the transport retries ran out (retry_exceeded_err).
	RetryExceededErr uint64
	// RetryRNRExceededErr counts work requests completed with
	// WCRNRRetryExcErr (retry_rnr_exceeded_err).
	RetryRNRExceededErr uint64
	// CompleterRetryErr counts go-back-N restarts of the requester after
	// a timeout or a sequence error NAK (completer_retry_err).
	CompleterRetryErr uint64
	// SendErr counts packets the kernel refused to send (send_err); device
	// only. The transport's retransmission recovers them.
	SendErr uint64
	// RDMASends counts SEND work requests that completed successfully,
	// signaled or not (rdma_sends).
	RDMASends uint64
	// RDMARecvs counts receive work requests that completed successfully
	// (rdma_recvs).
	RDMARecvs uint64

	// SentBytes and RcvdBytes count the UDP payload bytes, ICRC included,
	// of the packets sent and of every datagram read; device only.
	SentBytes uint64
	RcvdBytes uint64
	// Malformed counts datagrams dropped before the ICRC check: not a
	// well-formed RoCEv2 packet or too large; device only.
	Malformed uint64
	// ICRCErrors counts packets dropped because their ICRC did not match;
	// device only.
	ICRCErrors uint64
	// ICRCIDRecovered counts packets accepted after recovering a non-zero
	// IPv4 identification from their ICRC (as Linux rxe sends them), with
	// a 16-bit check instead of the full 32; device only.
	ICRCIDRecovered uint64
	// DroppedUnknownQP counts packets addressed to no live QP of the
	// device (QP 1 aside: GSIDropped); device only.
	DroppedUnknownQP uint64
	// DroppedWrongSource counts packets for a QP from another address than
	// its peer's; device only.
	DroppedWrongSource uint64
	// DroppedWrongPort counts packets for a connected QP from its peer's
	// address but not from the UDP source port the connection pinned
	// (DeviceConfig.AnySourcePort); device only.
	DroppedWrongPort uint64
	// DroppedReplay counts sealed packets (QP.SetPacketKeys) dropped
	// because their counter was already seen or is older than the replay
	// window; device only.
	DroppedReplay uint64
	// DroppedAuthFail counts sealed packets dropped because they did not
	// authenticate under the QP's key: forged, altered, or sealed under
	// another connection's key; device only.
	DroppedAuthFail uint64
	// DroppedPkts counts packets the transport dropped: wrong transport,
	// QP, P_Key, or a QP state that takes no packets.
	DroppedPkts uint64
	// DroppedBusy counts READ and atomic requests dropped because the
	// responder already held max_dest_rd_atomic of them; the requester's
	// retry resends them.
	DroppedBusy uint64
	// SentSeqErr counts PSN sequence error NAKs the responder sent: one
	// per gap, however many out-of-sequence packets arrive in it.
	SentSeqErr uint64
	// SentNAKs and RcvdNAKs count the other NAKs (invalid request, remote
	// access, remote operational error) sent and received.
	SentNAKs uint64
	RcvdNAKs uint64
	// RetryTimeouts counts expiries of the retransmission timer with work
	// outstanding.
	RetryTimeouts uint64
	// StaleResponses counts ACKs and READ responses ignored as duplicate,
	// stale, ahead of what was sent, or out of order.
	StaleResponses uint64
	// CQOverruns counts completions a CQ refused, full or in error after
	// an overrun (see CQ); the first one refused moved its QP to the
	// error state.
	CQOverruns uint64
	// LocalErrors counts local protection and length errors.
	LocalErrors uint64
	// CaptureErrors counts packets the capture tap failed to write;
	// device only.
	CaptureErrors uint64
	// DroppedMsgs counts UC messages dropped because a packet of theirs
	// was lost (a PSN gap) or failed a responder check: the rest of the
	// message is discarded, silently, until the next FIRST or ONLY.
	DroppedMsgs uint64
	// DroppedNoRecv counts UC and UD messages dropped for want of a posted
	// receive (RC answers with an RNR NAK instead).
	DroppedNoRecv uint64
	// QKeyViolations counts UD datagrams dropped because their Q_Key was
	// not the QP's (rxe's port qkey_viol_cntr).
	QKeyViolations uint64

	// Selective repeat between goroce peers (QPAttr.SelectiveRepeat):
	// SRHeld counts out-of-order requests the responder kept for replay,
	// SRSACKSent and SRSACKRcvd the SACKs sent and received, SRResends
	// the packets the requester resent because a SACK or the adaptive
	// timeout showed them lost (no go-back-N), SREarlyTimeouts the
	// expiries of the adaptive timeout (which spend no retry_cnt).
	SRHeld          uint64
	SRSACKSent      uint64
	SRSACKRcvd      uint64
	SRResends       uint64
	SREarlyTimeouts uint64

	// Congestion control (DeviceConfig.CongestionControl), with mlx5's
	// names: NPECNMarkedRoCEPackets counts packets received with ECN CE
	// (np_ecn_marked_roce_packets), NPCNPSent the CNPs sent for them
	// (np_cnp_sent), RPCNPHandled the CNPs from peers that the reaction
	// point acted on (rp_cnp_handled) and RPCNPIgnored the others, with
	// ECN off or in a state that sends nothing (rp_cnp_ignored).
	// RPRateDecreases counts DCQCN's rate decreases, RPRateLifted the
	// limits lifted when the rate recovered, RTTWindowDecreases the RTT
	// window's decreases.
	NPECNMarkedRoCEPackets uint64
	NPCNPSent              uint64
	RPCNPHandled           uint64
	RPCNPIgnored           uint64
	RPRateDecreases        uint64
	RPRateLifted           uint64
	RTTWindowDecreases     uint64

	// ICRCIDPredicted counts packets accepted with a full 32-bit ICRC
	// check for a non-zero IPv4 identification that follows the previous
	// packet's from the same source (segments of a GSO send); device only.
	ICRCIDPredicted uint64
	// TxGSO counts datagrams sent with UDP segmentation offload, each of
	// which left as several packets; device only.
	TxGSO uint64
	// TxCalls counts the system calls that sent packets (SentPkts per
	// TxCalls is how many packets one sendmmsg carried: the doorbell's
	// batching, see PostSend); device only.
	TxCalls uint64
	// RxGRO counts coalesced datagrams the kernel delivered (UDP GRO),
	// each split back into its packets; device only.
	RxGRO uint64
	// GSOFallbacks counts send sockets that stopped using segmentation
	// offload because the kernel refused it; device only.
	GSOFallbacks uint64
	// RxPolled counts the received packets (of RcvdPkts) that a CQ.Poll
	// took from the socket itself (DeviceConfig.BusyPoll) rather than the
	// device's receive goroutine; device only.
	RxPolled uint64
	// GSIRcvd counts management datagrams QP 1 received and handed to
	// the connection manager; device only.
	GSIRcvd uint64
	// GSISent counts management datagrams QP 1 sent; device only.
	GSISent uint64
	// GSIDropped counts packets for QP 1 dropped: not a UD SEND Only of
	// a 256-byte MAD from QP 1 with the GSI Q_Key and the default P_Key,
	// or no connection manager in the process to take it; device only.
	GSIDropped uint64
}

// counterField names one field of Counters.
type counterField struct {
	name string
	ptr  func(*Counters) *uint64
}

// counterFields lists the fields of Counters in the order Each reports
// them: rxe's hw_counters in rxe's order, then goroce's own. Add and Each
// both use it, so a field missing here is caught by the tests.
var counterFields = [...]counterField{
	{"sent_pkts", func(c *Counters) *uint64 { return &c.SentPkts }},
	{"rcvd_pkts", func(c *Counters) *uint64 { return &c.RcvdPkts }},
	{"duplicate_request", func(c *Counters) *uint64 { return &c.DuplicateRequest }},
	{"out_of_seq_request", func(c *Counters) *uint64 { return &c.OutOfSeqRequest }},
	{"rcvd_rnr_err", func(c *Counters) *uint64 { return &c.RcvdRNRErr }},
	{"send_rnr_err", func(c *Counters) *uint64 { return &c.SendRNRErr }},
	{"rcvd_seq_err", func(c *Counters) *uint64 { return &c.RcvdSeqErr }},
	{"ack_deferred", func(c *Counters) *uint64 { return &c.AckDeferred }},
	{"retry_exceeded_err", func(c *Counters) *uint64 { return &c.RetryExceededErr }},
	{"retry_rnr_exceeded_err", func(c *Counters) *uint64 { return &c.RetryRNRExceededErr }},
	{"completer_retry_err", func(c *Counters) *uint64 { return &c.CompleterRetryErr }},
	{"send_err", func(c *Counters) *uint64 { return &c.SendErr }},
	{"rdma_sends", func(c *Counters) *uint64 { return &c.RDMASends }},
	{"rdma_recvs", func(c *Counters) *uint64 { return &c.RDMARecvs }},

	{"sent_bytes", func(c *Counters) *uint64 { return &c.SentBytes }},
	{"rcvd_bytes", func(c *Counters) *uint64 { return &c.RcvdBytes }},
	{"malformed", func(c *Counters) *uint64 { return &c.Malformed }},
	{"icrc_err", func(c *Counters) *uint64 { return &c.ICRCErrors }},
	{"icrc_id_recovered", func(c *Counters) *uint64 { return &c.ICRCIDRecovered }},
	{"dropped_unknown_qp", func(c *Counters) *uint64 { return &c.DroppedUnknownQP }},
	{"dropped_wrong_source", func(c *Counters) *uint64 { return &c.DroppedWrongSource }},
	{"dropped_wrong_port", func(c *Counters) *uint64 { return &c.DroppedWrongPort }},
	{"dropped_replay", func(c *Counters) *uint64 { return &c.DroppedReplay }},
	{"dropped_auth_fail", func(c *Counters) *uint64 { return &c.DroppedAuthFail }},
	{"dropped_pkts", func(c *Counters) *uint64 { return &c.DroppedPkts }},
	{"dropped_busy", func(c *Counters) *uint64 { return &c.DroppedBusy }},
	{"sent_seq_err", func(c *Counters) *uint64 { return &c.SentSeqErr }},
	{"sent_naks", func(c *Counters) *uint64 { return &c.SentNAKs }},
	{"rcvd_naks", func(c *Counters) *uint64 { return &c.RcvdNAKs }},
	{"retry_timeouts", func(c *Counters) *uint64 { return &c.RetryTimeouts }},
	{"stale_responses", func(c *Counters) *uint64 { return &c.StaleResponses }},
	{"cq_overruns", func(c *Counters) *uint64 { return &c.CQOverruns }},
	{"local_err", func(c *Counters) *uint64 { return &c.LocalErrors }},
	{"capture_err", func(c *Counters) *uint64 { return &c.CaptureErrors }},
	{"dropped_msgs", func(c *Counters) *uint64 { return &c.DroppedMsgs }},
	{"dropped_no_recv", func(c *Counters) *uint64 { return &c.DroppedNoRecv }},
	{"qkey_violations", func(c *Counters) *uint64 { return &c.QKeyViolations }},
	{"sr_held", func(c *Counters) *uint64 { return &c.SRHeld }},
	{"sr_sack_sent", func(c *Counters) *uint64 { return &c.SRSACKSent }},
	{"sr_sack_rcvd", func(c *Counters) *uint64 { return &c.SRSACKRcvd }},
	{"sr_resends", func(c *Counters) *uint64 { return &c.SRResends }},
	{"sr_early_timeouts", func(c *Counters) *uint64 { return &c.SREarlyTimeouts }},
	{"np_ecn_marked_roce_packets", func(c *Counters) *uint64 { return &c.NPECNMarkedRoCEPackets }},
	{"np_cnp_sent", func(c *Counters) *uint64 { return &c.NPCNPSent }},
	{"rp_cnp_handled", func(c *Counters) *uint64 { return &c.RPCNPHandled }},
	{"rp_cnp_ignored", func(c *Counters) *uint64 { return &c.RPCNPIgnored }},
	{"rp_rate_decreases", func(c *Counters) *uint64 { return &c.RPRateDecreases }},
	{"rp_rate_lifted", func(c *Counters) *uint64 { return &c.RPRateLifted }},
	{"rtt_window_decreases", func(c *Counters) *uint64 { return &c.RTTWindowDecreases }},
	{"icrc_id_predicted", func(c *Counters) *uint64 { return &c.ICRCIDPredicted }},
	{"tx_gso", func(c *Counters) *uint64 { return &c.TxGSO }},
	{"tx_calls", func(c *Counters) *uint64 { return &c.TxCalls }},
	{"rx_gro", func(c *Counters) *uint64 { return &c.RxGRO }},
	{"gso_fallbacks", func(c *Counters) *uint64 { return &c.GSOFallbacks }},
	{"rx_polled", func(c *Counters) *uint64 { return &c.RxPolled }},
	{"gsi_rcvd", func(c *Counters) *uint64 { return &c.GSIRcvd }},
	{"gsi_sent", func(c *Counters) *uint64 { return &c.GSISent }},
	{"gsi_dropped", func(c *Counters) *uint64 { return &c.GSIDropped }},
}

// Each calls fn with the name and value of every counter, zero or not, in
// a fixed order: rxe's hw_counters first, in rxe's order and under rxe's
// names (sent_pkts, rcvd_pkts, duplicate_request, ...), then goroce's own
// in the same snake_case style.
func (c Counters) Each(fn func(name string, value uint64)) {
	for _, f := range counterFields {
		fn(f.name, *f.ptr(&c))
	}
}

// Add returns the sum of c and o, field by field.
func (c Counters) Add(o Counters) Counters {
	for _, f := range counterFields {
		*f.ptr(&c) += *f.ptr(&o)
	}
	return c
}

// Counters returns the device's counters: those of its socket and receive
// path plus the sum over its QPs, live and destroyed. Traffic goes on
// while it runs, so the result is not one instant's snapshot, but no event
// is counted twice or lost. Counters may be called after Close.
func (d *Device) Counters() Counters {
	if d.hw != nil {
		return Counters{} // the NIC's are in sysfs
	}
	// Each live QP's lock is taken in turn, briefly, and no lock is held
	// across QPs: traffic goes on.
	e := d.eng
	type share struct {
		qp *QP
		c  Counters
	}
	var live []share
	d.qps.Range(func(_, v any) bool {
		qp := v.(*QP)
		qp.xmu.Lock()
		// A closed QP folded its counters into e.retired under xmu.
		if !qp.closed.Load() {
			live = append(live, share{qp, qp.countersLocked()})
		}
		qp.xmu.Unlock()
		return true
	})

	// A QP read above may have been destroyed since, folding its counters
	// (by then at least as large) into e.retired: it counts there and not
	// here. Both are decided under cmu, which Destroy holds to fold.
	e.cmu.Lock()
	c := e.retired
	for _, s := range live {
		if !s.qp.folded {
			c = c.Add(s.c)
		}
	}
	e.cmu.Unlock()

	// The socket's counters first, then the engine's drops: the receive
	// loop adds a batch's counts after its packets were handled (netio's
	// Counters), so a reader that sees RcvdPkts include a packet sees the
	// drop counters include what the engine did with it. (The other order
	// let a waiter see 1,000 packets received and 999 dropped.) With
	// several receive queues, each socket's are read before the drops.
	n := e.netCounters()
	c.SentPkts = n.TxPackets.Load()
	c.SentBytes = n.TxBytes.Load()
	c.RcvdPkts = n.Delivered.Load()
	c.RcvdBytes = n.RxBytes.Load()
	c.Malformed = n.Malformed.Load()
	c.ICRCErrors = n.ICRCErrors.Load()
	c.ICRCIDRecovered = n.ICRCIDRecovered.Load()
	c.ICRCIDPredicted = n.ICRCIDPredicted.Load()
	c.TxGSO = n.TxGSO.Load()
	c.TxCalls = n.TxCalls.Load()
	c.RxGRO = n.RxGRO.Load()
	c.GSOFallbacks = n.GSOFallbacks.Load()
	c.RxPolled = n.Polled.Load()
	c.SendErr = n.SendErrors.Load()
	c.CaptureErrors = n.CaptureErrors.Load()
	c.DroppedUnknownQP = e.unknownQP.Load()
	c.DroppedWrongSource = e.wrongSource.Load()
	c.DroppedWrongPort = e.wrongPort.Load()
	c.DroppedReplay = e.replayed.Load()
	c.DroppedAuthFail = e.authFail.Load()
	if g := d.gsi.Load(); g != nil {
		c.GSIRcvd, c.GSISent, c.GSIDropped = g.rcvd.Load(), g.sent.Load(), g.dropped.Load()
	}
	return c
}

// Counters returns the QP's counters: what its transport state machines
// counted (packets sent and received, duplicates, NAKs, retries, ...) and
// its completed SENDs and receives. The device-wide fields (SendErr, the
// byte counts, ICRC, malformed and drop counts) are zero. A destroyed QP
// keeps the counters it had; they also remain in Device.Counters.
func (qp *QP) Counters() Counters {
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	return qp.countersLocked()
}

// countersLocked gathers the QP's counters. The caller holds xmu.
func (qp *QP) countersLocked() Counters {
	var c Counters
	if qp.tq == nil {
		return c
	}
	t := qp.tq.Counters()
	c.SentPkts = t.SentPackets
	c.RcvdPkts = t.ReceivedPackets
	c.DuplicateRequest = t.DuplicateRequest
	c.OutOfSeqRequest = t.OutOfSeqRequest
	c.RcvdRNRErr = t.RNRNakReceived
	c.SendRNRErr = t.RNRNakSent
	c.RcvdSeqErr = t.RcvdSeqErr
	c.AckDeferred = t.AckDeferred
	c.RetryExceededErr = t.RetryExceeded
	c.RetryRNRExceededErr = t.RNRRetryExceeded
	c.CompleterRetryErr = t.CompleterRetry
	c.DroppedPkts = t.DroppedPackets
	c.DroppedBusy = t.DroppedBusy
	c.SentSeqErr = t.SeqNakSent
	c.SentNAKs = t.NakSent
	c.RcvdNAKs = t.NakReceived
	c.RetryTimeouts = t.Timeouts
	c.StaleResponses = t.StaleResponses
	c.CQOverruns = t.CQOverflow
	c.LocalErrors = t.LocalErrors
	c.RDMASends = t.RDMASends
	c.RDMARecvs = t.RDMARecvs
	c.DroppedMsgs = t.DroppedMessages
	c.DroppedNoRecv = t.DroppedNoRecv
	c.QKeyViolations = t.QKeyViolations
	c.SRHeld = t.HeldRequests
	c.SRSACKSent = t.SACKSent
	c.SRSACKRcvd = t.SACKReceived
	c.SRResends = t.SelectiveResends
	c.SREarlyTimeouts = t.EarlyTimeouts
	c.NPECNMarkedRoCEPackets = t.ECNMarked
	c.NPCNPSent = t.CNPSent
	c.RPCNPHandled = t.CNPHandled
	c.RPCNPIgnored = t.CNPReceived - t.CNPHandled
	c.RPRateDecreases = t.RateDecreases
	c.RPRateLifted = t.RateLifted
	c.RTTWindowDecreases = t.RTTDecreases
	return c
}

// retire folds the final counters of a QP being destroyed into the
// device's totals. The caller holds qp.xmu and has marked the QP closed.
func (e *engine) retire(qp *QP) {
	c := qp.countersLocked()
	e.cmu.Lock()
	defer e.cmu.Unlock()
	e.retired = e.retired.Add(c)
	qp.folded = true
}
