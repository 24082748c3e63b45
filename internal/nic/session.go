//go:build linux

package nic

import (
	"net"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nicproto"
)

// session is one client connection: one open device context of one process,
// and every object created through it. Its requests are handled one at a
// time on its own goroutine; the CQ movers and QP pumps it starts read its
// tables under mu.
type session struct {
	srv  *Server
	conn *msgConn
	dev  *device

	asyncW       int // write end of the async event pipe, -1 before OPEN
	asyncDropped atomic.Uint64

	mu    sync.RWMutex
	next  uint32
	pds   map[uint32]*pdObj
	mrs   map[uint32]*mrObj
	chans map[uint32]*chanObj
	cqs   map[uint32]*cqObj
	srqs  map[uint32]*srqObj
	qps   map[uint32]*qpObj
	ahs   map[uint32]*ahObj
	mws   map[uint32]*mwObj
	cm    *cmState // the connection manager's objects (cm.go), nil until used

	// byNum maps QP numbers to the session's QPs for the CQ sinks, which
	// look them up on the device's goroutines without taking mu: a
	// copy-on-write map, replaced under mu (QPs come and go rarely).
	byNum atomic.Pointer[map[uint32]*qpObj]
}

func newSession(srv *Server, c *net.UnixConn) *session {
	return &session{
		srv: srv, conn: newMsgConn(c), asyncW: -1,
		pds: map[uint32]*pdObj{}, mrs: map[uint32]*mrObj{}, chans: map[uint32]*chanObj{},
		cqs: map[uint32]*cqObj{}, srqs: map[uint32]*srqObj{}, qps: map[uint32]*qpObj{},
		ahs: map[uint32]*ahObj{}, mws: map[uint32]*mwObj{},
	}
}

// qpByNum returns the session's QP numbered n, or nil. Lock-free.
func (s *session) qpByNum(n uint32) *qpObj {
	if m := s.byNum.Load(); m != nil {
		return (*m)[n]
	}
	return nil
}

// setQPNumLocked maps n to q (nil: removes it). The caller holds mu.
func (s *session) setQPNumLocked(n uint32, q *qpObj) {
	m := map[uint32]*qpObj{}
	if old := s.byNum.Load(); old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	if q == nil {
		delete(m, n)
	} else {
		m[n] = q
	}
	s.byNum.Store(&m)
}

// reply is a handler's answer: the structures of the response body, the
// descriptors to send with it, and descriptors to close once sent.
type reply struct {
	body       []any
	fds        []int
	closeAfter []int
}

func (s *session) serve() {
	defer s.teardown()
	for {
		msg, fds, err := s.conn.read()
		if err != nil {
			return
		}
		h, err := nicproto.ParseHeader(msg)
		if err != nil || int(h.NFDs) != len(fds) {
			s.srv.cfg.Logf("session: bad message (%v, %d fds): closing", err, len(fds))
			closeFDs(fds)
			return
		}
		r, herr := s.handle(h.Op, msg[nicproto.HeaderSize:], fds)
		closeFDs(fds)
		m := nicproto.NewMessage(h.Op, errno(herr))
		var out []int
		if herr == nil {
			m.Append(r.body...)
			out = r.fds
		}
		werr := s.conn.write(m.Bytes(len(out)), out...)
		closeFDs(r.closeAfter)
		if werr != nil {
			return
		}
	}
}

type handler func(s *session, body []byte, fds []int) (reply, error)

