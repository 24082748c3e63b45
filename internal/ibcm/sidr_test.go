package ibcm

import (
	"bytes"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/mad"
)

func sidrParams(b *node) SIDRParams {
	return SIDRParams{Peer: b.addr, ServiceID: mad.RDMAServiceID(mad.PortSpaceUDP, 7174), PrivateData: []byte("udp?")}
}

func TestSIDR(t *testing.T) {
	w, a, b := pair(t, 1)
	id, err := a.m.SIDRRequest(sidrParams(b), w.now, &a.out)
	if err != nil {
		t.Fatal(err)
	}
	w.flush(a)
	w.run(10 * time.Millisecond)
	req, ok := b.last(EventSIDRRequest)
	if !ok || req.ServiceID != 0x1111c06 || req.PKey != 0xFFFF || !bytes.HasPrefix(req.PrivateData, []byte("udp?")) {
		t.Fatalf("passive events %v", b.events)
	}
	if err := b.m.SIDRReply(req.ID, SIDRReplyParams{Status: mad.SIDRSuccess, QPN: 0x1234, QKey: 0x01234567,
		PrivateData: []byte("here")}, &b.out); err != nil {
		t.Fatal(err)
	}
	w.flush(b)
	w.run(10 * time.Millisecond)
	rep, ok := a.last(EventSIDRReply)
	if !ok || rep.ID != id || rep.SIDRREP.Status != mad.SIDRSuccess || rep.SIDRREP.QPN != 0x1234 ||
		rep.SIDRREP.QKey != 0x01234567 || rep.SIDRREP.ServiceID != req.ServiceID ||
		!bytes.HasPrefix(rep.SIDRREP.PrivateData, []byte("here")) {
		t.Fatalf("active events %v", a.events)
	}
	if a.m.Len() != 0 || b.m.Len() != 0 {
		t.Errorf("records left %d %d", a.m.Len(), b.m.Len())
	}
	// The SIDR_REP carries the SIDR_REQ's TID.
	h0, _ := mad.ParseHeader(w.sent[0].mad[:])
	h1, _ := mad.ParseHeader(w.sent[1].mad[:])
	if h0.TID != h1.TID || h0.TID>>32 != 1 {
		t.Errorf("TIDs %#x %#x", h0.TID, h1.TID)
	}
	mustCheck(t, a, b)
}

func TestSIDRNoListener(t *testing.T) {
	w, a, b := pair(t, 1)
	b.listen = false
	if _, err := a.m.SIDRRequest(sidrParams(b), w.now, &a.out); err != nil {
		t.Fatal(err)
	}
	w.flush(a)
	w.run(10 * time.Millisecond)
	rep, ok := a.last(EventSIDRReply)
	if !ok || rep.SIDRREP.Status != mad.SIDRUnsupported || b.m.Len() != 0 {
		t.Fatalf("events %v, passive records %d", a.events, b.m.Len())
	}
}

// TestSIDRRetransmitAndDuplicates: lost answers are covered by
// retransmission; a duplicate while the request waits for the driver is
// dropped; the request times out when nobody answers.
func TestSIDRRetransmitAndDuplicates(t *testing.T) {
	w, a, b := pair(t, 1)
	p := sidrParams(b)
	p.Timeout, p.MaxRetries = 100*time.Millisecond, 3
	if _, err := a.m.SIDRRequest(p, w.now, &a.out); err != nil {
		t.Fatal(err)
	}
	w.flush(a)
	w.run(time.Second)
	if b.count(EventSIDRRequest) != 1 || b.m.Counters().Duplicates != 3 {
		t.Fatalf("passive: %d requests, %d duplicates", b.count(EventSIDRRequest), b.m.Counters().Duplicates)
	}
	ev, ok := a.last(EventTimeout)
	if !ok || ev.Unanswered != mad.AttrSIDRREQ || a.m.Len() != 0 {
		t.Fatalf("active events %v", a.events)
	}
	if got := sendTimes(w, a, mad.AttrSIDRREQ); len(got) != 4 || got[3] != 300*time.Millisecond {
		t.Errorf("SIDR_REQ sent at %v", got)
	}
	// The driver never answered: the request is abandoned after
	// AcceptTimeout. Destroying it instead answers "rejected".
	w.run(80 * time.Second)
	if b.count(EventAbandoned) != 1 || b.m.Len() != 0 {
		t.Errorf("passive events %v", b.events)
	}
	w2, a2, b2 := pair(t, 2)
	if _, err := a2.m.SIDRRequest(sidrParams(b2), w2.now, &a2.out); err != nil {
		t.Fatal(err)
	}
	w2.flush(a2)
	w2.run(10 * time.Millisecond)
	req, _ := b2.last(EventSIDRRequest)
	if err := b2.m.Destroy(req.ID, nil, w2.now, &b2.out); err != nil {
		t.Fatal(err)
	}
	w2.flush(b2)
	w2.run(10 * time.Millisecond)
	if rep, ok := a2.last(EventSIDRReply); !ok || rep.SIDRREP.Status != mad.SIDRReject {
		t.Errorf("answer after Destroy: %v", a2.events)
	}
}
