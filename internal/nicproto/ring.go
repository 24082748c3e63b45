package nicproto

// The shared rings, as proto.h lays them out. The daemon views them through
// these types with unsafe casts over the mapped memfd; their Go memory layout
// equals the C one (natural alignment, explicit padding; checked by
// TestLayoutMatchesC). Everything the application side writes is untrusted:
// the daemon validates indices and counts before using them.

// WQHdr heads a work queue ring (struct gr_wq_hdr).
type WQHdr struct {
	Prod         uint64   `c:"prod"`
	Pad0         [56]byte `c:"pad0"`
	Cons         uint64   `c:"cons"`
	Done         uint64   `c:"done"`
	NeedDoorbell uint32   `c:"need_doorbell"`
	Pad1         uint32   `c:"pad1"`
	Pad2         [40]byte `c:"pad2"`
}

// SGE is a scatter/gather entry in a slot (struct gr_sge).
type SGE struct {
	Addr   uint64 `c:"addr"`
	Length uint32 `c:"length"`
	LKey   uint32 `c:"lkey"`
}

// SWQE heads a send slot; its SGEs and inline data follow (struct gr_swqe).
// Which fields matter depends on Opcode, as proto.h details.
type SWQE struct {
	WRID       uint64 `c:"wr_id"`
	Opcode     uint32 `c:"opcode"`
	SendFlags  uint32 `c:"send_flags"`
	NumSGE     uint32 `c:"num_sge"`
	InlineLen  uint32 `c:"inline_len"`
	ImmData    uint32 `c:"imm_data"`
	RKey       uint32 `c:"rkey"`
	RemoteAddr uint64 `c:"remote_addr"`
	CompareAdd uint64 `c:"compare_add"`
	Swap       uint64 `c:"swap"`
	Length     uint64 `c:"length"`
	AH         uint32 `c:"ah"`
	RemoteQPN  uint32 `c:"remote_qpn"`
	RemoteQKey uint32 `c:"remote_qkey"`
	MW         uint32 `c:"mw"`
	MR         uint32 `c:"mr"`
	Access     uint32 `c:"access"`
}

// RWQE heads a receive slot; its SGEs follow (struct gr_rwqe).
type RWQE struct {
	WRID   uint64 `c:"wr_id"`
	NumSGE uint32 `c:"num_sge"`
	Pad    uint32 `c:"pad"`
}

// CQHdr heads a completion ring (struct gr_cq_hdr).
type CQHdr struct {
	Prod    uint64   `c:"prod"`
	Pad0    [56]byte `c:"pad0"`
	Cons    uint64   `c:"cons"`
	Pad1    [56]byte `c:"pad1"`
	Arm     uint32   `c:"arm"`
	Overrun uint32   `c:"overrun"`
	Pad2    [56]byte `c:"pad2"`
}

// CQE is a completion in struct ibv_wc's layout (struct gr_cqe).
type CQE struct {
	WRID         uint64   `c:"wr_id"`
	Status       uint32   `c:"status"`
	Opcode       uint32   `c:"opcode"`
	VendorErr    uint32   `c:"vendor_err"`
	ByteLen      uint32   `c:"byte_len"`
	ImmData      uint32   `c:"imm_data"`
	QPNum        uint32   `c:"qp_num"`
	SrcQP        uint32   `c:"src_qp"`
	WCFlags      uint32   `c:"wc_flags"`
	PKeyIndex    uint16   `c:"pkey_index"`
	SLID         uint16   `c:"slid"`
	SL           uint8    `c:"sl"`
	DLIDPathBits uint8    `c:"dlid_path_bits"`
	Pad0         [2]byte  `c:"pad0"`
	Solicited    uint8    `c:"solicited"`
	Pad          [15]byte `c:"pad"`
}

// Ring geometry.
const (
	WQHdrSize = 128 // sizeof(struct gr_wq_hdr)
	CQHdrSize = 192 // sizeof(struct gr_cq_hdr)
	SGESize   = 16  // sizeof(struct gr_sge)
	SWQESize  = 88  // sizeof(struct gr_swqe)
	RWQESize  = 16  // sizeof(struct gr_rwqe)
	CQESize   = 64  // sizeof(struct gr_cqe)

	ArmNext      = 1 // GR_ARM_NEXT
	ArmSolicited = 2 // GR_ARM_SOLICITED
)

// Object kinds of async event records (enum gr_obj_kind).
const (
	ObjNone = 0
	ObjCQ   = 1
	ObjQP   = 2
	ObjSRQ  = 3
)

// SendStride is the size of a send slot holding maxSGE entries and
// maxInline bytes of inline data, rounded up to 64 bytes.
func SendStride(maxSGE, maxInline int) int {
	return roundUp(SWQESize+SGESize*maxSGE+maxInline, 64)
}

// RecvStride is the size of a receive slot holding maxSGE entries.
func RecvStride(maxSGE int) int {
	return roundUp(RWQESize+SGESize*maxSGE, 16)
}

// Entries returns the ring size for a queue of capacity n: the smallest power
// of two not below n (and at least 1).
func Entries(n int) int {
	e := 1
	for e < n {
		e <<= 1
	}
	return e
}

func roundUp(n, a int) int { return (n + a - 1) / a * a }
