package cm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// This file is the TCP side channel: framing messages on a stream and
// making blocking I/O honour contexts.

// bestEffortTimeout bounds writes made without a context: a REJ after a
// failure, the DREQ of Close. Such a message is a courtesy to the peer; if
// it cannot be sent at once, the closing connection tells the peer anyway.
const bestEffortTimeout = 2 * time.Second

// pastDeadline is a deadline in the past: setting it makes blocked I/O
// return at once.
var pastDeadline = time.Unix(1, 0)

// readMessage reads one message from r.
func readMessage(r io.Reader) (message, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return message{}, err
	}
	typ, n, err := parseHeader(h[:])
	if err != nil {
		return message{}, err
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return message{}, err
	}
	return decodeBody(typ, body)
}

// writeMessage writes m to w in one Write.
func writeMessage(w io.Writer, m *message) error {
	b, err := m.encode()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// sendBestEffort writes m within bestEffortTimeout, ignoring failure.
func sendBestEffort(c net.Conn, m *message) {
	_ = c.SetWriteDeadline(time.Now().Add(bestEffortTimeout))
	_ = writeMessage(c, m)
}

// ioError describes a failed read or write on the side channel. When ctx
// is done the failure is its doing (see watch), and the context's error is
// what the caller must see.
func ioError(ctx context.Context, what string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%s: %w", what, cerr)
	}
	switch {
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%s: peer closed the connection: %w", what, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%s: peer closed the connection inside a message: %w", what, err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%s: peer is silent: %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// watch makes blocking I/O on a connection fail once a context is done, by
// moving the connection's deadline into the past. The deadline is not set
// from ctx.Deadline: a timer that fires a little before the context's own
// would fail I/O while ctx.Err is still nil, and the caller could not
// report the context's error.
type watch struct {
	c    net.Conn
	stop func() bool

	mu    sync.Mutex
	ended bool
}

// watchContext starts watching ctx for c.
func watchContext(ctx context.Context, c net.Conn) *watch {
	w := &watch{c: c}
	w.stop = context.AfterFunc(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.ended {
			_ = w.c.SetDeadline(pastDeadline)
		}
	})
	return w
}

// end stops the watch and clears the deadline. After it returns, ctx no
// longer affects the connection, even if it ends at that very moment.
func (w *watch) end() {
	w.stop()
	w.mu.Lock()
	w.ended = true
	w.mu.Unlock()
	_ = w.c.SetDeadline(time.Time{})
}

// timeoutREJ is the REJ sent when this side's context ends during an
// exchange.
func timeoutREJ(ctx context.Context, side string) *message {
	return &message{typ: msgREJ, reason: RejectTimeout, info: side + " side: " + ctx.Err().Error()}
}

// versionREJ answers a message of another protocol version. It is encoded
// in this side's version, which a peer of any version can read, since the
// header layout never changes.
func versionREJ() *message {
	return &message{typ: msgREJ, reason: RejectVersion, info: fmt.Sprintf("this side speaks version %d", protocolVersion)}
}

// noResourcesREJ reports a failure to set up this side's QP.
func noResourcesREJ(side string, err error) *message {
	r := rejection{RejectNoResources, side + " side: " + err.Error()}
	m := r.message()
	return &m
}
