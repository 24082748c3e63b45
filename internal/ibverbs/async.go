//go:build linux && cgo && goroce_ibverbs

package ibverbs

/*
#include <infiniband/verbs.h>
#include <errno.h>
#include <fcntl.h>

static int gr_async_nonblock(struct ibv_context *ctx)
{
	int flags = fcntl(ctx->async_fd, F_GETFL);
	if (flags < 0)
		return -1;
	return fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK);
}

// gr_take_async takes one asynchronous event without blocking and
// acknowledges it at once, so destroying its object never waits: 1 for an
// event, 0 for none, -1 with errno on failure. The object is returned as
// a QP number, or a CQ or SRQ address (a handle, never dereferenced by
// Go), or a port.
static int gr_take_async(struct ibv_context *ctx, int *type, uint32_t *qpn, uintptr_t *cq, uintptr_t *srq, int *port)
{
	struct ibv_async_event ev;

	if (ibv_get_async_event(ctx, &ev))
		return errno == EAGAIN ? 0 : -1;
	*type = ev.event_type;
	switch (ev.event_type) {
	case IBV_EVENT_CQ_ERR:
		*cq = (uintptr_t)ev.element.cq;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		*srq = (uintptr_t)ev.element.srq;
		break;
	case IBV_EVENT_DEVICE_FATAL:
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		*port = ev.element.port_num;
		break;
	case IBV_EVENT_WQ_FATAL:
		break;
	default:
		*qpn = ev.element.qp->qp_num;
	}
	ibv_ack_async_event(&ev);
	return 1;
}

static int gr_modify_srq(struct ibv_srq *srq, uint32_t max_wr, uint32_t limit, int mask)
{
	struct ibv_srq_attr a = {.max_wr = max_wr, .srq_limit = limit};

	return ibv_modify_srq(srq, &a, mask);
}
*/
import "C"

import "unsafe"

// AsyncEvent is an asynchronous event (struct ibv_async_event), its object
// given as a number: the QP's, or the CQ's or SRQ's Handle, or the port.
type AsyncEvent struct {
	Type    int
	QPN     uint32
	CQ, SRQ uintptr
	Port    int
}

// AsyncFd is the device's asynchronous event descriptor, made
// non-blocking for Go's poller; it stays owned by the device.
func (d *Device) AsyncFd() (int, error) {
	if ret, err := C.gr_async_nonblock(d.ctx); ret != 0 {
		return -1, errnoOf("fcntl O_NONBLOCK", ret, err)
	}
	return int(d.ctx.async_fd), nil
}

// TakeAsyncEvent consumes and acknowledges one asynchronous event, without
// blocking: false when there is none.
func (d *Device) TakeAsyncEvent() (AsyncEvent, bool, error) {
	var typ, port C.int
	var qpn C.uint32_t
	var cq, srq C.uintptr_t
	ret, err := C.gr_take_async(d.ctx, &typ, &qpn, &cq, &srq, &port)
	if ret < 0 {
		return AsyncEvent{}, false, errnoOf("ibv_get_async_event", ret, err)
	}
	return AsyncEvent{Type: int(typ), QPN: uint32(qpn), CQ: uintptr(cq), SRQ: uintptr(srq), Port: int(port)}, ret == 1, nil
}

// Handle identifies the CQ in AsyncEvent.CQ.
func (cq *CQ) Handle() uintptr { return uintptr(unsafe.Pointer(cq.cq)) }

// Handle identifies the SRQ in AsyncEvent.SRQ.
func (s *SRQ) Handle() uintptr { return uintptr(unsafe.Pointer(s.srq)) }

// SRQ attribute mask bits of ibv_modify_srq.
const (
	SRQMaxWR = C.IBV_SRQ_MAX_WR
	SRQLimit = C.IBV_SRQ_LIMIT
)

// Modify resizes the SRQ (SRQMaxWR) or arms its limit (SRQLimit): when
// fewer than limit receives remain, the device raises
// IBV_EVENT_SRQ_LIMIT_REACHED once (ibv_modify_srq).
func (s *SRQ) Modify(maxWR, limit, mask int) error {
	return errnoOf("ibv_modify_srq", C.gr_modify_srq(s.srq, C.uint32_t(maxWR), C.uint32_t(limit), C.int(mask)), nil)
}
