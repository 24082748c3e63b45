package transport

import (
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/wire"
)

// Congestion control (SetCongestionControl), per QP and without I/O, in
// two independent parts:
//
//   - ECN and DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA
//     Deployments", SIGCOMM 2015), as RoCE NICs run it. The notification
//     point (MarkCE, called by the I/O layer for a packet that arrived with
//     the IP ECN field at CE) answers with a CNP (wire.CNP: BTH opcode
//     0x81, BECN set, 16 reserved bytes) to the peer QP, at most one per
//     NPMinTimeBetweenCNPs. The reaction point (dcqcn.go) turns a received
//     CNP into a rate limit of the QP's requests, paced by a token bucket
//     in pump, and recovers the rate by DCQCN's timer and byte counter.
//     Standard on the wire: any NIC's CNP throttles a goroce QP and
//     goroce's CNPs throttle a NIC's.
//   - An RTT-based window (swift.go), after Swift (Kumar et al., SIGCOMM
//     2020): for paths whose queues do not mark ECN, the round trips the
//     adaptive timeout measures (rto.go) drive a congestion window that
//     keeps the delay near a target. It changes only how much the QP keeps
//     in flight, nothing on the wire.
//
// A QP that received no CNP and has no RTT window pays one branch per
// packet for the whole of it.

// CCConfig configures a QP's congestion control. The zero value turns
// everything off. Names follow mlx5's DCQCN knobs (np_*, rp_*; the
// firmware's rpg_* and dce_tcp_*), so that a setting carries over.
type CCConfig struct {
	// ECN turns on DCQCN's notification point (CNPs for CE-marked
	// packets) and reaction point (rate limiting on CNPs).
	ECN bool
	// NPMinTimeBetweenCNPs is the least time between two CNPs of one QP
	// (mlx5 min_time_between_cnps; the paper's N).
	NPMinTimeBetweenCNPs time.Duration

	// RPTimeReset is the period of the rate increase timer
	// (rpg_time_reset).
	RPTimeReset time.Duration
	// RPByteReset is how many bytes sent make a byte-counter rate
	// increase event (rpg_byte_reset).
	RPByteReset uint64
	// RPThreshold is the number of timer or byte-counter events after
	// which fast recovery gives way to additive increase (rpg_threshold;
	// the paper's F).
	RPThreshold uint32
	// RPAIRate and RPHAIRate are the additive and hyper increase steps
	// of the target rate, in bytes per second (rpg_ai_rate,
	// rpg_hai_rate).
	RPAIRate, RPHAIRate float64
	// RPMinRate is the least rate, in bytes per second (rpg_min_rate).
	RPMinRate float64
	// RPMaxRate, when above zero, is the line rate: the rate set on the
	// first CNP and the one at which the limit is lifted
	// (rate_to_set_on_first_cnp, rpg_max_rate). At zero the QP's own
	// highest measured rate stands for it.
	RPMaxRate float64
	// RPMinDecFac is the least fraction, in percent, a single decrease
	// leaves of the rate (rpg_min_dec_fac).
	RPMinDecFac uint32
	// RPGD is log2 of the divisor of α in the decrease rc·(1 − α/2^RPGD)
	// (rpg_gd, which mlx5 expresses with 10 fractional bits: its 11 is
	// this 1, the paper's rc·(1 − α/2)).
	RPGD uint8
	// RPG is α's gain in 1/1024 (the paper's g = RPG/1024; mlx5's
	// dce_tcp_g is 1024 − RPG).
	RPG uint32
	// RPAlphaPeriod is the period of α's update (dce_tcp_rtt; the
	// paper's K).
	RPAlphaPeriod time.Duration
	// RPInitialAlpha is α on the first CNP, in 1/1024
	// (initial_alpha_value).
	RPInitialAlpha uint32
	// RPRateReduceMonitorPeriod is the least time between two rate
	// decreases (rate_reduce_monitor_period).
	RPRateReduceMonitorPeriod time.Duration

	// RTT turns on the RTT-based window (swift.go).
	RTT bool
	// RTTTarget is the round trip above which the window shrinks: the
	// path's own round trip plus the queueing delay allowed.
	RTTTarget time.Duration
	// RTTAI is the window's additive increase per round trip, in
	// packets; RTTBeta the multiplicative decrease's gain and
	// RTTMaxMDF the largest fraction one decrease takes off.
	RTTAI, RTTBeta, RTTMaxMDF float64
}

