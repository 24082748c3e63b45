//go:build !(linux && cgo && goroce_ibverbs)

package cm

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/goroce/goroce/verbs"
)

// Without librdmacm (the goroce_ibverbs tag, see hw_rdmacm.go) no QP is a
// hardware device's and no address is a kernel device's: Dial and Listen
// never take these, and the types are empty.

type (
	hwConn     struct{}
	hwListener struct{}
	hwRequest  struct{}
	hwChannel  struct{}
	hwID       struct{ dev *verbs.Device }
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

// The event API's: no ID is ever a kernel device's (hwBind and
// hwResolve decline), so the rest is never called.

func (id *ID) hwBind(netip.AddrPort) (bool, error) { return false, nil }

func (id *ID) hwResolve(netip.AddrPort, time.Duration) (bool, error) { return false, nil }

func (h *hwChannel) close() {}

func (id *ID) hwSetOption(hwOption, int) error { return errNoRDMACM }

func (id *ID) hwResolveRoute(time.Duration) error { return errNoRDMACM }

func (id *ID) hwListen(int) error { return errNoRDMACM }

func (id *ID) hwEstablish() error { return errNoRDMACM }

func (id *ID) hwNotify(verbs.AsyncEventType) error { return errNoRDMACM }

func (id *ID) hwMigrate(*EventChannel) error { return errNoRDMACM }

func (id *ID) hwQPAttr(verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	return verbs.QPAttr{}, 0, errNoRDMACM
}

func (id *ID) hwConnect(*ConnParam) error { return errNoRDMACM }

func (id *ID) hwAccept(*ConnParam) error { return errNoRDMACM }

func (id *ID) hwReject(RejectReason, []byte) error { return errNoRDMACM }

func (id *ID) hwDisconnect() error { return errNoRDMACM }

func (id *ID) hwDestroy() {}
