package mad

// REJ is the ConnectReject (IBA vol. 1 table 108).
type REJ struct {
	// LocalCommID is the rejecting side's comm ID: 0 when a passive side
	// rejects a REQ before making a connection of it (the kernel's
	// cm_issue_rej copies the REQ's RemoteCommID, which is 0).
	LocalCommID  uint32
	RemoteCommID uint32
	MsgRejected  MsgResponse // 2 bits; 3 is refused
	Reason       RejectReason
	// ARI is the additional rejection information, at most 72 bytes; its
	// length is the message's 7-bit rejection info length. Parse makes it
	// a subslice of the MAD of that length.
	ARI []byte
	// PrivateData is the 148 bytes of private data, a subslice of the
	// parsed MAD; encoding pads shorter data with zeros.
	PrivateData []byte
}

// Sizes of the variable parts of a REJ.
const (
	REJARISize         = 72
	REJPrivateDataSize = 148
)

var (
	rejLocalCommID  = field{0, 0, 32}
	rejRemoteCommID = field{4, 0, 32}
	rejMsgRejected  = field{8, 0, 2}
	rejInfoLength   = field{9, 0, 7}
	rejReason       = field{10, 0, 16}
	rejARI          = span{12, REJARISize}
	rejPrivateData  = span{84, REJPrivateDataSize}
)

// AttrID returns AttrREJ.
func (*REJ) AttrID() AttrID { return AttrREJ }

// Parse parses mad, a whole CM MAD carrying a REJ, into m. ARI and
// PrivateData alias mad. It refuses a rejected message of 3 and an ARI
// length above 72. It does not allocate.
func (m *REJ) Parse(mad []byte) error {
	b, err := cmBody(mad, AttrREJ)
	if err != nil {
		return err
	}
	msg := MsgResponse(rejMsgRejected.get(b))
	if msg > RespondOther {
		return errRejected
	}
	n := int(rejInfoLength.get(b))
	if n > REJARISize {
		return errARILength
	}
	*m = REJ{
		LocalCommID:  uint32(rejLocalCommID.get(b)),
		RemoteCommID: uint32(rejRemoteCommID.get(b)),
		MsgRejected:  msg,
		Reason:       RejectReason(rejReason.get(b)),
		ARI:          rejARI.of(b)[:n:n],
		PrivateData:  rejPrivateData.of(b),
	}
	return nil
}

// AppendBody appends the 232-byte message body to b; reserved bits and
// the ARI bytes beyond its length are zero. It fails with a *FieldError if
// a value does not fit its field.
func (m *REJ) AppendBody(b []byte) ([]byte, error) {
	e, b := grow(b, AttrREJ)
	e.set(rejLocalCommID, uint64(m.LocalCommID), "LocalCommID")
	e.set(rejRemoteCommID, uint64(m.RemoteCommID), "RemoteCommID")
	if m.MsgRejected > RespondOther {
		e.refuse("MsgRejected", uint64(m.MsgRejected), 2)
	}
	e.set(rejMsgRejected, uint64(m.MsgRejected), "MsgRejected")
	e.bytes(rejARI, m.ARI, "ARI")
	e.set(rejInfoLength, uint64(len(m.ARI)), "ARI length")
	e.set(rejReason, uint64(m.Reason), "Reason")
	e.bytes(rejPrivateData, m.PrivateData, "PrivateData")
	return e.done(b)
}
