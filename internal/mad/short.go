package mad

// This file holds the messages made of comm IDs, a field or two and
// private data: MRA, RTU, DREQ and DREP.

// MRA is the MsgRcptAck (IBA vol. 1 table 107): the receiver of a REQ, REP
// or LAP needs more time than the sender's response timeout allows.
type MRA struct {
	LocalCommID  uint32
	RemoteCommID uint32 // the LocalCommID of the message acknowledged
	MsgMRAed     MsgResponse
	// ServiceTimeout (5 bits) is how long the sender still needs:
	// 4.096 µs × 2^t. The kernel's CM sends 24 (about 68.7 s).
	ServiceTimeout uint8
	// PrivateData is the 222 bytes of private data, a subslice of the
	// parsed MAD; encoding pads shorter data with zeros.
	PrivateData []byte
}

// RTU is the ReadyToUse (IBA vol. 1 table 111): the active side has moved
// its QP to RTS.
type RTU struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  []byte // 224 bytes
}

// DREQ is the DisconnectRequest (IBA vol. 1 table 113).
type DREQ struct {
	LocalCommID  uint32
	RemoteCommID uint32
	// RemoteQPN (24 bits) is the receiver's QPN; the kernel drops a DREQ
	// whose RemoteQPN is not the connection's local QPN.
	RemoteQPN   uint32
	PrivateData []byte // 220 bytes
}

// DREP is the DisconnectReply (IBA vol. 1 table 114).
type DREP struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  []byte // 224 bytes
}

// Private data sizes of these messages.
const (
	MRAPrivateDataSize  = 222
	RTUPrivateDataSize  = 224
	DREQPrivateDataSize = 220
	DREPPrivateDataSize = 224
)

var (
	commLocal  = field{0, 0, 32} // every message but SIDR starts with the two comm IDs
	commRemote = field{4, 0, 32}

	mraMsgMRAed       = field{8, 0, 2}
	mraServiceTimeout = field{9, 0, 5}
	mraPrivateData    = span{10, MRAPrivateDataSize}

	rtuPrivateData = span{8, RTUPrivateDataSize}

	dreqRemoteQPN   = field{8, 0, 24}
	dreqPrivateData = span{12, DREQPrivateDataSize}

	drepPrivateData = span{8, DREPPrivateDataSize}
)

// AttrID returns AttrMRA.
func (*MRA) AttrID() AttrID { return AttrMRA }

// Parse parses mad, a whole CM MAD carrying an MRA, into m. PrivateData
// aliases mad. It refuses an MRAed message of 3 (the kernel drops it).
func (m *MRA) Parse(mad []byte) error {
	b, err := cmBody(mad, AttrMRA)
	if err != nil {
		return err
	}
	msg := MsgResponse(mraMsgMRAed.get(b))
	if msg > RespondOther {
		return errMRAed
	}
	*m = MRA{
		LocalCommID:    uint32(commLocal.get(b)),
		RemoteCommID:   uint32(commRemote.get(b)),
		MsgMRAed:       msg,
		ServiceTimeout: uint8(mraServiceTimeout.get(b)),
		PrivateData:    mraPrivateData.of(b),
	}
	return nil
}

// AppendBody appends the 232-byte message body to b.
func (m *MRA) AppendBody(b []byte) ([]byte, error) {
	e, b := grow(b, AttrMRA)
	e.set(commLocal, uint64(m.LocalCommID), "LocalCommID")
	e.set(commRemote, uint64(m.RemoteCommID), "RemoteCommID")
	if m.MsgMRAed > RespondOther {
		e.refuse("MsgMRAed", uint64(m.MsgMRAed), 2)
	}
	e.set(mraMsgMRAed, uint64(m.MsgMRAed), "MsgMRAed")
	e.set(mraServiceTimeout, uint64(m.ServiceTimeout), "ServiceTimeout")
	e.bytes(mraPrivateData, m.PrivateData, "PrivateData")
	return e.done(b)
}

// AttrID returns AttrRTU.
func (*RTU) AttrID() AttrID { return AttrRTU }

// Parse parses mad, a whole CM MAD carrying an RTU, into m. PrivateData
// aliases mad.
func (m *RTU) Parse(mad []byte) error {
	b, err := cmBody(mad, AttrRTU)
	if err != nil {
		return err
	}
	*m = RTU{LocalCommID: uint32(commLocal.get(b)), RemoteCommID: uint32(commRemote.get(b)),
		PrivateData: rtuPrivateData.of(b)}
	return nil
}

// AppendBody appends the 232-byte message body to b.
func (m *RTU) AppendBody(b []byte) ([]byte, error) {
	e, b := grow(b, AttrRTU)
	e.set(commLocal, uint64(m.LocalCommID), "LocalCommID")
	e.set(commRemote, uint64(m.RemoteCommID), "RemoteCommID")
	e.bytes(rtuPrivateData, m.PrivateData, "PrivateData")
	return e.done(b)
}

// AttrID returns AttrDREQ.
func (*DREQ) AttrID() AttrID { return AttrDREQ }

// Parse parses mad, a whole CM MAD carrying a DREQ, into m. PrivateData
// aliases mad.
func (m *DREQ) Parse(mad []byte) error {
	b, err := cmBody(mad, AttrDREQ)
	if err != nil {
		return err
	}
	*m = DREQ{LocalCommID: uint32(commLocal.get(b)), RemoteCommID: uint32(commRemote.get(b)),
		RemoteQPN: uint32(dreqRemoteQPN.get(b)), PrivateData: dreqPrivateData.of(b)}
	return nil
}

// AppendBody appends the 232-byte message body to b.
func (m *DREQ) AppendBody(b []byte) ([]byte, error) {
	e, b := grow(b, AttrDREQ)
	e.set(commLocal, uint64(m.LocalCommID), "LocalCommID")
	e.set(commRemote, uint64(m.RemoteCommID), "RemoteCommID")
	e.set(dreqRemoteQPN, uint64(m.RemoteQPN), "RemoteQPN")
	e.bytes(dreqPrivateData, m.PrivateData, "PrivateData")
	return e.done(b)
}

// AttrID returns AttrDREP.
func (*DREP) AttrID() AttrID { return AttrDREP }

// Parse parses mad, a whole CM MAD carrying a DREP, into m. PrivateData
// aliases mad.
func (m *DREP) Parse(mad []byte) error {
	b, err := cmBody(mad, AttrDREP)
	if err != nil {
		return err
	}
	*m = DREP{LocalCommID: uint32(commLocal.get(b)), RemoteCommID: uint32(commRemote.get(b)),
		PrivateData: drepPrivateData.of(b)}
	return nil
}

// AppendBody appends the 232-byte message body to b.
func (m *DREP) AppendBody(b []byte) ([]byte, error) {
	e, b := grow(b, AttrDREP)
	e.set(commLocal, uint64(m.LocalCommID), "LocalCommID")
	e.set(commRemote, uint64(m.RemoteCommID), "RemoteCommID")
	e.bytes(drepPrivateData, m.PrivateData, "PrivateData")
	return e.done(b)
}
