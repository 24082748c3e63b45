package mad

// Message is one of the CM messages: *REQ, *MRA, *REJ, *REP, *RTU, *DREQ,
// *DREP, *SIDRREQ, *SIDRREP, *LAP or *APR.
type Message interface {
	// AttrID is the attribute ID of the message.
	AttrID() AttrID
	// Parse parses a whole CM MAD (header included) into the message.
	// Byte fields alias the MAD. It does not allocate.
	Parse(mad []byte) error
	// AppendBody appends the 232-byte message body (no header) to b, or
	// returns b unchanged and a *FieldError if a value does not fit.
	AppendBody(b []byte) ([]byte, error)
}

// New returns a zero message of the CM attribute a, or nil if a is not a
// CM attribute.
func New(a AttrID) Message {
	switch a {
	case AttrREQ:
		return new(REQ)
	case AttrMRA:
		return new(MRA)
	case AttrREJ:
		return new(REJ)
	case AttrREP:
		return new(REP)
	case AttrRTU:
		return new(RTU)
	case AttrDREQ:
		return new(DREQ)
	case AttrDREP:
		return new(DREP)
	case AttrSIDRREQ:
		return new(SIDRREQ)
	case AttrSIDRREP:
		return new(SIDRREP)
	case AttrLAP:
		return new(LAP)
	case AttrAPR:
		return new(APR)
	}
	return nil
}

// Decode parses mad, a whole CM MAD, into its header and a newly
// allocated message whose byte fields alias mad. For tools and tests; a
// receive path that must not allocate keeps one message of each type and
// switches on ParseCMHeader's AttrID.
func Decode(mad []byte) (Header, Message, error) {
	h, err := ParseCMHeader(mad)
	if err != nil {
		return Header{}, nil, err
	}
	m := New(h.AttrID)
	if err := m.Parse(mad); err != nil {
		return Header{}, nil, err
	}
	return h, m, nil
}

// AppendMAD appends the whole MAD, h and m, to b. h.AttrID must be m's.
// It returns b unchanged and an error if a value does not fit its field.
func AppendMAD(b []byte, h *Header, m Message) ([]byte, error) {
	if h.AttrID != m.AttrID() {
		return b, &FieldError{Msg: m.AttrID(), Field: "header AttrID", Value: uint64(h.AttrID), Reserved: true}
	}
	n := len(b)
	b = h.Append(b)
	b, err := m.AppendBody(b)
	if err != nil {
		return b[:n], err
	}
	return b, nil
}

// AppendCM appends a CM MAD carrying m with transaction ID tid to b, its
// header as the kernel's CM makes it (CMHeader).
func AppendCM(b []byte, tid uint64, m Message) ([]byte, error) {
	h := CMHeader(m.AttrID(), tid)
	return AppendMAD(b, &h, m)
}
