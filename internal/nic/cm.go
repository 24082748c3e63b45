//go:build linux

package nic

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/nicproto"
	"github.com/goroce/goroce/verbs"
)

// The connection manager, run by the daemon on behalf of libgoroce.so's
// librdmacm (libgoroce/src/rdmacm.c). The devices are the daemon's, so
// their CM agents (package cm) are too; a client's IDs and event channels
// live in the session that created them and die with it, as the kernel's
// rdma_ucm objects die with their file.
//
// The application's QPs stay its own (libibverbs objects of its device
// contexts): the IDs here have none, so package cm reports
// EventConnectResponse and the library moves the QP with InitQPAttr and
// calls Establish, exactly as librdmacm does over the kernel's rdma_ucm.
//
// Each event channel is a SOCK_SEQPACKET socket pair: the application
// holds one end (rdma_event_channel.fd, pollable), the channel's pump the
// other, onto which it writes each event of the cm.EventChannel as one
// nicproto.CMEvent. The pump acknowledges an event once it has encoded it:
// the library keeps librdmacm's own count of unacknowledged events and
// makes rdma_destroy_id wait for them, and drops the events of IDs it has
// destroyed that were still in the socket.

// cmState is a session's CM objects.
type cmState struct {
	mu    sync.Mutex
	next  uint32
	chans map[uint32]*cmChan
	ids   map[uint32]*cmID
	// closed are the sockets of destroyed channels (see cmDestroyChannel).
	closed []*os.File
}

type cmChan struct {
	handle uint32
	ch     *cm.EventChannel
	w      *os.File
	cancel context.CancelFunc
	done   chan struct{}
}

// cmID is an ID's record, its cm.ID's context.
type cmID struct {
	handle uint32
	id     *cm.ID
}

func (s *session) cmState() *cmState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cm == nil {
		s.cm = &cmState{chans: map[uint32]*cmChan{}, ids: map[uint32]*cmID{}}
	}
	return s.cm
}

func (s *session) cmCreateChannel(body []byte, _ []int) (reply, error) {
	st := s.cmState()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return reply{}, err
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		closeFDs(fds[:])
		return reply{}, err
	}
	ctx, cancel := context.WithCancel(s.srv.ctx)
	c := &cmChan{ch: cm.NewEventChannel(), w: os.NewFile(uintptr(fds[0]), "cm-events"),
		cancel: cancel, done: make(chan struct{})}
	st.mu.Lock()
	st.next++
	c.handle = st.next
	st.chans[c.handle] = c
	st.mu.Unlock()
	go s.cmPump(ctx, c)
	return reply{body: []any{nicproto.CMResp{Info: nicproto.CMIDInfo{ID: c.handle, Device: -1}}},
		fds: []int{fds[1]}, closeAfter: []int{fds[1]}}, nil
}

// cmPump writes the channel's events onto its socket until the channel
// closes. A client that closed its end loses them (they are still taken
// and acknowledged, so that its IDs can be destroyed).
func (s *session) cmPump(ctx context.Context, c *cmChan) {
	defer close(c.done)
	for {
		ev, err := c.ch.GetEvent(ctx)
		if err != nil {
			return
		}
		out := s.cmEvent(ev)
		ev.Ack()
		b := nicproto.NewMessage(0, 0).Append(out).Bytes(0)[nicproto.HeaderSize:]
		if _, err := c.w.Write(b); err != nil && !errors.Is(err, unix.EPIPE) && ctx.Err() == nil {
			s.srv.cfg.Logf("cm: event channel %d: %v", c.handle, err)
		}
	}
}

