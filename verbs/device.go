package verbs

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/internal/gsi"
	"github.com/goroce/goroce/internal/netio"
	"github.com/goroce/goroce/internal/transport"
)

// DefaultUDPPort is the RoCEv2 UDP destination port (IANA 4791).
const DefaultUDPPort = 4791

// DefaultDeviceName is the name of a device opened without one.
const DefaultDeviceName = "goroce0"

// DeviceConfig configures Open.
type DeviceConfig struct {
	// Name identifies the device, like "rxe0" for the kernel's Soft-RoCE.
	// Default DefaultDeviceName.
	Name string

	// Addr is the IP address the device will bind (IPv4 or IPv6;
	// required). It also determines GID 1: the IPv4-mapped GID of an IPv4
	// address, or the IPv6 address itself. An IPv4-mapped IPv6 address is
	// treated as the IPv4 address.
	Addr netip.Addr

	// Port is the UDP port the device will bind. Default DefaultUDPPort.
	// Only goroce peers can be told to use another port.
	Port uint16

	// MTU, when set, fixes the port's active MTU, the largest path MTU
	// peers should negotiate (tools such as perftest use the minimum of
	// both ports' active MTUs). By default the active MTU follows the
	// link MTU of the interface carrying Addr, as rxe's does: the largest
	// IB MTU that fits in a link frame with the RoCEv2 headers (80 bytes
	// on IPv4, as rxe; 84 on IPv6), so 1500 gives MTU1024, 9000 and 4200
	// MTU4096, loopback's 64 KiB MTU4096. A change of the link's MTU
	// shows in QueryPort within a second (it is read again on query
	// when older); QPs keep the path MTU they were given (RC, UC) or
	// created with (UD), as rxe's do, so a QP whose path MTU exceeds a
	// shrunken link loses its large packets to the kernel (EMSGSIZE,
	// counted as send errors) until it fails with RETRY_EXC_ERR. When no
	// interface carries Addr (the GOOS hides it), the default is MTU4096
	// on loopback and MTU1024 elsewhere.
	MTU MTU

	// Limits, if not nil, overrides device limits (for tests, or to bound
	// memory use). Each non-zero field among MaxMRSize, MaxQP, MaxQPWR,
	// MaxSGE, MaxSGERD, MaxCQ, MaxCQE, MaxMR, MaxPD, MaxQPRdAtom,
	// MaxQPInitRdAtom, MaxResRdAtom, MaxAH, MaxSRQ, MaxSRQWR, MaxSRQSGE
	// and MaxInlineData replaces the default; the other fields are
	// ignored. A value the implementation cannot honour is an error:
	// MaxMR is at most 2^20 (the memory key slots), MaxQP at
	// most 2^24-2 (the QP numbers other than 0 and 1), MaxMRSize at most
	// 2^63-1, the others at most 2^31-1.
	Limits *DeviceAttr

	// NoOffload turns off UDP segmentation and receive offload (GSO and
	// GRO): every packet is its own datagram on its way through the
	// kernel. GSO sends a run of equal-size packets of one flow as one
	// datagram the kernel (or the NIC) cuts up, numbering the IPv4
	// identification of segment i as i, which goroce's ICRCs account
	// for; a NIC that numbers them differently in hardware would make
	// the ICRCs wrong for strict receivers such as rxe. Also useful
	// when a middlebox should see (and drop) single packets.
	NoOffload bool

	// PerQPReplyPort sends every ACKNOWLEDGE (ACK, NAK, RNR NAK) from
	// its QP's own UDP source port, as rxe does. By default the ones the
	// packets of one receive batch cause leave together from the
	// device's port (Port), in one system call for all QPs, which many
	// active QPs need; requests, READ responses and ATOMIC_ACKNOWLEDGE
	// always use the QP's port. The cost is ECMP entropy: on a multipath
	// fabric an ACK may overtake the READ responses of its QP, which the
	// requester handles as an implied NAK (it re-reads).
	PerQPReplyPort bool

	// AnySourcePort turns off source port pinning: by default a
	// connected (RC or UC) QP takes packets only from its peer's address
	// and, from the first one on after RTR, only from that packet's UDP
	// source port (Linux rxe and goroce send all of a QP's packets from
	// one port), plus ACKNOWLEDGEs from the peer's RoCE port (Port), from
	// which goroce peers send coalesced replies. Others are dropped and
	// counted (Counters.DroppedWrongPort). Pinning makes a forger spoofing
	// the peer's address also match its port; set AnySourcePort for a
	// peer whose QP changes source ports mid-connection.
	AnySourcePort bool

	// NoStatsEndpoint turns off the Unix socket on which the device
	// serves its counters to goroce-stat (see Device.StatsEndpoint).
	NoStatsEndpoint bool

	// BusyPoll lets an application that busy-polls its CQs drive the
	// device's receive path itself: CQ.Poll, when the CQ holds fewer
	// completions than asked for, first reads the device's socket
	// without waiting and processes what it finds on the caller's
	// goroutine, as a NIC would have done meanwhile. A spinning loop
	// (perftest's busy polling, WaitSpin with a negative spin) then needs
	// no processor for the device's receive goroutine, which on a
	// machine with few cores it would otherwise starve. The receive
	// goroutine still handles whatever no poller took. Each such Poll
	// costs a system call (about a microsecond when nothing is there);
	// applications that park (Wait, completion channels) gain nothing.
	BusyPoll bool

	// ReceiveQueues is how many sockets, each with its own goroutine,
	// receive on Addr and Port (SO_REUSEPORT): the kernel steers each
	// packet to the socket of its destination QP (QP number mod
	// ReceiveQueues, as a NIC's receive-side scaling steers by QP), so
	// the packets of several QPs are handled on several cores. QPs take
	// the queues in turn as they are created; one QP's receive
	// processing stays on one core, but for packets that GSO or GRO
	// carried behind another QP's (a peer's coalesced ACKs), which are
	// handled where that one is, under the QP's lock. 0 or 1
	// means one socket, the default; at most MaxReceiveQueues. Linux
	// only: elsewhere, and with the goroce_portable build tag, the device
	// has one socket whatever the value (Device.ReceiveQueues says how
	// many it has). Sends are not spread: each QP sends from its own
	// socket on the goroutine that posts, receives or runs its timer;
	// posts that the doorbell corks leave from its one flusher. With
	// BusyPoll, a Poll reads every queue's socket. See "Several cores"
	// in the README for what scales and what does not.
	ReceiveQueues int

	// CongestionControl configures ECN, DCQCN and the RTT window (see
	// CongestionControl); the zero value is ECN and DCQCN on with their
	// defaults and the RTT window off.
	CongestionControl CongestionControl
}

