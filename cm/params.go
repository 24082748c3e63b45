package cm

import (
	"fmt"

	"github.com/goroce/goroce/verbs"
)

// MaxPrivateData is the largest private data a REQ, REP or REJ carries.
// (The IB CM on QP1 carries far less: 92 bytes in a REQ, 196 in a REP, 148
// in a REJ, and rdma_cm takes 36 of the REQ's for its own header. Keep
// private data small if the application may later use rdma_cm peers.)
const MaxPrivateData = 4096

// Defaults applied to zero Params fields. The timers and retry counts are
// those of perftest and ibv_rc_pingpong.
const (
	DefaultRetryCount    = 7  // transport retries; 7 is not infinite
	DefaultRNRRetryCount = 7  // RNR retries; 7 is infinite
	DefaultMinRNRTimer   = 12 // 0.64 ms
	DefaultTimeout       = 14 // local ACK timeout 4.096 µs × 2^14 ≈ 67 ms
	DefaultGIDIndex      = 1  // the GID of the device's IP address

	// DefaultAccess are the QP's responder rights. They only enable the
	// operations: each remote access is still checked against the access
	// rights of the memory region its rkey names, so the QP may allow
	// everything and the MRs decide.
	DefaultAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite |
		verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
)

// NoRetry, as Params.RetryCount or Params.RNRRetryCount, asks for zero
// retries: the zero value of those fields selects the default instead.
const NoRetry uint8 = 0xFF

// hopLimit is the hop limit (IP TTL) of the connection's packets, the
// Linux default TTL that rdma_cm takes from the route.
const hopLimit = 64

// Params are what one side proposes for a connection (rdma_conn_param in
// spirit). A nil *Params or a zero field selects the default. Each side's
// values configure its own QP; they also travel to the peer, which sees
// them in RemoteInfo, and the READ/atomic depths and the path MTU are
// negotiated (the minimum of what both sides allow).
type Params struct {
	// ResponderResources is the number of incoming RDMA READ and atomic
	// requests this side accepts at once (its max_dest_rd_atomic is the
	// minimum of this and the peer's InitiatorDepth). Zero selects the
	// device limit (MaxQPRdAtom); at most 255.
	ResponderResources int

	// InitiatorDepth is the number of RDMA READ and atomic requests this
	// side wants outstanding at once (its max_rd_atomic is the minimum of
	// this and the peer's ResponderResources). Zero selects the device
	// limit (MaxQPInitRdAtom); at most 255.
	InitiatorDepth int

	// RetryCount is the number of transport retries after a local ACK
	// timeout (3 bits; 7 is NOT infinite). Zero selects
	// DefaultRetryCount; NoRetry selects 0.
	RetryCount uint8

	// RNRRetryCount is the number of retries after an RNR NAK (3 bits;
	// 7 means infinite). Zero selects DefaultRNRRetryCount; NoRetry
	// selects 0.
	RNRRetryCount uint8

	// MinRNRTimer is the RNR NAK timer code this side's responder sends
	// when no receive is posted (5 bits). Zero selects DefaultMinRNRTimer
	// (0.64 ms): the code 0 itself means 655 ms, which would stall the
	// peer on every RNR NAK.
	MinRNRTimer uint8

	// Timeout is the local ACK timeout exponent, 4.096 µs × 2^Timeout
	// (5 bits). Zero selects DefaultTimeout; an infinite timeout is not
	// offered, as it hides dead peers.
	Timeout uint8

	// PathMTU caps the path MTU. Zero selects the port's active MTU;
	// otherwise this side proposes the smaller of the two. The connection
	// uses the minimum of both sides' proposals.
	PathMTU verbs.MTU

	// GIDIndex selects the local GID (and so the source IP address) of
	// the connection. Zero selects DefaultGIDIndex.
	GIDIndex int

	// Access are the QP's access flags (qp_access_flags). Zero selects
	// DefaultAccess. For a QP handed over in INIT, zero keeps the flags it
	// has.
	Access verbs.AccessFlags

	// PrivateData is sent to the peer with the REQ (Dial) or the REP
	// (Accept), typically the rkey and address of a memory region. At
	// most MaxPrivateData bytes.
	PrivateData []byte
}