var handlers = [...]handler{
	nicproto.OpHello:          (*session).hello,
	nicproto.OpList:           (*session).list,
	nicproto.OpEnsure:         (*session).ensureDevice,
	nicproto.OpOpen:           (*session).open,
	nicproto.OpAllocPD:        (*session).allocPD,
	nicproto.OpDeallocPD:      (*session).deallocPD,
	nicproto.OpRegMR:          (*session).regMR,
	nicproto.OpReregMR:        (*session).reregMR,
	nicproto.OpDeregMR:        (*session).deregMR,
	nicproto.OpCreateChannel:  (*session).createChannel,
	nicproto.OpDestroyChannel: (*session).destroyChannel,
	nicproto.OpCreateCQ:       (*session).createCQ,
	nicproto.OpResizeCQ:       (*session).resizeCQ,
	nicproto.OpDestroyCQ:      (*session).destroyCQ,
	nicproto.OpCreateSRQ:      (*session).createSRQ,
	nicproto.OpModifySRQ:      (*session).modifySRQ,
	nicproto.OpQuerySRQ:       (*session).querySRQ,
	nicproto.OpDestroySRQ:     (*session).destroySRQ,
	nicproto.OpCreateQP:       (*session).createQP,
	nicproto.OpModifyQP:       (*session).modifyQP,
	nicproto.OpQueryQP:        (*session).queryQP,
	nicproto.OpDestroyQP:      (*session).destroyQP,
	nicproto.OpCreateAH:       (*session).createAH,
	nicproto.OpDestroyAH:      (*session).destroyAH,
	nicproto.OpAllocMW:        (*session).allocMW,
	nicproto.OpDeallocMW:      (*session).deallocMW,

	nicproto.OpCMCreateChannel:  (*session).cmCreateChannel,
	nicproto.OpCMDestroyChannel: (*session).cmDestroyChannel,
	nicproto.OpCMCreateID:       (*session).cmCreateID,
	nicproto.OpCMDestroyID:      (*session).cmDestroyID,
	nicproto.OpCMBindAddr:       (*session).cmBindAddr,
	nicproto.OpCMResolveAddr:    (*session).cmResolveAddr,
	nicproto.OpCMResolveRoute:   (*session).cmResolveRoute,
	nicproto.OpCMListen:         (*session).cmListen,
	nicproto.OpCMConnect:        (*session).cmConnect,
	nicproto.OpCMAccept:         (*session).cmAccept,
	nicproto.OpCMReject:         (*session).cmReject,
	nicproto.OpCMDisconnect:     (*session).cmDisconnect,
	nicproto.OpCMEstablish:      (*session).cmEstablish,
	nicproto.OpCMInitQPAttr:     (*session).cmInitQPAttr,
	nicproto.OpCMSetOption:      (*session).cmSetOption,
	nicproto.OpCMMigrate:        (*session).cmMigrate,
	nicproto.OpCMQuery:          (*session).cmQuery,
}

// handle runs op. Before OPEN only the device-independent operations are
// allowed; the received descriptors are closed by the caller afterwards.
func (s *session) handle(op nicproto.Op, body []byte, fds []int) (reply, error) {
	switch op {
	case nicproto.OpHello, nicproto.OpList, nicproto.OpEnsure:
	case nicproto.OpOpen:
		if s.cm != nil {
			return reply{}, errInval // a CM session stays one
		}
		if s.dev != nil {
			return reply{}, errInval
		}
	default:
		if op >= nicproto.OpCMCreateChannel {
			if s.dev != nil {
				return reply{}, errInval // the CM has sessions of its own
			}
			break
		}
		if s.dev == nil {
			return reply{}, errNoDev
		}
	}
	if int(op) >= len(handlers) || handlers[op] == nil {
		return reply{}, errNotSup
	}
	return handlers[op](s, body, fds)
}

// newHandle returns a handle never used before in this session (so a stale
// handle in a ring or an event never names a newer object).
func (s *session) newHandle() uint32 {
	s.next++
	return s.next
}

func (s *session) hello(body []byte, _ []int) (reply, error) {
	var req nicproto.HelloReq
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	if req.Version != nicproto.Version {
		return reply{}, unix.EPROTO
	}
	return reply{body: []any{nicproto.HelloResp{Version: nicproto.Version, PageSize: uint32(os.Getpagesize())}}}, nil
}

// postAsync writes an async event record for the client; a client that
// does not read them loses the newest, counted.
func (s *session) postAsync(ev nicproto.AsyncEvent) {
	b := nicproto.NewMessage(0, 0).Append(ev).Bytes(0)[nicproto.HeaderSize:]
	s.mu.RLock()
	w := s.asyncW
	s.mu.RUnlock()
	if w < 0 {
		return
	}
	if n, err := unix.Write(w, b); err != nil || n != len(b) {
		s.asyncDropped.Add(1)
	}
}

// teardown destroys what the client left, dependents first, as
// ibv_close_device on a dying process would.
func (s *session) teardown() {
	s.conn.c.Close()
	s.cmTeardown()
	s.mu.RLock()
	qps := mapValues(s.qps)
	s.mu.RUnlock()
	for _, q := range qps {
		s.dropQP(q)
	}
	for _, q := range mapValues(s.srqs) {
		s.dropSRQ(q)
	}
	for _, a := range mapValues(s.ahs) {
		a.ah.Destroy()
	}
	for _, w := range mapValues(s.mws) {
		w.mw.Dealloc()
	}
	for _, m := range mapValues(s.mrs) {
		m.release()
	}
	for _, c := range mapValues(s.cqs) {
		s.dropCQ(c)
	}
	for _, c := range mapValues(s.chans) {
		c.close()
	}
	for _, p := range mapValues(s.pds) {
		p.pd.Dealloc()
	}
	s.mu.Lock()
	if s.asyncW >= 0 {
		unix.Close(s.asyncW)
		s.asyncW = -1
	}
	s.mu.Unlock()
}

func mapValues[K comparable, V any](m map[K]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
