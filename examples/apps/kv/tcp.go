package kv

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
)

// TCPServer serves a Table over a byte stream (TCP, or any net.Listener):
// its goroutine per connection answers GETs and PUTs alike.
type TCPServer struct {
	t        *Table
	get, put atomic.Uint64
	bad      atomic.Uint64
	wg       sync.WaitGroup
}

// NewTCPServer serves t.
func NewTCPServer(t *Table) *TCPServer { return &TCPServer{t: t} }

// Gets, Puts and BadRequests count the requests the server's goroutines
// answered, and the connections they ended on a malformed request.
func (s *TCPServer) Gets() uint64        { return s.get.Load() }
func (s *TCPServer) Puts() uint64        { return s.put.Load() }
func (s *TCPServer) BadRequests() uint64 { return s.bad.Load() }

// Serve accepts connections from l until it is closed, and returns the
// error that ended accepting once their goroutines have ended (close the
// connections' peers, or l's, to end them).
func (s *TCPServer) Serve(l net.Listener) error {
	defer s.wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			if err := s.serveConn(c); errors.Is(err, errBadMessage) {
				s.bad.Add(1)
			}
		}()
	}
}

// maxDiscard is the largest value a TCP server reads past to refuse it;
// a larger one ends the connection.
const maxDiscard = 1 << 20

func (s *TCPServer) serveConn(c net.Conn) error {
	r := bufio.NewReader(c)
	w := bufio.NewWriter(c)
	var h [headerLen]byte
	msg := make([]byte, KeyMax+s.t.ValueMax)
	var val []byte
	for {
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return err
		}
		op, klen, vlen, err := parseHeader(h[:], maxDiscard)
		if err != nil {
			return err
		}
		if vlen > s.t.ValueMax { // refused, but the stream stays in step
			if _, err := r.Discard(klen + vlen); err != nil {
				return err
			}
			if _, err := w.Write([]byte{statusTooLarge, 0, 0, 0, 0}); err != nil {
				return err
			}
			if err := w.Flush(); err != nil {
				return err
			}
			continue
		}
		m := msg[:klen+vlen]
		if _, err := io.ReadFull(r, m); err != nil {
			return err
		}
		key := m[:klen]
		if op == opPut {
			err = s.t.Put(key, m[klen:])
			s.put.Add(1)
			val = val[:0]
		} else {
			val, err = s.t.Get(key, val)
			s.get.Add(1)
		}
		var rh [replyLen]byte
		rh[0] = statusOf(err)
		if err == nil {
			binary.BigEndian.PutUint32(rh[1:], uint32(len(val)))
		}
		w.Write(rh[:])
		if err == nil {
			w.Write(val)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
}

// TCPClient is one connection to a TCPServer. One goroutine at a time.
type TCPClient struct {
	c   net.Conn
	r   *bufio.Reader
	buf []byte
}

// NewTCPClient talks to the server at the other end of c.
func NewTCPClient(c net.Conn) *TCPClient {
	return &TCPClient{c: c, r: bufio.NewReader(c)}
}

func (c *TCPClient) call(ctx context.Context, op byte, key, value, dst []byte) ([]byte, error) {
	if len(key) == 0 || len(key) > KeyMax {
		return dst, ErrTooLarge
	}
	if d, ok := ctx.Deadline(); ok {
		_ = c.c.SetDeadline(d)
	}
	c.buf = appendRequest(c.buf[:0], op, key, value)
	if _, err := c.c.Write(c.buf); err != nil {
		return dst, err
	}
	var rh [replyLen]byte
	if _, err := io.ReadFull(c.r, rh[:]); err != nil {
		return dst, err
	}
	if err := errOf(rh[0]); err != nil {
		return dst, err
	}
	n := int(binary.BigEndian.Uint32(rh[1:]))
	if op == opPut && n != 0 || n > 1<<20 {
		return dst, errBadMessage
	}
	dst = slices.Grow(dst[:0], n)[:n]
	_, err := io.ReadFull(c.r, dst)
	return dst, err
}

// Get appends the value stored under key to dst[:0].
func (c *TCPClient) Get(ctx context.Context, key, dst []byte) ([]byte, error) {
	return c.call(ctx, opGet, key, nil, dst)
}

// Put stores value under key.
func (c *TCPClient) Put(ctx context.Context, key, value []byte) error {
	_, err := c.call(ctx, opPut, key, value, nil)
	return err
}

// Close closes the connection.
func (c *TCPClient) Close() error { return c.c.Close() }
