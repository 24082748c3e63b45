package cm

import (
	"errors"
	"fmt"
	"strconv"
	"syscall"

	"github.com/goroce/goroce/internal/mad"
)

// Sentinel errors, for errors.Is. Errors of this package match those that
// apply and may also wrap a context error or a *verbs.Error (invalid
// arguments and states wrap verbs.ErrInvalidArgument,
// verbs.ErrInvalidState, verbs.ErrNotSupported); the message names the
// peer.
var (
	// ErrRejected: the peer refused the connection (a REJ) or the UD
	// service (a SIDR_REP that is not a success). The error is a
	// *RejectError with the reason and the peer's private data.
	ErrRejected = errors.New("rejected")
	// ErrNoListener: nothing listens on that port at the peer (REJ
	// "invalid service ID", SIDR_REP "unsupported"). It comes with
	// ErrRejected.
	ErrNoListener = errors.New("no listener")
	// ErrTimeout: the peer did not answer a REQ, REP, DREQ or SIDR_REQ
	// through all its retransmissions (about 70 s with the kernel's
	// timers), or did not accept in time; librdmacm's UNREACHABLE with
	// ETIMEDOUT.
	ErrTimeout = errors.New("peer did not answer")
	// ErrNoRoute: the kernel's routing has no route from the device's
	// address to the peer's (ENETUNREACH, EHOSTUNREACH).
	ErrNoRoute = errors.New("no route to the address")
	// ErrNoDevice: no goroce device in this process has the (source)
	// address (ENODEV).
	ErrNoDevice = errors.New("no goroce device for the address")
	// ErrAddrInUse: the port is bound already (EADDRINUSE,
	// EADDRNOTAVAIL).
	ErrAddrInUse = errors.New("address in use")
	// ErrDisconnected: the peer disconnected (its DREQ).
	ErrDisconnected = errors.New("disconnected by peer")
	// ErrDeviceRemoved: the device under the ID was closed
	// (DEVICE_REMOVAL).
	ErrDeviceRemoved = errors.New("device closed")
	// ErrConnect: the local side could not set up its QP with what the
	// peer announced (CONNECT_ERROR); the peer was sent a REJ.
	ErrConnect = errors.New("connection setup failed")
	// ErrClosed: the ID, listener or event channel is closed.
	ErrClosed = errors.New("closed")
)

// RejectReason is the reason of a REJ (IBA vol. 1 table 112, the
// kernel's enum ib_cm_rej_reason): what librdmacm reports as the status
// of a REJECTED event.
type RejectReason uint16

// The reject reasons a connection meets in practice; the others keep
// their IBA numbers.
const (
	RejectNoQP                 RejectReason = 1
	RejectNoResources          RejectReason = 3
	RejectTimeout              RejectReason = 4  // the peer gave up waiting for us
	RejectUnsupported          RejectReason = 5  //
	RejectInvalidServiceID     RejectReason = 8  // no listener on the port
	RejectInvalidTransportType RejectReason = 9  //
	RejectStaleConnection      RejectReason = 10 // the QPN or comm ID is of a connection the peer still knows
	RejectInvalidGID           RejectReason = 12 //
	RejectInvalidMTU           RejectReason = 26 //
	RejectConsumer             RejectReason = 28 // the application refused (rdma_reject); its private data says why
	RejectVendorOption         RejectReason = 35 // rdma_reject_ece
)

func (r RejectReason) String() string { return mad.RejectReason(r).String() }

// SIDRStatus is the status of a SIDR_REP: why a UD service was refused
// (librdmacm's status of an UNREACHABLE event after rdma_connect on a UD
// ID).
type SIDRStatus uint8

// SIDR statuses (IBA vol. 1 table 120).
const (
	SIDRSuccess     SIDRStatus = 0
	SIDRUnsupported SIDRStatus = 1 // no listener on the port
	SIDRReject      SIDRStatus = 2 // the application refused
	SIDRNoQP        SIDRStatus = 3
)

func (s SIDRStatus) String() string { return mad.SIDRStatus(s).String() }

// RejectError is the error of a connection or UD resolution the peer
// refused. It matches ErrRejected and, for a port nobody listens on,
// ErrNoListener.
type RejectError struct {
	// Reason is the REJ's reason; zero for a refused SIDR request.
	Reason RejectReason
	// SIDR is set for a UD service request, with its status.
	SIDR       bool
	SIDRStatus SIDRStatus
	// PrivateData is the peer's explanation (rdma_reject's data): 148
	// bytes for a REJ, 136 for a SIDR_REP, zero-padded (the wire has no
	// length).
	PrivateData []byte
	// ARI is a REJ's additional rejection information.
	ARI []byte
}

func (e *RejectError) Error() string {
	if e.SIDR {
		return "UD service refused: " + e.SIDRStatus.String()
	}
	return "rejected: " + e.Reason.String() + " (reason " + strconv.Itoa(int(e.Reason)) + ")"
}

// Unwrap returns ErrRejected, and ErrNoListener when nothing listened.
func (e *RejectError) Unwrap() []error {
	if (!e.SIDR && e.Reason == RejectInvalidServiceID) || (e.SIDR && e.SIDRStatus == SIDRUnsupported) {
		return []error{ErrRejected, ErrNoListener}
	}
	return []error{ErrRejected}
}

// errnoError is a failure reported as an errno status (librdmacm's
// negative status values), with the sentinel it falls under.
type errnoError struct {
	errno    syscall.Errno
	sentinel error
	msg      string
}

func (e *errnoError) Error() string { return e.msg }

// Unwrap returns the sentinel and the errno, so that errors.Is matches
// either (syscall.ETIMEDOUT, ErrTimeout).
func (e *errnoError) Unwrap() []error {
	if e.sentinel == nil {
		return []error{e.errno}
	}
	return []error{e.sentinel, e.errno}
}

func errnoErr(errno syscall.Errno, sentinel error, format string, args ...any) error {
	return &errnoError{errno: errno, sentinel: sentinel, msg: fmt.Sprintf(format, args...)}
}

// status returns the librdmacm status of err: a negative errno, the
// REJ's reason for a rejection, the SIDR status for a refused UD service,
// 0 for none.
func status(err error) int {
	if err == nil {
		return 0
	}
	var rej *RejectError
	if errors.As(err, &rej) {
		if rej.SIDR {
			return int(rej.SIDRStatus)
		}
		return int(rej.Reason)
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return -int(en)
	}
	return -int(syscall.EINVAL)
}
