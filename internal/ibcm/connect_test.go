package ibcm

import (
	"bytes"
	"math/bits"
	"slices"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/mad"
)

func pair(t *testing.T, seed uint64) (*world, *node, *node) {
	w := newWorld(t, seed)
	a := w.addNode("10.99.0.2", 0x505400fffe990002, nil)
	b := w.addNode("10.99.0.3", 0x505400fffe990003, nil)
	return w, a, b
}

func TestConnect(t *testing.T) {
	w, a, b := pair(t, 1)
	id := a.connect(b, []byte("hello"))
	w.run(time.Second)
	mustCheck(t, a, b)

	if got := a.eventsOf(id); !slices.Equal(got, []EventType{EventReply, EventEstablished}) {
		t.Fatalf("active events %v", got)
	}
	req, ok := b.last(EventConnectRequest)
	if !ok || !bytes.HasPrefix(req.REQ.PrivateData, []byte("hello")) || req.Peer != a.addr {
		t.Fatalf("connect request %+v", req)
	}
	if got := b.eventsOf(req.ID); !slices.Equal(got, []EventType{EventConnectRequest, EventEstablished}) {
		t.Fatalf("passive events %v", got)
	}
	if est, _ := b.last(EventEstablished); !bytes.HasPrefix(est.PrivateData, []byte("rtu")) {
		t.Errorf("RTU private data %q", est.PrivateData)
	}
	// The handshake on the wire: REQ, REP, RTU, all with the REQ's TID.
	if got := w.sentAttrs(a, b); !slices.Equal(got, []mad.AttrID{mad.AttrREQ, mad.AttrRTU}) {
		t.Errorf("active sent %v", got)
	}
	if got := w.sentAttrs(b, a); !slices.Equal(got, []mad.AttrID{mad.AttrREP}) {
		t.Errorf("passive sent %v", got)
	}
	tid := uint64(1)<<32 | uint64(bits.ReverseBytes32(uint32(id)))
	for _, p := range w.sent {
		if h, _ := mad.ParseCMHeader(p.mad[:]); h.TID != tid {
			t.Errorf("%v with TID %#x, want %#x", h.AttrID, h.TID, tid)
		}
	}
	// The two QPs' attributes mirror each other.
	qa, qb := a.attrs[id], b.attrs[req.ID]
	if qa.DestQPN != b.qpn || qb.DestQPN != req.REQ.LocalQPN || qa.SQPSN != qb.RQPSN || qb.SQPSN != qa.RQPSN {
		t.Errorf("QPNs/PSNs: active %+v passive %+v", qa, qb)
	}
	if qa.MaxRdAtomic != qb.MaxDestRdAtomic || qa.MaxDestRdAtomic != qb.MaxRdAtomic {
		t.Errorf("RDMA READ depths: active %+v passive %+v", qa, qb)
	}
	// rdma_cm defaults: packet life time 16, ACK delay 15 → ACK timeout 17
	// for both QPs; RNR retries cross over (REQ's for the passive QP,
	// REP's for the active one).
	if qa.Timeout != 17 || qb.Timeout != 17 || qb.RNRRetry != 6 || qa.RNRRetry != 7 || qa.RetryCount != 7 || qb.RetryCount != 7 {
		t.Errorf("timeouts and retries: active %+v passive %+v", qa, qb)
	}
	if qa.PathMTU != 3 || qb.PathMTU != 3 || qb.RemoteGID.Addr() != a.addr || qa.RemoteGID.Addr() != b.addr ||
		qa.FlowLabel != qb.FlowLabel || qb.HopLimit != 64 || qa.PKey != 0xFFFF {
		t.Errorf("path: active %+v passive %+v", qa, qb)
	}
	if s, _ := a.m.State(id); s != StateEstablished {
		t.Errorf("active state %v", s)
	}
	if a.m.HalfOpen() != 0 || b.m.HalfOpen() != 0 {
		t.Error("half-open after establishment")
	}
}

