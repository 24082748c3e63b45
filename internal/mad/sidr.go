package mad

// SIDRREQ is the ServiceIDResReq (IBA vol. 1 table 119): which UD QP
// serves a service ID. rdma_cm's UDP and IB port spaces resolve UD
// endpoints with it, the CMAHeader at the start of the private data.
type SIDRREQ struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   ServiceID
	PrivateData []byte // 216 bytes
}

// SIDRREP is the ServiceIDResReqResp (IBA vol. 1 table 120).
type SIDRREP struct {
	RequestID uint32 // the SIDR_REQ's RequestID
	Status    SIDRStatus
	QPN       uint32 // 24 bits
	ServiceID ServiceID
	QKey      uint32
	// VendorIDHigh (bytes 6-7) and VendorIDLow (byte 11) hold the ECE
	// vendor ID. The kernel writes bits 15-8 of its vendor ID into the
	// 16-bit high field and bits 7-0 into the low one (so bits 23-16 are
	// lost); they are kept apart here as the wire has them.
	VendorIDHigh uint16
	VendorIDLow  uint8
	// Info is the additional information, at most 72 bytes (a
	// ClassPortInfo with SIDRRedirect); its length is the message's 8-bit
	// additional information length. Parse makes it a subslice of the MAD.
	Info        []byte
	PrivateData []byte // 136 bytes
}

// Sizes of the variable parts of the SIDR messages.
const (
	SIDRREQPrivateDataSize = 216
	SIDRREPInfoSize        = 72
	SIDRREPPrivateDataSize = 136
)

var (
	sidrReqRequestID   = field{0, 0, 32}
	sidrReqPKey        = field{4, 0, 16}
	sidrReqServiceID   = field{8, 0, 64}
	sidrReqPrivateData = span{16, SIDRREQPrivateDataSize}

	sidrRepRequestID   = field{0, 0, 32}
	sidrRepStatus      = field{4, 0, 8}
	sidrRepInfoLength  = field{5, 0, 8}
	sidrRepVendorHigh  = field{6, 0, 16}
	sidrRepQPN         = field{8, 0, 24}
	sidrRepVendorLow   = field{11, 0, 8}
	sidrRepServiceID   = field{12, 0, 64}
	sidrRepQKey        = field{20, 0, 32}
	sidrRepInfo        = span{24, SIDRREPInfoSize}
	sidrRepPrivateData = span{96, SIDRREPPrivateDataSize}
)

// AttrID returns AttrSIDRREQ.
func (*SIDRREQ) AttrID() AttrID { return AttrSIDRREQ }

// Parse parses mad, a whole CM MAD carrying a SIDR_REQ, into m.
// PrivateData aliases mad.
func (m *SIDRREQ) Parse(mad []byte) error {
	b, err := cmBody(mad, AttrSIDRREQ)
	if err != nil {
		return err
	}
	*m = SIDRREQ{RequestID: uint32(sidrReqRequestID.get(b)), PKey: uint16(sidrReqPKey.get(b)),
		ServiceID: ServiceID(sidrReqServiceID.get(b)), PrivateData: sidrReqPrivateData.of(b)}
	return nil
}

// AppendBody appends the 232-byte message body to b.
func (m *SIDRREQ) AppendBody(b []byte) ([]byte, error) {
	e, b := grow(b, AttrSIDRREQ)
	e.set(sidrReqRequestID, uint64(m.RequestID), "RequestID")
	e.set(sidrReqPKey, uint64(m.PKey), "PKey")
	e.set(sidrReqServiceID, uint64(m.ServiceID), "ServiceID")
	e.bytes(sidrReqPrivateData, m.PrivateData, "PrivateData")
	return e.done(b)
}

// AttrID returns AttrSIDRREP.
func (*SIDRREP) AttrID() AttrID { return AttrSIDRREP }

// Parse parses mad, a whole CM MAD carrying a SIDR_REP, into m. Info and
// PrivateData alias mad. It refuses an information length above 72.
func (m *SIDRREP) Parse(mad []byte) error {
	b, err := cmBody(mad, AttrSIDRREP)
	if err != nil {
		return err
	}
	n := int(sidrRepInfoLength.get(b))
	if n > SIDRREPInfoSize {
		return errSIDRInfoLen
	}
	*m = SIDRREP{
		RequestID:    uint32(sidrRepRequestID.get(b)),
		Status:       SIDRStatus(sidrRepStatus.get(b)),
		QPN:          uint32(sidrRepQPN.get(b)),
		ServiceID:    ServiceID(sidrRepServiceID.get(b)),
		QKey:         uint32(sidrRepQKey.get(b)),
		VendorIDHigh: uint16(sidrRepVendorHigh.get(b)),
		VendorIDLow:  uint8(sidrRepVendorLow.get(b)),
		Info:         sidrRepInfo.of(b)[:n:n],
		PrivateData:  sidrRepPrivateData.of(b),
	}
	return nil
}

// AppendBody appends the 232-byte message body to b.
func (m *SIDRREP) AppendBody(b []byte) ([]byte, error) {
	e, b := grow(b, AttrSIDRREP)
	e.set(sidrRepRequestID, uint64(m.RequestID), "RequestID")
	e.set(sidrRepStatus, uint64(m.Status), "Status")
	e.bytes(sidrRepInfo, m.Info, "Info")
	e.set(sidrRepInfoLength, uint64(len(m.Info)), "Info length")
	e.set(sidrRepVendorHigh, uint64(m.VendorIDHigh), "VendorIDHigh")
	e.set(sidrRepQPN, uint64(m.QPN), "QPN")
	e.set(sidrRepVendorLow, uint64(m.VendorIDLow), "VendorIDLow")
	e.set(sidrRepServiceID, uint64(m.ServiceID), "ServiceID")
	e.set(sidrRepQKey, uint64(m.QKey), "QKey")
	e.bytes(sidrRepPrivateData, m.PrivateData, "PrivateData")
	return e.done(b)
}