// cmEvent encodes ev; a connection request's new ID gets its handle here.
func (s *session) cmEvent(ev *cm.Event) nicproto.CMEvent {
	st := s.cm
	out := nicproto.CMEvent{Type: uint32(ev.Type), Status: int32(ev.Status)}
	if ev.Type == cm.EventConnectRequest && ev.Listen != nil {
		if l, ok := ev.Listen.Context().(*cmID); ok {
			out.Listen = l.handle
		}
		rec := &cmID{id: ev.ID}
		st.mu.Lock()
		st.next++
		rec.handle = st.next
		st.ids[rec.handle] = rec
		st.mu.Unlock()
		ev.ID.SetContext(rec)
	}
	if ev.ID != nil {
		out.Info = s.cmInfo(ev.ID)
	}
	p := &out.Param
	if ev.ID != nil && ev.ID.QPType() == verbs.QPTypeUD {
		u := ev.UD
		p.PrivateDataLen = uint32(copy(p.PrivateData[:], u.PrivateData))
		p.QPNum, p.QKey = u.QPNum, u.QKey
		p.AHAttr = toAHAttr(&u.AH)
		return out
	}
	c := ev.Conn
	p.PrivateDataLen = uint32(copy(p.PrivateData[:], c.PrivateData))
	p.ResponderResources, p.InitiatorDepth = c.ResponderResources, c.InitiatorDepth
	p.FlowControl = b2u8(c.FlowControl)
	p.RetryCount, p.RNRRetryCount = c.RetryCount, c.RNRRetryCount
	p.SRQ, p.QPNum = b2u8(c.SRQ), c.QPNum
	return out
}

// cmEmpty answers an operation with nothing to say: every CM response has
// a CMResp body.
var cmEmpty = reply{body: []any{nicproto.CMResp{Info: nicproto.CMIDInfo{Device: -1}}}}

func b2u8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// cmInfo describes id for the library.
func (s *session) cmInfo(id *cm.ID) nicproto.CMIDInfo {
	in := nicproto.CMIDInfo{Device: -1, PS: uint32(id.PortSpace()), QPType: uint32(id.QPType()),
		Src: toCMAddr(id.LocalAddr()), Dst: toCMAddr(id.PeerAddr())}
	if r, ok := id.Context().(*cmID); ok {
		in.ID = r.handle
	}
	if d := id.Device(); d != nil {
		for _, sd := range s.srv.deviceList() {
			if sd.dev == d {
				in.Device = int32(sd.index)
			}
		}
	}
	return in
}

func toCMAddr(a netip.AddrPort) nicproto.CMAddr {
	var o nicproto.CMAddr
	if !a.IsValid() {
		return o
	}
	o.Port = a.Port()
	ip := a.Addr()
	if ip.Is4() || ip.Is4In6() {
		o.Family = unix.AF_INET
		b := ip.Unmap().As4()
		copy(o.Addr[:], b[:])
		return o
	}
	o.Family = unix.AF_INET6
	o.Addr = ip.As16()
	return o
}

func fromCMAddr(a nicproto.CMAddr) (netip.AddrPort, error) {
	switch a.Family {
	case unix.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(a.Addr[:4])), a.Port), nil
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), a.Port), nil
	case 0:
		return netip.AddrPort{}, nil
	}
	return netip.AddrPort{}, unix.EAFNOSUPPORT
}

func fromCMParam(p *nicproto.CMParam) *cm.ConnParam {
	n := min(int(p.PrivateDataLen), len(p.PrivateData))
	return &cm.ConnParam{PrivateData: append([]byte(nil), p.PrivateData[:n]...),
		ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		FlowControl: p.FlowControl != 0, RetryCount: p.RetryCount, RNRRetryCount: p.RNRRetryCount,
		SRQ: p.SRQ != 0, QPNum: p.QPNum}
}

func (s *session) cmDestroyChannel(body []byte, _ []int) (reply, error) {
	var req nicproto.CMReq
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	st := s.cmState()
	c := st.channel(req.ID)
	if c == nil {
		return reply{}, errInval
	}
	if err := c.ch.Close(); err != nil {
		return reply{}, err
	}
	st.mu.Lock()
	delete(st.chans, req.ID)
	// The socket stays open until the session ends: a thread of the
	// client still blocked reading the channel it destroyed keeps
	// waiting, as on a kernel rdma_cm file, instead of seeing an error.
	st.closed = append(st.closed, c.w)
	st.mu.Unlock()
	c.stop(false)
	return cmEmpty, nil
}

// channel returns the session's event channel with handle h, or nil.
func (st *cmState) channel(h uint32) *cmChan {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.chans[h]
}

