//go:build linux && cgo && goroce_ibverbs

package ibverbs

/*
#include <infiniband/verbs.h>
#include <errno.h>
#include <fcntl.h>

static int gr_nonblock(int fd)
{
	int flags = fcntl(fd, F_GETFL);
	if (flags < 0)
		return -1;
	return fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// gr_take_event takes one event of the channel without blocking (its fd is
// non-blocking) and acknowledges it at once: 1 for an event, 0 for none
// (EAGAIN), -1 with errno on failure.
// gr_take_cq_event is gr_take_event for a channel shared by CQs: it
// returns the CQ's address as a handle in *cq.
static int gr_take_cq_event(struct ibv_comp_channel *ch, uintptr_t *handle)
{
	struct ibv_cq *cq;
	void *ctx;

	if (ibv_get_cq_event(ch, &cq, &ctx)) {
		return errno == EAGAIN ? 0 : -1;
	}
	ibv_ack_cq_events(cq, 1);
	*handle = (uintptr_t)cq;
	return 1;
}

static int gr_take_event(struct ibv_comp_channel *ch)
{
	uintptr_t handle;

	return gr_take_cq_event(ch, &handle);
}

static int gr_req_notify(struct ibv_cq *cq, int solicited)
{
	return ibv_req_notify_cq(cq, solicited);
}
*/
import "C"

import "fmt"

// CreateCQWithChannel creates a completion queue of at least cqe entries
// with a completion channel of its own, whose file descriptor (Fd) is
// non-blocking, for Go's poller: after ReqNotify, the descriptor becomes
// readable when a completion arrives, and TakeEvent consumes the event.
func (d *Device) CreateCQWithChannel(cqe int) (*CQ, error) {
	c, err := d.CreateCompChannel()
	if err != nil {
		return nil, err
	}
	ch := c.ch
	cq, err := C.ibv_create_cq(d.ctx, C.int(cqe), nil, ch, 0)
	if cq == nil {
		C.ibv_destroy_comp_channel(ch)
		return nil, nilErr("ibv_create_cq", err)
	}
	return &CQ{cq: cq, wcs: make([]C.struct_ibv_wc, 64), ch: ch}, nil
}

// Fd is the completion channel's file descriptor, or -1 without one. It
// stays owned by the CQ: Destroy closes it.
func (cq *CQ) Fd() int {
	if cq.ch == nil {
		return -1
	}
	return int(cq.ch.fd)
}

// ReqNotify arms the CQ: its next completion (or next solicited one) makes
// the channel readable (ibv_req_notify_cq).
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	s := C.int(0)
	if solicitedOnly {
		s = 1
	}
	return errnoOf("ibv_req_notify_cq", C.gr_req_notify(cq.cq, s), nil)
}

// TakeEvent consumes and acknowledges one event of the channel, without
// blocking: false when there is none.
func (cq *CQ) TakeEvent() (bool, error) {
	if cq.ch == nil {
		return false, fmt.Errorf("ibverbs: TakeEvent on a CQ without a channel")
	}
	ret, err := C.gr_take_event(cq.ch)
	if ret < 0 {
		return false, errnoOf("ibv_get_cq_event", ret, err)
	}
	return ret == 1, nil
}

// CompChannel is a completion channel that CQs share (CreateCQOn), its
// descriptor non-blocking for Go's poller.
type CompChannel struct{ ch *C.struct_ibv_comp_channel }

// CreateCompChannel creates a completion channel (ibv_create_comp_channel).
func (d *Device) CreateCompChannel() (*CompChannel, error) {
	ch, err := C.ibv_create_comp_channel(d.ctx)
	if ch == nil {
		return nil, nilErr("ibv_create_comp_channel", err)
	}
	if ret, err := C.gr_nonblock(ch.fd); ret != 0 {
		C.ibv_destroy_comp_channel(ch)
		return nil, errnoOf("fcntl O_NONBLOCK", ret, err)
	}
	return &CompChannel{ch: ch}, nil
}

// Fd is the channel's descriptor; the channel owns it.
func (c *CompChannel) Fd() int { return int(c.ch.fd) }

// TakeEvent consumes and acknowledges one event without blocking, and
// returns its CQ's Handle; false when there is none.
func (c *CompChannel) TakeEvent() (uintptr, bool, error) {
	var h C.uintptr_t
	ret, err := C.gr_take_cq_event(c.ch, &h)
	if ret < 0 {
		return 0, false, errnoOf("ibv_get_cq_event", ret, err)
	}
	return uintptr(h), ret == 1, nil
}

// Destroy destroys the channel; it fails (EBUSY) while CQs use it.
func (c *CompChannel) Destroy() error {
	return errnoOf("ibv_destroy_comp_channel", C.ibv_destroy_comp_channel(c.ch), nil)
}

// CreateCQOn creates a completion queue of at least cqe entries whose
// events go to ch.
func (d *Device) CreateCQOn(cqe int, ch *CompChannel) (*CQ, error) {
	cq, err := C.ibv_create_cq(d.ctx, C.int(cqe), nil, ch.ch, 0)
	if cq == nil {
		return nil, nilErr("ibv_create_cq", err)
	}
	return &CQ{cq: cq, wcs: make([]C.struct_ibv_wc, 64)}, nil
}
