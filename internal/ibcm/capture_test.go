package ibcm

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/mad"
)

// capturedMAD returns a MAD of rping.pcap (Linux 6.1 rxe on both sides),
// from the seed corpus internal/mad keeps of the captures.
func capturedMAD(t *testing.T, frame int) []byte {
	t.Helper()
	path := filepath.Join("..", "mad", "testdata", "fuzz", "FuzzDecode", "rping-"+strconv.Itoa(frame))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[1], "[]byte(") {
		t.Fatalf("%s: not a fuzz seed", path)
	}
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
	if err != nil {
		t.Fatal(err)
	}
	return []byte(s)
}

// TestKernelBytes replays rping.pcap's connection: configured like the two
// rxe hosts of the capture, each Manager produces the very MADs the
// kernel sent, byte for byte, and accepts the other side's.
func TestKernelBytes(t *testing.T) {
	client, server := netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.99.0.3")
	now := epoch
	// IDSeed makes each side's first comm ID the capture's; TIDHigh is
	// the kernel MAD agent's hi_tid (2).
	act := New(Config{CAGUID: 0x505400fffe990002, TIDHigh: 2, IDSeed: 0x073d5972 ^ 1})
	pas := New(Config{CAGUID: 0x505400fffe990003, TIDHigh: 2, IDSeed: 0xdf09ee72 ^ 1,
		Listening: func(sid mad.ServiceID, from netip.Addr, pd []byte) Verdict {
			h, err := mad.ParseCMAHeader(pd)
			if err == nil && sid == mad.RDMAServiceID(mad.PortSpaceTCP, 7174) && h.Dst == server {
				return Deliver
			}
			return NoListener
		}})
	var ao, po Output
	expect := func(o *Output, frame int, what string) {
		t.Helper()
		want := capturedMAD(t, frame)
		if len(o.Sends()) != 1 {
			t.Fatalf("%s: %d MADs", what, len(o.Sends()))
		}
		if got := o.Sends()[0].MAD[:]; !bytes.Equal(got, want) {
			t.Fatalf("%s differs from rping.pcap frame %d:\n got % x\nwant % x", what, frame, got, want)
		}
		o.Reset()
	}

	// rping -c: rdma_connect with rping's parameters, on Linux 6.1
	// (response timeout 20, packet life time 18).
	cma, _ := (&mad.CMAHeader{SrcPort: 0xd519, Src: client, Dst: server}).Append(nil)
	id, err := act.Connect(ConnectParams{Peer: server, ServiceID: mad.RDMAServiceID(mad.PortSpaceTCP, 7174),
		QPN: 0x31, StartingPSN: 0x0337dc, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7,
		PathMTU: 3, Path: mad.Path{LocalGID: mad.GIDFromAddr(client), RemoteGID: mad.GIDFromAddr(server),
			FlowLabel: mad.RDMACMFlowLabel(0xd519, 7174), HopLimit: 64},
		PacketLifetime: 18, ResponseTimeout: 20, PrivateData: cma}, now, &ao)
	if err != nil {
		t.Fatal(err)
	}
	expect(&ao, 1, "REQ")

	// rping -s: the kernel's REQ arrives; rdma_accept.
	pas.HandleMAD(client, capturedMAD(t, 1), now, &po)
	if len(po.Events()) != 1 || po.Events()[0].Type != EventConnectRequest {
		t.Fatalf("passive events %v", po.Events())
	}
	pid := po.Events()[0].ID
	po.Reset()
	q, err := pas.Accept(pid, AcceptParams{QPN: 0x1d, StartingPSN: 0x7281ca, ResponderResources: 1,
		InitiatorDepth: 1, RNRRetryCount: 7}, now, &po)
	if err != nil {
		t.Fatal(err)
	}
	// rxe moved its QP with these: they start sending at the REQ's PSN.
	if q.DestQPN != 0x31 || q.SQPSN != 0x0337dc || q.RQPSN != 0x7281ca || q.Timeout != 19 || q.PathMTU != 3 {
		t.Errorf("passive QP attributes %+v", q)
	}
	expect(&po, 2, "REP")

	act.HandleMAD(server, capturedMAD(t, 2), now, &ao)
	if len(ao.Events()) != 1 || ao.Events()[0].Type != EventReply {
		t.Fatalf("active events %v", ao.Events())
	}
	if qa := ao.Events()[0].QP; qa.DestQPN != 0x1d || qa.SQPSN != 0x7281ca || qa.Timeout != 19 ||
		mad.FlowLabelSourcePort(qa.FlowLabel) != 59946 {
		t.Errorf("active QP attributes %+v", qa)
	}
	ao.Reset()
	if err := act.Ready(id, nil, &ao); err != nil {
		t.Fatal(err)
	}
	expect(&ao, 3, "RTU")
	pas.HandleMAD(client, capturedMAD(t, 3), now, &po)
	if s, _ := pas.State(pid); s != StateEstablished {
		t.Fatalf("passive state %v", s)
	}
	po.Reset()

	// The client disconnects.
	now = now.Add(50 * time.Millisecond)
	if err := act.Disconnect(id, nil, now, &ao); err != nil {
		t.Fatal(err)
	}
	expect(&ao, 40, "DREQ")
	pas.HandleMAD(client, capturedMAD(t, 40), now, &po)
	if len(po.Events()) != 1 || po.Events()[0].Type != EventDisconnectRequest {
		t.Fatalf("passive events %v", po.Events())
	}
	po.Reset()
	if err := pas.Disconnect(pid, nil, now, &po); err != nil {
		t.Fatal(err)
	}
	expect(&po, 41, "DREP")
	act.HandleMAD(server, capturedMAD(t, 41), now, &ao)
	if len(ao.Events()) != 1 || ao.Events()[0].Type != EventDisconnected {
		t.Fatalf("active events %v", ao.Events())
	}
	// Timewait: 2^(19−8) ms on both sides with Linux 6.1's life time.
	ao.Reset()
	if d, _ := act.Deadline(); d.Sub(now) != 2048*time.Millisecond {
		t.Errorf("active timewait %v", d.Sub(now))
	}
	if d, _ := pas.Deadline(); d.Sub(now) != 2048*time.Millisecond {
		t.Errorf("passive timewait %v", d.Sub(now))
	}
}