// settings are Params resolved against the local device: every default
// applied, every value checked.
type settings struct {
	access             verbs.AccessFlags
	keepAccess         bool // the QP came in INIT and Access was zero
	responderResources int
	initiatorDepth     int
	retryCount         uint8
	rnrRetryCount      uint8
	minRNRTimer        uint8
	timeout            uint8
	mtu                verbs.MTU // this side's proposal
	gidIndex           int
	gid                verbs.GID
	udpPort            uint16
	privateData        []byte
}

// invalid returns an error wrapping verbs.ErrInvalidArgument about field.
func invalid(field, format string, args ...any) error {
	return fmt.Errorf("parameter %s: %s: %w", field, fmt.Sprintf(format, args...), verbs.ErrInvalidArgument)
}

// retries resolves a retry count field.
func retries(field string, v, def uint8) (uint8, error) {
	switch {
	case v == 0:
		return def, nil
	case v == NoRetry:
		return 0, nil
	case v > 7:
		return 0, invalid(field, "%d exceeds 7 (use NoRetry for none)", v)
	}
	return v, nil
}

// depth resolves a READ/atomic depth field against the device limit.
func depth(field string, v, limit int) (int, error) {
	const wireMax = 255 // one byte on the wire, as in the IB CM
	switch {
	case v < 0:
		return 0, invalid(field, "%d is negative", v)
	case v == 0:
		return min(limit, wireMax), nil
	case v > limit || v > wireMax:
		return 0, invalid(field, "%d exceeds the device limit %d or %d", v, limit, wireMax)
	}
	return v, nil
}

// resolve applies the defaults of p (which may be nil) for a QP of dev in
// state state, and checks every value.
func (p *Params) resolve(dev *verbs.Device, state verbs.QPState) (settings, error) {
	var zero Params
	if p == nil {
		p = &zero
	}
	attr := dev.Query()
	port, err := dev.QueryPort(1)
	if err != nil {
		return settings{}, err
	}
	s := settings{
		access:      p.Access,
		minRNRTimer: p.MinRNRTimer,
		timeout:     p.Timeout,
		gidIndex:    p.GIDIndex,
		udpPort:     dev.UDPPort(),
		privateData: p.PrivateData,
	}
	if s.access == 0 {
		s.access = DefaultAccess
		s.keepAccess = state == verbs.QPStateInit
	}
	if s.responderResources, err = depth("ResponderResources", p.ResponderResources, attr.MaxQPRdAtom); err != nil {
		return settings{}, err
	}
	if s.initiatorDepth, err = depth("InitiatorDepth", p.InitiatorDepth, attr.MaxQPInitRdAtom); err != nil {
		return settings{}, err
	}
	if s.retryCount, err = retries("RetryCount", p.RetryCount, DefaultRetryCount); err != nil {
		return settings{}, err
	}
	if s.rnrRetryCount, err = retries("RNRRetryCount", p.RNRRetryCount, DefaultRNRRetryCount); err != nil {
		return settings{}, err
	}
	switch {
	case s.minRNRTimer == 0:
		s.minRNRTimer = DefaultMinRNRTimer
	case s.minRNRTimer > 31:
		return settings{}, invalid("MinRNRTimer", "%d exceeds 31", s.minRNRTimer)
	}
	switch {
	case s.timeout == 0:
		s.timeout = DefaultTimeout
	case s.timeout > 31:
		return settings{}, invalid("Timeout", "%d exceeds 31", s.timeout)
	}
	s.mtu = port.ActiveMTU
	if p.PathMTU != 0 {
		if !p.PathMTU.Valid() {
			return settings{}, invalid("PathMTU", "%v is not an IB MTU", p.PathMTU)
		}
		s.mtu = min(s.mtu, p.PathMTU)
	}
	if s.gidIndex == 0 {
		s.gidIndex = DefaultGIDIndex
	}
	if s.gid, err = dev.QueryGID(1, s.gidIndex); err != nil {
		return settings{}, err
	}
	if s.gid.IsZero() {
		return settings{}, invalid("GIDIndex", "GID %d is not populated", s.gidIndex)
	}
	if len(s.privateData) > MaxPrivateData {
		return settings{}, invalid("PrivateData", "%d bytes exceed %d", len(s.privateData), MaxPrivateData)
	}
	return s, nil
}
