package mad

// REP is the ConnectReply (IBA vol. 1 table 110). "Local" is the passive
// side that sends it.
type REP struct {
	LocalCommID  uint32
	RemoteCommID uint32 // the REQ's LocalCommID
	LocalQKey    uint32
	LocalQPN     uint32 // 24 bits
	LocalEECN    uint32 // 24 bits, RD only (and the XRC target's SRQ number)
	// StartingPSN (24 bits) is the first PSN the sender's receive queue
	// expects: the active side's send queue starts there.
	StartingPSN        uint32
	ResponderResources uint8
	InitiatorDepth     uint8
	// TargetACKDelay (5 bits) is the sender's local CA ACK delay; the
	// receiver adds it to the packet life time for its QP timeout and its
	// timewait (rxe sends 15).
	TargetACKDelay      uint8
	FailoverAccepted    uint8 // 2 bits
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits
	SRQ                 bool
	LocalCAGUID         uint64
	// VendorID is the 24-bit ECE vendor ID, spread over the reserved
	// bytes 15 (bits 23-16), 19 (15-8) and 23 (7-0).
	VendorID uint32
	// PrivateData is the 196 bytes of private data, a subslice of the
	// parsed MAD; encoding pads shorter data with zeros.
	PrivateData []byte
}

// REPPrivateDataSize is the private data a REP carries.
const REPPrivateDataSize = 196

var (
	repLocalCommID   = field{0, 0, 32}
	repRemoteCommID  = field{4, 0, 32}
	repLocalQKey     = field{8, 0, 32}
	repLocalQPN      = field{12, 0, 24}
	repVendorIDHigh  = field{15, 0, 8}
	repLocalEECN     = field{16, 0, 24}
	repVendorIDMid   = field{19, 0, 8}
	repStartingPSN   = field{20, 0, 24}
	repVendorIDLow   = field{23, 0, 8}
	repRespResources = field{24, 0, 8}
	repInitDepth     = field{25, 0, 8}
	repTargetACKDly  = field{26, 0, 5}
	repFailover      = field{26, 5, 2}
	repE2EFlowCtl    = field{26, 7, 1}
	repRNRRetryCount = field{27, 0, 3}
	repSRQ           = field{27, 3, 1}
	repLocalCAGUID   = field{28, 0, 64}
	repPrivateData   = span{36, REPPrivateDataSize}
)

// AttrID returns AttrREP.
func (*REP) AttrID() AttrID { return AttrREP }

// Parse parses mad, a whole CM MAD carrying a REP, into m. PrivateData
// aliases mad. It does not allocate.
func (m *REP) Parse(mad []byte) error {
	b, err := cmBody(mad, AttrREP)
	if err != nil {
		return err
	}
	*m = REP{
		LocalCommID:         uint32(repLocalCommID.get(b)),
		RemoteCommID:        uint32(repRemoteCommID.get(b)),
		LocalQKey:           uint32(repLocalQKey.get(b)),
		LocalQPN:            uint32(repLocalQPN.get(b)),
		LocalEECN:           uint32(repLocalEECN.get(b)),
		StartingPSN:         uint32(repStartingPSN.get(b)),
		ResponderResources:  uint8(repRespResources.get(b)),
		InitiatorDepth:      uint8(repInitDepth.get(b)),
		TargetACKDelay:      uint8(repTargetACKDly.get(b)),
		FailoverAccepted:    uint8(repFailover.get(b)),
		EndToEndFlowControl: repE2EFlowCtl.get(b) != 0,
		RNRRetryCount:       uint8(repRNRRetryCount.get(b)),
		SRQ:                 repSRQ.get(b) != 0,
		LocalCAGUID:         repLocalCAGUID.get(b),
		VendorID: uint32(repVendorIDHigh.get(b)<<16 | repVendorIDMid.get(b)<<8 |
			repVendorIDLow.get(b)),
		PrivateData: repPrivateData.of(b),
	}
	return nil
}

// AppendBody appends the 232-byte message body to b; reserved bits are
// zero. It fails with a *FieldError if a value does not fit its field.
func (m *REP) AppendBody(b []byte) ([]byte, error) {
	e, b := grow(b, AttrREP)
	e.set(repLocalCommID, uint64(m.LocalCommID), "LocalCommID")
	e.set(repRemoteCommID, uint64(m.RemoteCommID), "RemoteCommID")
	e.set(repLocalQKey, uint64(m.LocalQKey), "LocalQKey")
	e.set(repLocalQPN, uint64(m.LocalQPN), "LocalQPN")
	e.set(repLocalEECN, uint64(m.LocalEECN), "LocalEECN")
	e.set(repStartingPSN, uint64(m.StartingPSN), "StartingPSN")
	e.set(repRespResources, uint64(m.ResponderResources), "ResponderResources")
	e.set(repInitDepth, uint64(m.InitiatorDepth), "InitiatorDepth")
	e.set(repTargetACKDly, uint64(m.TargetACKDelay), "TargetACKDelay")
	e.set(repFailover, uint64(m.FailoverAccepted), "FailoverAccepted")
	e.flag(repE2EFlowCtl, m.EndToEndFlowControl, "EndToEndFlowControl")
	e.set(repRNRRetryCount, uint64(m.RNRRetryCount), "RNRRetryCount")
	e.flag(repSRQ, m.SRQ, "SRQ")
	e.set(repLocalCAGUID, m.LocalCAGUID, "LocalCAGUID")
	if m.VendorID>>24 != 0 {
		e.overflow("VendorID", uint64(m.VendorID), 24)
	} else {
		e.set(repVendorIDHigh, uint64(m.VendorID>>16), "VendorID")
		e.set(repVendorIDMid, uint64(m.VendorID>>8&0xFF), "VendorID")
		e.set(repVendorIDLow, uint64(m.VendorID&0xFF), "VendorID")
	}
	e.bytes(repPrivateData, m.PrivateData, "PrivateData")
	return e.done(b)
}
