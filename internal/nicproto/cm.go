package nicproto

// The connection manager's messages (librdmacm's rdma_* calls): every
// request is a CMReq, every response a CMResp, every event a CMEvent
// written, without a header, on the event channel's own socket (the
// descriptor CM_CREATE_CHANNEL returns, the application's
// rdma_event_channel.fd). Which fields an operation reads is documented in
// libgoroce/src/proto.h next to the same structures.

// CMPrivateMax is the largest private data any CM message carries (a
// SIDR_REQ's 216 bytes).
const CMPrivateMax = 256

// CMAddr is a socket address (struct gr_cm_addr): AF_INET (the address in
// the first 4 bytes) or AF_INET6; Port in host byte order.
type CMAddr struct {
	Family  uint16   `c:"family"`
	Port    uint16   `c:"port"`
	ScopeID uint32   `c:"scope_id"`
	Addr    [16]byte `c:"addr"`
}

// CMParam is struct rdma_conn_param and struct rdma_ud_param in one
// (struct gr_cm_param).
type CMParam struct {
	PrivateDataLen     uint32             `c:"private_data_len"`
	ResponderResources uint8              `c:"responder_resources"`
	InitiatorDepth     uint8              `c:"initiator_depth"`
	FlowControl        uint8              `c:"flow_control"`
	RetryCount         uint8              `c:"retry_count"`
	RNRRetryCount      uint8              `c:"rnr_retry_count"`
	SRQ                uint8              `c:"srq"`
	Pad                uint16             `c:"pad"`
	QPNum              uint32             `c:"qp_num"`
	QKey               uint32             `c:"qkey"`
	AHAttr             AHAttr             `c:"ah_attr"`
	PrivateData        [CMPrivateMax]byte `c:"private_data"`
}

// CMReq is every CM request (struct gr_cm_req).
type CMReq struct {
	ID    uint32  `c:"id"`
	Arg   uint32  `c:"arg"`
	Arg2  uint32  `c:"arg2"`
	Arg3  uint32  `c:"arg3"`
	Src   CMAddr  `c:"src"`
	Dst   CMAddr  `c:"dst"`
	Param CMParam `c:"param"`
}

// CMIDInfo describes an ID (struct gr_cm_id_info): its handle, device
// (index in the daemon's list, -1 for none), port space and addresses.
type CMIDInfo struct {
	ID     uint32 `c:"id"`
	Device int32  `c:"device"`
	PS     uint32 `c:"ps"`
	QPType uint32 `c:"qp_type"`
	Src    CMAddr `c:"src"`
	Dst    CMAddr `c:"dst"`
}

// CMResp is every CM response (struct gr_cm_resp): the ID's description,
// and for CM_INIT_QP_ATTR the attributes and their mask.
type CMResp struct {
	Info CMIDInfo `c:"info"`
	Mask uint32   `c:"mask"`
	Pad  uint32   `c:"pad"`
	Attr QPAttr   `c:"attr"`
}

// CMEvent is one rdma_cm event (struct gr_cm_event). Info describes the
// event's ID (for a connection request, the new ID); Listen is the
// listener's handle for a connection request.
type CMEvent struct {
	Type   uint32   `c:"type"`
	Status int32    `c:"status"`
	Listen uint32   `c:"listen"`
	Pad    uint32   `c:"pad"`
	Info   CMIDInfo `c:"info"`
	Param  CMParam  `c:"param"`
}
