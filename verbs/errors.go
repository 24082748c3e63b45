package verbs

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by this package is an *Error that
// wraps exactly one of them, so callers branch with errors.Is and print the
// *Error for the details (verb, field, reason). The comments give the errno a
// libibverbs provider returns in the same situation.
var (
	// ErrInvalidArgument reports a bad argument or a bad combination of
	// arguments (EINVAL).
	ErrInvalidArgument = errors.New("invalid argument")

	// ErrInvalidState reports a verb that the object's current state does
	// not allow, such as an illegal QP state transition or posting to a QP
	// in RESET. libibverbs providers return EINVAL here; the separate
	// sentinel lets Go callers tell a state problem from a bad argument.
	ErrInvalidState = errors.New("invalid state")

	// ErrNoMemory reports a full queue (ENOMEM): a send queue, receive
	// queue or shared receive queue with no free work queue entry.
	ErrNoMemory = errors.New("cannot allocate memory")

	// ErrResourceLimit reports that a device limit (max_qp, max_mr, ...) is
	// reached. It wraps ErrNoMemory, the errno providers use for it, so
	// errors.Is(err, ErrNoMemory) also holds.
	ErrResourceLimit = fmt.Errorf("resource limit reached: %w", ErrNoMemory)

	// ErrBusy reports an object still in use (EBUSY): a PD with live MRs or
	// QPs, a CQ attached to QPs, an MR with bound memory windows.
	ErrBusy = errors.New("resource busy")

	// ErrNotSupported reports a valid request that this device does not
	// implement (EOPNOTSUPP), such as on-demand paging or RAW_PACKET QPs.
	// rdma-core's tests skip on it instead of failing.
	ErrNotSupported = errors.New("operation not supported")

	// ErrClosed reports use of an object that was already destroyed,
	// deallocated or deregistered, or of a closed device.
	ErrClosed = errors.New("object already destroyed")
)

// Error is the error type of this package: the verb that failed, the
// attribute or argument at fault, a human-readable reason, and the sentinel it
// wraps. Field uses the rdma-core (libibverbs) name of the attribute, such as
// "access", "max_send_wr" or "qp_state", so a message maps directly onto the
// man pages.
type Error struct {
	Op     string // the verb, e.g. "RegMR", "ModifyQP"
	Field  string // the offending argument or attribute, if any
	Reason string // what is wrong with it, if more than the sentinel says
	Err    error  // one of the sentinel errors above
}

// Error formats the error as "verbs: Op: Field: Reason: sentinel", leaving out
// empty parts.
func (e *Error) Error() string {
	s := "verbs: " + e.Op
	if e.Field != "" {
		s += ": " + e.Field
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the sentinel error.
func (e *Error) Unwrap() error { return e.Err }

// newError builds an *Error; reason may be empty.
func newError(op, field string, sentinel error, reason string) *Error {
	return &Error{Op: op, Field: field, Reason: reason, Err: sentinel}
}

// errorf builds an *Error with a formatted reason.
func errorf(op, field string, sentinel error, format string, args ...any) *Error {
	return &Error{Op: op, Field: field, Reason: fmt.Sprintf(format, args...), Err: sentinel}
}

// closedError reports use of a destroyed object.
func closedError(op, what string) *Error {
	return newError(op, what, ErrClosed, "")
}