// Device is an open goroce RDMA device (struct ibv_context): one port, one
// IP address and UDP port, and the objects created on it. All methods are
// safe for concurrent use.
type Device struct {
	name           string
	addr           netip.Addr
	udpPort        uint16
	attr           DeviceAttr // immutable after Open
	port           PortAttr   // immutable after Open, but for ActiveMTU: see mtu
	mtu            *activeMTU // the port's active MTU (QueryPort)
	gids           []GIDEntry // immutable after Open
	numCompVectors int

	res resources

	// keys is the secret the device's memory keys are drawn with.
	keys *keySecret
	// mrs maps lkeys and rkeys to memory regions; lookups are lock-free.
	mrs *keyTable[mrRegion]
	// mws maps memory window rkeys to windows, lock-free as well.
	mws *keyTable[MW]

	eng           *engine // the socket and the data path's goroutines
	busyPoll      bool    // DeviceConfig.BusyPoll
	anySourcePort bool    // DeviceConfig.AnySourcePort
	// cc is every connected QP's congestion control
	// (DeviceConfig.CongestionControl), immutable after Open.
	cc transport.CCConfig

	stats *statsEndpoint // nil without one (NoStatsEndpoint, or it failed)

	// gsi is QP 1 (gsi.go), set once the engine runs; the receive path
	// loads it for packets that match no QP.
	gsi atomic.Pointer[gsiPort]

	// qps maps QP numbers to QPs; sync.Map loads are lock-free, which is
	// what the receive path's dispatch by destination QPN needs.
	qps        sync.Map // uint32 -> *QP
	qpnMu      sync.Mutex
	qpnPerm    *perm24 // QP numbers are its images of qpnCounter
	qpnCounter uint32  // guarded by qpnMu
	qpnQueue   uint32  // the receive queue of the next QP (addQP); guarded by qpnMu

	// mu guards closed and the registries Close walks.
	mu       sync.Mutex
	closed   bool
	pds      map[*PD]struct{}
	cqs      map[*CQ]struct{}
	channels map[*CompChannel]struct{}
	srqs     map[*SRQ]struct{}
	ahs      map[*AH]struct{}

	// hw is the hardware backend (OpenHardware, hw.go); nil on a goroce
	// device.
	hw hwDevice
}

