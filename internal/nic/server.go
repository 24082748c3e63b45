//go:build linux

// Package nic is goroce-nic, the software NIC daemon behind libgoroce.so: it
// owns the goroce devices (one verbs.Device per bound address) and serves the
// libibverbs calls of any number of client processes.
//
// The flow of a work request:
//
//  1. The application calls ibv_post_send; libgoroce.so writes the request
//     into the QP's send ring (shared memory) and, if the QP's pump sleeps,
//     writes the QP's doorbell eventfd.
//  2. The pump (one goroutine per QP, wq.go) drains the ring into
//     verbs.QP.PostSendList; the transport sends on the caller's goroutine.
//  3. The device's receive goroutine completes the request into the verbs CQ.
//  4. The CQ's mover (one goroutine per CQ, cq.go) copies the completion into
//     the CQ ring in struct ibv_wc's layout and, if the CQ is armed, writes
//     the completion channel's pipe.
//  5. ibv_poll_cq in the application reads the ring; no system call.
//
// Control operations (create, modify, destroy, register memory) are messages
// on the client's connection (session.go); registered memory is shared in
// place through memfds (shm.go, mr.go).
package nic

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/goroce/goroce/internal/nicproto"
	"github.com/goroce/goroce/verbs"
)

// Config configures a Server.
type Config struct {
	// Socket is the Unix socket name to listen on: "@name" for an abstract
	// name, else a path. Default DefaultSocket().
	Socket string
	// Bind lists the addresses to open devices on at start, as goroce0,
	// goroce1, ... in order.
	Bind []netip.Addr
	// UDPPort is the devices' UDP port; 0 means 4791.
	UDPPort uint16
	// ReceiveQueues is each device's verbs.DeviceConfig.ReceiveQueues:
	// how many sockets and goroutines receive its packets (Linux).
	ReceiveQueues int
	// PollSpin makes each QP's pump poll its rings this long before it
	// sleeps on its doorbell: lower latency for a processor per active QP.
	// 0 (the default) sleeps at once, which suits machines with few cores.
	PollSpin time.Duration
	// Logf, if not nil, receives diagnostics.
	Logf func(format string, args ...any)
}

// Server is a running daemon.
type Server struct {
	cfg Config
	ln  *net.UnixListener
	uid uint32

	mu       sync.Mutex
	devices  []*device
	sessions map[*session]struct{}
	closed   bool
	wg       sync.WaitGroup
	ctx      context.Context
	cancel   context.CancelFunc
}

// Listen opens the configured devices and the socket. Serve then accepts
// clients.
func Listen(cfg Config) (*Server, error) {
	if cfg.Socket == "" {
		cfg.Socket = DefaultSocket()
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, uid: uint32(os.Getuid()), sessions: map[*session]struct{}{}, ctx: ctx, cancel: cancel}
	for _, a := range cfg.Bind {
		if _, err := s.ensure(a); err != nil {
			s.Close()
			return nil, err
		}
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: cfg.Socket, Net: "unixpacket"})
	if err != nil {
		s.Close()
		return nil, err
	}
	s.ln = ln
	return s, nil
}

// Addr returns the socket name.
func (s *Server) Addr() string { return s.cfg.Socket }

// Serve accepts clients until Close.
func (s *Server) Serve() error {
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		if uid, err := peerUID(c); err != nil || (uid != s.uid && uid != 0) {
			s.cfg.Logf("refusing client uid %d (%v)", uid, err)
			c.Close()
			continue
		}
		sess := newSession(s, c)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.sessions[sess] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			sess.serve()
			s.mu.Lock()
			delete(s.sessions, sess)
			s.mu.Unlock()
		}()
	}
}

// Sessions returns the number of connected clients.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Close stops accepting, ends every session (destroying its objects) and
// closes the devices.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	sessions := make([]*session, 0, len(s.sessions))
	for sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	s.mu.Unlock()
	if s.ln != nil {
		s.ln.Close()
	}
	for _, sess := range sessions {
		sess.conn.c.Close()
	}
	s.wg.Wait()
	s.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.devices {
		d.close()
	}
	return nil
}

// device is one goroce device and the owners of its objects, to which its
// asynchronous events are routed.
type device struct {
	dev    *verbs.Device
	index  int
	owners sync.Map // *verbs.QP, *verbs.CQ, *verbs.SRQ -> owner
	done   chan struct{}
}

type owner struct {
	sess   *session
	kind   uint32
	handle uint32
}

// ensure returns the device bound to addr, opening it as the next goroceN.
func (s *Server) ensure(addr netip.Addr) (*device, error) {
	addr = addr.Unmap()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.devices {
		if d.dev.Addr() == addr {
			return d, nil
		}
	}
	name := fmt.Sprintf("goroce%d", len(s.devices))
	dev, err := verbs.Open(verbs.DeviceConfig{Name: name, Addr: addr, Port: s.cfg.UDPPort, ReceiveQueues: s.cfg.ReceiveQueues})
	if err != nil {
		return nil, fmt.Errorf("open %s on %v: %w", name, addr, err)
	}
	d := &device{dev: dev, index: len(s.devices), done: make(chan struct{})}
	s.devices = append(s.devices, d)
	go d.routeEvents(s.ctx)
	s.cfg.Logf("%s on %v port %d", name, addr, dev.UDPPort())
	return d, nil
}

func (s *Server) deviceByName(name string) *device {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.devices {
		if d.dev.Name() == name {
			return d
		}
	}
	return nil
}

func (s *Server) deviceList() []*device {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*device(nil), s.devices...)
}

func (d *device) info() nicproto.DevInfo {
	var in nicproto.DevInfo
	nicproto.PutName(&in.Name, d.dev.Name())
	in.GID = verbs.GIDFromAddr(d.dev.Addr())
	in.GUID = uint64(d.dev.Query().NodeGUID)
	in.Index = uint32(d.index)
	in.UDPPort = uint32(d.dev.UDPPort())
	return in
}

// routeEvents hands each asynchronous event to the session owning its object.
func (d *device) routeEvents(ctx context.Context) {
	defer close(d.done)
	for {
		ev, err := d.dev.GetAsyncEvent(ctx)
		if err != nil {
			return
		}
		var key any
		switch {
		case ev.QP != nil:
			key = ev.QP
		case ev.CQ != nil:
			key = ev.CQ
		case ev.SRQ != nil:
			key = ev.SRQ
		default:
			continue
		}
		if o, ok := d.owners.Load(key); ok {
			ow := o.(owner)
			ow.sess.postAsync(nicproto.AsyncEvent{EventType: uint32(ev.Type), Kind: ow.kind, Handle: uint64(ow.handle)})
		}
	}
}

func (d *device) close() {
	d.dev.Close()
	<-d.done
}

// StdLogf logs to the standard logger.
func StdLogf(format string, args ...any) { log.Printf(format, args...) }
