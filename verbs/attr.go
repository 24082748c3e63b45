package verbs

import "strconv"

// DeviceAttr describes a device's identity and limits (struct
// ibv_device_attr, returned by ibv_query_device). Limits are in objects or
// entries; sizes are in bytes.
type DeviceAttr struct {
	FWVer           string
	NodeGUID        GUID
	SysImageGUID    GUID
	MaxMRSize       uint64 // largest memory region, bytes
	PageSizeCap     uint64 // supported page sizes (bit mask)
	VendorID        uint32
	VendorPartID    uint32
	HWVer           uint32
	MaxQP           int
	MaxQPWR         int // work requests per send or receive queue
	DeviceCapFlags  DeviceCapFlags
	MaxSGE          int // scatter/gather entries per work request
	MaxSGERD        int // SGEs per RDMA READ work request
	MaxCQ           int
	MaxCQE          int // entries per CQ
	MaxMR           int
	MaxPD           int
	MaxQPRdAtom     int // RDMA READ/atomic requests a QP accepts as responder (max_dest_rd_atomic)
	MaxQPInitRdAtom int // RDMA READ/atomic requests a QP may have outstanding as initiator (max_rd_atomic)
	MaxResRdAtom    int // responder resources for the whole device
	AtomicCap       AtomicCap
	MaxMW           int
	MaxAH           int
	MaxSRQ          int
	MaxSRQWR        int
	MaxSRQSGE       int
	MaxPKeys        int
	LocalCAAckDelay uint8
	PhysPortCnt     int
	MaxInlineData   int // largest max_inline_data a QP may request
}

// DeviceCapFlags are device capability bits (enum ibv_device_cap_flags).
type DeviceCapFlags uint64

// Device capability bits, with the libibverbs values. A goroce device sets
// only the bits for behaviour it implements; see defaultDeviceAttr.
const (
	DeviceResizeMaxWR        DeviceCapFlags = 1 << 0
	DeviceBadPKeyCntr        DeviceCapFlags = 1 << 1
	DeviceBadQKeyCntr        DeviceCapFlags = 1 << 2
	DeviceRawMulti           DeviceCapFlags = 1 << 3
	DeviceAutoPathMig        DeviceCapFlags = 1 << 4
	DeviceChangePhyPort      DeviceCapFlags = 1 << 5
	DeviceUDAVPortEnforce    DeviceCapFlags = 1 << 6
	DeviceCurrQPStateMod     DeviceCapFlags = 1 << 7
	DeviceShutdownPort       DeviceCapFlags = 1 << 8
	DeviceInitType           DeviceCapFlags = 1 << 9
	DevicePortActiveEvent    DeviceCapFlags = 1 << 10
	DeviceSysImageGUID       DeviceCapFlags = 1 << 11
	DeviceRCRNRNAKGen        DeviceCapFlags = 1 << 12
	DeviceSRQResize          DeviceCapFlags = 1 << 13
	DeviceNNotifyCQ          DeviceCapFlags = 1 << 14
	DeviceMemWindow          DeviceCapFlags = 1 << 17
	DeviceUDIPCsum           DeviceCapFlags = 1 << 18
	DeviceXRC                DeviceCapFlags = 1 << 20
	DeviceMemMgtExtensions   DeviceCapFlags = 1 << 21
	DeviceMemWindowType2A    DeviceCapFlags = 1 << 23
	DeviceMemWindowType2B    DeviceCapFlags = 1 << 24
	DeviceRCIPCsum           DeviceCapFlags = 1 << 25
	DeviceRawIPCsum          DeviceCapFlags = 1 << 26
	DeviceManagedFlowSteer   DeviceCapFlags = 1 << 29
	DeviceRawScatterFCS      DeviceCapFlags = 1 << 34
	DevicePCIWriteEndPadding DeviceCapFlags = 1 << 36
	// FLUSH placement types and ATOMIC_WRITE (IB_UVERBS_DEVICE_*; kernel
	// values that libibverbs passes through in device_cap_flags_ex
	// without naming them).
	DeviceFlushGlobal     DeviceCapFlags = 1 << 38
	DeviceFlushPersistent DeviceCapFlags = 1 << 39
	DeviceAtomicWrite     DeviceCapFlags = 1 << 40
)

// AtomicCap is the scope of atomic operations (enum ibv_atomic_cap).
type AtomicCap int