// Hard caps: limits the implementation cannot exceed whatever
// DeviceConfig.Limits asks.
const (
	capMaxMR  = keySlots            // the MR key slots
	capMaxMW  = keySlots            // the MW key slots
	capMaxQP  = qpnMax - qpnMin + 1 // the QPN space minus QP0 and QP1
	capMaxInt = math.MaxInt32       // 32-bit fields of ibv structures
)

// defaultDeviceAttr returns the limits of a goroce device. They follow rxe
// (drivers/infiniband/sw/rxe/rxe_param.h) where rxe's choice fits a
// userspace device, and differ where noted.
func defaultDeviceAttr() DeviceAttr {
	return DeviceAttr{
		FWVer:        "0.0.0",
		MaxMRSize:    math.MaxInt64, // a Go slice's length is an int (rxe: ~0)
		PageSizeCap:  0xfffff000,
		VendorID:     0xffffff, // no IEEE OUI
		VendorPartID: 0,
		HWVer:        0,
		MaxQP:        0x10000,
		MaxQPWR:      0x4000,
		// Only what is implemented: RNR NAKs, SRQ resize, a system image
		// GUID, CUR_STATE in ModifyQP, UD address handles pinned to the
		// port, memory windows of type 1 and 2B, FLUSH of both
		// placement types and ATOMIC_WRITE (rxe's bits for these).
		DeviceCapFlags: DeviceRCRNRNAKGen | DeviceSRQResize | DeviceSysImageGUID |
			DeviceCurrQPStateMod | DeviceUDAVPortEnforce | DeviceMemWindow | DeviceMemWindowType2B |
			DeviceFlushGlobal | DeviceFlushPersistent | DeviceAtomicWrite,
		MaxSGE:          32,
		MaxSGERD:        32,
		MaxCQ:           16384,
		MaxCQE:          1<<15 - 1,
		MaxMR:           capMaxMR, // the whole MR key range (rxe: 2048 to 256K by version)
		MaxPD:           0x7ffc,
		MaxQPRdAtom:     128,
		MaxQPInitRdAtom: 128,
		MaxResRdAtom:    0x3f000,
		AtomicCap:       AtomicHCA,
		MaxMW:           capMaxMW, // the whole MW key range (rxe: 0x20000)
		MaxAH:           0x7fff,   // rxe: 100, too few for UD servers
		MaxSRQ:          960,
		MaxSRQWR:        0x4000,
		MaxSRQSGE:       32, // rxe: 27, a kernel WQE layout limit that does not apply here
		MaxPKeys:        1,
		LocalCAAckDelay: 15,
		PhysPortCnt:     1,
		MaxInlineData:   400,
	}
}

// Open opens a device: it validates the configuration, builds the device's
// attributes, port and GID table, binds the UDP socket on Addr and Port
// (failing if another device or program holds it) and starts the device's
// receive and timer goroutines. Close stops them.
func Open(cfg DeviceConfig) (*Device, error) { return open("Open", cfg, nil) }

// open is Open with the receive path's fault injection (nil: none), which
// only binaries built with the goroce_faults tag can ask for.
func open(op string, cfg DeviceConfig, faults *netio.Faults) (*Device, error) {
	d, err := buildDevice(op, cfg)
	if err != nil {
		return nil, err
	}
	queues := max(cfg.ReceiveQueues, 1)
	if !netio.ReusePortSpreads {
		queues = 1
	}
	eng, err := startEngine(d, faults, cfg.NoOffload, cfg.PerQPReplyPort, d.cc.ECN, queues)
	if err != nil {
		return nil, bindError(op, netip.AddrPortFrom(d.addr, d.udpPort), err)
	}
	d.eng = eng
	g, err := openGSI(d)
	if err != nil {
		eng.stop()
		return nil, errorf(op, "Addr", ErrInvalidArgument, "QP 1 source port: %v", err)
	}
	d.gsi.Store(g)
	d.busyPoll = cfg.BusyPoll
	d.anySourcePort = cfg.AnySourcePort
	if !cfg.NoStatsEndpoint {
		// Best effort: a device without an endpoint works the same.
		d.stats, _ = startStatsEndpoint(d)
	}
	// The connection manager (package cm) learns of the device here.
	gsi.Register(g)
	return d, nil
}

