package mad

import "strconv"

// AttrID is a MAD attribute ID; for the CM class it names the message.
type AttrID uint16

// CM attribute IDs (IBA vol. 1 table 104; the kernel's CM_*_ATTR_ID).
const (
	AttrREQ     AttrID = 0x0010 // ConnectRequest
	AttrMRA     AttrID = 0x0011 // MsgRcptAck
	AttrREJ     AttrID = 0x0012 // ConnectReject
	AttrREP     AttrID = 0x0013 // ConnectReply
	AttrRTU     AttrID = 0x0014 // ReadyToUse
	AttrDREQ    AttrID = 0x0015 // DisconnectRequest
	AttrDREP    AttrID = 0x0016 // DisconnectReply
	AttrSIDRREQ AttrID = 0x0017 // ServiceIDResReq
	AttrSIDRREP AttrID = 0x0018 // ServiceIDResReqResp
	AttrLAP     AttrID = 0x0019 // LoadAlternatePath
	AttrAPR     AttrID = 0x001A // AlternatePathResponse
)

const (
	attrFirst = int(AttrREQ)
	attrCount = int(AttrAPR) - attrFirst + 1
)

var attrNames = [attrCount]string{"REQ", "MRA", "REJ", "REP", "RTU", "DREQ", "DREP", "SIDR_REQ", "SIDR_REP", "LAP", "APR"}

// IsCM reports whether a is one of the eleven CM messages.
func (a AttrID) IsCM() bool { return int(a) >= attrFirst && int(a) < attrFirst+attrCount }

func (a AttrID) String() string {
	if a.IsCM() {
		return attrNames[int(a)-attrFirst]
	}
	return "AttrID(0x" + strconv.FormatUint(uint64(a), 16) + ")"
}

// Method is a MAD method. Bit 7 marks a response.
type Method uint8

// Methods of IBA vol. 1 table 97 (the kernel's IB_MGMT_METHOD_*). CM
// messages all use MethodSend.
const (
	MethodGet         Method = 0x01
	MethodSet         Method = 0x02
	MethodSend        Method = 0x03
	MethodTrap        Method = 0x05
	MethodReport      Method = 0x06
	MethodTrapRepress Method = 0x07
	MethodGetResp     Method = 0x81
	MethodReportResp  Method = 0x86
	MethodResponse    Method = 0x80 // the response bit
)

// MsgResponse is the 2-bit "message MRAed" of an MRA and "message
// rejected" of a REJ: which message the MRA or REJ answers (the kernel's
// enum cm_msg_response). 3 is reserved and refused by the parsers.
type MsgResponse uint8

// Messages an MRA or REJ can answer.
const (
	RespondREQ   MsgResponse = 0 // the REQ
	RespondREP   MsgResponse = 1 // the REP
	RespondOther MsgResponse = 2 // a LAP (MRA); anything else (REJ)
)

func (m MsgResponse) String() string {
	switch m {
	case RespondREQ:
		return "REQ"
	case RespondREP:
		return "REP"
	case RespondOther:
		return "other"
	}
	return "MsgResponse(" + strconv.Itoa(int(m)) + ")"
}

// RejectReason is the 16-bit reason of a REJ (IBA vol. 1 table 112, the
// kernel's enum ib_cm_rej_reason). The ARI (additional rejection
// information) a reason carries is noted per value.
type RejectReason uint16

// Reject reasons. 34 is not assigned.
const (
	RejectNoQP                      RejectReason = 1
	RejectNoEEC                     RejectReason = 2
	RejectNoResources               RejectReason = 3
	RejectTimeout                   RejectReason = 4  // ARI: the rejecting side's CA GUID (8 bytes)
	RejectUnsupported               RejectReason = 5  // REQ asked for something unsupported
	RejectInvalidCommID             RejectReason = 6  //
	RejectInvalidCommInstance       RejectReason = 7  //
	RejectInvalidServiceID          RejectReason = 8  // no listener for the service ID
	RejectInvalidTransportType      RejectReason = 9  //
	RejectStaleConnection           RejectReason = 10 // the remote QPN or comm ID belongs to a live or timewait connection
	RejectRDCNotExist               RejectReason = 11 //
	RejectInvalidGID                RejectReason = 12 // ARI: a GID the rejecting side accepts (16 bytes)
	RejectInvalidLID                RejectReason = 13 //
	RejectInvalidSL                 RejectReason = 14 //
	RejectInvalidTrafficClass       RejectReason = 15 //
	RejectInvalidHopLimit           RejectReason = 16 //
	RejectInvalidPacketRate         RejectReason = 17 //
	RejectInvalidAltGID             RejectReason = 18 //
	RejectInvalidAltLID             RejectReason = 19 //
	RejectInvalidAltSL              RejectReason = 20 //
	RejectInvalidAltTrafficClass    RejectReason = 21 //
	RejectInvalidAltHopLimit        RejectReason = 22 //
	RejectInvalidAltPacketRate      RejectReason = 23 //
	RejectPortCMRedirect            RejectReason = 24 // ARI: a ClassPortInfo
	RejectPortRedirect              RejectReason = 25 //
	RejectInvalidMTU                RejectReason = 26 //
	RejectInsufficientRespResources RejectReason = 27 //
	RejectConsumer                  RejectReason = 28 // the application refused; its private data says why
	RejectInvalidRNRRetry           RejectReason = 29 //
	RejectDuplicateLocalCommID      RejectReason = 30 //
	RejectInvalidClassVersion       RejectReason = 31 //
	RejectInvalidFlowLabel          RejectReason = 32 //
	RejectInvalidAltFlowLabel       RejectReason = 33 //
	RejectVendorOptionNotSupported  RejectReason = 35 // ECE: the vendor option is refused
)

