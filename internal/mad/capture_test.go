package mad

import (
	"bytes"
	"net/netip"
	"testing"
)

// TestCaptureReencode decodes every CM MAD of the rdma_cm captures and
// re-encodes it from the parsed values to the identical 256 bytes.
func TestCaptureReencode(t *testing.T) {
	mads := captureMADs(t)
	counts := map[AttrID]int{}
	for _, fm := range mads {
		h, m, err := Decode(fm.mad)
		if err != nil {
			t.Fatalf("%v: %v", fm, err)
		}
		counts[h.AttrID]++
		b, err := AppendMAD(nil, &h, m)
		if err != nil {
			t.Fatalf("%v: encode: %v", fm, err)
		}
		if !bytes.Equal(b, fm.mad) {
			t.Errorf("%v: %v re-encodes differently:\n got % x\nwant % x", fm, h.AttrID, b, fm.mad)
		}
		if fm.src != 1 || fm.udpSrc != 55410 {
			t.Errorf("%v: from QP %v port %d, want QP 1 and rxe's QP 1 port 55410", fm, fm.src, fm.udpSrc)
		}
	}
	// rping: REQ, REP, RTU, DREQ, DREP; write_bw_rdmacm: two connections
	// (the control QP and the data QP) set up and torn down.
	want := map[AttrID]int{AttrREQ: 3, AttrREP: 3, AttrRTU: 3, AttrDREQ: 3, AttrDREP: 3}
	for a, n := range want {
		if counts[a] != n {
			t.Errorf("%d %v in the captures, want %d", counts[a], a, n)
		}
	}
}

// TestCaptureRping checks the rping handshake field by field against what
// rping's log and the kernel's rdma_cm imply.
func TestCaptureRping(t *testing.T) {
	var mads []frameMAD
	for _, fm := range captureMADs(t) {
		if fm.file == "rping.pcap" {
			mads = append(mads, fm)
		}
	}
	if len(mads) != 5 {
		t.Fatalf("%d MADs in rping.pcap, want 5", len(mads))
	}
	var req REQ
	if err := req.Parse(mads[0].mad); err != nil {
		t.Fatal(err)
	}
	h, _ := ParseHeader(mads[0].mad)
	ps, port, ok := req.ServiceID.RDMA()
	switch {
	case h.TID != 0x0000000272593d07:
		t.Errorf("TID %#x", h.TID)
	case !ok || ps != PortSpaceTCP || port != 7174:
		t.Errorf("service ID %v: %v %d", req.ServiceID, ps, port)
	case req.LocalQPN != 0x31 || req.StartingPSN != 0x0337dc || req.PathMTU != 3:
		t.Errorf("QPN %#x PSN %#x MTU %d", req.LocalQPN, req.StartingPSN, req.PathMTU)
	case req.RemoteCMResponseTimeout != 20 || req.LocalCMResponseTimeout != 20 || req.MaxCMRetries != 15:
		t.Errorf("CM timeouts %d/%d, retries %d: rdma_cm's CMA_CM_RESPONSE_TIMEOUT and CMA_MAX_CM_RETRIES are 20 and 15",
			req.RemoteCMResponseTimeout, req.LocalCMResponseTimeout, req.MaxCMRetries)
	case req.ResponderResources != 1 || req.InitiatorDepth != 1 || req.RetryCount != 7 || req.RNRRetryCount != 7:
		t.Errorf("rping's conn params: %+v", req)
	case req.Primary.LocalLID != 0xFFFF || req.Primary.HopLimit != 64 || req.Primary.SubnetLocal:
		t.Errorf("RoCE path: %+v", req.Primary)
	case req.Primary.LocalGID.Addr() != netip.MustParseAddr("10.99.0.2") || req.Primary.LocalGID[10] != 0xFF:
		t.Errorf("local GID %v is not ::ffff:10.99.0.2", req.Primary.LocalGID)
	case req.Primary.LocalACKTimeout != 19:
		// Linux 6.1: packet life time 18 (CMA_IBOE_PACKET_LIFETIME, 16
		// in later kernels), ACK delay 15: cm_ack_timeout gives 19.
		t.Errorf("local ACK timeout %d", req.Primary.LocalACKTimeout)
	case req.HasAlternatePath():
		t.Error("alternate path")
	}
	cma, err := ParseCMAHeader(req.PrivateData)
	if err != nil {
		t.Fatal(err)
	}
	if cma.SrcPort != 0xd519 || cma.Src != netip.MustParseAddr("10.99.0.2") || cma.Dst != netip.MustParseAddr("10.99.0.3") {
		t.Errorf("CMA header %+v", cma)
	}
	// The flow label rdma_cm computed from the ports, and the UDP source
	// port both data QPs then use (frames 4 on in rping.pcap).
	if fl := RDMACMFlowLabel(cma.SrcPort, port); fl != req.Primary.FlowLabel || fl != 0x9ea0d {
		t.Errorf("flow label %#x, REQ carries %#x", fl, req.Primary.FlowLabel)
	}
	if sp := FlowLabelSourcePort(req.Primary.FlowLabel); sp != 59946 {
		t.Errorf("data QP source port %d, capture shows 59946", sp)
	}

	var rep REP
	if err := rep.Parse(mads[1].mad); err != nil {
		t.Fatal(err)
	}
	if rep.RemoteCommID != req.LocalCommID || rep.LocalQPN != 0x1d || rep.StartingPSN != 0x7281ca ||
		rep.TargetACKDelay != 15 || rep.LocalCAGUID != 0x505400fffe990003 {
		t.Errorf("REP %+v", rep)
	}
	var rtu RTU
	var dreq DREQ
	var drep DREP
	if rtu.Parse(mads[2].mad) != nil || dreq.Parse(mads[3].mad) != nil || drep.Parse(mads[4].mad) != nil {
		t.Fatal("RTU, DREQ, DREP")
	}
	if rtu.LocalCommID != req.LocalCommID || rtu.RemoteCommID != rep.LocalCommID {
		t.Errorf("RTU %+v", rtu)
	}
	// The client disconnects: its DREQ names the server's QPN; the DREP
	// swaps the comm IDs back.
	if dreq.LocalCommID != req.LocalCommID || dreq.RemoteQPN != rep.LocalQPN ||
		drep.LocalCommID != rep.LocalCommID || drep.RemoteCommID != req.LocalCommID {
		t.Errorf("DREQ %+v DREP %+v", dreq, drep)
	}
	// Every MAD of one connection carries the REQ's TID: REP, RTU, and (the
	// kernel forms DREQ TIDs as REQ TIDs, from the agent and the local comm
	// ID) the client's DREQ, and the DREP the DREQ's.
	for _, fm := range mads {
		if h, _ := ParseHeader(fm.mad); h.TID != 0x0000000272593d07 {
			t.Errorf("%v: TID %#x", fm, h.TID)
		}
	}
}

