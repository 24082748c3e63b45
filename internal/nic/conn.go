//go:build linux

package nic

import (
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nicproto"
)

// msgConn is one client connection: SOCK_SEQPACKET messages, each with up to
// nicproto.MaxFDs file descriptors.
type msgConn struct {
	c   *net.UnixConn
	buf []byte
	oob []byte
}

func newMsgConn(c *net.UnixConn) *msgConn {
	return &msgConn{
		c:   c,
		buf: make([]byte, nicproto.MaxMsg),
		oob: make([]byte, unix.CmsgSpace(4*nicproto.MaxFDs)),
	}
}

// errTruncated reports a message or its file descriptors cut short: the
// client broke the protocol and the connection is closed.
var errTruncated = errors.New("nic: truncated message")

// read returns the next message and the file descriptors that came with it,
// which the caller owns (and must close) from then on. The message aliases
// the connection's buffer until the next read.
func (m *msgConn) read() ([]byte, []int, error) {
	n, oobn, flags, _, err := m.c.ReadMsgUnix(m.buf, m.oob)
	if err != nil {
		return nil, nil, err
	}
	fds, ferr := parseRights(m.oob[:oobn])
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeFDs(fds)
		return nil, nil, errTruncated
	}
	if ferr != nil {
		closeFDs(fds)
		return nil, nil, ferr
	}
	if n == 0 {
		closeFDs(fds)
		return nil, nil, net.ErrClosed // an orderly shutdown of the peer
	}
	return m.buf[:n], fds, nil
}

// write sends msg with fds (which stay owned by the caller).
func (m *msgConn) write(msg []byte, fds ...int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := m.c.WriteMsgUnix(msg, oob, nil)
	if err == nil && (n != len(msg) || oobn != len(oob)) {
		err = fmt.Errorf("nic: short write %d/%d", n, len(msg))
	}
	return err
}

func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	cmsgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, cm := range cmsgs {
		if cm.Header.Level != unix.SOL_SOCKET || cm.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&cm)
		if err != nil {
			closeFDs(fds)
			return nil, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// peerUID returns the user ID of the process at the other end.
func peerUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	err = raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return cred.Uid, nil
}

// DefaultSocket returns the daemon's socket name: $GOROCE_NIC_SOCKET, or
// the abstract name "@goroce-nic.<uid>" (abstract names live in the network
// namespace, as the devices' addresses do).
func DefaultSocket() string {
	if s := os.Getenv("GOROCE_NIC_SOCKET"); s != "" {
		return s
	}
	return fmt.Sprintf("@goroce-nic.%d", os.Getuid())
}
