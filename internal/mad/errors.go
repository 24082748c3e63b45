package mad

import (
	"errors"
	"fmt"
)

// Sentinel errors of the parsers. They return a *ParseError wrapping one of
// them; match with errors.Is.
var (
	// ErrLength: the MAD is not MADSize (256) bytes long.
	ErrLength = errors.New("MAD is not 256 bytes")
	// ErrBaseVersion: the base version is not 1.
	ErrBaseVersion = errors.New("unsupported MAD base version")
	// ErrNotCM: the management class is not communication management
	// (0x07), or its class version is not 2.
	ErrNotCM = errors.New("not a CM MAD of class version 2")
	// ErrMethod: a CM MAD whose method is not Send, the only method CM
	// messages use (the kernel's CM agent registers for no other).
	ErrMethod = errors.New("CM MAD method is not Send")
	// ErrAttribute: the attribute ID is not the message being parsed, or
	// not a CM message at all.
	ErrAttribute = errors.New("unexpected CM attribute ID")
	// ErrValue: a field holds a value IBA reserves (an MRAed or rejected
	// message of 3, an information length beyond its 72-byte field).
	ErrValue = errors.New("reserved field value")
	// ErrCMAHeader: private data that does not start with a valid rdma_cm
	// header.
	ErrCMAHeader = errors.New("bad rdma_cm header")
)

// ParseError says which check a MAD failed. The parsers only return
// package-level ParseErrors, one per check, so that rejecting a malformed
// MAD allocates nothing: a flood of garbage must not become garbage
// collector work.
type ParseError struct {
	Msg    string // the message or header: "MAD", "REQ", "REJ", ...
	Reason string // what is wrong with it
	Err    error  // the sentinel error, for errors.Is
}

func (e *ParseError) Error() string { return "mad: " + e.Msg + ": " + e.Reason }

// Unwrap returns the sentinel error.
func (e *ParseError) Unwrap() error { return e.Err }

var (
	errLength      = &ParseError{"MAD", "length is not 256 bytes", ErrLength}
	errBaseVersion = &ParseError{"MAD", "base version is not 1", ErrBaseVersion}
	errNotCM       = &ParseError{"MAD", "management class is not CM (0x07)", ErrNotCM}
	errCMVersion   = &ParseError{"MAD", "CM class version is not 2", ErrNotCM}
	errMethod      = &ParseError{"MAD", "CM method is not Send (0x03)", ErrMethod}
	errUnknownAttr = &ParseError{"MAD", "attribute ID is not a CM message", ErrAttribute}

	errMRAed        = &ParseError{"MRA", "message MRAed is 3 (reserved)", ErrValue}
	errRejected     = &ParseError{"REJ", "message rejected is 3 (reserved)", ErrValue}
	errARILength    = &ParseError{"REJ", "rejection info length above 72", ErrValue}
	errSIDRInfoLen  = &ParseError{"SIDR_REP", "additional information length above 72", ErrValue}
	errAPRInfoLen   = &ParseError{"APR", "additional information length above 72", ErrValue}
	errCMAShort     = &ParseError{"CMA header", "private data shorter than 36 bytes", ErrCMAHeader}
	errCMAVersion   = &ParseError{"CMA header", "cma_version is not 0", ErrCMAHeader}
	errCMAIPVersion = &ParseError{"CMA header", "IP version is neither 4 nor 6", ErrCMAHeader}
)

// errWrongAttr holds, per CM attribute, the error of a parser given a MAD
// of another attribute.
var errWrongAttr = func() (e [attrCount]*ParseError) {
	for i := range e {
		e[i] = &ParseError{AttrID(attrFirst + i).String(), "MAD carries another attribute", ErrAttribute}
	}
	return e
}()

// FieldError is returned by the encoders when a value does not fit its
// field: a QPN above 24 bits, private data longer than the message holds.
// It is a programming error of the caller, never caused by network input.
type FieldError struct {
	Msg   AttrID
	Field string
	Value uint64
	Bits  int // width of a numeric field
	Bytes int // size of a byte field (Value is then the length given)
	// Reserved: the value fits but IBA reserves it.
	Reserved bool
}

func (e *FieldError) Error() string {
	if e.Reserved {
		return fmt.Sprintf("mad: %v: %s: %d is reserved", e.Msg, e.Field, e.Value)
	}
	if e.Bytes > 0 {
		return fmt.Sprintf("mad: %v: %s: %d bytes do not fit in %d", e.Msg, e.Field, e.Value, e.Bytes)
	}
	return fmt.Sprintf("mad: %v: %s: %#x does not fit in %d bits", e.Msg, e.Field, e.Value, e.Bits)
}