// buildDevice checks cfg and builds a device from it, with its attributes,
// port, GID table and resource limits, and no engine yet.
func buildDevice(op string, cfg DeviceConfig) (*Device, error) {
	if !cfg.Addr.IsValid() {
		return nil, newError(op, "Addr", ErrInvalidArgument, "required")
	}
	addr := cfg.Addr
	if addr.Is4In6() {
		addr = addr.Unmap()
	}
	if addr.IsUnspecified() || addr.IsMulticast() {
		return nil, errorf(op, "Addr", ErrInvalidArgument, "%v cannot identify a device", addr)
	}
	name := cfg.Name
	if name == "" {
		name = DefaultDeviceName
	}
	udpPort := cfg.Port
	if udpPort == 0 {
		udpPort = DefaultUDPPort
	}
	if cfg.ReceiveQueues < 0 || cfg.ReceiveQueues > MaxReceiveQueues {
		return nil, errorf(op, "ReceiveQueues", ErrInvalidArgument, "%d outside 0..%d", cfg.ReceiveQueues, MaxReceiveQueues)
	}
	if cfg.MTU != 0 && !cfg.MTU.Valid() {
		return nil, errorf(op, "MTU", ErrInvalidArgument, "%d is not an IB MTU (1..5)", int(cfg.MTU))
	}
	mtu := newActiveMTU(addr, cfg.MTU)
	attr := defaultDeviceAttr()
	if cfg.Limits != nil {
		if err := applyLimits(op, &attr, cfg.Limits); err != nil {
			return nil, err
		}
	}
	ifid := interfaceID(addr.WithZone(""), udpPort)
	attr.NodeGUID = GUID(binary.BigEndian.Uint64(ifid[:]))
	attr.SysImageGUID = attr.NodeGUID

	gids := buildGIDTable(addr.WithZone(""), ifid)
	cc, err := cfg.CongestionControl.transportCC(op)
	if err != nil {
		return nil, err
	}
	keys := newKeySecret()
	return &Device{
		cc:      cc,
		name:    name,
		addr:    addr,
		udpPort: udpPort,
		attr:    attr,
		port: PortAttr{
			State:        PortActive,
			MaxMTU:       MTU4096,
			ActiveMTU:    mtu.cached(),
			GIDTblLen:    len(gids),
			PortCapFlags: PortCMSup | PortIPBasedGIDs,
			MaxMsgSize:   1 << 31, // the IBA maximum; rxe reports 8 MiB but accepts 2 GiB
			PKeyTblLen:   1,
			MaxVLNum:     1,
			ActiveWidth:  Width1X,
			ActiveSpeed:  SpeedEDR,
			PhysState:    PhysPortStateLinkUp,
			LinkLayer:    LinkLayerEthernet,
		},
		mtu:            mtu,
		gids:           gids,
		numCompVectors: runtime.NumCPU(),
		keys:           keys,
		mrs:            newKeyTable[mrRegion](keys, 0, mrEpochs, keySlots),
		mws:            newKeyTable[MW](keys, mwClassBase, mwEpochs, keySlots),
		qpnPerm:        newPerm24(),
		qpnCounter:     rand.Uint32N(1 << 24),
		pds:            make(map[*PD]struct{}),
		cqs:            make(map[*CQ]struct{}),
		channels:       make(map[*CompChannel]struct{}),
		srqs:           make(map[*SRQ]struct{}),
		ahs:            make(map[*AH]struct{}),
		res: resources{
			pd:  resource{name: "max_pd", limit: int64(attr.MaxPD)},
			mr:  resource{name: "max_mr", limit: int64(attr.MaxMR)},
			mw:  resource{name: "max_mw", limit: int64(attr.MaxMW)},
			cq:  resource{name: "max_cq", limit: int64(attr.MaxCQ)},
			qp:  resource{name: "max_qp", limit: int64(attr.MaxQP)},
			srq: resource{name: "max_srq", limit: int64(attr.MaxSRQ)},
			ah:  resource{name: "max_ah", limit: int64(attr.MaxAH)},
		},
	}, nil
}

// defaultActiveMTU is the port's active MTU when neither the configuration
// nor the interface says: 4096 on loopback, whose link MTU is 64 KiB, and
// 1024 elsewhere, what rxe derives from a 1500-byte Ethernet link.
func defaultActiveMTU(addr netip.Addr) MTU {
	if addr.IsLoopback() {
		return MTU4096
	}
	return MTU1024
}

