package verbs

import (
	"time"

	"github.com/goroce/goroce/internal/transport"
)

// CongestionControl configures a device's congestion control
// (DeviceConfig.CongestionControl): ECN with DCQCN, as RoCE NICs run it,
// on by default, and an RTT-based window, off by default. Every zero
// field takes its default; the names are those of mlx5's DCQCN parameters
// (np_* for the notification point, rp_* for the reaction point, whose
// firmware names are rpg_* and dce_tcp_*), and the defaults are mlx5's or
// the DCQCN paper's (Zhu et al., SIGCOMM 2015), as listed in the README's
// "Congestion control" section.
//
// With ECN on, every packet leaves with ECT(0) in its IP header (the ICRC
// masks the whole byte: rxe and NICs accept it either way). A connected QP
// that receives a packet marked CE (congestion experienced) by a queue on
// the way answers with a CNP, at most one per NPMinTimeBetweenCNPs; a QP
// that receives a CNP from its peer limits its rate (DCQCN's reaction
// point) and paces its requests until the rate has recovered. CNPs are
// RoCEv2's own (BTH opcode 0x81): a NIC's CNP throttles a goroce QP, and
// goroce's throttle a NIC's. Counters: NPECNMarkedRoCEPackets, NPCNPSent,
// RPCNPHandled, RPCNPIgnored, RPRateDecreases, RPRateLifted.
//
// The RTT window changes nothing on the wire: from the round trips each
// QP measures, it bounds what the QP keeps in flight so that the round
// trip stays near RTTTarget (after Swift, SIGCOMM 2020). It is for paths
// whose queues mark no ECN; see the README for what it costs and gains.
type CongestionControl struct {
	// NoECN turns off ECT(0), CNPs and DCQCN.
	NoECN bool
	// RTT turns on the RTT-based window.
	RTT bool
	// RTTTarget is the round trip above which the RTT window shrinks.
	// Default 1 ms.
	RTTTarget time.Duration

	// NPMinTimeBetweenCNPs is the least time between two CNPs of one QP
	// (np_min_time_between_cnps). Default 50 µs.
	NPMinTimeBetweenCNPs time.Duration
	// RPTimeReset is the period of the rate increase timer
	// (rp_time_reset). Default 300 µs.
	RPTimeReset time.Duration
	// RPByteReset is the bytes sent per byte-counter increase event
	// (rp_byte_reset). Default 10 MiB.
	RPByteReset uint64
	// RPThreshold is the number of increase events of fast recovery
	// (rp_threshold). Default 5.
	RPThreshold uint32
	// RPAIRate, RPHAIRate, RPMinRate and RPMaxRate are in Mb/s: the
	// additive and hyper increase steps (rp_ai_rate, rp_hai_rate;
	// defaults 40 and 50), the least rate (rp_min_rate; default 1) and
	// the line rate, set on the first CNP and at which the limit is
	// lifted (rp_max_rate; default: the QP's own highest measured rate,
	// at least 8,000).
	RPAIRate, RPHAIRate, RPMinRate, RPMaxRate uint32
	// RPMinDecFac is the least share, in percent, one decrease leaves
	// of the rate (rp_min_dec_fac). Default 50.
	RPMinDecFac uint32
	// RPGD is log2 of α's divisor in a decrease, rc·(1 − α/2^RPGD)
	// (rp_gd; mlx5 writes it with 10 fractional bits, its 11 is this
	// 1). Default 1.
	RPGD uint8
	// RPDceTCPG is α's gain g in 1/1024 (the paper's g; mlx5's
	// dce_tcp_g is 1024 minus it). Default 4 (g = 1/256).
	RPDceTCPG uint32
	// RPDceTCPRTT is the period of α's update (rp_dce_tcp_rtt). Default
	// 55 µs.
	RPDceTCPRTT time.Duration
	// RPInitialAlphaValue is α on the first CNP, in 1/1024
	// (rp_initial_alpha_value). Default 1023.
	RPInitialAlphaValue uint32
	// RPRateReduceMonitorPeriod is the least time between two decreases
	// (rp_rate_reduce_monitor_period), or the QP's round trip when
	// longer. Default 4 µs.
	RPRateReduceMonitorPeriod time.Duration
}

// transportCC checks c and returns the transport's configuration, each
// zero field given its default.
func (c *CongestionControl) transportCC(op string) (transport.CCConfig, error) {
	t := transport.DefaultCCConfig()
	switch {
	case c.RPMinDecFac > 100:
		return t, errorf(op, "CongestionControl.RPMinDecFac", ErrInvalidArgument, "%d is not a percentage", c.RPMinDecFac)
	case c.RPDceTCPG > 1024:
		return t, errorf(op, "CongestionControl.RPDceTCPG", ErrInvalidArgument, "%d is above 1024", c.RPDceTCPG)
	case c.RPInitialAlphaValue > 1024:
		return t, errorf(op, "CongestionControl.RPInitialAlphaValue", ErrInvalidArgument, "%d is above 1024", c.RPInitialAlphaValue)
	case c.RPGD > 10:
		return t, errorf(op, "CongestionControl.RPGD", ErrInvalidArgument, "%d is above 10", c.RPGD)
	case c.RTTTarget < 0 || c.NPMinTimeBetweenCNPs < 0 || c.RPTimeReset < 0 || c.RPDceTCPRTT < 0 || c.RPRateReduceMonitorPeriod < 0:
		return t, errorf(op, "CongestionControl", ErrInvalidArgument, "negative duration")
	}
	const mbps = 1e6 / 8
	t.ECN, t.RTT = !c.NoECN, c.RTT
	setDefault(&t.RTTTarget, c.RTTTarget)
	setDefault(&t.NPMinTimeBetweenCNPs, c.NPMinTimeBetweenCNPs)
	setDefault(&t.RPTimeReset, c.RPTimeReset)
	setDefault(&t.RPByteReset, c.RPByteReset)
	setDefault(&t.RPThreshold, c.RPThreshold)
	for _, r := range []struct {
		dst *float64
		v   uint32
	}{{&t.RPAIRate, c.RPAIRate}, {&t.RPHAIRate, c.RPHAIRate}, {&t.RPMinRate, c.RPMinRate}, {&t.RPMaxRate, c.RPMaxRate}} {
		if r.v != 0 {
			*r.dst = float64(r.v) * mbps
		}
	}
	setDefault(&t.RPMinDecFac, c.RPMinDecFac)
	setDefault(&t.RPGD, c.RPGD)
	setDefault(&t.RPG, c.RPDceTCPG)
	setDefault(&t.RPAlphaPeriod, c.RPDceTCPRTT)
	setDefault(&t.RPInitialAlpha, c.RPInitialAlphaValue)
	setDefault(&t.RPRateReduceMonitorPeriod, c.RPRateReduceMonitorPeriod)
	return t, nil
}

// setDefault overwrites *dst with v unless v is zero.
func setDefault[T comparable](dst *T, v T) {
	var zero T
	if v != zero {
		*dst = v
	}
}
