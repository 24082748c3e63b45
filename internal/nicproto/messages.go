package nicproto

// The control messages, field for field as libgoroce/src/proto.h declares
// them (the c tags name the C fields; TestLayoutMatchesC compares every
// offset). All are fixed-size and encoded little-endian without padding of
// their own: the C structures carry their padding as explicit fields.

// Header starts every message (struct gr_hdr).
type Header struct {
	Op     Op     `c:"op"`
	Status int32  `c:"status"`
	Len    uint32 `c:"len"`
	NFDs   uint32 `c:"nfds"`
}

// HelloReq opens a session (struct gr_hello_req).
type HelloReq struct {
	Version uint32 `c:"version"`
	PID     uint32 `c:"pid"`
}

// HelloResp answers it (struct gr_hello_resp).
type HelloResp struct {
	Version  uint32 `c:"version"`
	PageSize uint32 `c:"page_size"`
}

// DevInfo describes one device (struct gr_dev_info).
type DevInfo struct {
	Name    [NameMax]byte `c:"name"`
	GID     [16]byte      `c:"gid"`
	GUID    uint64        `c:"guid"`
	Index   uint32        `c:"index"`
	UDPPort uint32        `c:"udp_port"`
}

// ListResp heads the LIST response, followed by Count DevInfo (struct gr_list_resp).
type ListResp struct {
	Count uint32 `c:"count"`
	Pad   uint32 `c:"pad"`
}

// EnsureReq asks for a device on an address (struct gr_ensure_req).
type EnsureReq struct {
	GID [16]byte `c:"gid"`
}

// DevAttr mirrors struct ibv_device_attr (struct gr_dev_attr).
type DevAttr struct {
	FWVer           [64]byte `c:"fw_ver"`
	NodeGUID        uint64   `c:"node_guid"`
	SysImageGUID    uint64   `c:"sys_image_guid"`
	MaxMRSize       uint64   `c:"max_mr_size"`
	PageSizeCap     uint64   `c:"page_size_cap"`
	DeviceCapFlags  uint64   `c:"device_cap_flags"`
	VendorID        uint32   `c:"vendor_id"`
	VendorPartID    uint32   `c:"vendor_part_id"`
	HWVer           uint32   `c:"hw_ver"`
	MaxQP           uint32   `c:"max_qp"`
	MaxQPWR         uint32   `c:"max_qp_wr"`
	MaxSGE          uint32   `c:"max_sge"`
	MaxSGERD        uint32   `c:"max_sge_rd"`
	MaxCQ           uint32   `c:"max_cq"`
	MaxCQE          uint32   `c:"max_cqe"`
	MaxMR           uint32   `c:"max_mr"`
	MaxPD           uint32   `c:"max_pd"`
	MaxQPRdAtom     uint32   `c:"max_qp_rd_atom"`
	MaxQPInitRdAtom uint32   `c:"max_qp_init_rd_atom"`
	MaxResRdAtom    uint32   `c:"max_res_rd_atom"`
	AtomicCap       uint32   `c:"atomic_cap"`
	MaxMW           uint32   `c:"max_mw"`
	MaxAH           uint32   `c:"max_ah"`
	MaxSRQ          uint32   `c:"max_srq"`
	MaxSRQWR        uint32   `c:"max_srq_wr"`
	MaxSRQSGE       uint32   `c:"max_srq_sge"`
	MaxPKeys        uint32   `c:"max_pkeys"`
	LocalCAAckDelay uint32   `c:"local_ca_ack_delay"`
	PhysPortCnt     uint32   `c:"phys_port_cnt"`
	MaxInlineData   uint32   `c:"max_inline_data"`
	NumCompVectors  uint32   `c:"num_comp_vectors"`
	Pad             uint32   `c:"pad"`
}

// PortAttr mirrors struct ibv_port_attr (struct gr_port_attr).
type PortAttr struct {
	State         uint32 `c:"state"`
	MaxMTU        uint32 `c:"max_mtu"`
	ActiveMTU     uint32 `c:"active_mtu"`
	GIDTblLen     uint32 `c:"gid_tbl_len"`
	PortCapFlags  uint32 `c:"port_cap_flags"`
	MaxMsgSz      uint32 `c:"max_msg_sz"`
	BadPKeyCntr   uint32 `c:"bad_pkey_cntr"`
	QKeyViolCntr  uint32 `c:"qkey_viol_cntr"`
	PKeyTblLen    uint32 `c:"pkey_tbl_len"`
	LID           uint32 `c:"lid"`
	SMLID         uint32 `c:"sm_lid"`
	LMC           uint32 `c:"lmc"`
	MaxVLNum      uint32 `c:"max_vl_num"`
	SMSL          uint32 `c:"sm_sl"`
	SubnetTimeout uint32 `c:"subnet_timeout"`
	InitTypeReply uint32 `c:"init_type_reply"`
	ActiveWidth   uint32 `c:"active_width"`
	ActiveSpeed   uint32 `c:"active_speed"`
	PhysState     uint32 `c:"phys_state"`
	LinkLayer     uint32 `c:"link_layer"`
}