// TestREQFields checks the REQ Connect builds against what the kernel's
// cm_format_req puts in rping.pcap's REQ, and its TID form.
func TestREQFields(t *testing.T) {
	w, a, b := pair(t, 1)
	p := a.params(b, 0x31, nil)
	p.ResponseTimeout, p.PacketLifetime = 20, 18 // Linux 6.1, as in the capture
	id, err := a.m.Connect(p, w.now, &a.out)
	if err != nil {
		t.Fatal(err)
	}
	var req mad.REQ
	if err := req.Parse(a.out.Sends()[0].MAD[:]); err != nil {
		t.Fatal(err)
	}
	h, _ := mad.ParseCMHeader(a.out.Sends()[0].MAD[:])
	switch {
	case req.LocalCommID != uint32(id) || h.TID != 1<<32|uint64(bits.ReverseBytes32(uint32(id))):
		t.Errorf("comm ID %#x TID %#x", req.LocalCommID, h.TID)
	case req.RemoteCMResponseTimeout != 20 || req.LocalCMResponseTimeout != 20 || req.MaxCMRetries != 15:
		t.Errorf("timeouts %+v", req)
	case req.Primary.LocalACKTimeout != 19 || req.Primary.LocalLID != 0xFFFF || req.Primary.SubnetLocal:
		t.Errorf("path %+v", req.Primary)
	case req.PKey != 0xFFFF || req.LocalCAGUID != 0x505400fffe990002 || req.ServiceID != 0x1061c06:
		t.Errorf("%+v", req)
	}
	// One hop: subnet local, LIDs 0.
	p.Path.HopLimit = 1
	a.out.Reset()
	if _, err := a.m.Connect(p, w.now, &a.out); err != nil {
		t.Fatal(err)
	}
	_ = req.Parse(a.out.Sends()[0].MAD[:])
	if !req.Primary.SubnetLocal || req.Primary.LocalLID != 0 {
		t.Errorf("one-hop path %+v", req.Primary)
	}
	// Values that do not fit are refused before any record is made.
	p.PrivateData = make([]byte, 93)
	if _, err := a.m.Connect(p, w.now, &a.out); err == nil || a.m.Len() != 2 {
		t.Errorf("93 bytes of private data: %v, %d records", err, a.m.Len())
	}
}

func TestNoListener(t *testing.T) {
	w, a, b := pair(t, 1)
	b.listen = false
	id := a.connect(b, nil)
	w.run(time.Second)
	ev, ok := a.last(EventRejected)
	if !ok || ev.ID != id || ev.Reason != mad.RejectInvalidServiceID || ev.MsgRejected != mad.RespondREQ || ev.Local {
		t.Fatalf("rejection %+v", ev)
	}
	if a.m.Len() != 0 || b.m.Len() != 0 || b.count(EventConnectRequest) != 0 {
		t.Errorf("records left: %d, %d", a.m.Len(), b.m.Len())
	}
	// The REJ: comm ID 0, the REQ's TID.
	p := w.sent[1]
	var rej mad.REJ
	if err := rej.Parse(p.mad[:]); err != nil || rej.LocalCommID != 0 || rej.RemoteCommID != uint32(id) {
		t.Errorf("REJ %+v %v", rej, err)
	}
}

// TestListeningVerdicts: a listener that refuses a REQ (rdma_cm: no
// listener for its address) answers REJ "consumer defined" with comm ID
// 0 and keeps no record; one that drops it answers nothing, and the REQ
// is retransmitted until the listener delivers it.
func TestListeningVerdicts(t *testing.T) {
	w, a, b := pair(t, 1)
	b.verdict = Refuse
	id := a.connect(b, nil)
	w.run(time.Second)
	ev, ok := a.last(EventRejected)
	if !ok || ev.ID != id || ev.Reason != mad.RejectConsumer || ev.MsgRejected != mad.RespondREQ {
		t.Fatalf("rejection %+v", ev)
	}
	var rej mad.REJ
	if err := rej.Parse(w.sent[1].mad[:]); err != nil || rej.LocalCommID != 0 || rej.RemoteCommID != uint32(id) {
		t.Errorf("REJ %+v %v", rej, err)
	}
	if a.m.Len() != 0 || b.m.Len() != 0 || b.count(EventConnectRequest) != 0 {
		t.Errorf("records left: %d, %d", a.m.Len(), b.m.Len())
	}

	b.verdict = Drop
	id = a.connect(b, nil)
	w.run(3 * time.Second) // the first REQ and a retransmission or two
	if b.m.Len() != 0 || b.m.Counters().Dropped < 2 || b.count(EventConnectRequest) != 0 {
		t.Fatalf("dropping listener: %d records, %d dropped", b.m.Len(), b.m.Counters().Dropped)
	}
	b.verdict = Deliver
	w.run(10 * time.Second)
	if ev, ok := a.last(EventEstablished); !ok || ev.ID != id {
		t.Fatalf("after the backlog cleared: %+v", ev)
	}
}

