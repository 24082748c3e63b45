package mad

// LAP is the LoadAlternatePath (IBA vol. 1 table 115), for automatic path
// migration. The kernel's CM drops LAP and APR on RoCE ports without an
// answer (cm_lap_handler, cm_apr_handler: "not supported for RoCE link
// layer"); goroce parses them so that it can answer a LAP with an APR of
// status APRUnsupported.
type LAP struct {
	LocalCommID             uint32
	RemoteCommID            uint32
	RemoteQPN               uint32 // 24 bits (QPN or EECN)
	RemoteCMResponseTimeout uint8  // 5 bits
	Alternate               Path
	PrivateData             []byte // 168 bytes
}

// APR is the AlternatePathResponse (IBA vol. 1 table 116).
type APR struct {
	LocalCommID  uint32
	RemoteCommID uint32
	Status       APRStatus
	// Info is the additional information, at most 72 bytes; its length is
	// the message's 8-bit additional information length.
	Info        []byte
	PrivateData []byte // 148 bytes
}

// Sizes of the variable parts of LAP and APR.
const (
	LAPPrivateDataSize = 168
	APRInfoSize        = 72
	APRPrivateDataSize = 148
)

var (
	lapRemoteQPN    = field{12, 0, 24}
	lapRemoteRespTO = field{15, 0, 5}
	lapPrivateData  = span{64, LAPPrivateDataSize}
	aprInfoLength   = field{8, 0, 8}
	aprStatus       = field{9, 0, 8}
	aprInfo         = span{12, APRInfoSize}
	aprPrivateData  = span{84, APRPrivateDataSize}
)

// AttrID returns AttrLAP.
func (*LAP) AttrID() AttrID { return AttrLAP }

// Parse parses mad, a whole CM MAD carrying a LAP, into m. PrivateData
// aliases mad.
func (m *LAP) Parse(mad []byte) error {
	b, err := cmBody(mad, AttrLAP)
	if err != nil {
		return err
	}
	*m = LAP{
		LocalCommID:             uint32(commLocal.get(b)),
		RemoteCommID:            uint32(commRemote.get(b)),
		RemoteQPN:               uint32(lapRemoteQPN.get(b)),
		RemoteCMResponseTimeout: uint8(lapRemoteRespTO.get(b)),
		PrivateData:             lapPrivateData.of(b),
	}
	lapPath.decode(b, &m.Alternate)
	return nil
}

// AppendBody appends the 232-byte message body to b.
func (m *LAP) AppendBody(b []byte) ([]byte, error) {
	e, b := grow(b, AttrLAP)
	e.set(commLocal, uint64(m.LocalCommID), "LocalCommID")
	e.set(commRemote, uint64(m.RemoteCommID), "RemoteCommID")
	e.set(lapRemoteQPN, uint64(m.RemoteQPN), "RemoteQPN")
	e.set(lapRemoteRespTO, uint64(m.RemoteCMResponseTimeout), "RemoteCMResponseTimeout")
	lapPath.encode(&e, &m.Alternate)
	e.bytes(lapPrivateData, m.PrivateData, "PrivateData")
	return e.done(b)
}

// AttrID returns AttrAPR.
func (*APR) AttrID() AttrID { return AttrAPR }

// Parse parses mad, a whole CM MAD carrying an APR, into m. Info and
// PrivateData alias mad. It refuses an information length above 72.
func (m *APR) Parse(mad []byte) error {
	b, err := cmBody(mad, AttrAPR)
	if err != nil {
		return err
	}
	n := int(aprInfoLength.get(b))
	if n > APRInfoSize {
		return errAPRInfoLen
	}
	*m = APR{
		LocalCommID:  uint32(commLocal.get(b)),
		RemoteCommID: uint32(commRemote.get(b)),
		Status:       APRStatus(aprStatus.get(b)),
		Info:         aprInfo.of(b)[:n:n],
		PrivateData:  aprPrivateData.of(b),
	}
	return nil
}

// AppendBody appends the 232-byte message body to b.
func (m *APR) AppendBody(b []byte) ([]byte, error) {
	e, b := grow(b, AttrAPR)
	e.set(commLocal, uint64(m.LocalCommID), "LocalCommID")
	e.set(commRemote, uint64(m.RemoteCommID), "RemoteCommID")
	e.bytes(aprInfo, m.Info, "Info")
	e.set(aprInfoLength, uint64(len(m.Info)), "Info length")
	e.set(aprStatus, uint64(m.Status), "Status")
	e.bytes(aprPrivateData, m.PrivateData, "PrivateData")
	return e.done(b)
}