// OpenReq opens a device context (struct gr_open_req).
type OpenReq struct {
	Name [NameMax]byte `c:"name"`
}

// OpenResp describes the opened device; one fd, the async event pipe
// (struct gr_open_resp).
type OpenResp struct {
	Info     DevInfo           `c:"info"`
	Attr     DevAttr           `c:"attr"`
	Port     PortAttr          `c:"port"`
	GIDs     [MaxGIDs][16]byte `c:"gids"`
	GIDTypes [MaxGIDs]uint32   `c:"gid_types"`
	GIDCount uint32            `c:"gid_count"`
	PKey     uint32            `c:"pkey"`
}

// Handle names one object (struct gr_handle).
type Handle struct {
	Handle uint32 `c:"handle"`
	Pad    uint32 `c:"pad"`
}

// Piece is one part of a registration's view (struct gr_piece).
type Piece struct {
	FDIndex  uint32 `c:"fd_index"`
	Writable uint32 `c:"writable"`
	Offset   uint64 `c:"offset"`
	Length   uint64 `c:"length"`
}

// RegMRReq registers (or reregisters) memory; NPieces Piece follow
// (struct gr_reg_mr_req).
type RegMRReq struct {
	Handle    uint32 `c:"handle"`
	PD        uint32 `c:"pd"`
	Access    uint32 `c:"access"`
	Flags     uint32 `c:"flags"`
	Addr      uint64 `c:"addr"`
	Length    uint64 `c:"length"`
	IOVA      uint64 `c:"iova"`
	ViewStart uint64 `c:"view_start"`
	NPieces   uint32 `c:"npieces"`
	Pad       uint32 `c:"pad"`
}

// RegMRResp returns the region's keys (struct gr_reg_mr_resp).
type RegMRResp struct {
	Handle uint32 `c:"handle"`
	LKey   uint32 `c:"lkey"`
	RKey   uint32 `c:"rkey"`
	Pad    uint32 `c:"pad"`
}

// CompEvent is a completion channel pipe record (struct gr_comp_event).
type CompEvent struct {
	CQHandle uint64 `c:"cq_handle"`
}

// AsyncEvent is an async event pipe record (struct gr_async_event).
type AsyncEvent struct {
	EventType uint32 `c:"event_type"`
	Kind      uint32 `c:"kind"`
	Handle    uint64 `c:"handle"`
}

// CreateCQReq (struct gr_create_cq_req).
type CreateCQReq struct {
	CQE        uint32 `c:"cqe"`
	Channel    uint32 `c:"channel"`
	CompVector uint32 `c:"comp_vector"`
	Pad        uint32 `c:"pad"`
}

// CreateCQResp; one fd, the ring (struct gr_create_cq_resp).
type CreateCQResp struct {
	Handle   uint32 `c:"handle"`
	CQE      uint32 `c:"cqe"`
	Entries  uint32 `c:"entries"`
	Pad      uint32 `c:"pad"`
	RingSize uint64 `c:"ring_size"`
}

// ResizeCQReq (struct gr_resize_cq_req).
type ResizeCQReq struct {
	Handle uint32 `c:"handle"`
	CQE    uint32 `c:"cqe"`
}

// AHAttr mirrors struct ibv_ah_attr with its GRH (struct gr_ah_attr).
type AHAttr struct {
	DGID         [16]byte `c:"dgid"`
	FlowLabel    uint32   `c:"flow_label"`
	SGIDIndex    uint32   `c:"sgid_index"`
	HopLimit     uint32   `c:"hop_limit"`
	TrafficClass uint32   `c:"traffic_class"`
	SL           uint32   `c:"sl"`
	StaticRate   uint32   `c:"static_rate"`
	IsGlobal     uint32   `c:"is_global"`
	PortNum      uint32   `c:"port_num"`
	DLID         uint32   `c:"dlid"`
	SrcPathBits  uint32   `c:"src_path_bits"`
}

// CreateAHReq (struct gr_create_ah_req).
type CreateAHReq struct {
	PD   uint32 `c:"pd"`
	Pad  uint32 `c:"pad"`
	Attr AHAttr `c:"attr"`
}

// QPCap mirrors struct ibv_qp_cap (struct gr_qp_cap).
type QPCap struct {
	MaxSendWR     uint32 `c:"max_send_wr"`
	MaxRecvWR     uint32 `c:"max_recv_wr"`
	MaxSendSGE    uint32 `c:"max_send_sge"`
	MaxRecvSGE    uint32 `c:"max_recv_sge"`
	MaxInlineData uint32 `c:"max_inline_data"`
	Pad           uint32 `c:"pad"`
}

