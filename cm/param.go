package cm

import (
	"github.com/goroce/goroce/verbs"
)

// Private data: what each message leaves to the application. A REQ's 92
// bytes start with rdma_cm's 36-byte header, a SIDR_REQ's 216 too; the
// wire carries no length, so the receiver gets the whole field, padded
// with zeros.
const (
	MaxConnectPrivateData   = 56  // Connect, RC: a REQ's 92 bytes less rdma_cm's header
	MaxAcceptPrivateData    = 196 // Accept, RC: a REP's
	MaxRejectPrivateData    = 148 // Reject, RC: a REJ's
	MaxUDConnectPrivateData = 180 // Connect, UD: a SIDR_REQ's 216 less the header
	MaxUDAcceptPrivateData  = 136 // Accept and Reject, UD: a SIDR_REP's
)

// Maximum READ/atomic depths, as ConnParam's depths: the device's limit
// (librdmacm's RDMA_MAX_RESP_RES and RDMA_MAX_INIT_DEPTH).
const (
	MaxResponderResources = 0xFF
	MaxInitiatorDepth     = 0xFF
)

// ConnParam is what one side offers for a connection (struct
// rdma_conn_param), for Connect and Accept; in events, what the peer
// sent. Unlike the net-like API's Params, zero values mean zero, as in C.
type ConnParam struct {
	// PrivateData goes to the peer: at most MaxConnectPrivateData in a
	// Connect, MaxAcceptPrivateData in an Accept (UD:
	// MaxUDConnectPrivateData, MaxUDAcceptPrivateData).
	PrivateData []byte
	// ResponderResources is how many RDMA READs and atomics this side's
	// QP serves at once (its max_dest_rd_atomic); InitiatorDepth how many
	// it issues (max_rd_atomic). MaxResponderResources and
	// MaxInitiatorDepth ask for the device's limit (on Accept: the peer's
	// offer, within the device's limit).
	ResponderResources uint8
	InitiatorDepth     uint8
	FlowControl        bool
	// RetryCount is the connection's transport retry count (3 bits; 7
	// is not infinite), which the active side sets for both QPs;
	// RNRRetryCount the RNR retries the peer's QP makes against this
	// side's (3 bits; 7 is infinite).
	RetryCount    uint8
	RNRRetryCount uint8
	// SRQ and QPNum describe the QP when the ID has none (the application
	// moves it itself, with InitQPAttr).
	SRQ   bool
	QPNum uint32
	// SelectiveRepeat asks for goroce's selective repeat
	// (verbs.QPAttr.SelectiveRepeat) on an RC connection: Connect offers
	// it in the REQ's ECE vendor ID (GoroceECEVendorID), Accept grants it
	// if the REQ offered it, and it is on for both QPs only if the REP
	// carries the ID back. A peer that is not goroce (rdma_cm, rxe, a
	// NIC) does not answer with it: the connection stays IBTA go-back-N.
	// In EventConnectRequest it reports the offer; in
	// EventEstablished and EventConnectResponse, the outcome.
	SelectiveRepeat bool
}

// GoroceECEVendorID is the 24-bit ECE vendor ID (the REQ and REP's vendor
// ID field, as ibv_ece's vendor_id) by which goroce offers and grants
// selective repeat. It is goroce's own choice ("gor"), not an IEEE OUI:
// only a peer that sends it back is treated as having agreed.
const GoroceECEVendorID = 0x676F72

// defaultConnParam is what a nil *ConnParam stands for (librdmacm's):
// the device's depths, 7 retries of each kind.
var defaultConnParam = ConnParam{ResponderResources: MaxResponderResources, InitiatorDepth: MaxInitiatorDepth,
	RetryCount: 7, RNRRetryCount: 7}

// UDParam is what a UD exchange delivered (struct rdma_ud_param): in an
// EventConnectRequest the SIDR_REQ's private data; in EventEstablished
// the service's QP number, Q_Key and address, and its private data.
type UDParam struct {
	PrivateData []byte
	// AH is the address vector of the peer: create an address handle
	// from it to send to QPNum with QKey.
	AH    verbs.AddressVector
	QPNum uint32
	QKey  uint32
}

// depth resolves a requested READ/atomic depth against the device limit.
func depth(v uint8, limit int) uint8 {
	limit = min(limit, 0xFF)
	if v == 0xFF || int(v) > limit {
		return uint8(limit)
	}
	return v
}
