package cm

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/goroce/goroce/verbs"
)

// Params are what one side of the net-like API proposes for a connection
// (Dial, Request.Accept). A nil *Params or a zero field selects the
// default, unlike ConnParam's C-like zeros.
type Params struct {
	// ResponderResources is how many RDMA READs and atomics this side's
	// QP serves at once, InitiatorDepth how many it issues. Zero selects
	// the device limit (accepting: the peer's ask within it); at most
	// 255.
	ResponderResources int
	InitiatorDepth     int

	// RetryCount is the connection's transport retry count (3 bits; 7 is
	// NOT infinite), which the active side sets for both QPs; zero
	// selects 7, NoRetry 0. RNRRetryCount is the RNR retries the peer
	// makes against this side (7 is infinite); zero selects 7.
	RetryCount    uint8
	RNRRetryCount uint8

	// MinRNRTimer is the RNR NAK timer code this side's responder sends
	// (5 bits); zero selects DefaultMinRNRTimer (0.64 ms). rdma_cm leaves
	// 0, the longest (655 ms).
	MinRNRTimer uint8

	// Timeout is the QP's local ACK timeout exponent (4.096 µs × 2^t);
	// zero selects the CM's, from the path's packet life time and the
	// devices' ACK delay (17, about 0.5 s).
	Timeout uint8

	// PathMTU caps the path MTU on the active side (zero: the device's
	// active MTU). The passive side takes the active side's: a REP has
	// no MTU.
	PathMTU verbs.MTU

	// Access are the QP's remote rights; zero selects the CM's:
	// REMOTE_WRITE, and REMOTE_READ and REMOTE_ATOMIC when it serves READs
	// and atomics. Each access is still checked against the rights of
	// the memory region its rkey names.
	Access verbs.AccessFlags

	// TrafficClass is the IP traffic class (DSCP and ECN) of the
	// connection's packets (Dial).
	TrafficClass uint8

	// CMResponseTimeout and MaxCMRetries shape the CM's retransmission
	// of the REQ (Dial) and of the REP the peer's REQ asks for: see
	// ID.SetCMTimeouts. Zero keeps rdma_cm's (18, 15).
	CMResponseTimeout uint8
	MaxCMRetries      uint8

	// PrivateData goes to the peer with the REQ (at most
	// MaxConnectPrivateData, 56 bytes) or the REP (MaxAcceptPrivateData,
	// 196 bytes). The peer receives the whole field, zero-padded.
	PrivateData []byte

	// Security, when set, offers (Dial) or accepts (Request.Accept)
	// authenticated, encrypted RDMA with a goroce peer; see Security.
	// With it PrivateData shrinks by SecurityLen bytes.
	Security *Security

	// SelectiveRepeat offers (Dial) or grants (Accept) goroce's
	// selective repeat and adaptive retransmission timeout
	// (ConnParam.SelectiveRepeat): on only if both sides ask for it and
	// the peer is goroce; otherwise the QPs use IBTA go-back-N.
	SelectiveRepeat bool
}

// NoRetry, as Params.RetryCount or Params.RNRRetryCount, asks for zero
// retries: the zero value selects the default instead.
const NoRetry uint8 = 0xFF

// connParam converts p into the event API's parameters.
func (p *Params) connParam() (ConnParam, error) {
	var z Params
	if p == nil {
		p = &z
	}
	c := ConnParam{PrivateData: p.PrivateData, ResponderResources: MaxResponderResources,
		InitiatorDepth: MaxInitiatorDepth, RetryCount: 7, RNRRetryCount: 7, SelectiveRepeat: p.SelectiveRepeat}
	for _, d := range []struct {
		name string
		v    int
		dst  *uint8
	}{{"ResponderResources", p.ResponderResources, &c.ResponderResources}, {"InitiatorDepth", p.InitiatorDepth, &c.InitiatorDepth}} {
		switch {
		case d.v < 0 || d.v > 255:
			return c, fmt.Errorf("cm: parameter %s: %d outside 0..255: %w", d.name, d.v, verbs.ErrInvalidArgument)
		case d.v > 0:
			*d.dst = uint8(d.v)
		}
	}
	for _, r := range []struct {
		name string
		v    uint8
		dst  *uint8
	}{{"RetryCount", p.RetryCount, &c.RetryCount}, {"RNRRetryCount", p.RNRRetryCount, &c.RNRRetryCount}} {
		switch {
		case r.v == NoRetry:
			*r.dst = 0
		case r.v > 7:
			return c, fmt.Errorf("cm: parameter %s: %d exceeds 7 (NoRetry for none): %w", r.name, r.v, verbs.ErrInvalidArgument)
		case r.v > 0:
			*r.dst = r.v
		}
	}
	if p.PathMTU != 0 && !p.PathMTU.Valid() {
		return c, fmt.Errorf("cm: parameter PathMTU: %d is not an IB MTU: %w", int(p.PathMTU), verbs.ErrInvalidArgument)
	}
	return c, nil
}