// applyLimits copies the non-zero limit fields of l into a, checking them.
func applyLimits(op string, a, l *DeviceAttr) error {
	ints := []struct {
		name string
		dst  *int
		val  int
		cap  int
	}{
		{"Limits.MaxQP", &a.MaxQP, l.MaxQP, capMaxQP},
		{"Limits.MaxQPWR", &a.MaxQPWR, l.MaxQPWR, capMaxInt},
		{"Limits.MaxSGE", &a.MaxSGE, l.MaxSGE, capMaxInt},
		{"Limits.MaxSGERD", &a.MaxSGERD, l.MaxSGERD, capMaxInt},
		{"Limits.MaxCQ", &a.MaxCQ, l.MaxCQ, capMaxInt},
		{"Limits.MaxCQE", &a.MaxCQE, l.MaxCQE, capMaxInt},
		{"Limits.MaxMR", &a.MaxMR, l.MaxMR, capMaxMR},
		{"Limits.MaxPD", &a.MaxPD, l.MaxPD, capMaxInt},
		{"Limits.MaxQPRdAtom", &a.MaxQPRdAtom, l.MaxQPRdAtom, capMaxInt},
		{"Limits.MaxQPInitRdAtom", &a.MaxQPInitRdAtom, l.MaxQPInitRdAtom, capMaxInt},
		{"Limits.MaxResRdAtom", &a.MaxResRdAtom, l.MaxResRdAtom, capMaxInt},
		{"Limits.MaxAH", &a.MaxAH, l.MaxAH, capMaxInt},
		{"Limits.MaxSRQ", &a.MaxSRQ, l.MaxSRQ, capMaxInt},
		{"Limits.MaxSRQWR", &a.MaxSRQWR, l.MaxSRQWR, capMaxInt},
		{"Limits.MaxSRQSGE", &a.MaxSRQSGE, l.MaxSRQSGE, capMaxInt},
		{"Limits.MaxInlineData", &a.MaxInlineData, l.MaxInlineData, capMaxInt},
	}
	for _, f := range ints {
		switch {
		case f.val == 0:
		case f.val < 0 || f.val > f.cap:
			return errorf(op, f.name, ErrInvalidArgument, "%d outside 1..%d", f.val, f.cap)
		default:
			*f.dst = f.val
		}
	}
	if l.MaxMRSize != 0 {
		if l.MaxMRSize > math.MaxInt64 {
			return errorf(op, "Limits.MaxMRSize", ErrInvalidArgument, "%d exceeds the largest Go slice", l.MaxMRSize)
		}
		a.MaxMRSize = l.MaxMRSize
	}
	return nil
}

// Name returns the device name.
func (d *Device) Name() string { return d.name }

// Addr returns the IP address the device binds.
func (d *Device) Addr() netip.Addr { return d.addr }

// MaxReceiveQueues bounds DeviceConfig.ReceiveQueues: sockets and
// goroutines beyond a core each gain nothing.
const MaxReceiveQueues = 256

// ReceiveQueues returns how many sockets receive the device's packets,
// each on its own goroutine (DeviceConfig.ReceiveQueues): 1 where the
// platform cannot spread flows over sockets, 0 on a hardware device
// (OpenHardware: the NIC receives).
func (d *Device) ReceiveQueues() int {
	if d.eng == nil {
		return 0
	}
	return len(d.eng.rxqs)
}

// UDPPort returns the UDP port the device binds.
func (d *Device) UDPPort() uint16 { return d.udpPort }

// NumCompVectors returns the number of completion vectors (the
// num_comp_vectors of struct ibv_context), one per CPU as in rxe. A CQ's
// completion vector must be below it; it has no other effect here.
func (d *Device) NumCompVectors() int { return d.numCompVectors }

// Query returns the device attributes (ibv_query_device).
func (d *Device) Query() DeviceAttr { return d.attr }

// QueryPort returns the attributes of a port (ibv_query_port). The only port
// is 1. Its ActiveMTU follows the interface's link MTU (DeviceConfig.MTU).
func (d *Device) QueryPort(port int) (PortAttr, error) {
	if err := d.checkPort("QueryPort", "port_num", port); err != nil {
		return PortAttr{}, err
	}
	p := d.port
	p.ActiveMTU = d.mtu.get()
	return p, nil
}

// QueryGID returns entry index of a port's GID table (ibv_query_gid).
func (d *Device) QueryGID(port, index int) (GID, error) {
	const op = "QueryGID"
	if err := d.checkPort(op, "port_num", port); err != nil {
		return GID{}, err
	}
	if index < 0 || index >= len(d.gids) {
		return GID{}, errorf(op, "index", ErrInvalidArgument, "%d outside the GID table (length %d)", index, len(d.gids))
	}
	return d.gids[index].GID, nil
}

