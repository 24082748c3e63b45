package ibcm

import (
	"net/netip"
	"time"

	"github.com/goroce/goroce/internal/mad"
)

// Defaults, with the kernel value each one follows.
const (
	// DefaultAckDelay is the local CA ACK delay rxe reports (REP target
	// ACK delay 15 in rping.pcap).
	DefaultAckDelay = 15
	// DefaultResponseTimeout is rdma_cm's CM response timeout,
	// CMA_CM_RESPONSE_TIMEOUT: 18 (about 1 s) since Linux 6.14, 20 (about
	// 4 s, the value in the captures) before.
	DefaultResponseTimeout = 18
	// DefaultMaxCMRetries is CMA_MAX_CM_RETRIES.
	DefaultMaxCMRetries = 15
	// DefaultPacketLifetime is CMA_IBOE_PACKET_LIFETIME: 16 in kernels
	// after 6.1 (changed in 2023), 18 before (the captures' REQ local ACK
	// timeout of 19 is 18 + 1 with rxe's ACK delay of 15).
	DefaultPacketLifetime = 16
	// DefaultMRAServiceTimeout is the service timeout of the kernel's MRAs
	// (CM_MRA_SETTING, formerly CMA_CM_MRA_SETTING): about 68.7 s.
	DefaultMRAServiceTimeout = 24
	// DefaultLinearTimeouts is how many retransmissions keep the first
	// interval before it doubles (IB_MAD_LINEAR_TIMEOUTS_DEFAULT, Linux
	// 6.14's exponential MAD backoff).
	DefaultLinearTimeouts = 4
	// DefaultMaxInterval caps the doubled interval (IB_MAD_MAX_TIMEOUT_MS).
	DefaultMaxInterval = 60 * time.Second
	// DefaultTotalTimeout is how long a REQ, REP or DREQ is retransmitted
	// at most, MRA extensions aside (CM_MAD_TOTAL_TIMEOUT).
	DefaultTotalTimeout = 70 * time.Second
)

// Config configures a Manager. CAGUID is required; zero values elsewhere
// select the defaults.
type Config struct {
	// CAGUID is the device's node GUID: the LocalCAGUID of its REQs and
	// REPs, the ARI of its timeout REJs. Peers detect duplicate and stale
	// requests by it, so it must be stable and unique per device.
	CAGUID uint64
	// AckDelay is the device's local CA ACK delay (5 bits), the REP's
	// target ACK delay and an input of the QP timeouts and timewait.
	AckDelay uint8
	// TIDHigh is the high half of the transaction IDs the Manager starts
	// (REQ, DREQ, SIDR_REQ), the low half being the local comm ID, as the
	// kernel forms them from its MAD agent's hi_tid.
	TIDHigh uint32
	// IDSeed is XORed into the sequence of local comm IDs (the kernel's
	// random_id_operand), so that a restarted device does not reuse the
	// comm IDs of its previous life. Pass a random value.
	IDSeed uint32
	// Listening decides what becomes of a new REQ or SIDR_REQ (not a
	// duplicate, not stale) from its service ID, sender and private data
	// (with rdma_cm, a mad.CMAHeader and the user's data). Nil listens to
	// nothing. The private data is valid only during the call.
	Listening func(sid mad.ServiceID, from netip.Addr, privateData []byte) Verdict
	// Disconnecting decides whether what would end connection id is its
	// peer's word: a DREQ matching it (established or about to be), a
	// REJ matching it once established, or, with nil private data, a new
	// REQ or REP that reuses its remote QPN (which makes it stale). A
	// connection whose peer authenticates its teardown (package cm's
	// Security) refuses one without the right tag in its private data,
	// and a stale verdict always. A refusal changes nothing for id and is
	// counted (Counters.Refused); a stale REQ or REP is still refused.
	// Nil takes them all. The private data is valid only during the call.
	Disconnecting func(id ID, privateData []byte) bool
	// MRAServiceTimeout is the service timeout of the MRAs sent for
	// duplicate REQs and REPs (5 bits; default 24).
	MRAServiceTimeout uint8
	// LinearTimeouts, MaxInterval and TotalTimeout shape retransmission:
	// the first LinearTimeouts retries wait the message's timeout, later
	// ones double it up to MaxInterval; TotalTimeout after the first send
	// the message times out whatever retries remain. A negative
	// LinearTimeouts never doubles (the kernel before 6.14).
	LinearTimeouts int
	MaxInterval    time.Duration
	TotalTimeout   time.Duration
	Limits         Limits
}