// TestCaptureWriteBW checks the two connections of perftest -R: each
// connection's flow label matches its ports and the data source port its
// capture shows.
func TestCaptureWriteBW(t *testing.T) {
	var reqs []REQ
	for _, fm := range captureMADs(t) {
		if fm.file != "write_bw_rdmacm.pcap" {
			continue
		}
		if h, _ := ParseHeader(fm.mad); h.AttrID == AttrREQ {
			var r REQ
			if err := r.Parse(fm.mad); err != nil {
				t.Fatal(err)
			}
			reqs = append(reqs, r)
		}
	}
	if len(reqs) != 2 {
		t.Fatalf("%d REQs, want 2", len(reqs))
	}
	// The control QPs (0x2f, 0x1b) send from 51649, the data QPs (0x30,
	// 0x1c) from 53492: tshark -r write_bw_rdmacm.pcap -e udp.srcport.
	wantPort := []uint16{51649, 53492}
	for i, r := range reqs {
		cma, err := ParseCMAHeader(r.PrivateData)
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := r.ServiceID.RDMA()
		if port != 18515 {
			t.Errorf("perftest port %d", port)
		}
		if fl := RDMACMFlowLabel(cma.SrcPort, port); fl != r.Primary.FlowLabel {
			t.Errorf("flow label %#x, REQ carries %#x", fl, r.Primary.FlowLabel)
		}
		if sp := FlowLabelSourcePort(r.Primary.FlowLabel); sp != wantPort[i] {
			t.Errorf("connection %d: data source port %d, capture shows %d", i, sp, wantPort[i])
		}
	}
}