// CreateQPReq (struct gr_create_qp_req).
type CreateQPReq struct {
	PD       uint32 `c:"pd"`
	SendCQ   uint32 `c:"send_cq"`
	RecvCQ   uint32 `c:"recv_cq"`
	SRQ      uint32 `c:"srq"`
	QPType   uint32 `c:"qp_type"`
	SQSigAll uint32 `c:"sq_sig_all"`
	Cap      QPCap  `c:"cap"`
}

// CreateQPResp; two fds, the ring and the doorbell (struct gr_create_qp_resp).
type CreateQPResp struct {
	Handle    uint32 `c:"handle"`
	QPNum     uint32 `c:"qp_num"`
	Cap       QPCap  `c:"cap"`
	SQEntries uint32 `c:"sq_entries"`
	RQEntries uint32 `c:"rq_entries"`
	SQStride  uint32 `c:"sq_stride"`
	RQStride  uint32 `c:"rq_stride"`
	SQOffset  uint64 `c:"sq_offset"`
	RQOffset  uint64 `c:"rq_offset"`
	RingSize  uint64 `c:"ring_size"`
}

// QPAttr mirrors struct ibv_qp_attr (struct gr_qp_attr).
type QPAttr struct {
	QPState          uint32 `c:"qp_state"`
	CurQPState       uint32 `c:"cur_qp_state"`
	PathMTU          uint32 `c:"path_mtu"`
	PathMigState     uint32 `c:"path_mig_state"`
	QKey             uint32 `c:"qkey"`
	RQPSN            uint32 `c:"rq_psn"`
	SQPSN            uint32 `c:"sq_psn"`
	DestQPNum        uint32 `c:"dest_qp_num"`
	QPAccessFlags    uint32 `c:"qp_access_flags"`
	PKeyIndex        uint32 `c:"pkey_index"`
	EnSQDAsyncNotify uint32 `c:"en_sqd_async_notify"`
	SQDraining       uint32 `c:"sq_draining"`
	MaxRdAtomic      uint32 `c:"max_rd_atomic"`
	MaxDestRdAtomic  uint32 `c:"max_dest_rd_atomic"`
	MinRNRTimer      uint32 `c:"min_rnr_timer"`
	PortNum          uint32 `c:"port_num"`
	Timeout          uint32 `c:"timeout"`
	RetryCnt         uint32 `c:"retry_cnt"`
	RNRRetry         uint32 `c:"rnr_retry"`
	RateLimit        uint32 `c:"rate_limit"`
	Cap              QPCap  `c:"cap"`
	AHAttr           AHAttr `c:"ah_attr"`
}

// ModifyQPReq (struct gr_modify_qp_req).
type ModifyQPReq struct {
	Handle uint32 `c:"handle"`
	Mask   uint32 `c:"mask"`
	Attr   QPAttr `c:"attr"`
}

// QueryQPResp (struct gr_query_qp_resp).
type QueryQPResp struct {
	Attr     QPAttr `c:"attr"`
	SQSigAll uint32 `c:"sq_sig_all"`
	Pad      uint32 `c:"pad"`
}

// CreateSRQReq (struct gr_create_srq_req).
type CreateSRQReq struct {
	PD       uint32 `c:"pd"`
	MaxWR    uint32 `c:"max_wr"`
	MaxSGE   uint32 `c:"max_sge"`
	SRQLimit uint32 `c:"srq_limit"`
}

// CreateSRQResp; two fds, the ring and the doorbell (struct gr_create_srq_resp).
type CreateSRQResp struct {
	Handle   uint32 `c:"handle"`
	MaxWR    uint32 `c:"max_wr"`
	MaxSGE   uint32 `c:"max_sge"`
	Entries  uint32 `c:"entries"`
	Stride   uint32 `c:"stride"`
	Pad      uint32 `c:"pad"`
	RingSize uint64 `c:"ring_size"`
}

// ModifySRQReq (struct gr_modify_srq_req).
type ModifySRQReq struct {
	Handle   uint32 `c:"handle"`
	Mask     uint32 `c:"mask"`
	MaxWR    uint32 `c:"max_wr"`
	SRQLimit uint32 `c:"srq_limit"`
}

// QuerySRQResp (struct gr_query_srq_resp).
type QuerySRQResp struct {
	MaxWR    uint32 `c:"max_wr"`
	MaxSGE   uint32 `c:"max_sge"`
	SRQLimit uint32 `c:"srq_limit"`
	Pad      uint32 `c:"pad"`
}

// AllocMWReq allocates a memory window (struct gr_alloc_mw_req).
type AllocMWReq struct {
	PD   uint32 `c:"pd"`
	Type uint32 `c:"type"`
}

// AllocMWResp returns the window (struct gr_alloc_mw_resp).
type AllocMWResp struct {
	Handle uint32 `c:"handle"`
	RKey   uint32 `c:"rkey"`
}
