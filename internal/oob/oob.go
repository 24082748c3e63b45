package oob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"
)

// DefaultPort is the TCP port perftest (DEF_PORT) and the pingpong examples
// listen on unless told otherwise.
const DefaultPort = 18515

// Role says which side of the TCP connection a program is: the client
// connects, writes each block first and reads the answer; the server
// accepts, reads first and answers.
type Role uint8

// The two roles. The zero Role is invalid, so that forgetting to set one is
// an error rather than a silent choice.
const (
	Client Role = iota + 1
	Server
)

// String returns "client" or "server".
func (r Role) String() string {
	switch r {
	case Client:
		return "client"
	case Server:
		return "server"
	}
	return "Role(" + strconv.Itoa(int(r)) + ")"
}

// Sentinel errors; the errors the package returns wrap them (match with
// errors.Is).
var (
	// ErrMalformed: the peer sent bytes that are not what the protocol
	// allows at that point (wrong length field, bad hex, missing NUL, an
	// implausible value).
	ErrMalformed = errors.New("malformed message")
	// ErrIncompatibleVersion: the perftest peer announced a version older
	// than 5.70, which perftest itself refuses (check_version_compatibility).
	ErrIncompatibleVersion = errors.New("incompatible perftest version")
)

// errBadRole is returned for a Role that is neither Client nor Server.
var errBadRole = errors.New("oob: role must be Client or Server")

// longAgo is a deadline in the past, used to interrupt blocked I/O when a
// context is cancelled.
var longAgo = time.Unix(1, 0)

// withContext runs fn with nc's deadline set from ctx, and interrupts fn's
// blocked reads and writes if ctx is cancelled. An error caused by the
// context is reported as the context's error (wrapped together with the I/O
// error), so that callers can match context.DeadlineExceeded or
// context.Canceled.
func withContext(ctx context.Context, nc net.Conn, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	deadline, hasDeadline := ctx.Deadline()
	if err := nc.SetDeadline(deadline); err != nil { // zero: no deadline
		return fmt.Errorf("set deadline: %w", err)
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = nc.SetDeadline(longAgo)
		close(fired)
	})
	err := fn()
	if !stop() {
		// The context ended while fn ran. Wait for the forced deadline to
		// be in place, so that it cannot land on a later exchange, and
		// report an error from fn as the context's doing.
		<-fired
		if err != nil {
			return fmt.Errorf("%w (%w)", context.Cause(ctx), err)
		}
		return nil
	}
	if err != nil && hasDeadline && errors.Is(err, os.ErrDeadlineExceeded) {
		// The connection's deadline fired a hair before the context's timer.
		return fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
	}
	return err
}

// readBlock fills b from r, naming what in errors. A peer that closes
// before sending anything gives io.EOF, one that stops part way
// io.ErrUnexpectedEOF, each with the byte counts.
func readBlock(r io.Reader, b []byte, what string) error {
	n, err := io.ReadFull(r, b)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF):
		return fmt.Errorf("read %s: peer closed the connection: %w", what, io.EOF)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("read %s: peer closed the connection after %d of %d bytes: %w", what, n, len(b), io.ErrUnexpectedEOF)
	case n > 0:
		return fmt.Errorf("read %s: after %d of %d bytes: %w", what, n, len(b), err)
	}
	return fmt.Errorf("read %s: %w", what, err)
}

// writeBlock writes b in one Write call. The C programs read each block with
// a single read(2) and fail on a short count, so a block must not be split
// into several writes (TCP_NODELAY, Go's default, would send the pieces as
// separate segments).
func writeBlock(w io.Writer, b []byte, what string) error {
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write %s: %w", what, err)
	}
	return nil
}

// quoteBytes renders at most 48 bytes of b as a Go-quoted string, for error
// messages about peer input: one line whatever the bytes are.
func quoteBytes(b []byte) string {
	const max = 48
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "..."
	}
	return strconv.Quote(string(b))
}

const hexDigits = "0123456789abcdef"

// appendHex appends v as exactly width lowercase hex digits, keeping the low
// 4*width bits, as printf's %0<width>x does for a value that fits.
func appendHex(b []byte, v uint64, width int) []byte {
	for shift := 4 * (width - 1); shift >= 0; shift -= 4 {
		b = append(b, hexDigits[(v>>uint(shift))&0xf])
	}
	return b
}

// parseHex parses s, which must be exactly len(s) hex digits of either case
// (at most 16). ok is false for any other byte.
func parseHex(s []byte) (v uint64, ok bool) {
	if len(s) == 0 || len(s) > 16 {
		return 0, false
	}
	for _, c := range s {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(d)
	}
	return v, true
}

// doneMsg is what a pingpong client, and perftest before 6.17, writes last:
// "done" with its NUL terminator (sizeof "done" in C).
var doneMsg = []byte("done\x00")
