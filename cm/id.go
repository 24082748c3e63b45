package cm

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/goroce/goroce/internal/ibcm"
	"github.com/goroce/goroce/internal/mad"
	"github.com/goroce/goroce/verbs"
)

// PortSpace is an rdma_cm port space (enum rdma_port_space): the upper
// bits of the service IDs of its ports, and the kind of QP its IDs
// connect.
type PortSpace uint16

// Port spaces. PortSpaceTCP connects RC (or UC) QPs with REQ/REP/RTU;
// PortSpaceUDP and PortSpaceIPoIB resolve UD QPs with SIDR.
const (
	PortSpaceIPoIB PortSpace = 0x0002 // RDMA_PS_IPOIB
	PortSpaceTCP   PortSpace = 0x0106 // RDMA_PS_TCP
	PortSpaceUDP   PortSpace = 0x0111 // RDMA_PS_UDP
)

func (ps PortSpace) String() string { return mad.PortSpace(ps).String() }

// UDPQKey is the Q_Key of UD QPs in the UDP and IPoIB port spaces
// (RDMA_UDP_QKEY): what rdma_cm programs a UD QP with and answers SIDR
// requests with.
const UDPQKey = 0x01234567

// idState is an ID's rdma_cm state (the kernel's enum rdma_cm_state).
type idState uint8

const (
	idIdle idState = iota
	idAddrBound
	idAddrResolved
	idRouteResolved
	idConnect // connecting, connected, or a request received
	idDisconnect
	idListen
	idDestroying
)

var idStateNames = [...]string{"IDLE", "ADDR_BOUND", "ADDR_RESOLVED", "ROUTE_RESOLVED", "CONNECT",
	"DISCONNECT", "LISTEN", "DESTROYING"}