func TestConsumerReject(t *testing.T) {
	w, a, b := pair(t, 1)
	b.accept = false
	id := a.connect(b, nil)
	w.run(10 * time.Millisecond)
	req, _ := b.last(EventConnectRequest)
	if err := b.m.Reject(req.ID, mad.RejectConsumer, nil, []byte("go away"), w.now, &b.out); err != nil {
		t.Fatal(err)
	}
	w.flush(b)
	w.run(time.Second)
	ev, ok := a.last(EventRejected)
	if !ok || ev.ID != id || ev.Reason != mad.RejectConsumer || !bytes.HasPrefix(ev.PrivateData, []byte("go away")) ||
		len(ev.PrivateData) != mad.REJPrivateDataSize {
		t.Fatalf("rejection %+v", ev)
	}
	if a.m.Len() != 0 || b.m.Len() != 0 {
		t.Errorf("records left: %d, %d", a.m.Len(), b.m.Len())
	}
	if err := b.m.Reject(req.ID, mad.RejectConsumer, nil, nil, w.now, &b.out); err != ErrUnknownID {
		t.Errorf("second Reject: %v", err)
	}
}

// TestActiveRejectsREP: the active side refuses the REP (its QP could not
// be moved to RTR): the passive side gets the REJ, both forget.
func TestActiveRejectsREP(t *testing.T) {
	w, a, b := pair(t, 1)
	a.ready = false
	id := a.connect(b, nil)
	w.run(10 * time.Millisecond)
	if err := a.m.Reject(id, mad.RejectConsumer, nil, nil, w.now, &a.out); err != nil {
		t.Fatal(err)
	}
	w.flush(a)
	w.run(time.Second)
	ev, ok := b.last(EventRejected)
	if !ok || ev.MsgRejected != mad.RespondREP || ev.Reason != mad.RejectConsumer {
		t.Fatalf("passive got %+v", ev)
	}
	// The passive side had sent its REP: it goes through timewait.
	if s, ok := b.m.State(ev.ID); ok {
		t.Errorf("passive state %v", s)
	}
	w.run(time.Second)
	if a.m.Len() != 0 || b.m.Len() != 0 {
		t.Errorf("records left: %d, %d", a.m.Len(), b.m.Len())
	}
}

func TestAPIStateErrors(t *testing.T) {
	w, a, b := pair(t, 1)
	id := a.connect(b, nil)
	if err := a.m.Ready(id, nil, &a.out); err != ErrState {
		t.Errorf("Ready before the REP: %v", err)
	}
	if _, err := a.m.Accept(id, AcceptParams{}, w.now, &a.out); err != ErrState {
		t.Errorf("Accept of an active connection: %v", err)
	}
	if err := a.m.Disconnect(id, nil, w.now, &a.out); err != ErrState {
		t.Errorf("Disconnect before establishment: %v", err)
	}
	if err := a.m.Established(id, &a.out); err != ErrState {
		t.Errorf("Established on the active side: %v", err)
	}
	if err := a.m.SIDRReply(id, SIDRReplyParams{}, &a.out); err != ErrState {
		t.Errorf("SIDRReply: %v", err)
	}
	if err := a.m.Ready(12345, nil, &a.out); err != ErrUnknownID {
		t.Errorf("unknown ID: %v", err)
	}
	w.run(time.Second)
	if err := a.m.Reject(id, mad.RejectConsumer, nil, nil, w.now, &a.out); err != ErrState {
		t.Errorf("Reject when established: %v", err)
	}
	if err := a.m.Disconnect(id, make([]byte, 221), w.now, &a.out); err == nil {
		t.Error("DREQ with 221 bytes of private data")
	}
	if s, _ := a.m.State(id); s != StateEstablished {
		t.Errorf("a refused Disconnect changed the state to %v", s)
	}
}

// TestLoopback: both ends on one device, one Manager (rdma-core's tests
// run both players on one device): its own REQ comes back to it.
func TestLoopback(t *testing.T) {
	w := newWorld(t, 1)
	a := w.addNode("10.99.0.2", 0x505400fffe990002, nil)
	id := a.connect(a, nil)
	w.run(time.Second)
	req, _ := a.last(EventConnectRequest)
	if s, _ := a.m.State(id); s != StateEstablished {
		t.Fatalf("active state %v, events %v", s, a.events)
	}
	if s, _ := a.m.State(req.ID); s != StateEstablished || req.ID == id {
		t.Fatalf("passive state %v", s)
	}
	if err := a.m.Disconnect(id, nil, w.now, &a.out); err != nil {
		t.Fatal(err)
	}
	w.flush(a)
	w.run(time.Second)
	if a.m.Len() != 0 || a.count(EventTimewaitExit) != 2 {
		t.Fatalf("%d records, events %v", a.m.Len(), a.events)
	}
	mustCheck(t, a)
}