// Verdict is Listening's decision on a new request.
type Verdict uint8

// Verdicts.
const (
	// Deliver: a listener takes the request: EventConnectRequest or
	// EventSIDRRequest.
	Deliver Verdict = iota
	// NoListener: nothing listens on the service ID: REJ "invalid
	// service ID", SIDR_REP "unsupported", as the kernel's CM answers.
	NoListener
	// Refuse: the service ID has a listener that does not take this
	// request (rdma_cm: the rdma_cm header's destination address matches
	// no listener of the port): REJ "consumer defined" with local comm ID
	// 0, SIDR_REP "rejected", what the kernel's CM sends when rdma_cm
	// fails a request it was handed (cm_destroy_id in REQ_RCVD).
	Refuse
	// Drop: no answer and no record; the peer retransmits (the kernel
	// with a full rdma_cm listen backlog).
	Drop
)

// Limits bound what peers can make a Manager hold. Zero values select the
// defaults.
type Limits struct {
	// HalfOpen is the most passive connections and SIDR requests held
	// before they are established or answered (default 1024). At the
	// limit a new request evicts the oldest, whose driver is told with
	// EventAbandoned: a flood of requests that are never completed
	// displaces itself, and a real connection that completes within the
	// time the flood takes to fill the table gets through.
	HalfOpen int
	// HalfOpenPerSource is the most half-open requests from one address
	// (default 64); beyond it that address's new requests are dropped
	// (the peer retransmits).
	HalfOpenPerSource int
	// Records is the most connection records of any state, timewait
	// included (default 65536). At the limit the oldest timewait record is
	// freed early; without one, Connect fails and requests are dropped.
	Records int
	// AcceptTimeout is how long a passive request waits for Accept,
	// Reject or SIDRReply before it is abandoned (default 70 s, longer
	// than any peer retransmits it).
	AcceptTimeout time.Duration
}

const (
	defaultHalfOpen          = 1024
	defaultHalfOpenPerSource = 64
	defaultRecords           = 65536
	defaultAcceptTimeout     = 70 * time.Second
)

func (c *Config) withDefaults() Config {
	d := *c
	if d.AckDelay == 0 {
		d.AckDelay = DefaultAckDelay
	}
	d.AckDelay &= 0x1F
	if d.MRAServiceTimeout == 0 {
		d.MRAServiceTimeout = DefaultMRAServiceTimeout
	}
	d.MRAServiceTimeout &= 0x1F
	if d.LinearTimeouts == 0 {
		d.LinearTimeouts = DefaultLinearTimeouts
	}
	if d.MaxInterval <= 0 {
		d.MaxInterval = DefaultMaxInterval
	}
	if d.TotalTimeout <= 0 {
		d.TotalTimeout = DefaultTotalTimeout
	}
	l := &d.Limits
	if l.HalfOpen <= 0 {
		l.HalfOpen = defaultHalfOpen
	}
	if l.HalfOpenPerSource <= 0 {
		l.HalfOpenPerSource = defaultHalfOpenPerSource
	}
	if l.Records <= 0 {
		l.Records = defaultRecords
	}
	if l.AcceptTimeout <= 0 {
		l.AcceptTimeout = defaultAcceptTimeout
	}
	return d
}

// IBATime converts an IBA time exponent (4.096 µs × 2^t) to a duration
// the way the kernel's cm_convert_to_ms does: 2^(t-8) ms, at least 1 ms.
func IBATime(t uint8) time.Duration {
	if t <= 8 {
		return time.Millisecond
	}
	return time.Duration(1<<(t-8)) * time.Millisecond
}

// ACKTimeout is the kernel's cm_ack_timeout: the QP's local ACK timeout
// exponent for a CA ACK delay and a packet life time, 4.096 µs ×
// 2^timeout covering the delay plus a round trip, rounded to the larger
// term and incremented when the other is within 50 %.
func ACKTimeout(caAckDelay, packetLifetime uint8) uint8 {
	t := int(packetLifetime) + 1
	d := int(caAckDelay)
	if t >= d {
		if d >= t-1 {
			t++
		}
	} else {
		t = d
		if int(packetLifetime)+1 >= d-1 {
			t++
		}
	}
	return uint8(min(t, 31))
}