func (s idState) String() string {
	if int(s) < len(idStateNames) {
		return idStateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// ID is a connection manager identifier (struct rdma_cm_id): an address,
// and once resolved a device and a path; a listener; or one side of a
// connection, with its QP. Its events go to its EventChannel. An ID is
// safe for concurrent use; destroy it with Destroy.
type ID struct {
	ps     PortSpace
	qpType verbs.QPType

	// Guarded by state.mu.
	ch        *EventChannel
	context   any
	st        idState
	agent     *agent         // the device, once bound to an address or resolved
	src, dst  netip.AddrPort // local and peer address; src may be a wildcard
	bind      *bindList      // the port binding
	opts      options
	route     Route
	routeOK   bool
	qp        *verbs.QP
	pd        *verbs.PD
	qpOwned   bool // CreateQP made it: DestroyQP destroys it
	qkey      uint32
	destroyed bool
	removed   bool // the device was closed
	// hw is the ID's rdma_cm_id of librdmacm once it is bound to, or
	// resolved through, a kernel RDMA device (hw_id.go).
	hw *hwID
	// portAsked: the binding's port was the application's, not one
	// picked for it.
	portAsked bool
	// goroceOnly keeps the ID off kernel devices: the net-like API's
	// IDs, which reach those through hw_rdmacm.go instead. Set before
	// the ID is shared.
	goroceOnly bool

	// The connection (Connect, or a received request).
	cmID      ibcm.ID // the Manager's record; 0 for none
	active    bool
	psn       uint32 // our starting PSN: the first our QP receives
	respRes   uint8  // READs and atomics our QP serves (max_dest_rd_atomic)
	initDepth uint8  // READs and atomics it issues (max_rd_atomic)
	attrs     ibcm.QPAttrs
	haveAttrs bool // attrs hold the connection's values (a REQ or REP arrived)
	noQPNum   uint32
	noQPSRQ   bool
	replied   bool // active: the REP arrived; passive: Accept sent the REP
	// srOffer: the REQ offers selective repeat (sent or received); sr:
	// both sides agreed, the QP gets it on its way to RTR.
	srOffer, sr bool
	connErr     bool // CONNECT_ERROR was reported: later REJECTED and DISCONNECTED are not

	// Listener.
	backlog         int
	pendingRequests int // its EventConnectRequests not yet taken by GetEvent

	// Request: the listener, and the EventConnectRequest still queued.
	parent       *ID
	requestEvent *Event
	req          *mad.REQ
	// sec is the active side's handshake until the REP (secure.go);
	// discKey authenticates the DREQs of a secured connection.
	sec     *securing
	discKey *[32]byte

	// Events handed out and not acknowledged; Destroy waits on ackWait.
	unacked int
	ackWait chan struct{}
}

// options are rdma_set_option's values and goroce's CM knobs.
type options struct {
	tos          uint8
	tosSet       bool
	reuseAddr    bool
	afOnly       bool
	afOnlySet    bool
	ackTimeout   uint8 // 0: the CM's, from the path's packet life time
	minRNRTimer  uint8 // 0: DefaultMinRNRTimer
	respTimeout  uint8 // CM response timeout; 0: ibcm's default
	maxCMRetries uint8 // 0: ibcm's default
	// For the net-like API's Params: the QP's rights instead of the
	// CM's, and a cap on the path MTU.
	access  verbs.AccessFlags
	pathMTU verbs.MTU
}

// DefaultMinRNRTimer is the RNR NAK timer code (5 bits, 0.64 ms) a
// connection's QP gets unless SetMinRNRTimer says otherwise. The kernel's
// CM leaves it 0, which is the longest, 655 ms: every RNR NAK would stall
// the peer that long.
const DefaultMinRNRTimer = 12

// CreateID creates an ID on ch for a port space (rdma_create_id):
// PortSpaceTCP for RC QPs, PortSpaceUDP or PortSpaceIPoIB for UD QPs.
// context is the application's, returned by Context and given to the IDs
// of the requests a listener receives.
func (ch *EventChannel) CreateID(context any, ps PortSpace) (*ID, error) {
	var t verbs.QPType
	switch ps {
	case PortSpaceTCP:
		t = verbs.QPTypeRC
	case PortSpaceUDP, PortSpaceIPoIB:
		t = verbs.QPTypeUD
	default:
		return nil, fmt.Errorf("cm: create ID: port space %v: %w", ps, verbs.ErrNotSupported)
	}
	lock()
	defer unlock()
	ch.mu.Lock()
	closed := ch.closed
	ch.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("cm: create ID: event channel %w", ErrClosed)
	}
	return newID(ch, context, ps, t), nil
}

// newID makes an ID on ch. The caller holds state.mu.
func newID(ch *EventChannel, context any, ps PortSpace, t verbs.QPType) *ID {
	id := &ID{ch: ch, context: context, ps: ps, qpType: t}
	if t == verbs.QPTypeUD {
		id.qkey = UDPQKey
	}
	ch.ids++
	state.ids++
	return id
}

// Context returns the application's context of the ID.
func (id *ID) Context() any {
	lock()
	defer unlock()
	return id.context
}

// SetContext replaces the application's context of the ID.
func (id *ID) SetContext(c any) {
	lock()
	defer unlock()
	id.context = c
}

// Channel returns the ID's event channel.
func (id *ID) Channel() *EventChannel {
	lock()
	defer unlock()
	return id.ch
}

// PortSpace returns the ID's port space.
func (id *ID) PortSpace() PortSpace { return id.ps }

// QPType returns the type of QP the ID connects (RC, or UD for the UDP
// and IPoIB port spaces; an RC ID connects a UC QP given to it too).
func (id *ID) QPType() verbs.QPType { return id.qpType }

// Device returns the device the ID is bound to (id->verbs), nil before
// an address is bound or resolved, or after the device closed.
func (id *ID) Device() *verbs.Device {
	lock()
	defer unlock()
	if id.hw != nil && !id.removed {
		return id.hw.dev
	}
	if id.agent == nil || id.removed {
		return nil
	}
	return id.agent.dev
}

// PortNum returns the device's port (id->port_num): 1.
func (id *ID) PortNum() int { return 1 }

// QP returns the ID's QP, nil if none was given.
func (id *ID) QP() *verbs.QP {
	lock()
	defer unlock()
	return id.qp
}

// PD returns the protection domain of the ID's QP.
func (id *ID) PD() *verbs.PD {
	lock()
	defer unlock()
	return id.pd
}

// LocalAddr returns the ID's address and port (rdma_get_local_addr,
// rdma_get_src_port); the address is unspecified for a wildcard binding.
func (id *ID) LocalAddr() netip.AddrPort {
	lock()
	defer unlock()
	return id.src
}

// PeerAddr returns the peer's address and port (rdma_get_peer_addr,
// rdma_get_dst_port).
func (id *ID) PeerAddr() netip.AddrPort {
	lock()
	defer unlock()
	return id.dst
}

// Route is the resolved path of an ID (struct rdma_route).
type Route struct {
	SGID, DGID   verbs.GID
	PathMTU      verbs.MTU
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
	// PacketLifetime is the path's packet life time exponent (4.096 µs ×
	// 2^t), rdma_cm's 16 on RoCE.
	PacketLifetime uint8
	// UDPPort is the peer device's RoCEv2 port: 4791 unless it is a
	// goroce device of this process opened with another.
	UDPPort uint16
}

// Route returns the ID's path; ok is false before ResolveRoute (or a
// request) set one.
func (id *ID) Route() (r Route, ok bool) {
	lock()
	defer unlock()
	return id.route, id.routeOK
}

// QKey returns the Q_Key of a UD ID's QP (UDPQKey).
func (id *ID) QKey() uint32 { return id.qkey }

// SetTOS sets the traffic class of the ID's packets (RDMA_OPTION_ID_TOS):
// the REQ's path and the QP's address vector. Set it before ResolveRoute.
func (id *ID) SetTOS(tos uint8) error {
	lock()
	defer unlock()
	if err := id.usable("set TOS"); err != nil {
		return err
	}
	if id.hw != nil {
		if err := id.hwSetOption(hwOptionTOS, int(tos)); err != nil {
			return fmt.Errorf("cm: set TOS: %w", err)
		}
	}
	id.opts.tos, id.opts.tosSet = tos, true
	return nil
}

// SetReuseAddr lets the ID share its port with other IDs that do the same
// and do not listen (RDMA_OPTION_ID_REUSEADDR). Turning it off is only
// allowed before the ID is bound.
func (id *ID) SetReuseAddr(reuse bool) error {
	lock()
	defer unlock()
	if err := id.usable("set REUSEADDR"); err != nil {
		return err
	}
	if !reuse && id.st != idIdle {
		return id.errState("set REUSEADDR")
	}
	if id.hw != nil {
		if err := id.hwSetOption(hwOptionReuseAddr, boolInt(reuse)); err != nil {
			return fmt.Errorf("cm: set REUSEADDR: %w", err)
		}
	}
	id.opts.reuseAddr = reuse
	return nil
}

// SetAFOnly makes an IPv6 wildcard ID take IPv6 only
// (RDMA_OPTION_ID_AFONLY); by default it takes IPv4 too. Set it before the
// ID listens.
func (id *ID) SetAFOnly(only bool) error {
	lock()
	defer unlock()
	if err := id.usable("set AFONLY"); err != nil {
		return err
	}
	if id.st != idIdle && id.st != idAddrBound {
		return id.errState("set AFONLY")
	}
	if id.hw != nil {
		if err := id.hwSetOption(hwOptionAFOnly, boolInt(only)); err != nil {
			return fmt.Errorf("cm: set AFONLY: %w", err)
		}
	}
	id.opts.afOnly, id.opts.afOnlySet = only, true
	return nil
}

// SetAckTimeout sets the local ACK timeout exponent (5 bits, 4.096 µs ×
// 2^t) of the ID's QP (RDMA_OPTION_ID_ACK_TIMEOUT), instead of the one
// the CM derives from the path (the kernel's cm_ack_timeout: 17 with
// rdma_cm's defaults, 0.5 s).
func (id *ID) SetAckTimeout(t uint8) error {
	if t > 31 {
		return fmt.Errorf("cm: set ACK timeout: %d exceeds 31: %w", t, verbs.ErrInvalidArgument)
	}
	lock()
	defer unlock()
	if err := id.usable("set ACK timeout"); err != nil {
		return err
	}
	if id.hw != nil {
		if err := id.hwSetOption(hwOptionAckTimeout, int(t)); err != nil {
			return fmt.Errorf("cm: set ACK timeout: %w", err)
		}
	}
	id.opts.ackTimeout = t
	return nil
}

// SetMinRNRTimer sets the RNR NAK timer code (5 bits) of the ID's QP
// (rdma_set_min_rnr_timer); the default is DefaultMinRNRTimer.
func (id *ID) SetMinRNRTimer(t uint8) error {
	if t > 31 {
		return fmt.Errorf("cm: set min RNR timer: %d exceeds 31: %w", t, verbs.ErrInvalidArgument)
	}
	lock()
	defer unlock()
	if err := id.usable("set min RNR timer"); err != nil {
		return err
	}
	id.opts.minRNRTimer = t
	return nil
}

// SetCMTimeouts sets the CM response timeout exponent (5 bits; 4.096 µs ×
// 2^t, the REQ's and thus the REP's; rdma_cm's is 18, about 1 s) and the
// number of retransmissions of the ID's REQ, REP, DREQ or SIDR_REQ (4
// bits; rdma_cm's 15). Zero keeps the default. A goroce extension: the
// kernel's are fixed.
func (id *ID) SetCMTimeouts(responseTimeout, maxRetries uint8) error {
	if responseTimeout > 31 || maxRetries > 15 {
		return fmt.Errorf("cm: set CM timeouts: %d/%d exceed 31/15: %w", responseTimeout, maxRetries, verbs.ErrInvalidArgument)
	}
	lock()
	defer unlock()
	if err := id.usable("set CM timeouts"); err != nil {
		return err
	}
	if id.hw != nil {
		return fmt.Errorf("cm: set CM timeouts on a kernel RDMA device (the kernel's CM timers are fixed): %w", verbs.ErrNotSupported)
	}
	id.opts.respTimeout, id.opts.maxCMRetries = responseTimeout, maxRetries
	return nil
}

// usable fails for a destroyed ID. The caller holds state.mu.
func (id *ID) usable(op string) error {
	if id.destroyed {
		return fmt.Errorf("cm: %s: ID %w", op, ErrClosed)
	}
	return nil
}

// onDevice fails for a destroyed ID or one whose device closed. The
// caller holds state.mu.
func (id *ID) onDevice(op string) error {
	if err := id.usable(op); err != nil {
		return err
	}
	if id.removed {
		return fmt.Errorf("cm: %s: %w", op, ErrDeviceRemoved)
	}
	return nil
}

// errState is the error of a call the ID's state does not allow (EINVAL
// in librdmacm).
func (id *ID) errState(op string) error {
	return fmt.Errorf("cm: %s: not valid in state %v: %w", op, id.st, verbs.ErrInvalidState)
}

// post reports an event for the ID on its channel. The caller holds
// state.mu.
func (id *ID) post(ev *Event) {
	ev.ID = id
	if ev.Err != nil && ev.Status == 0 {
		ev.Status = status(ev.Err)
	}
	id.ch.post(ev)
}

// isChildInQueue reports whether id is a request whose
// EventConnectRequest the application has not taken yet: its other events
// are not reported (as the kernel's ucma ignores them until userspace
// knows the ID). The caller holds state.mu.
func (id *ID) isChildInQueue() bool { return id.requestEvent != nil }

// Migrate moves the ID to another event channel (rdma_migrate_id): its
// queued events, and its future ones, go to ch.
func (id *ID) Migrate(ch *EventChannel) error {
	lock()
	defer unlock()
	if err := id.usable("migrate"); err != nil {
		return err
	}
	ch.mu.Lock()
	closed := ch.closed
	ch.mu.Unlock()
	if closed {
		return fmt.Errorf("cm: migrate: event channel %w", ErrClosed)
	}
	old := id.ch
	if old == ch {
		return nil
	}
	if id.hw != nil {
		if err := id.hwMigrate(ch); err != nil {
			return err
		}
	}
	moved := old.unpost(func(ev *Event) bool { return ev.owner() == id })
	old.ids--
	id.ch = ch
	ch.ids++
	for _, ev := range moved {
		ch.post(ev)
	}
	return nil
}

// boolInt is v as C's int.
func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}