// Atomic capabilities.
const (
	// AtomicNone: atomics are not supported.
	AtomicNone AtomicCap = 0
	// AtomicHCA: atomics are atomic with respect to other atomics on the
	// same device. This is a goroce device's scope: every atomic that
	// reaches it is applied under one device-wide discipline, but CPU
	// stores to the same memory are not ordered with them.
	AtomicHCA AtomicCap = 1
	// AtomicGlob: atomics are atomic with respect to the CPU as well.
	AtomicGlob AtomicCap = 2
)

// String returns the libibverbs enumerator name.
func (c AtomicCap) String() string {
	switch c {
	case AtomicNone:
		return "ATOMIC_NONE"
	case AtomicHCA:
		return "ATOMIC_HCA"
	case AtomicGlob:
		return "ATOMIC_GLOB"
	}
	return "AtomicCap(" + strconv.Itoa(int(c)) + ")"
}

// PortAttr describes port 1 of a device (struct ibv_port_attr).
type PortAttr struct {
	State         PortState
	MaxMTU        MTU
	ActiveMTU     MTU
	GIDTblLen     int
	PortCapFlags  PortCapFlags
	MaxMsgSize    uint32 // largest message, bytes
	BadPKeyCntr   uint32
	QKeyViolCntr  uint32
	PKeyTblLen    int
	LID           uint16 // no meaning on RoCE; 0
	SMLID         uint16 // no meaning on RoCE; 0
	LMC           uint8
	MaxVLNum      uint8
	SMSL          uint8
	SubnetTimeout uint8
	InitTypeReply uint8
	ActiveWidth   PortWidth
	ActiveSpeed   PortSpeed
	PhysState     PhysPortState
	LinkLayer     LinkLayer
}

// PortState is a port's logical state (enum ibv_port_state).
type PortState int

// Port states.
const (
	PortNop         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

// String returns the text of ibv_port_state_str.
func (s PortState) String() string {
	switch s {
	case PortNop:
		return "no state change (NOP)"
	case PortDown:
		return "down"
	case PortInit:
		return "init"
	case PortArmed:
		return "armed"
	case PortActive:
		return "active"
	case PortActiveDefer:
		return "active defer"
	}
	return "unknown"
}

// PhysPortState is a port's physical state (IBA PortPhysicalState).
type PhysPortState uint8

// Physical port states used by this package.
const (
	PhysPortStatePolling  PhysPortState = 2
	PhysPortStateDisabled PhysPortState = 3
	PhysPortStateLinkUp   PhysPortState = 5
)

// PortCapFlags are port capability bits (enum ibv_port_cap_flags).
type PortCapFlags uint32

// Port capability bits reported by a goroce port.
const (
	PortCMSup       PortCapFlags = 1 << 16 // IBV_PORT_CM_SUP
	PortIPBasedGIDs PortCapFlags = 1 << 26 // IBV_PORT_IP_BASED_GIDS
)

// LinkLayer is a port's link layer (IBV_LINK_LAYER_*).
type LinkLayer uint8

// Link layers.
const (
	LinkLayerUnspecified LinkLayer = 0
	LinkLayerInfiniBand  LinkLayer = 1
	LinkLayerEthernet    LinkLayer = 2
)

// String returns the name ibv_devinfo prints.
func (l LinkLayer) String() string {
	switch l {
	case LinkLayerInfiniBand:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	}
	return "Unknown"
}

// PortWidth is a port's active link width (IB_WIDTH_*).
type PortWidth uint8

// Link widths.
const (
	Width1X  PortWidth = 1
	Width4X  PortWidth = 2
	Width8X  PortWidth = 4
	Width12X PortWidth = 8
	Width2X  PortWidth = 16
)

// PortSpeed is a port's active per-lane speed (IB_SPEED_*).
type PortSpeed uint8

// Lane speeds.
const (
	SpeedSDR   PortSpeed = 1   // 2.5 Gb/s
	SpeedDDR   PortSpeed = 2   // 5 Gb/s
	SpeedQDR   PortSpeed = 4   // 10 Gb/s
	SpeedFDR10 PortSpeed = 8   // 10.3125 Gb/s
	SpeedFDR   PortSpeed = 16  // 14.0625 Gb/s
	SpeedEDR   PortSpeed = 32  // 25.78125 Gb/s
	SpeedHDR   PortSpeed = 64  // 53.125 Gb/s
	SpeedNDR   PortSpeed = 128 // 106.25 Gb/s
)
