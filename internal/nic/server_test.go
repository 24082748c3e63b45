//go:build linux

package nic

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nicproto"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

func TestListAndEnsure(t *testing.T) {
	srv := startServer(t)
	cl, err := Dial(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	devs, err := cl.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 || devs[0].Name != "goroce0" || devs[1].Name != "goroce1" ||
		devs[0].Addr != testkit.Addr(1) || devs[1].Addr != testkit.Addr(2) {
		t.Fatalf("devices %+v", devs)
	}
	d, err := cl.Ensure(testkit.Addr(3))
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "goroce2" {
		t.Fatalf("new device %+v", d)
	}
	again, err := cl.Ensure(testkit.Addr(3))
	if err != nil || again != d {
		t.Fatalf("second Ensure: %+v, %v", again, err)
	}
	if _, err := cl.Ensure(netip.IPv4Unspecified()); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("Ensure 0.0.0.0: %v", err)
	}
}

// rawCall sends one message on a fresh connection and returns the reply's
// status, or an error if the daemon closed the connection instead.
func rawCall(t *testing.T, srv *Server, msgs ...[]byte) (int32, error) {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: srv.Addr(), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mc := newMsgConn(c)
	var status int32
	for _, m := range msgs {
		if err := mc.write(m); err != nil {
			return 0, err
		}
		reply, fds, err := mc.read()
		closeFDs(fds)
		if err != nil {
			return 0, err
		}
		h, err := nicproto.ParseHeader(reply)
		if err != nil {
			t.Fatalf("reply: %v", err)
		}
		status = h.Status
	}
	return status, nil
}

func TestBadRequests(t *testing.T) {
	srv := startServer(t)
	hello := nicproto.NewMessage(nicproto.OpHello, 0).Append(nicproto.HelloReq{Version: nicproto.Version}).Bytes(0)
	for _, tc := range []struct {
		name   string
		msgs   [][]byte
		status unix.Errno
		closed bool
	}{
		{"garbage", [][]byte{[]byte("not a message at all")}, 0, true},
		{"short", [][]byte{{1, 0, 0}}, 0, true},
		{"unknown op", [][]byte{nicproto.NewMessage(nicproto.Op(999), 0).Bytes(0)}, 0, true},
		{"length mismatch", [][]byte{append(nicproto.NewMessage(nicproto.OpList, 0).Bytes(0), 0)}, 0, true},
		{"fds promised", [][]byte{nicproto.NewMessage(nicproto.OpList, 0).Bytes(2)}, 0, true},
		{"old version", [][]byte{nicproto.NewMessage(nicproto.OpHello, 0).Append(nicproto.HelloReq{Version: 99}).Bytes(0)}, unix.EPROTO, false},
		{"verb before open", [][]byte{hello, nicproto.NewMessage(nicproto.OpAllocPD, 0).Bytes(0)}, unix.ENODEV, false},
		{"open unknown device", [][]byte{hello, nicproto.NewMessage(nicproto.OpOpen, 0).Append(nicproto.OpenReq{}).Bytes(0)}, unix.ENODEV, false},
		{"short body", [][]byte{hello, nicproto.NewMessage(nicproto.OpEnsure, 0).Bytes(0)}, unix.EINVAL, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, err := rawCall(t, srv, tc.msgs...)
			if tc.closed {
				if err == nil {
					t.Fatalf("connection not closed; status %d", status)
				}
				return
			}
			if err != nil || unix.Errno(status) != tc.status {
				t.Fatalf("status %v (%v), want %v", unix.Errno(status), err, tc.status)
			}
		})
	}
	waitNoSessions(t, srv)
}

func TestObjectsWithoutDevice(t *testing.T) {
	srv := startServer(t)
	open := func(name string) []byte {
		var r nicproto.OpenReq
		nicproto.PutName(&r.Name, name)
		return nicproto.NewMessage(nicproto.OpOpen, 0).Append(r).Bytes(0)
	}
	hello := nicproto.NewMessage(nicproto.OpHello, 0).Append(nicproto.HelloReq{Version: nicproto.Version}).Bytes(0)
	// Handles that name nothing are refused, never dereferenced.
	for _, m := range [][]byte{
		nicproto.NewMessage(nicproto.OpDeallocPD, 0).Append(nicproto.Handle{Handle: 42}).Bytes(0),
		nicproto.NewMessage(nicproto.OpDeregMR, 0).Append(nicproto.Handle{Handle: 42}).Bytes(0),
		nicproto.NewMessage(nicproto.OpDestroyCQ, 0).Append(nicproto.Handle{Handle: 42}).Bytes(0),
		nicproto.NewMessage(nicproto.OpQueryQP, 0).Append(nicproto.Handle{Handle: 42}).Bytes(0),
		nicproto.NewMessage(nicproto.OpCreateQP, 0).Append(nicproto.CreateQPReq{PD: 1, SendCQ: 2, RecvCQ: 3}).Bytes(0),
		nicproto.NewMessage(nicproto.OpRegMR, 0).Append(nicproto.RegMRReq{PD: 1, Length: 4096, NPieces: 1},
			nicproto.Piece{Length: 4096}).Bytes(0),
		nicproto.NewMessage(nicproto.OpCreateCQ, 0).Append(nicproto.CreateCQReq{CQE: 1 << 30}).Bytes(0),
	} {
		status, err := rawCall(t, srv, hello, open("goroce0"), m)
		if err != nil || unix.Errno(status) != unix.EINVAL {
			h, _ := nicproto.ParseHeader(m)
			t.Errorf("%v: status %v (%v), want EINVAL", h.Op, unix.Errno(status), err)
		}
	}
	waitNoSessions(t, srv)
}