// stop ends the pump, which may be blocked writing to a client that does
// not read: a past write deadline releases it. closeSocket also closes the
// daemon's end.
func (c *cmChan) stop(closeSocket bool) {
	c.cancel()
	c.w.SetWriteDeadline(time.Unix(1, 0))
	<-c.done
	if closeSocket {
		c.w.Close()
	}
}

func (s *session) cmCreateID(body []byte, _ []int) (reply, error) {
	var req nicproto.CMReq
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	st := s.cmState()
	c := st.channel(req.Arg)
	if c == nil {
		return reply{}, errInval
	}
	rec := &cmID{}
	id, err := c.ch.CreateID(rec, cm.PortSpace(req.Arg2))
	if err != nil {
		return reply{}, err
	}
	rec.id = id
	st.mu.Lock()
	st.next++
	rec.handle = st.next
	st.ids[rec.handle] = rec
	st.mu.Unlock()
	return reply{body: []any{nicproto.CMResp{Info: s.cmInfo(id)}}}, nil
}

// cmCall decodes a request on an ID, runs op on it and answers with the
// ID's description.
func (s *session) cmCall(body []byte, op func(id *cm.ID, req *nicproto.CMReq) error) (reply, error) {
	var req nicproto.CMReq
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	st := s.cmState()
	st.mu.Lock()
	rec := st.ids[req.ID]
	st.mu.Unlock()
	if rec == nil {
		return reply{}, errInval
	}
	if err := op(rec.id, &req); err != nil {
		return reply{}, cmErrno(err)
	}
	return reply{body: []any{nicproto.CMResp{Info: s.cmInfo(rec.id)}}}, nil
}

// cmErrno maps the CM's errors to the errno librdmacm returns for them.
func cmErrno(err error) error {
	switch {
	case errors.Is(err, cm.ErrNoDevice):
		return unix.ENODEV
	case errors.Is(err, cm.ErrAddrInUse):
		return unix.EADDRINUSE
	case errors.Is(err, cm.ErrNoRoute):
		return unix.ENETUNREACH
	case errors.Is(err, cm.ErrClosed):
		return unix.EINVAL
	}
	return err
}

func (s *session) cmDestroyID(body []byte, _ []int) (reply, error) {
	var req nicproto.CMReq
	if _, err := nicproto.Decode(body, &req); err != nil {
		return reply{}, errInval
	}
	st := s.cmState()
	st.mu.Lock()
	rec := st.ids[req.ID]
	delete(st.ids, req.ID)
	st.mu.Unlock()
	if rec == nil {
		return reply{}, errInval
	}
	if err := rec.id.Destroy(); err != nil {
		return reply{}, cmErrno(err)
	}
	return cmEmpty, nil
}

func msTimeout(ms uint32) time.Duration {
	if ms == 0 {
		ms = 2000
	}
	return time.Duration(ms) * time.Millisecond
}

func (s *session) cmBindAddr(body []byte, _ []int) (reply, error) {
	return s.cmCall(body, func(id *cm.ID, r *nicproto.CMReq) error {
		a, err := fromCMAddr(r.Src)
		if err != nil {
			return err
		}
		return id.BindAddr(a)
	})
}

func (s *session) cmResolveAddr(body []byte, _ []int) (reply, error) {
	return s.cmCall(body, func(id *cm.ID, r *nicproto.CMReq) error {
		src, err := fromCMAddr(r.Src)
		if err != nil {
			return err
		}
		dst, err := fromCMAddr(r.Dst)
		if err != nil {
			return err
		}
		return id.ResolveAddr(src, dst, msTimeout(r.Arg))
	})
}

func (s *session) cmResolveRoute(body []byte, _ []int) (reply, error) {
	return s.cmCall(body, func(id *cm.ID, r *nicproto.CMReq) error { return id.ResolveRoute(msTimeout(r.Arg)) })
}

func (s *session) cmListen(body []byte, _ []int) (reply, error) {
	return s.cmCall(body, func(id *cm.ID, r *nicproto.CMReq) error { return id.Listen(int(int32(r.Arg))) })
}

func (s *session) cmConnect(body []byte, _ []int) (reply, error) {
	return s.cmCall(body, func(id *cm.ID, r *nicproto.CMReq) error { return id.Connect(fromCMParam(&r.Param)) })
}

