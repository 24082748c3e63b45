package ibv

import "strconv"

// QPType is a queue pair's transport service (enum ibv_qp_type).
type QPType int

// QP types, with the libibverbs values. goroce implements RC, UC and UD.
const (
	QPTypeRC        QPType = 2    // IBV_QPT_RC: reliable connection
	QPTypeUC        QPType = 3    // IBV_QPT_UC: unreliable connection
	QPTypeUD        QPType = 4    // IBV_QPT_UD: unreliable datagram
	QPTypeRawPacket QPType = 8    // IBV_QPT_RAW_PACKET (not supported)
	QPTypeXRCSend   QPType = 9    // IBV_QPT_XRC_SEND (not supported)
	QPTypeXRCRecv   QPType = 10   // IBV_QPT_XRC_RECV (not supported)
	QPTypeDriver    QPType = 0xff // IBV_QPT_DRIVER (not supported)
)

// String returns the type's name, e.g. "RC".
func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUC:
		return "UC"
	case QPTypeUD:
		return "UD"
	case QPTypeRawPacket:
		return "RAW_PACKET"
	case QPTypeXRCSend:
		return "XRC_SEND"
	case QPTypeXRCRecv:
		return "XRC_RECV"
	case QPTypeDriver:
		return "DRIVER"
	}
	return "QPType(" + strconv.Itoa(int(t)) + ")"
}

// QPState is a queue pair state (enum ibv_qp_state).
type QPState int

// QP states, with the libibverbs values.
const (
	QPStateReset   QPState = 0 // IBV_QPS_RESET
	QPStateInit    QPState = 1 // IBV_QPS_INIT
	QPStateRTR     QPState = 2 // IBV_QPS_RTR: ready to receive
	QPStateRTS     QPState = 3 // IBV_QPS_RTS: ready to send
	QPStateSQD     QPState = 4 // IBV_QPS_SQD: send queue drained
	QPStateSQE     QPState = 5 // IBV_QPS_SQE: send queue error (UC, UD)
	QPStateErr     QPState = 6 // IBV_QPS_ERR
	QPStateUnknown QPState = 7 // IBV_QPS_UNKNOWN
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN"}

// String returns the state's name, e.g. "RTS".
func (s QPState) String() string {
	if s < 0 || int(s) >= len(qpStateNames) {
		return "QPState(" + strconv.Itoa(int(s)) + ")"
	}
	return qpStateNames[s]
}