var rejectNames = [...]string{
	RejectNoQP: "no QP", RejectNoEEC: "no EEC", RejectNoResources: "no resources",
	RejectTimeout: "timeout", RejectUnsupported: "unsupported",
	RejectInvalidCommID: "invalid comm ID", RejectInvalidCommInstance: "invalid comm instance",
	RejectInvalidServiceID: "invalid service ID", RejectInvalidTransportType: "invalid transport type",
	RejectStaleConnection: "stale connection", RejectRDCNotExist: "RDC not exist",
	RejectInvalidGID: "invalid GID", RejectInvalidLID: "invalid LID", RejectInvalidSL: "invalid SL",
	RejectInvalidTrafficClass: "invalid traffic class", RejectInvalidHopLimit: "invalid hop limit",
	RejectInvalidPacketRate: "invalid packet rate", RejectInvalidAltGID: "invalid alt GID",
	RejectInvalidAltLID: "invalid alt LID", RejectInvalidAltSL: "invalid alt SL",
	RejectInvalidAltTrafficClass: "invalid alt traffic class", RejectInvalidAltHopLimit: "invalid alt hop limit",
	RejectInvalidAltPacketRate: "invalid alt packet rate", RejectPortCMRedirect: "port CM redirect",
	RejectPortRedirect: "port redirect", RejectInvalidMTU: "invalid MTU",
	RejectInsufficientRespResources: "insufficient responder resources", RejectConsumer: "consumer defined",
	RejectInvalidRNRRetry: "invalid RNR retry", RejectDuplicateLocalCommID: "duplicate local comm ID",
	RejectInvalidClassVersion: "invalid class version", RejectInvalidFlowLabel: "invalid flow label",
	RejectInvalidAltFlowLabel: "invalid alt flow label", RejectVendorOptionNotSupported: "vendor option not supported",
}

func (r RejectReason) String() string {
	if int(r) < len(rejectNames) && rejectNames[r] != "" {
		return rejectNames[r]
	}
	return "RejectReason(" + strconv.Itoa(int(r)) + ")"
}

// SIDRStatus is the status of a SIDR_REP (IBA vol. 1 table 120, the
// kernel's enum ib_cm_sidr_status).
type SIDRStatus uint8

// SIDR_REP statuses.
const (
	SIDRSuccess            SIDRStatus = 0 // QPN and Q_Key are valid
	SIDRUnsupported        SIDRStatus = 1 // no listener for the service ID (the kernel's answer)
	SIDRReject             SIDRStatus = 2 // the application refused
	SIDRNoQP               SIDRStatus = 3
	SIDRRedirect           SIDRStatus = 4 // the additional information is a ClassPortInfo
	SIDRUnsupportedVersion SIDRStatus = 5
)

var sidrNames = [...]string{"success", "unsupported service ID", "rejected", "no QP", "redirect", "unsupported version"}

func (s SIDRStatus) String() string {
	if int(s) < len(sidrNames) {
		return sidrNames[s]
	}
	return "SIDRStatus(" + strconv.Itoa(int(s)) + ")"
}

// APRStatus is the status of an APR (IBA vol. 1 table 117, the kernel's
// enum ib_cm_apr_status).
type APRStatus uint8

// APR statuses.
const (
	APRSuccess           APRStatus = 0
	APRInvalidCommID     APRStatus = 1
	APRUnsupported       APRStatus = 2 // what goroce answers to every LAP
	APRReject            APRStatus = 3
	APRRedirect          APRStatus = 4
	APRIsCurrent         APRStatus = 5
	APRInvalidQPNEECN    APRStatus = 6
	APRInvalidLID        APRStatus = 7
	APRInvalidGID        APRStatus = 8
	APRInvalidFlowLabel  APRStatus = 9
	APRInvalidTClass     APRStatus = 10
	APRInvalidHopLimit   APRStatus = 11
	APRInvalidPacketRate APRStatus = 12
	APRInvalidSL         APRStatus = 13
)

// TransportType is the 2-bit transport service type of a REQ; with
// TransportXRC the REQ's extended transport type says which XRC side.
type TransportType uint8

// Transport service types of a REQ (the kernel's cm_req_get_qp_type).
const (
	TransportRC  TransportType = 0
	TransportUC  TransportType = 1
	TransportRD  TransportType = 2
	TransportXRC TransportType = 3 // extended transport type 1: XRC target
)

func (t TransportType) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	}
	return "XRC"
}
