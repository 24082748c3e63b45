//go:build !(linux && cgo && goroce_ibverbs)

package cm

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/verbs"
)

// Without librdmacm (the goroce_ibverbs tag, see hw_rdmacm.go) no QP is a
// hardware device's and no address is a kernel device's: Dial and Listen
// never take these, and the types are empty.

type (
	hwConn     struct{}
	hwListener struct{}
	hwRequest  struct{}
)

var errNoRDMACM = fmt.Errorf("a kernel RDMA device needs a build with -tags goroce_ibverbs: %w", verbs.ErrNotSupported)

func hwDial(context.Context, string, *verbs.QP, *Params) (*Conn, error) { return nil, errNoRDMACM }

func hwListen([]netip.AddrPort, int, bool) (*Listener, error) { return nil, nil }

func hwDialUD(context.Context, string, *verbs.QP, *Params) (*UDService, error) {
	return nil, errNoRDMACM
}

func (r *Request) hwAcceptUD(*verbs.QP, []byte) error { return errNoRDMACM }

func (c *Conn) hwClose() error { return errNoRDMACM }

func (l *Listener) hwAccept(context.Context) (*Request, error) { return nil, errNoRDMACM }

func (l *Listener) hwClose() error { return errNoRDMACM }

func (r *Request) hwRelease() {}

func (r *Request) hwReject([]byte) error { return errNoRDMACM }

func (r *Request) hwAccept(context.Context, *verbs.QP, *Params) (*Conn, error) {
	return nil, errNoRDMACM
}