// DefaultCCConfig returns the defaults: ECN and DCQCN on and the RTT
// window off. Each DCQCN value is either the mlx5 firmware's default
// (ConnectX-4 and later, NVIDIA's "DCQCN parameters") or the paper's (Zhu
// et al., section 5 and Table 1), as noted. Where they differ the choice
// was made by TestDCQCNBottleneck (four flows, a 10 Gb/s RED queue, the
// paper's marking): mlx5's byte counter (32767 bytes) and α period (1 µs)
// are sized for a NIC's microsecond feedback; with them the byte counter
// made the increase proportional to the rate and one flow took the link
// (Jain's index 0.37), where the paper's values share it (0.997, 96 %
// busy, the queue near Kmax).
func DefaultCCConfig() CCConfig {
	const mbps = 1e6 / 8 // bytes per second in a Mb/s
	return CCConfig{
		ECN: true,
		// The paper's N, the interval commonly configured
		// (roce-facts.md); mlx5's firmware default is 4 µs.
		NPMinTimeBetweenCNPs: 50 * time.Microsecond,
		RPTimeReset:          300 * time.Microsecond, // mlx5 rpg_time_reset
		RPByteReset:          10 << 20,               // paper's B (10 MB)
		RPThreshold:          5,                      // paper's F
		RPAIRate:             40 * mbps,              // paper's R_AI
		RPHAIRate:            50 * mbps,              // mlx5 rpg_hai_rate
		RPMinRate:            1 * mbps,               // mlx5 rpg_min_rate
		RPMinDecFac:          50,                     // mlx5 rpg_min_dec_fac
		RPGD:                 1,                      // mlx5 rpg_gd 11, the paper's α/2
		// α as the paper sets it (g = 1/256, K = 55 µs): mlx5's
		// dce_tcp_g 1019 and dce_tcp_rtt 1 µs let α decay to nothing
		// within a millisecond, while CNPs here come at the pace the
		// receive path delivers marked packets, every 100 µs or more.
		RPG:                       4,
		RPAlphaPeriod:             55 * time.Microsecond,
		RPInitialAlpha:            1023,                 // mlx5 initial_alpha_value
		RPRateReduceMonitorPeriod: 4 * time.Microsecond, // mlx5 rate_reduce_monitor_period
		// Swift's published settings (ai 1 packet, β 0.8, max_mdf
		// 0.5); the target is a machine's scheduling noise, not a
		// fabric's microseconds.
		RTTTarget: time.Millisecond,
		RTTAI:     1,
		RTTBeta:   0.8,
		RTTMaxMDF: 0.5,
	}
}

// ccState is a QP's congestion control state.
type ccState struct {
	cfg CCConfig
	// lastCNP is when the notification point last sent a CNP; cnpSent
	// says whether it ever did.
	lastCNP time.Time
	cnpSent bool
	rp      dcqcn
	win     rttWindow
}

// SetCongestionControl configures the QP's congestion control and forgets
// its state (a new connection starts unthrottled).
func (qp *QP) SetCongestionControl(c CCConfig) {
	qp.cc = ccState{cfg: c}
	qp.resetCC()
}

// CongestionControl returns the QP's congestion control configuration.
func (qp *QP) CongestionControl() CCConfig { return qp.cc.cfg }

// resetCC forgets the rate limit and the window (reset, a new connection).
func (qp *QP) resetCC() {
	qp.cc.rp = dcqcn{}
	qp.cc.win = rttWindow{}
	qp.cc.cnpSent = false
}

// MarkCE is the notification point: the caller received, for this QP, a
// packet whose IP ECN field was CE (congestion experienced), which it has
// handed or will hand to HandlePacket. The QP counts it and sends a CNP to
// its peer QP unless it sent one less than NPMinTimeBetweenCNPs ago. Only
// a connected QP past RTR with ECN on answers.
func (qp *QP) MarkCE(now time.Time, out *Output) {
	qp.now = now
	qp.counters.ECNMarked++
	if !qp.cc.cfg.ECN || qp.typ == ibv.QPTypeUD {
		return
	}
	switch qp.state {
	case ibv.QPStateRTR, ibv.QPStateRTS, ibv.QPStateSQD, ibv.QPStateSQE:
	default:
		return
	}
	if qp.cc.cnpSent && now.Sub(qp.cc.lastCNP) < qp.cc.cfg.NPMinTimeBetweenCNPs {
		return
	}
	qp.cc.lastCNP, qp.cc.cnpSent = now, true
	h := &qp.hdr
	*h = wire.Headers{}
	h.BTH.Opcode = wire.CNP
	h.BTH.PKey = wire.DefaultPKey
	h.BTH.BECN = true
	h.BTH.DestQP = wire.QPN(qp.destQPN)
	p := out.alloc(h.Len() + wire.CNPReservedLen)
	b := wire.AppendHeaders(p.Bytes, h)
	var zero [wire.CNPReservedLen]byte
	p.Bytes = append(b, zero[:]...)
	p.QPN, p.Dest = qp.qpn, qp.dest
	qp.counters.SentPackets++
	qp.counters.CNPSent++
}

// handleCNP is the reaction point's entry: a CNP for this QP (the caller
// checked that it came from the QP's peer). Only RC requests are paced: a
// UC QP sends CNPs for what it receives but ignores those it gets.
func (qp *QP) handleCNP(now time.Time) {
	qp.counters.CNPReceived++
	if !qp.cc.cfg.ECN || qp.typ != ibv.QPTypeRC {
		return
	}
	switch qp.state {
	case ibv.QPStateRTS, ibv.QPStateSQD, ibv.QPStateSQE:
	default:
		return
	}
	qp.counters.CNPHandled++
	qp.rpCNP(now)
}

// sendWindow returns how many PSNs the requester may have unacknowledged:
// the go-back-N window (window.go), narrowed by the RTT window when on.
func (qp *QP) sendWindow() uint32 {
	if qp.cc.cfg.RTT {
		return min(qp.req.win, qp.cc.win.packets(qp.window))
	}
	return qp.req.win
}
