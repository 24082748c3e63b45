package mad

// REQ is the ConnectRequest (IBA vol. 1 table 106; the kernel's
// CM_REQ_* fields in include/rdma/ibta_vol1_c12.h). Field names follow the
// table; "local" is the active side that sends it.
type REQ struct {
	LocalCommID uint32
	// VendorID is the 24-bit ECE vendor ID in bytes 5-7 (reserved before
	// IBA 1.4; the ECE options themselves travel in the header's
	// attribute modifier).
	VendorID    uint32
	ServiceID   ServiceID
	LocalCAGUID uint64
	LocalQKey   uint32 // UD/RD only; 0 for RC
	LocalQPN    uint32 // 24 bits
	// ResponderResources is how many RDMA READs and atomics the sender
	// will serve at once (its max_dest_rd_atomic); the receiver takes it
	// as its initiator depth.
	ResponderResources uint8
	LocalEECN          uint32 // 24 bits, RD only
	// InitiatorDepth is how many the sender will have outstanding (its
	// max_rd_atomic); the receiver takes it as its responder resources.
	InitiatorDepth uint8
	RemoteEECN     uint32 // 24 bits, RD only
	// RemoteCMResponseTimeout (5 bits) is how long the receiver may take
	// to answer this REQ before it must send an MRA: 4.096 µs × 2^t.
	RemoteCMResponseTimeout uint8
	TransportServiceType    TransportType // 2 bits
	EndToEndFlowControl     bool
	// StartingPSN (24 bits) is the first PSN the sender's receive queue
	// expects: the receiver's send queue starts there (the kernel sets the
	// active side's rq_psn and the passive side's sq_psn from it, and the
	// rping capture shows the passive side sending from it).
	StartingPSN uint32
	// LocalCMResponseTimeout (5 bits) is how long the sender may take to
	// answer the REP; the receiver retransmits its REP on that period.
	LocalCMResponseTimeout uint8
	RetryCount             uint8  // 3 bits, the transport's retry_cnt
	PKey                   uint16 //
	PathMTU                uint8  // 4 bits, IB MTU enum (1=256 ... 5=4096)
	RDCExists              bool
	RNRRetryCount          uint8 // 3 bits
	MaxCMRetries           uint8 // 4 bits: how often each side resends a CM message
	SRQ                    bool
	ExtendedTransportType  uint8 // 3 bits; 1 with TransportXRC: XRC target
	Primary                Path
	Alternate              Path
	// SAPSupported is the alternate path's byte 139 bit 5 (IBA 1.3).
	SAPSupported bool
	// PrivateData is the 92 bytes of private data. Parse makes it a
	// subslice of the parsed MAD (all 92 bytes: the wire carries no
	// length); encoding accepts up to 92 bytes and pads with zeros. With
	// rdma_cm the first 36 are a CMAHeader.
	PrivateData []byte
}

// REQPrivateDataSize is the private data a REQ carries.
const REQPrivateDataSize = 92

var (
	reqLocalCommID    = field{0, 0, 32}
	reqVendorID       = field{5, 0, 24}
	reqServiceID      = field{8, 0, 64}
	reqLocalCAGUID    = field{16, 0, 64}
	reqLocalQKey      = field{28, 0, 32}
	reqLocalQPN       = field{32, 0, 24}
	reqRespResources  = field{35, 0, 8}
	reqLocalEECN      = field{36, 0, 24}
	reqInitiatorDepth = field{39, 0, 8}
	reqRemoteEECN     = field{40, 0, 24}
	reqRemoteRespTO   = field{43, 0, 5}
	reqTransportType  = field{43, 5, 2}
	reqE2EFlowControl = field{43, 7, 1}
	reqStartingPSN    = field{44, 0, 24}
	reqLocalRespTO    = field{47, 0, 5}
	reqRetryCount     = field{47, 5, 3}
	reqPKey           = field{48, 0, 16}
	reqPathMTU        = field{50, 0, 4}
	reqRDCExists      = field{50, 4, 1}
	reqRNRRetryCount  = field{50, 5, 3}
	reqMaxCMRetries   = field{51, 0, 4}
	reqSRQ            = field{51, 4, 1}
	reqExtTransport   = field{51, 5, 3}
	reqSAPSupported   = field{139, 5, 1}
	reqPrimary        = reqPathLayout(52)
	reqAlternate      = reqPathLayout(96)
	reqPrivateData    = span{140, REQPrivateDataSize}
)

// AttrID returns AttrREQ.
func (*REQ) AttrID() AttrID { return AttrREQ }

