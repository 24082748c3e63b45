//go:build linux && cgo && goroce_ibverbs

package rdmacm

/*
#cgo LDFLAGS: -lrdmacm -libverbs
#include <rdma/rdma_cma.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <string.h>
#include <errno.h>
#include <stdlib.h>

// The event's union and the sockaddr families are reached through these:
// cgo sees unions as byte arrays.
static struct rdma_conn_param *gr_conn(struct rdma_cm_event *e) { return &e->param.conn; }
static struct rdma_ud_param *gr_ud(struct rdma_cm_event *e) { return &e->param.ud; }
static int gr_is_ud(struct rdma_cm_id *id) { return id->ps == RDMA_PS_UDP; }
static void gr_ah_dgid(struct ibv_ah_attr *a, uint8_t *out) { memcpy(out, a->grh.dgid.raw, 16); }

static void gr_sockaddr(struct sockaddr_storage *ss, int v6, const uint8_t *ip, uint16_t port)
{
	memset(ss, 0, sizeof(*ss));
	if (v6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(port);
		memcpy(&s->sin6_addr, ip, 16);
	} else {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		memcpy(&s->sin_addr, ip, 4);
	}
}

static int gr_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		return -1;
	return fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static const char *gr_device_name(struct rdma_cm_id *id)
{
	if (!id->verbs)
		return NULL;
	return ibv_get_device_name(id->verbs->device);
}

// gr_addr copies a sockaddr's address (16 bytes, IPv4 in the first 4)
// and port; it returns 4, 6, or 0 for another family.
static int gr_addr(struct sockaddr *sa, uint8_t *ip, uint16_t *port)
{
	if (sa->sa_family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)sa;
		memcpy(ip, &s->sin_addr, 4);
		*port = ntohs(s->sin_port);
		return 4;
	}
	if (sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)sa;
		memcpy(ip, &s->sin6_addr, 16);
		*port = ntohs(s->sin6_port);
		return 6;
	}
	return 0;
}

static void gr_dgid(struct ibv_qp_attr *a, uint8_t *out) { memcpy(out, a->ah_attr.grh.dgid.raw, 16); }

// gr_route copies the ID's first path record: 0 when it has none.
static int gr_route(struct rdma_cm_id *id, uint8_t *sgid, uint8_t *dgid, uint32_t *flow, uint8_t *hop,
	uint8_t *tclass, uint8_t *mtu, uint8_t *life)
{
	struct ibv_sa_path_rec *p = id->route.path_rec;
	if (!p || id->route.num_paths < 1)
		return 0;
	memcpy(sgid, p->sgid.raw, 16);
	memcpy(dgid, p->dgid.raw, 16);
	*flow = ntohl(p->flow_label);
	*hop = p->hop_limit;
	*tclass = p->traffic_class;
	*mtu = p->mtu;
	*life = p->packet_life_time;
	return 1;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/goroce/goroce/verbs"
)

// Available reports whether this build has the librdmacm binding.
const Available = true

// EventType is enum rdma_cm_event_type.
type EventType int

// The events this binding's users see.
const (
	EventAddrResolved    EventType = C.RDMA_CM_EVENT_ADDR_RESOLVED
	EventAddrError       EventType = C.RDMA_CM_EVENT_ADDR_ERROR
	EventRouteResolved   EventType = C.RDMA_CM_EVENT_ROUTE_RESOLVED
	EventRouteError      EventType = C.RDMA_CM_EVENT_ROUTE_ERROR
	EventConnectRequest  EventType = C.RDMA_CM_EVENT_CONNECT_REQUEST
	EventConnectResponse EventType = C.RDMA_CM_EVENT_CONNECT_RESPONSE
	EventConnectError    EventType = C.RDMA_CM_EVENT_CONNECT_ERROR
	EventUnreachable     EventType = C.RDMA_CM_EVENT_UNREACHABLE
	EventRejected        EventType = C.RDMA_CM_EVENT_REJECTED
	EventEstablished     EventType = C.RDMA_CM_EVENT_ESTABLISHED
	EventDisconnected    EventType = C.RDMA_CM_EVENT_DISCONNECTED
	EventDeviceRemoval   EventType = C.RDMA_CM_EVENT_DEVICE_REMOVAL
	EventTimewaitExit    EventType = C.RDMA_CM_EVENT_TIMEWAIT_EXIT
)

func (t EventType) String() string { return C.GoString(C.rdma_event_str(C.enum_rdma_cm_event_type(t))) }

// errnoOf turns a librdmacm return value (-1 with errno set) into an error
// naming the call.
func errnoOf(call string, ret C.int, err error) error {
	if ret == 0 {
		return nil
	}
	if err == nil {
		err = syscall.EINVAL
	}
	return fmt.Errorf("rdmacm: %s: %w", call, err)
}

// EventChannel is struct rdma_event_channel, its fd in Go's poller: a
// goroutine waiting in GetEvent parks instead of holding a thread.
type EventChannel struct {
	ch *C.struct_rdma_event_channel
	f  *os.File // a dup of the channel's fd, non-blocking
	rc syscall.RawConn

	mu  sync.Mutex
	ids map[*C.struct_rdma_cm_id]*ID

	// closed makes GetEvent return ErrClosed; getting is held while a
	// GetEvent reads, so that Close frees the channel only after it.
	closed  atomic.Bool
	getting sync.Mutex
}

// ErrClosed is GetEvent's error once the channel is closed.
var ErrClosed = errors.New("rdmacm: event channel closed")

// NewEventChannel creates an event channel (rdma_create_event_channel).
func NewEventChannel() (*EventChannel, error) {
	ch, err := C.rdma_create_event_channel()
	if ch == nil {
		if err == nil {
			err = syscall.ENODEV
		}
		return nil, fmt.Errorf("rdmacm: rdma_create_event_channel: %w", err)
	}
	c := &EventChannel{ch: ch, ids: make(map[*C.struct_rdma_cm_id]*ID)}
	if r, err := C.gr_nonblock(ch.fd); r != 0 {
		C.rdma_destroy_event_channel(ch)
		return nil, fmt.Errorf("rdmacm: O_NONBLOCK: %w", err)
	}
	fd, err := syscall.Dup(int(ch.fd))
	if err != nil {
		C.rdma_destroy_event_channel(ch)
		return nil, fmt.Errorf("rdmacm: dup: %w", err)
	}
	syscall.CloseOnExec(fd)
	c.f = os.NewFile(uintptr(fd), "rdma_cm")
	if c.rc, err = c.f.SyscallConn(); err != nil {
		c.f.Close()
		C.rdma_destroy_event_channel(ch)
		return nil, err
	}
	return c, nil
}

// Close destroys the channel; its IDs must be destroyed first. A
// GetEvent waiting meanwhile returns ErrClosed before the channel is
// freed.
func (c *EventChannel) Close() error {
	if c.closed.Swap(true) {
		return ErrClosed
	}
	// After closed is set: a GetEvent that has not seen it yet has set
	// its own deadline already, and this one replaces it.
	_ = c.f.SetReadDeadline(time.Unix(1, 0))
	c.getting.Lock()
	err := c.f.Close()
	C.rdma_destroy_event_channel(c.ch)
	c.getting.Unlock()
	return err
}

// ConnParam is struct rdma_conn_param for a connection whose QP the
// caller owns: QPNum is its number.
type ConnParam struct {
	PrivateData        []byte
	ResponderResources uint8
	InitiatorDepth     uint8
	RetryCount         uint8
	RNRRetryCount      uint8
	QPNum              uint32
	SRQ                bool
}

// Event is a struct rdma_cm_event, copied out and acknowledged. Param is
// from this side's point of view, as the kernel reports it: for a
// request, ResponderResources is what the peer's initiator depth asks
// this side to serve.
type Event struct {
	Type   EventType
	Status int // a negative errno, or a REJ's reason
	ID     *ID // for EventConnectRequest, a new ID for the request
	Listen *ID // for EventConnectRequest, the listening ID
	Param  ConnParam
	// UD is, for an ID of the UDP port space (CreateUDID), the SIDR
	// reply's service: on EventEstablished the address vector toward
	// it, its QP and its Q_Key. Param then holds the private data only.
	UD UDParam
}

// UDParam is the part of struct rdma_ud_param beyond the private data.
type UDParam struct {
	AH          verbs.AddressVector
	QPNum, QKey uint32
}

// ErrTimeout is GetEvent's error when the deadline passed without an event.
var ErrTimeout = errors.New("rdmacm: no event before the deadline")

// GetEvent waits until deadline (zero: for ever) for the channel's next
// event (rdma_get_cm_event), copies it and acknowledges it
// (rdma_ack_cm_event), so that no event is left to hold up a Destroy.
func (c *EventChannel) GetEvent(deadline time.Time) (Event, error) {
	c.getting.Lock()
	defer c.getting.Unlock()
	if c.closed.Load() {
		return Event{}, ErrClosed
	}
	if err := c.f.SetReadDeadline(deadline); err != nil {
		return Event{}, err
	}
	if c.closed.Load() { // Close's deadline may have come before ours
		return Event{}, ErrClosed
	}
	var ev *C.struct_rdma_cm_event
	var gerr error
	err := c.rc.Read(func(uintptr) bool {
		r, err := C.rdma_get_cm_event(c.ch, &ev)
		if r == 0 {
			gerr = nil
			return true
		}
		if errors.Is(err, syscall.EAGAIN) {
			return false
		}
		gerr = errnoOf("rdma_get_cm_event", r, err)
		return true
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if c.closed.Load() {
			return Event{}, ErrClosed
		}
		return Event{}, ErrTimeout
	}
	if err != nil {
		return Event{}, err
	}
	if gerr != nil {
		return Event{}, gerr
	}
	e := Event{Type: EventType(ev.event), Status: int(ev.status)}
	cp := C.gr_conn(ev)
	e.Param = ConnParam{ResponderResources: uint8(cp.responder_resources), InitiatorDepth: uint8(cp.initiator_depth),
		RetryCount: uint8(cp.retry_count), RNRRetryCount: uint8(cp.rnr_retry_count), QPNum: uint32(cp.qp_num),
		SRQ: cp.srq != 0}
	if C.gr_is_ud(ev.id) != 0 {
		// The union's other member: its private data is where the
		// connection's is, the rest is not a connection's.
		ud := C.gr_ud(ev)
		e.Param = ConnParam{}
		e.UD = UDParam{QPNum: uint32(ud.qp_num), QKey: uint32(ud.qkey)}
		a := &ud.ah_attr
		av := &e.UD.AH
		C.gr_ah_dgid(a, (*C.uint8_t)(unsafe.Pointer(&av.DGID[0])))
		av.FlowLabel, av.SGIDIndex = uint32(a.grh.flow_label), int(a.grh.sgid_index)
		av.HopLimit, av.TrafficClass, av.SL = uint8(a.grh.hop_limit), uint8(a.grh.traffic_class), uint8(a.sl)
		av.IsGlobal, av.PortNum = a.is_global != 0, int(a.port_num)
	}
	if cp.private_data != nil && cp.private_data_len > 0 {
		e.Param.PrivateData = C.GoBytes(cp.private_data, C.int(cp.private_data_len))
	}
	c.mu.Lock()
	if e.Type == EventConnectRequest {
		e.ID = &ID{id: ev.id, ch: c}
		c.ids[ev.id] = e.ID
		e.Listen = c.ids[ev.listen_id]
	} else {
		e.ID = c.ids[ev.id]
	}
	c.mu.Unlock()
	C.rdma_ack_cm_event(ev)
	return e, nil
}

// ID is struct rdma_cm_id of the TCP port space (RC connections) or of
// the UDP one (UD services, SIDR).
type ID struct {
	id *C.struct_rdma_cm_id
	ch *EventChannel
}

// CreateID creates an ID whose events go to c (rdma_create_id, RDMA_PS_TCP).
func (c *EventChannel) CreateID() (*ID, error) { return c.createID(C.RDMA_PS_TCP) }

// CreateUDID creates an ID of the UDP port space (RDMA_PS_UDP): Connect
// sends a SIDR request for a UD service, a listener's requests are SIDR
// requests, and Accept answers one with the QP p.QPNum names and the
// ID's Q_Key (RDMA_UDP_QKEY, which InitQPAttr gives the QP).
func (c *EventChannel) CreateUDID() (*ID, error) { return c.createID(C.RDMA_PS_UDP) }

func (c *EventChannel) createID(ps C.enum_rdma_port_space) (*ID, error) {
	var cid *C.struct_rdma_cm_id
	r, err := C.rdma_create_id(c.ch, &cid, nil, ps)
	if err := errnoOf("rdma_create_id", r, err); err != nil {
		return nil, err
	}
	id := &ID{id: cid, ch: c}
	c.mu.Lock()
	c.ids[cid] = id
	c.mu.Unlock()
	return id, nil
}

// sockaddr fills ss with ap; the zero AddrPort is left unset (nil).
func sockaddr(ss *C.struct_sockaddr_storage, ap netip.AddrPort) *C.struct_sockaddr {
	if !ap.IsValid() {
		return nil
	}
	a := ap.Addr()
	if a.Is4In6() {
		a = a.Unmap()
	}
	v6 := C.int(0)
	ip := a.AsSlice()
	if a.Is6() {
		v6 = 1
	}
	C.gr_sockaddr(ss, v6, (*C.uint8_t)(unsafe.Pointer(&ip[0])), C.uint16_t(ap.Port()))
	return (*C.struct_sockaddr)(unsafe.Pointer(ss))
}

// BindAddr binds the ID to a local address (rdma_bind_addr); an address
// of an RDMA device binds the ID to that device.
func (id *ID) BindAddr(ap netip.AddrPort) error {
	var ss C.struct_sockaddr_storage
	r, err := C.rdma_bind_addr(id.id, sockaddr(&ss, ap))
	return errnoOf("rdma_bind_addr", r, err)
}

// ResolveAddr resolves dst, from src if valid (rdma_resolve_addr); the
// outcome is an EventAddrResolved or EventAddrError.
func (id *ID) ResolveAddr(src, dst netip.AddrPort, timeout time.Duration) error {
	var s, d C.struct_sockaddr_storage
	r, err := C.rdma_resolve_addr(id.id, sockaddr(&s, src), sockaddr(&d, dst), C.int(timeout.Milliseconds()))
	return errnoOf("rdma_resolve_addr", r, err)
}

// ResolveRoute resolves the route to the resolved address
// (rdma_resolve_route): an EventRouteResolved or EventRouteError.
func (id *ID) ResolveRoute(timeout time.Duration) error {
	r, err := C.rdma_resolve_route(id.id, C.int(timeout.Milliseconds()))
	return errnoOf("rdma_resolve_route", r, err)
}

// DeviceName is the name of the RDMA device the ID is bound to, "" before
// it is (ibv_get_device_name of id->verbs).
func (id *ID) DeviceName() string {
	n := C.gr_device_name(id.id)
	if n == nil {
		return ""
	}
	return C.GoString(n)
}

func addrOf(sa *C.struct_sockaddr) netip.AddrPort {
	var ip [16]byte
	var port C.uint16_t
	switch C.gr_addr(sa, (*C.uint8_t)(unsafe.Pointer(&ip[0])), &port) {
	case 4:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[:4])), uint16(port))
	case 6:
		return netip.AddrPortFrom(netip.AddrFrom16(ip), uint16(port))
	}
	return netip.AddrPort{}
}

// LocalAddr is the ID's source address and port (rdma_get_local_addr).
func (id *ID) LocalAddr() netip.AddrPort { return addrOf(C.rdma_get_local_addr(id.id)) }

// PeerAddr is the peer's address and port (rdma_get_peer_addr).
func (id *ID) PeerAddr() netip.AddrPort { return addrOf(C.rdma_get_peer_addr(id.id)) }

// LocalPort is the ID's bound port (rdma_get_src_port): a listener
// bound to port 0 learns the one it got.
func (id *ID) LocalPort() uint16 { return uint16(C.ntohs(C.rdma_get_src_port(id.id))) }

// PortNum is the device's port the ID is bound to.
func (id *ID) PortNum() int { return int(id.id.port_num) }

// Listen listens for connection requests (rdma_listen).
func (id *ID) Listen(backlog int) error {
	r, err := C.rdma_listen(id.id, C.int(backlog))
	return errnoOf("rdma_listen", r, err)
}

// withParam calls f with p as a C struct rdma_conn_param whose private
// data is in C memory (cgo forbids Go pointers in what C is given).
func withParam(p *ConnParam, f func(*C.struct_rdma_conn_param) (C.int, error)) (C.int, error) {
	var cp C.struct_rdma_conn_param
	cp.responder_resources, cp.initiator_depth = C.uint8_t(p.ResponderResources), C.uint8_t(p.InitiatorDepth)
	cp.retry_count, cp.rnr_retry_count = C.uint8_t(p.RetryCount), C.uint8_t(p.RNRRetryCount)
	cp.qp_num = C.uint32_t(p.QPNum)
	if p.SRQ {
		cp.srq = 1
	}
	if len(p.PrivateData) > 0 {
		pd := C.CBytes(p.PrivateData)
		defer C.free(pd)
		cp.private_data, cp.private_data_len = pd, C.uint8_t(len(p.PrivateData))
	}
	return f(&cp)
}

// Connect sends the connection request (rdma_connect) for the QP p.QPNum
// names, which the caller has moved to INIT (InitQPAttr).
func (id *ID) Connect(p *ConnParam) error {
	r, err := withParam(p, func(cp *C.struct_rdma_conn_param) (C.int, error) {
		r, err := C.rdma_connect(id.id, cp)
		return r, err
	})
	return errnoOf("rdma_connect", r, err)
}

// Accept accepts a request (rdma_accept): the QP p.QPNum names must be in
// RTS already.
func (id *ID) Accept(p *ConnParam) error {
	r, err := withParam(p, func(cp *C.struct_rdma_conn_param) (C.int, error) {
		r, err := C.rdma_accept(id.id, cp)
		return r, err
	})
	return errnoOf("rdma_accept", r, err)
}

// Establish completes the active side after EventConnectResponse, once
// its QP is in RTS (rdma_establish: the RTU).
func (id *ID) Establish() error {
	r, err := C.rdma_establish(id.id)
	return errnoOf("rdma_establish", r, err)
}

// Reject refuses a request with private data (rdma_reject).
func (id *ID) Reject(privateData []byte) error {
	var pd unsafe.Pointer
	if len(privateData) > 0 {
		pd = C.CBytes(privateData)
		defer C.free(pd)
	}
	r, err := C.rdma_reject(id.id, pd, C.uint8_t(len(privateData)))
	return errnoOf("rdma_reject", r, err)
}

// Disconnect sends a DREQ (rdma_disconnect); the caller moves its QP to
// ERR.
func (id *ID) Disconnect() error {
	r, err := C.rdma_disconnect(id.id)
	return errnoOf("rdma_disconnect", r, err)
}

// Route is the first path record of an ID's route (struct
// rdma_route's path_rec), as the kernel's rdma_cm resolved it.
type Route struct {
	SGID, DGID     verbs.GID
	FlowLabel      uint32
	HopLimit       uint8
	TrafficClass   uint8
	MTU            verbs.MTU
	PacketLifetime uint8
}

// Route returns the ID's path: after EventRouteResolved, or on a
// request's ID; ok is false when it has none.
func (id *ID) Route() (r Route, ok bool) {
	var mtu C.uint8_t
	var flow C.uint32_t
	var hop, tclass, life C.uint8_t
	if C.gr_route(id.id, (*C.uint8_t)(unsafe.Pointer(&r.SGID[0])), (*C.uint8_t)(unsafe.Pointer(&r.DGID[0])),
		&flow, &hop, &tclass, &mtu, &life) == 0 {
		return Route{}, false
	}
	// The path record's word holds RawTraffic and reserved bits above
	// the 20-bit flow label, and librdmacm passes them on (rxe0 gave
	// 0x8213d7).
	r.FlowLabel, r.HopLimit, r.TrafficClass = uint32(flow)&0xFFFFF, uint8(hop), uint8(tclass)
	r.MTU, r.PacketLifetime = verbs.MTU(mtu), uint8(life)
	return r, true
}

// Option is an rdma_set_option option of level RDMA_OPTION_ID.
type Option int

// The ID's options.
const (
	OptionTOS        Option = C.RDMA_OPTION_ID_TOS         // uint8
	OptionReuseAddr  Option = C.RDMA_OPTION_ID_REUSEADDR   // int
	OptionAFOnly     Option = C.RDMA_OPTION_ID_AFONLY      // int
	OptionAckTimeout Option = C.RDMA_OPTION_ID_ACK_TIMEOUT // uint8
)

// SetOption sets one of the ID's options (rdma_set_option); v is given
// as the option's C type, a uint8_t or an int.
func (id *ID) SetOption(o Option, v int) error {
	var r C.int
	var err error
	switch o {
	case OptionTOS, OptionAckTimeout:
		b := C.uint8_t(v)
		r, err = C.rdma_set_option(id.id, C.RDMA_OPTION_ID, C.int(o), unsafe.Pointer(&b), C.size_t(unsafe.Sizeof(b)))
	default:
		i := C.int(v)
		r, err = C.rdma_set_option(id.id, C.RDMA_OPTION_ID, C.int(o), unsafe.Pointer(&i), C.size_t(unsafe.Sizeof(i)))
	}
	return errnoOf("rdma_set_option", r, err)
}

// Notify passes a QP's asynchronous event to the CM (rdma_notify): an
// IBV_EVENT_COMM_EST establishes a passive connection whose RTU was lost.
func (id *ID) Notify(event int) error {
	r, err := C.rdma_notify(id.id, C.enum_ibv_event_type(event))
	return errnoOf("rdma_notify", r, err)
}

// RejectECE refuses a request as rdma_reject_ece does: the REJ's reason
// is "vendor option not supported".
func (id *ID) RejectECE(privateData []byte) error {
	var pd unsafe.Pointer
	if len(privateData) > 0 {
		pd = C.CBytes(privateData)
		defer C.free(pd)
	}
	r, err := C.rdma_reject_ece(id.id, pd, C.uint8_t(len(privateData)))
	return errnoOf("rdma_reject_ece", r, err)
}

// Destroy destroys the ID (rdma_destroy_id).
func (id *ID) Destroy() error {
	id.ch.mu.Lock()
	delete(id.ch.ids, id.id)
	id.ch.mu.Unlock()
	r, err := C.rdma_destroy_id(id.id)
	return errnoOf("rdma_destroy_id", r, err)
}

// Migrate moves the ID, and its future events, to channel to
// (rdma_migrate_id): a request's ID leaves its listener's channel.
func (id *ID) Migrate(to *EventChannel) error {
	r, err := C.rdma_migrate_id(id.id, to.ch)
	if err := errnoOf("rdma_migrate_id", r, err); err != nil {
		return err
	}
	id.ch.mu.Lock()
	delete(id.ch.ids, id.id)
	id.ch.mu.Unlock()
	to.mu.Lock()
	to.ids[id.id] = id
	to.mu.Unlock()
	id.ch = to
	return nil
}

// InitQPAttr returns the attributes, and their mask, that move the ID's QP
// to state (rdma_init_qp_attr), as verbs' QP.Modify takes them. The
// address vector's flow label is dropped: verbs' hardware backend does not
// pass it on.
func (id *ID) InitQPAttr(state verbs.QPState) (*verbs.QPAttr, verbs.QPAttrMask, error) {
	var a C.struct_ibv_qp_attr
	var mask C.int
	a.qp_state = C.enum_ibv_qp_state(state)
	r, err := C.rdma_init_qp_attr(id.id, &a, &mask)
	if err := errnoOf("rdma_init_qp_attr", r, err); err != nil {
		return nil, 0, err
	}
	q := &verbs.QPAttr{QPState: verbs.QPState(a.qp_state), PathMTU: verbs.MTU(a.path_mtu), QKey: uint32(a.qkey),
		RQPSN: uint32(a.rq_psn), SQPSN: uint32(a.sq_psn), DestQPNum: uint32(a.dest_qp_num),
		QPAccessFlags: verbs.AccessFlags(a.qp_access_flags), PKeyIndex: int(a.pkey_index),
		MaxRdAtomic: int(a.max_rd_atomic), MaxDestRdAtomic: int(a.max_dest_rd_atomic),
		MinRNRTimer: uint8(a.min_rnr_timer), PortNum: int(a.port_num), Timeout: uint8(a.timeout),
		RetryCnt: uint8(a.retry_cnt), RNRRetry: uint8(a.rnr_retry)}
	av := &q.AHAttr
	C.gr_dgid(&a, (*C.uint8_t)(unsafe.Pointer(&av.DGID[0])))
	av.SGIDIndex, av.HopLimit = int(a.ah_attr.grh.sgid_index), uint8(a.ah_attr.grh.hop_limit)
	av.TrafficClass, av.SL = uint8(a.ah_attr.grh.traffic_class), uint8(a.ah_attr.sl)
	av.IsGlobal, av.PortNum = a.ah_attr.is_global != 0, int(a.ah_attr.port_num)
	return q, verbs.QPAttrMask(mask), nil
}