// GIDTable returns port 1's GID table (ibv_query_gid_table): index 0 is a
// link-local GID derived from the device's interface identifier (see
// DeviceAttr.NodeGUID), index 1 the GID of the bound address. Every entry is
// a RoCE v2 GID.
func (d *Device) GIDTable() []GIDEntry {
	return append([]GIDEntry(nil), d.gids...)
}

// QueryPKey returns entry index of a port's P_Key table (ibv_query_pkey).
// The table has one entry, the default full-membership P_Key 0xFFFF.
func (d *Device) QueryPKey(port, index int) (uint16, error) {
	const op = "QueryPKey"
	if err := d.checkPort(op, "port_num", port); err != nil {
		return 0, err
	}
	if index != 0 {
		return 0, errorf(op, "index", ErrInvalidArgument, "%d outside the P_Key table (length 1)", index)
	}
	return defaultPKey, nil
}

// defaultPKey is the default P_Key, full membership of the default partition.
const defaultPKey = 0xFFFF

func (d *Device) checkPort(op, field string, port int) error {
	if port != 1 {
		return errorf(op, field, ErrInvalidArgument, "port %d does not exist (the only port is 1)", port)
	}
	return nil
}

// sgid returns GID table entry index, or false if there is none.
func (d *Device) sgid(index int) (GID, bool) {
	if index < 0 || index >= len(d.gids) || d.gids[index].GID.IsZero() {
		return GID{}, false
	}
	return d.gids[index].GID, true
}

// deviceObjects are the objects a device keeps for Close to destroy.
type deviceObjects struct {
	pds      map[*PD]struct{}
	cqs      map[*CQ]struct{}
	channels map[*CompChannel]struct{}
	srqs     map[*SRQ]struct{}
	ahs      map[*AH]struct{}
}

// markClosed marks the device closed and hands its objects to the caller
// (Close, on either backend), or fails if it was closed already.
func (d *Device) markClosed() (deviceObjects, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return deviceObjects{}, closedError("Close", "device")
	}
	d.closed = true
	o := deviceObjects{d.pds, d.cqs, d.channels, d.srqs, d.ahs}
	d.pds, d.cqs, d.channels, d.srqs, d.ahs = nil, nil, nil, nil, nil
	return o, nil
}

// Close destroys every object of the device (QPs, SRQs, address handles,
// memory regions, CQs, completion channels, PDs, in that order) and closes
// it. Blocked GetEvent calls return ErrClosed. Deregistration waits for
// accesses in flight, as MR.Dereg does. Closing a closed device returns
// ErrClosed.
func (d *Device) Close() error {
	if d.hw != nil {
		return d.hw.close(d)
	}
	o, err := d.markClosed()
	if err != nil {
		return err
	}
	pds, cqs, chans, srqs, ahs := o.pds, o.cqs, o.channels, o.srqs, o.ahs
	// The connection manager lets go first, while QP 1 can still tell
	// the peers of its connections (it disconnects them as the kernel's
	// CM does when an ID is destroyed).
	g := d.gsi.Load()
	gsi.Unregister(g)

	// addQP checks closed under qpnMu, so once this collection holds
	// qpnMu no QP can appear behind it.
	var qps []*QP
	d.qpnMu.Lock()
	d.qps.Range(func(_, v any) bool {
		qps = append(qps, v.(*QP))
		return true
	})
	d.qpnMu.Unlock()
	for _, qp := range qps {
		_ = qp.Destroy()
	}
	for srq := range srqs {
		_ = srq.Destroy()
	}
	for ah := range ahs {
		_ = ah.Destroy()
	}
	var mrs []*MR
	d.mrs.each(func(r *mrRegion) { mrs = append(mrs, r.mr) })
	for _, mr := range mrs {
		mr.forceDereg()
	}
	for cq := range cqs {
		cq.destroy(true)
	}
	for ch := range chans {
		ch.destroy(true)
	}
	for pd := range pds {
		pd.forceDealloc()
	}
	if d.stats != nil {
		d.stats.close()
	}
	g.close()
	d.eng.stop()
	return nil
}

// register runs add under the device lock unless the device is closed; the
// creating verbs use it to make their object visible to Close.
func (d *Device) register(op string, add func()) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return closedError(op, "device")
	}
	add()
	return nil
}

// unregister runs remove under the device lock. After Close the registries
// are gone and there is nothing to remove.
func (d *Device) unregister(remove func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		remove()
	}
}

// isClosed reports whether Close has started.
func (d *Device) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}
