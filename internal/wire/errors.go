package wire

import "errors"

// Sentinel errors of the parser. Parse and PayloadRule.Check return a
// *ParseError that wraps one of them; match with errors.Is.
var (
	// ErrTruncated: the packet ends before a header or the ICRC it must
	// contain.
	ErrTruncated = errors.New("truncated packet")
	// ErrUnknownOpcode: the BTH opcode is not one this package knows.
	ErrUnknownOpcode = errors.New("unknown opcode")
	// ErrBadTVer: the BTH transport header version is not 0.
	ErrBadTVer = errors.New("unsupported transport header version")
	// ErrPadCount: the pad count is inconsistent with the payload.
	ErrPadCount = errors.New("bad pad count")
	// ErrPayloadLength: the payload length is not allowed for the opcode,
	// whatever the MTU.
	ErrPayloadLength = errors.New("bad payload length")
	// ErrMTU: the payload length breaks the path MTU rule of the opcode.
	ErrMTU = errors.New("payload length does not fit the path MTU")
	// ErrIPHeader: a malformed IP or UDP header (SplitIPUDP).
	ErrIPHeader = errors.New("malformed IP/UDP header")
	// ErrNotUDP: an IP packet that does not carry a UDP datagram directly
	// (SplitIPUDP), or an IPv4 fragment.
	ErrNotUDP = errors.New("not an unfragmented UDP datagram")
)

// ParseError says which part of a packet failed which check. Err is one of
// the sentinel errors above.
//
// The parser only returns ParseErrors that are package-level values, one per
// check, so that rejecting a malformed packet costs no allocation: a flood of
// garbage must not turn into garbage-collector work. They therefore carry no
// per-packet data such as offsets; the field names the header or rule, and
// the offset follows from the opcode (OpInfo).
type ParseError struct {
	Field  string // the header or part of the packet: "BTH", "RETH", "payload", "pad", "ICRC"...
	Reason string // what is wrong with it
	Err    error  // the sentinel error, for errors.Is
}

func (e *ParseError) Error() string { return "wire: " + e.Field + ": " + e.Reason }

// Unwrap returns the sentinel error.
func (e *ParseError) Unwrap() error { return e.Err }

// The errors the parser returns.
var (
	errTruncatedBTH  = &ParseError{"BTH", "packet shorter than the BTH", ErrTruncated}
	errTruncatedICRC = &ParseError{"ICRC", "packet too short for the headers and the ICRC", ErrTruncated}
	errUnknownOpcode = &ParseError{"BTH", "unknown opcode", ErrUnknownOpcode}
	errBadTVer       = &ParseError{"BTH", "transport header version is not 0", ErrBadTVer}

	errUnaligned    = &ParseError{"pad", "payload plus pad is not a multiple of 4 bytes", ErrPadCount}
	errPadNoPayload = &ParseError{"pad", "pad count without payload", ErrPadCount}
	errPadNotLast   = &ParseError{"pad", "pad on a FIRST or MIDDLE packet", ErrPadCount}

	errUnexpectedPayload = &ParseError{"payload", "opcode carries no payload", ErrPayloadLength}
	errEmptyFirstMiddle  = &ParseError{"payload", "empty FIRST or MIDDLE packet", ErrPayloadLength}
	errEmptyLast         = &ParseError{"payload", "empty LAST packet", ErrPayloadLength}
	errAtomicWriteLen    = &ParseError{"payload", "ATOMIC_WRITE payload is not 8 bytes", ErrPayloadLength}
	errCNPLen            = &ParseError{"payload", "CNP does not have 16 reserved bytes", ErrPayloadLength}
	errSACKLen           = &ParseError{"payload", "SACK bitmap is not 1 to 32 whole words", ErrPayloadLength}

	errPayloadAboveMTU = &ParseError{"payload", "payload longer than the MTU", ErrMTU}
	errPayloadNotMTU   = &ParseError{"payload", "FIRST or MIDDLE payload differs from the MTU", ErrMTU}
)

// errTruncatedHdr holds the truncation error of each extension header, indexed
// by bit number.
var errTruncatedHdr = func() (e [hdrCount]*ParseError) {
	for i := range e {
		e[i] = &ParseError{hdrInfo[i].name, "packet ends inside the header", ErrTruncated}
	}
	return e
}()