// Parse parses mad, a whole CM MAD carrying a REQ, into m. PrivateData
// aliases mad. It does not allocate.
func (m *REQ) Parse(mad []byte) error {
	b, err := cmBody(mad, AttrREQ)
	if err != nil {
		return err
	}
	*m = REQ{
		LocalCommID:             uint32(reqLocalCommID.get(b)),
		VendorID:                uint32(reqVendorID.get(b)),
		ServiceID:               ServiceID(reqServiceID.get(b)),
		LocalCAGUID:             reqLocalCAGUID.get(b),
		LocalQKey:               uint32(reqLocalQKey.get(b)),
		LocalQPN:                uint32(reqLocalQPN.get(b)),
		ResponderResources:      uint8(reqRespResources.get(b)),
		LocalEECN:               uint32(reqLocalEECN.get(b)),
		InitiatorDepth:          uint8(reqInitiatorDepth.get(b)),
		RemoteEECN:              uint32(reqRemoteEECN.get(b)),
		RemoteCMResponseTimeout: uint8(reqRemoteRespTO.get(b)),
		TransportServiceType:    TransportType(reqTransportType.get(b)),
		EndToEndFlowControl:     reqE2EFlowControl.get(b) != 0,
		StartingPSN:             uint32(reqStartingPSN.get(b)),
		LocalCMResponseTimeout:  uint8(reqLocalRespTO.get(b)),
		RetryCount:              uint8(reqRetryCount.get(b)),
		PKey:                    uint16(reqPKey.get(b)),
		PathMTU:                 uint8(reqPathMTU.get(b)),
		RDCExists:               reqRDCExists.get(b) != 0,
		RNRRetryCount:           uint8(reqRNRRetryCount.get(b)),
		MaxCMRetries:            uint8(reqMaxCMRetries.get(b)),
		SRQ:                     reqSRQ.get(b) != 0,
		ExtendedTransportType:   uint8(reqExtTransport.get(b)),
		SAPSupported:            reqSAPSupported.get(b) != 0,
		PrivateData:             reqPrivateData.of(b),
	}
	reqPrimary.decode(b, &m.Primary)
	reqAlternate.decode(b, &m.Alternate)
	return nil
}

// AppendBody appends the 232-byte message body to b; reserved bits are
// zero. It fails with a *FieldError if a value does not fit its field.
func (m *REQ) AppendBody(b []byte) ([]byte, error) {
	e, b := grow(b, AttrREQ)
	e.set(reqLocalCommID, uint64(m.LocalCommID), "LocalCommID")
	e.set(reqVendorID, uint64(m.VendorID), "VendorID")
	e.set(reqServiceID, uint64(m.ServiceID), "ServiceID")
	e.set(reqLocalCAGUID, m.LocalCAGUID, "LocalCAGUID")
	e.set(reqLocalQKey, uint64(m.LocalQKey), "LocalQKey")
	e.set(reqLocalQPN, uint64(m.LocalQPN), "LocalQPN")
	e.set(reqRespResources, uint64(m.ResponderResources), "ResponderResources")
	e.set(reqLocalEECN, uint64(m.LocalEECN), "LocalEECN")
	e.set(reqInitiatorDepth, uint64(m.InitiatorDepth), "InitiatorDepth")
	e.set(reqRemoteEECN, uint64(m.RemoteEECN), "RemoteEECN")
	e.set(reqRemoteRespTO, uint64(m.RemoteCMResponseTimeout), "RemoteCMResponseTimeout")
	e.set(reqTransportType, uint64(m.TransportServiceType), "TransportServiceType")
	e.flag(reqE2EFlowControl, m.EndToEndFlowControl, "EndToEndFlowControl")
	e.set(reqStartingPSN, uint64(m.StartingPSN), "StartingPSN")
	e.set(reqLocalRespTO, uint64(m.LocalCMResponseTimeout), "LocalCMResponseTimeout")
	e.set(reqRetryCount, uint64(m.RetryCount), "RetryCount")
	e.set(reqPKey, uint64(m.PKey), "PKey")
	e.set(reqPathMTU, uint64(m.PathMTU), "PathMTU")
	e.flag(reqRDCExists, m.RDCExists, "RDCExists")
	e.set(reqRNRRetryCount, uint64(m.RNRRetryCount), "RNRRetryCount")
	e.set(reqMaxCMRetries, uint64(m.MaxCMRetries), "MaxCMRetries")
	e.flag(reqSRQ, m.SRQ, "SRQ")
	e.set(reqExtTransport, uint64(m.ExtendedTransportType), "ExtendedTransportType")
	reqPrimary.encode(&e, &m.Primary)
	reqAlternate.encode(&e, &m.Alternate)
	e.flag(reqSAPSupported, m.SAPSupported, "SAPSupported")
	e.bytes(reqPrivateData, m.PrivateData, "PrivateData")
	return e.done(b)
}

// HasAlternatePath reports whether the REQ carries an alternate path,
// the kernel's test: a nonzero alternate local LID.
func (m *REQ) HasAlternatePath() bool { return m.Alternate.LocalLID != 0 }