func (s *session) cmAccept(body []byte, _ []int) (reply, error) {
	return s.cmCall(body, func(id *cm.ID, r *nicproto.CMReq) error { return id.Accept(fromCMParam(&r.Param)) })
}

func (s *session) cmReject(body []byte, _ []int) (reply, error) {
	return s.cmCall(body, func(id *cm.ID, r *nicproto.CMReq) error {
		return id.Reject(fromCMParam(&r.Param).PrivateData)
	})
}

func (s *session) cmDisconnect(body []byte, _ []int) (reply, error) {
	return s.cmCall(body, func(id *cm.ID, _ *nicproto.CMReq) error { return id.Disconnect() })
}

func (s *session) cmEstablish(body []byte, _ []int) (reply, error) {
	return s.cmCall(body, func(id *cm.ID, _ *nicproto.CMReq) error { return id.Establish() })
}

func (s *session) cmQuery(body []byte, _ []int) (reply, error) {
	return s.cmCall(body, func(*cm.ID, *nicproto.CMReq) error { return nil })
}

func (s *session) cmInitQPAttr(body []byte, _ []int) (reply, error) {
	var attr verbs.QPAttr
	var mask verbs.QPAttrMask
	r, err := s.cmCall(body, func(id *cm.ID, req *nicproto.CMReq) error {
		var err error
		attr, mask, err = id.InitQPAttr(verbs.QPState(req.Arg))
		return err
	})
	if err != nil {
		return r, err
	}
	resp := r.body[0].(nicproto.CMResp)
	resp.Mask, resp.Attr = uint32(mask), toQPAttr(&attr)
	r.body[0] = resp
	return r, nil
}

// rdma_set_option's levels and names (rdma_cma.h).
const (
	optLevelID      = 0
	optIDTOS        = 0
	optIDReuseAddr  = 1
	optIDAFOnly     = 2
	optIDAckTimeout = 3
	optLevelIB      = 1
	optIBPath       = 1
)

func (s *session) cmSetOption(body []byte, _ []int) (reply, error) {
	return s.cmCall(body, func(id *cm.ID, r *nicproto.CMReq) error {
		if r.Arg != optLevelID {
			if r.Arg == optLevelIB && r.Arg2 == optIBPath {
				return unix.EOPNOTSUPP // paths come from the addresses on RoCE
			}
			return unix.ENOSYS
		}
		switch r.Arg2 {
		case optIDTOS:
			return id.SetTOS(uint8(r.Arg3))
		case optIDReuseAddr:
			return id.SetReuseAddr(r.Arg3 != 0)
		case optIDAFOnly:
			return id.SetAFOnly(r.Arg3 != 0)
		case optIDAckTimeout:
			return id.SetAckTimeout(uint8(r.Arg3))
		}
		return unix.ENOSYS
	})
}

func (s *session) cmMigrate(body []byte, _ []int) (reply, error) {
	st := s.cmState()
	return s.cmCall(body, func(id *cm.ID, r *nicproto.CMReq) error {
		c := st.channel(r.Arg)
		if c == nil {
			return errInval
		}
		return id.Migrate(c.ch)
	})
}

// cmTeardown destroys what the client left: the pumps stop first (so that
// no request's ID is made meanwhile), then its IDs go (connections get
// their DREQ, listeners stop, the requests they held are refused), then
// its channels.
func (s *session) cmTeardown() {
	s.mu.Lock()
	st := s.cm
	s.mu.Unlock()
	if st == nil {
		return
	}
	st.mu.Lock()
	chans := mapValues(st.chans)
	st.mu.Unlock()
	for _, c := range chans {
		c.stop(true)
	}
	st.mu.Lock()
	ids := mapValues(st.ids)
	st.ids, st.chans = map[uint32]*cmID{}, map[uint32]*cmChan{}
	for _, w := range st.closed {
		w.Close()
	}
	st.closed = nil
	st.mu.Unlock()
	for _, r := range ids {
		r.id.Destroy()
	}
	for _, c := range chans {
		c.ch.Close()
	}
}
