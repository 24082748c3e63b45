//go:build linux

package nic

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nicproto"
	"github.com/goroce/goroce/verbs"
)

// Client is a control connection to a running goroce-nic, for the launcher
// and tests: it lists devices and asks for new ones. Applications talk to
// the daemon through libgoroce.so instead.
type Client struct {
	c *msgConn
}

// Dial connects to the daemon's socket and opens a session.
func Dial(socket string) (*Client, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: socket, Net: "unixpacket"})
	if err != nil {
		return nil, err
	}
	cl := &Client{c: newMsgConn(c)}
	var resp nicproto.HelloResp
	if err := cl.call(nicproto.OpHello, &resp, nicproto.HelloReq{Version: nicproto.Version, PID: uint32(os.Getpid())}); err != nil {
		c.Close()
		return nil, err
	}
	return cl, nil
}

// Close ends the session.
func (cl *Client) Close() error { return cl.c.c.Close() }

func (cl *Client) call(op nicproto.Op, resp any, req ...any) error {
	if err := cl.c.write(nicproto.NewMessage(op, 0).Append(req...).Bytes(0)); err != nil {
		return err
	}
	msg, fds, err := cl.c.read()
	closeFDs(fds)
	if err != nil {
		return err
	}
	h, err := nicproto.ParseHeader(msg)
	if err != nil {
		return err
	}
	if h.Op != op {
		return fmt.Errorf("nic: response to %v for %v", h.Op, op)
	}
	if h.Status != 0 {
		return unix.Errno(h.Status)
	}
	if resp != nil {
		if _, err := nicproto.Decode(msg[nicproto.HeaderSize:], resp); err != nil {
			return err
		}
	}
	return nil
}

// DeviceInfo names a device and its address.
type DeviceInfo struct {
	Name string
	Addr netip.Addr
	GUID uint64
}

func deviceInfo(in nicproto.DevInfo) DeviceInfo {
	return DeviceInfo{Name: nicproto.Name(in.Name), Addr: verbs.GID(in.GID).Addr(), GUID: in.GUID}
}

// List returns the daemon's devices.
func (cl *Client) List() ([]DeviceInfo, error) {
	if err := cl.c.write(nicproto.NewMessage(nicproto.OpList, 0).Bytes(0)); err != nil {
		return nil, err
	}
	msg, fds, err := cl.c.read()
	closeFDs(fds)
	if err != nil {
		return nil, err
	}
	if _, err := nicproto.ParseHeader(msg); err != nil {
		return nil, err
	}
	var lr nicproto.ListResp
	rest, err := nicproto.Decode(msg[nicproto.HeaderSize:], &lr)
	if err != nil {
		return nil, err
	}
	infos := make([]nicproto.DevInfo, lr.Count)
	if _, err := nicproto.Decode(rest, infos); err != nil {
		return nil, err
	}
	out := make([]DeviceInfo, len(infos))
	for i, in := range infos {
		out[i] = deviceInfo(in)
	}
	return out, nil
}

// Ensure asks for a device on addr and returns it (a new goroceN, or the
// device already bound there).
func (cl *Client) Ensure(addr netip.Addr) (DeviceInfo, error) {
	var in nicproto.DevInfo
	if err := cl.call(nicproto.OpEnsure, &in, nicproto.EnsureReq{GID: verbs.GIDFromAddr(addr)}); err != nil {
		return DeviceInfo{}, fmt.Errorf("device on %v: %w", addr, err)
	}
	return deviceInfo(in), nil
}

// WaitReady dials socket until a daemon answers or timeout passes.
func WaitReady(socket string, timeout time.Duration) (*Client, error) {
	deadline := time.Now().Add(timeout)
	for {
		cl, err := Dial(socket)
		if err == nil || time.Now().After(deadline) {
			return cl, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ParseBind parses a comma-separated address list ("127.0.0.1,127.0.0.2").
func ParseBind(s string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("bind list: %v", err)
		}
		out = append(out, a)
	}
	return out, nil
}

// DefaultBind is the bind list when none is given: $GOROCE_BIND, else
// 127.0.0.1 and 127.0.0.2 (goroce0 and goroce1).
func DefaultBind() string {
	if b := os.Getenv("GOROCE_BIND"); b != "" {
		return b
	}
	return "127.0.0.1,127.0.0.2"
}

// ExitWhenIdle closes srv once it has had no client for idle.
func ExitWhenIdle(srv *Server, idle time.Duration) {
	since := time.Now()
	t := time.NewTicker(idle / 10)
	defer t.Stop()
	for range t.C {
		if srv.Sessions() > 0 {
			since = time.Now()
		} else if time.Since(since) >= idle {
			srv.Close()
			return
		}
	}
}
