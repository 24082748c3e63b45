package cm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/verbs"
)

// DefaultHandshakeTimeout is how long a Listener waits for a connecting
// peer's REQ unless ListenConfig says otherwise.
const DefaultHandshakeTimeout = 10 * time.Second

// maxPending bounds the connections a Listener holds before Accept takes
// them (reading their REQ, or waiting for Accept). Beyond it the listener
// stops accepting and further peers wait in the kernel's backlog.
const maxPending = 64

// ListenConfig holds a Listener's options. The zero value is valid.
type ListenConfig struct {
	// HandshakeTimeout bounds the time a connecting peer has to send its
	// REQ. Zero selects DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
}

// Listen announces on the TCP address (host:port; port 0 picks one, see
// Addr) with the default configuration.
func Listen(address string) (*Listener, error) {
	return ListenConfig{}.Listen(context.Background(), address)
}

// Listen announces on the TCP address. ctx bounds setting up the socket
// only, as in net.ListenConfig.
func (lc ListenConfig) Listen(ctx context.Context, address string) (*Listener, error) {
	var nlc net.ListenConfig
	ln, err := nlc.Listen(ctx, "tcp", address)
	if err != nil {
		return nil, fmt.Errorf("cm: listen: %w", err)
	}
	l := &Listener{
		ln:               ln,
		handshakeTimeout: lc.HandshakeTimeout,
		results:          make(chan acceptResult),
		sem:              make(chan struct{}, maxPending),
	}
	if l.handshakeTimeout <= 0 {
		l.handshakeTimeout = DefaultHandshakeTimeout
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.serve()
	return l, nil
}

// Listener is the passive side (rdma_listen): it accepts TCP connections
// and reads their REQs in the background, so that a slow or silent peer
// never holds up another, and hands each valid request to Accept.
type Listener struct {
	ln               net.Listener
	handshakeTimeout time.Duration

	results chan acceptResult
	sem     chan struct{} // one token per pending connection

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // serve and handshake goroutines

	closeOnce sync.Once
}

// acceptResult is a request, or the error of a peer that failed to send
// a valid one.
type acceptResult struct {
	req *Request
	err error
}

// Addr returns the listener's TCP address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Accept waits for the next connection request (RDMA_CM_EVENT_CONNECT_REQUEST)
// and returns it; the caller must answer it with Request.Accept or
// Request.Reject.
//
// Accept also returns the errors of peers that failed before their request
// was complete: garbage on the wire (ErrProtocol), another protocol
// version (ErrVersion), a REQ the passive side cannot accept whatever its
// QP (ErrMismatch), silence beyond the handshake timeout. Where it makes
// sense the peer was answered with a REJ. Such an error concerns that one
// peer: the listener stays usable and Accept can be called again. Accept
// returns an error wrapping ctx.Err() when ctx ends, and one wrapping
// net.ErrClosed once the listener is closed.
func (l *Listener) Accept(ctx context.Context) (*Request, error) {
	if l.ctx.Err() != nil {
		return nil, fmt.Errorf("cm: accept: %w", net.ErrClosed)
	}
	select {
	case r := <-l.results:
		return r.req, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("cm: accept: %w", ctx.Err())
	case <-l.ctx.Done():
		return nil, fmt.Errorf("cm: accept: %w", net.ErrClosed)
	}
}

// Close stops listening, drops the connections whose requests Accept has
// not returned yet, and waits for the listener's goroutines to end.
// Requests already returned by Accept and established connections are not
// affected.
func (l *Listener) Close() error {
	err := fmt.Errorf("cm: close listener: %w", net.ErrClosed)
	l.closeOnce.Do(func() {
		l.cancel()
		err = l.ln.Close()
		if err != nil {
			err = fmt.Errorf("cm: close listener: %w", err)
		}
		l.wg.Wait()
	})
	return err
}

// serve accepts TCP connections and starts a handshake for each.
func (l *Listener) serve() {
	defer l.wg.Done()
	var backoff time.Duration
	for {
		select {
		case l.sem <- struct{}{}:
		case <-l.ctx.Done():
			return
		}
		nc, err := l.ln.Accept()
		if err != nil {
			<-l.sem
			if l.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: retry later, as
			// net/http does, rather than give up on the listener.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-l.ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		l.wg.Add(1)
		go l.handshake(nc)
	}
}

// handshake reads a peer's REQ and hands the request, or the peer's error,
// to Accept.
func (l *Listener) handshake(nc net.Conn) {
	defer l.wg.Done()
	defer func() { <-l.sem }()
	req, err := l.readREQ(nc)
	if err != nil {
		_ = nc.Close()
		if l.ctx.Err() == nil {
			l.deliver(acceptResult{err: fmt.Errorf("cm: accept from %v: %w", nc.RemoteAddr(), err)})
		}
		return
	}
	if !l.deliver(acceptResult{req: req}) {
		_ = nc.Close()
	}
}

// deliver passes r to an Accept call, or reports false if the listener
// closes first.
func (l *Listener) deliver(r acceptResult) bool {
	select {
	case l.results <- r:
		return true
	case <-l.ctx.Done():
		return false
	}
}

// readREQ reads and checks the REQ of a new connection within the
// handshake timeout, answering a bad one with a REJ.
func (l *Listener) readREQ(nc net.Conn) (*Request, error) {
	stop := context.AfterFunc(l.ctx, func() { _ = nc.Close() })
	defer stop()
	_ = nc.SetReadDeadline(time.Now().Add(l.handshakeTimeout))
	m, err := readMessage(nc)
	var reply *message
	switch {
	case errors.Is(err, ErrVersion):
		reply = versionREJ()
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = fmt.Errorf("no REQ within %v: %w", l.handshakeTimeout, err)
	case err != nil:
		err = ioError(context.Background(), "reading REQ", err)
	case m.typ != msgREQ:
		r := rejection{RejectUnsupported, fmt.Sprintf("got %v, want REQ", m.typ)}
		rm := r.message()
		reply = &rm
		err = fmt.Errorf("%w: %s", ErrProtocol, r.info)
	default:
		if r := checkProposal(&m); r != nil {
			rm := r.message()
			reply = &rm
			err = fmt.Errorf("rejected REQ: %w", r.err())
		}
	}
	if err != nil {
		if reply != nil {
			sendBestEffort(nc, reply)
		}
		return nil, err
	}
	_ = nc.SetReadDeadline(time.Time{})
	remote := remoteInfo(&m)
	remote.Addr = nc.RemoteAddr()
	return &Request{nc: nc, req: m, remote: remote}, nil
}

// Request is a connection request received by a Listener. Answer it once,
// with Accept or Reject; either releases it.
type Request struct {
	nc       net.Conn
	req      message
	remote   RemoteInfo
	answered atomic.Bool
}

// PrivateData returns the private data of the request. It must not be
// modified.
func (r *Request) PrivateData() []byte { return r.remote.PrivateData }

// Remote returns what the active side announced in its request.
func (r *Request) Remote() RemoteInfo { return r.remote }

// claim marks the request answered, or reports that it already was.
func (r *Request) claim(op string) error {
	if !r.answered.CompareAndSwap(false, true) {
		return fmt.Errorf("cm: %s request from %v: already answered: %w", op, r.remote.Addr, verbs.ErrInvalidState)
	}
	return nil
}

// Accept accepts the request with qp (rdma_accept): it checks the request
// against qp, moves qp (an RC or UC QP in RESET or INIT) through INIT and
// RTR to RTS, replies with a REP carrying p's private data, and returns
// once the active side's RTU arrives, when both QPs are in RTS.
//
// A request that does not fit qp (QP types differ, GIDs of different IP
// families) is rejected, and Accept returns an error wrapping ErrMismatch.
// ctx bounds the wait for the RTU; when it ends the peer is sent a REJ and
// Accept returns an error wrapping ctx.Err(). After any failure the request
// is answered (rejected), and qp, if it reached RTR, is in ERR.
func (r *Request) Accept(ctx context.Context, qp *verbs.QP, p *Params) (*Conn, error) {
	if err := r.claim("accept"); err != nil {
		return nil, err
	}
	if err := r.accept(ctx, qp, p); err != nil {
		_ = r.nc.Close()
		return nil, fmt.Errorf("cm: accept from %v: %w", r.remote.Addr, err)
	}
	// Only now, with ctx no longer watched, may the side channel be read
	// by the Conn.
	return newConn(r.nc, qp, r.remote), nil
}

// accept runs the passive side's part of the exchange, up to the RTU.
func (r *Request) accept(ctx context.Context, qp *verbs.QP, p *Params) (err error) {
	w := watchContext(ctx, r.nc)
	var (
		e     *endpoint
		reply *message // sent to the peer on failure
	)
	defer func() {
		w.end()
		if err == nil {
			return
		}
		if e != nil {
			e.abort()
		}
		if reply == nil && ctx.Err() != nil {
			reply = timeoutREJ(ctx, "passive")
		}
		if reply != nil {
			sendBestEffort(r.nc, reply)
		}
	}()

	if err := ctx.Err(); err != nil {
		return err
	}
	e, err = newEndpoint(qp, p)
	if err != nil {
		reply = noResourcesREJ("passive", err)
		return err
	}
	n, rej := e.negotiate(&r.req, false)
	if rej != nil {
		m := rej.message()
		reply = &m
		return rej.err()
	}
	if err := e.toInit(); err != nil {
		reply = noResourcesREJ("passive", err)
		return err
	}
	if err := e.connect(&r.req, n); err != nil {
		reply = noResourcesREJ("passive", err)
		return err
	}
	rep := e.proposal(msgREP, &n)
	if err := writeMessage(r.nc, &rep); err != nil {
		return ioError(ctx, "sending REP", err)
	}
	m, err := readMessage(r.nc)
	if err != nil {
		if errors.Is(err, ErrVersion) {
			reply = versionREJ()
		}
		return ioError(ctx, "waiting for RTU", err)
	}
	switch m.typ {
	case msgRTU:
		return nil
	case msgREJ:
		return rejected(&m)
	}
	rj := rejection{RejectUnsupported, fmt.Sprintf("got %v, want RTU or REJ", m.typ)}
	rm := rj.message()
	reply = &rm
	return fmt.Errorf("%w: %s", ErrProtocol, rj.info)
}

// Reject rejects the request (rdma_reject): the active side's Dial
// returns a *RejectError with reason RejectConsumer and privateData (at
// most MaxPrivateData bytes).
func (r *Request) Reject(privateData []byte) error {
	if len(privateData) > MaxPrivateData {
		return fmt.Errorf("cm: reject: %d bytes of private data exceed %d: %w", len(privateData), MaxPrivateData, verbs.ErrInvalidArgument)
	}
	if err := r.claim("reject"); err != nil {
		return err
	}
	defer r.nc.Close()
	_ = r.nc.SetWriteDeadline(time.Now().Add(bestEffortTimeout))
	m := message{typ: msgREJ, reason: RejectConsumer, privateData: privateData}
	if err := writeMessage(r.nc, &m); err != nil {
		return fmt.Errorf("cm: reject request from %v: %w", r.remote.Addr, err)
	}
	return nil
}
