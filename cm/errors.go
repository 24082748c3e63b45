package cm

import (
	"errors"
	"fmt"
	"strconv"
)

// Sentinel errors, for errors.Is. Errors returned by this package match
// those that apply (a rejection for a mismatch matches both ErrRejected and
// ErrMismatch) and may also wrap a context error, a net error or a
// *verbs.Error; the message says what happened and with which peer.
var (
	// ErrRejected reports that the peer rejected the connection. The
	// error is a *RejectError carrying the reason and the peer's private
	// data (errors.As).
	ErrRejected = errors.New("connection rejected")

	// ErrVersion reports a peer speaking another version of the protocol.
	// The side that notices answers with a REJ, so both sides report it.
	ErrVersion = errors.New("unsupported protocol version")

	// ErrMismatch reports connection parameters the two sides cannot
	// agree on: QP types that differ, an invalid path MTU, GIDs of
	// different IP families. The side that notices answers with a REJ, so
	// both sides report it.
	ErrMismatch = errors.New("connection parameters do not match")

	// ErrProtocol reports a peer that does not follow the protocol:
	// bytes that are not a CM message, or a message out of sequence.
	ErrProtocol = errors.New("protocol violation")

	// ErrDisconnected is Conn.Err after the peer disconnected (its Close).
	ErrDisconnected = errors.New("disconnected by peer")
)

// RejectReason says why a connection was rejected. The values are the
// IB CM's REJ reason codes (IBA vol. 1 table 112, enum ib_cm_rej_reason),
// so they keep their meaning when the CM moves to QP1.
type RejectReason uint16

// Reject reasons used by this package.
const (
	// RejectNoResources: the rejecting side could not set up its QP
	// (IB_CM_REJ_NO_RESOURCES). The REJ's info says which step failed.
	RejectNoResources RejectReason = 3
	// RejectTimeout: the rejecting side gave up waiting, e.g. its context
	// ended during the exchange (IB_CM_REJ_TIMEOUT).
	RejectTimeout RejectReason = 4
	// RejectUnsupported: a message or parameter the rejecting side does
	// not support (IB_CM_REJ_UNSUPPORTED).
	RejectUnsupported RejectReason = 5
	// RejectInvalidTransportType: the QP types differ or are not
	// connected types (IB_CM_REJ_INVALID_TRANSPORT_TYPE).
	RejectInvalidTransportType RejectReason = 9
	// RejectInvalidGID: a GID that is zero or of another IP family than
	// the rejecting side's (IB_CM_REJ_INVALID_GID).
	RejectInvalidGID RejectReason = 12
	// RejectInvalidMTU: a path MTU that is not an IB MTU, or above the
	// one proposed (IB_CM_REJ_INVALID_MTU).
	RejectInvalidMTU RejectReason = 26
	// RejectConsumer: the application rejected the request with
	// Request.Reject (IB_CM_REJ_CONSUMER_DEFINED).
	RejectConsumer RejectReason = 28
	// RejectVersion: a protocol version the rejecting side does not speak
	// (IB_CM_REJ_INVALID_CLASS_VERSION).
	RejectVersion RejectReason = 31
)

// String returns a short description of the reason.
func (r RejectReason) String() string {
	switch r {
	case RejectNoResources:
		return "no resources"
	case RejectTimeout:
		return "timeout"
	case RejectUnsupported:
		return "unsupported request"
	case RejectInvalidTransportType:
		return "invalid transport type"
	case RejectInvalidGID:
		return "invalid GID"
	case RejectInvalidMTU:
		return "invalid MTU"
	case RejectConsumer:
		return "consumer reject"
	case RejectVersion:
		return "unsupported version"
	}
	return "reject reason " + strconv.Itoa(int(r))
}

// sentinel returns the sentinel error a reason falls under, or nil.
func (r RejectReason) sentinel() error {
	switch r {
	case RejectVersion:
		return ErrVersion
	case RejectInvalidTransportType, RejectInvalidGID, RejectInvalidMTU, RejectUnsupported:
		return ErrMismatch
	}
	return nil
}

// RejectError is the error of a Dial or Request.Accept that the peer
// rejected. It matches ErrRejected and, for a mismatch or a version
// problem, ErrMismatch or ErrVersion as well.
type RejectError struct {
	Reason RejectReason
	// Info is the peer's explanation for a rejection the CM made on its
	// own (a mismatch, a failure to set up its QP); empty for a rejection
	// by the application.
	Info string
	// PrivateData is the data the peer's application passed to
	// Request.Reject.
	PrivateData []byte
}

// Error returns a one-line description. The peer's info text is quoted:
// it comes from the network.
func (e *RejectError) Error() string {
	s := "rejected by peer: " + e.Reason.String()
	if e.Info != "" {
		s += ": " + strconv.Quote(e.Info)
	}
	if len(e.PrivateData) > 0 {
		s += fmt.Sprintf(" (%d bytes of private data)", len(e.PrivateData))
	}
	return s
}

// Unwrap returns ErrRejected and the sentinel of the reason, if any.
func (e *RejectError) Unwrap() []error {
	if s := e.Reason.sentinel(); s != nil {
		return []error{ErrRejected, s}
	}
	return []error{ErrRejected}
}

// rejection is a REJ this side decides to send, and the local error it
// stands for.
type rejection struct {
	reason RejectReason
	info   string // sent to the peer and used in the local error
}

// message returns the REJ to send.
func (r *rejection) message() message {
	info := r.info
	if len(info) > maxInfoLen {
		info = info[:maxInfoLen]
	}
	return message{typ: msgREJ, reason: r.reason, info: info}
}

// err returns the local error for the rejection: the reason's sentinel
// (ErrMismatch, ErrVersion) with the explanation.
func (r *rejection) err() error {
	if s := r.reason.sentinel(); s != nil {
		return fmt.Errorf("%w: %s", s, r.info)
	}
	return fmt.Errorf("%s: %s", r.reason, r.info)
}

// rejected converts a received REJ into the caller's error.
func rejected(m *message) *RejectError {
	return &RejectError{Reason: m.reason, Info: m.info, PrivateData: cloneBytes(m.privateData)}
}

// cloneBytes returns a copy of b, nil if b is empty.
func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}