// apply sets p's options on id.
func (p *Params) apply(id *ID) error {
	if p == nil {
		return nil
	}
	if err := id.SetMinRNRTimer(p.MinRNRTimer); err != nil {
		return err
	}
	if err := id.SetAckTimeout(p.Timeout); err != nil {
		return err
	}
	if err := id.SetCMTimeouts(p.CMResponseTimeout, p.MaxCMRetries); err != nil {
		return err
	}
	if p.TrafficClass != 0 {
		if err := id.SetTOS(p.TrafficClass); err != nil {
			return err
		}
	}
	lock()
	id.opts.access, id.opts.pathMTU = p.Access, p.PathMTU
	unlock()
	return nil
}

// RemoteInfo is what the peer announced for its side of a connection, in
// its REQ (seen by the passive side) or REP (seen by the active side).
type RemoteInfo struct {
	// Addr is the peer's IP address and rdma_cm port.
	Addr netip.AddrPort
	// QPN is the peer's QP number; GID its device's GID; UDPPort the
	// RoCEv2 port its device receives on.
	QPN     uint32
	GID     verbs.GID
	UDPPort uint16
	// PathMTU is the connection's path MTU (the active side's choice).
	PathMTU verbs.MTU
	// ResponderResources and InitiatorDepth are the peer's own: the READs
	// and atomics it serves and issues at once.
	ResponderResources int
	InitiatorDepth     int
	// RetryCount and RNRRetryCount are the REQ's (the connection's retry
	// count, and the RNR retries the active side asks of the passive
	// side's QP) or the REP's RNR retry count.
	RetryCount    uint8
	RNRRetryCount uint8
	FlowControl   bool
	SRQ           bool
	// PrivateData is the REQ's (56 bytes) or REP's (196), zero-padded.
	PrivateData []byte
}

// remoteInfo fills in what the ID knows of its peer. The caller holds
// state.mu.
func (id *ID) remoteInfo(c ConnParam) RemoteInfo {
	r := RemoteInfo{Addr: id.dst, QPN: c.QPNum, GID: verbs.GIDFromAddr(id.dst.Addr()),
		UDPPort: peerUDPPort(id.dst.Addr()), PathMTU: verbs.MTU(id.attrs.PathMTU),
		ResponderResources: int(c.InitiatorDepth), InitiatorDepth: int(c.ResponderResources),
		RetryCount: c.RetryCount, RNRRetryCount: c.RNRRetryCount, FlowControl: c.FlowControl, SRQ: c.SRQ,
		PrivateData: c.PrivateData}
	if id.req != nil {
		r.GID = verbs.GID(id.req.Primary.LocalGID)
	}
	return r
}

// resolveAddress parses "host:port" (host an IP address or a name the
// resolver knows; empty for every address) into an address and port.
func resolveAddress(ctx context.Context, address string) ([]netip.AddrPort, error) {
	host, ps, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("cm: address %q: %w", address, err)
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("cm: address %q: port %q: %w", address, ps, verbs.ErrInvalidArgument)
	}
	if host == "" {
		return []netip.AddrPort{netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(port))}, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.AddrPort{netip.AddrPortFrom(ip.Unmap(), uint16(port))}, nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("cm: address %q: %w", address, err)
	}
	out := make([]netip.AddrPort, 0, len(ips))
	for _, ip := range ips {
		out = append(out, netip.AddrPortFrom(ip.Unmap(), uint16(port)))
	}
	return out, nil
}
