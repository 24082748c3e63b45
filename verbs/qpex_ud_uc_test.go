package verbs

import (
	"bytes"
	"testing"
)

// Ports of rdma-core's pyverbs scenarios for UD (tests/test_qpex.py, and
// test_modify_ud_qp and test_create_ud_qp_with_privileged_qkey of
// tests/test_qp.py), with u.traffic run over UC as well. As in pyverbs, the
// client sends 'c's, the server 's's, and a UD receive buffer holds the
// 40-byte GRH before the message.

// pyTrafficIters is u.traffic's iteration count (pyverbs uses 100).
const pyTrafficIters = 100

// pyPlayers opens the client and server of a pyverbs test: UD QPs in RTS
// with Q_Key 0x11111111, or UC QPs connected to each other.
func pyPlayers(t *testing.T, typ QPType) (client, server *rcEnd) {
	t.Helper()
	o := endOpts{cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	if typ == QPTypeUD {
		return newUDEnd(t, "127.0.1.1", o), newUDEnd(t, "127.0.1.2", o)
	}
	return newUCPair(t, MTU1024, o)
}

// pyTraffic is u.traffic: iters rounds of a client send answered by a
// server send, each side validating what it received.
func pyTraffic(t *testing.T, client, server *rcEnd, iters, size int, op WROpcode) {
	t.Helper()
	typ := client.qp.Type()
	grh := 0
	if typ == QPTypeUD {
		grh = GRHSize
	}
	const imm = 0x1234 // pyverbs IMM_DATA
	var toServer, toClient UDParams
	if typ == QPTypeUD {
		toServer = UDParams{AH: ahTo(t, client, server), RemoteQPN: server.qp.QPN(), RemoteQKey: udQKey}
		toClient = UDParams{AH: ahTo(t, server, client), RemoteQPN: client.qp.QPN(), RemoteQKey: udQKey}
	}
	// Send from offset 64 KiB - size; receive at 0.
	sendOff := len(client.buf) - 4096
	recv := func(e *rcEnd) { mustPostRecv(t, e.qp, RecvWR{SGList: []SGE{e.mr.SGE(0, grh+size)}}) }
	check := func(e *rcEnd, from *rcEnd, want byte) {
		t.Helper()
		wc := waitN(t, e.cq, 1)[0]
		wantLen := uint32(grh + size)
		if wc.Status != WCSuccess || wc.Opcode != WCRecv || wc.ByteLen != wantLen || wc.SrcQP != from.qp.QPN() {
			t.Fatalf("receive completion %+v", wc)
		}
		if op == WRSendWithImm && (wc.WCFlags&WCWithImm == 0 || wc.ImmData != imm) {
			t.Fatalf("immediate data: %+v", wc)
		}
		if typ == QPTypeUD && wc.WCFlags&WCGRH == 0 {
			t.Fatalf("no GRH flag: %+v", wc)
		}
		if !bytes.Equal(e.buf[grh:grh+size], bytes.Repeat([]byte{want}, size)) {
			t.Fatalf("data validation failure: received %q", e.buf[grh:grh+size])
		}
	}
	send := func(e *rcEnd, ud UDParams, fillWith byte) {
		t.Helper()
		copy(e.buf[sendOff:sendOff+size], bytes.Repeat([]byte{fillWith}, size))
		mustPostSend(t, e.qp, SendWR{Opcode: op, SendFlags: SendSignaled, ImmData: imm, UD: ud,
			SGList: []SGE{e.mr.SGE(sendOff, size)}})
		if wc := waitN(t, e.cq, 1)[0]; wc.Status != WCSuccess || wc.Opcode != WCSend {
			t.Fatalf("send completion %+v", wc)
		}
	}
	recv(client)
	recv(server)
	for range iters {
		send(client, toServer, 'c')
		check(server, client, 'c')
		recv(server)
		send(server, toClient, 's')
		check(client, server, 's')
		recv(client)
	}
}

func TestQPExUDSend(t *testing.T) {
	c, s := pyPlayers(t, QPTypeUD)
	pyTraffic(t, c, s, pyTrafficIters, 1024, WRSend)
}

func TestQPExUDZeroSize(t *testing.T) {
	c, s := pyPlayers(t, QPTypeUD)
	pyTraffic(t, c, s, pyTrafficIters, 0, WRSend)
}

func TestQPExUDSendImm(t *testing.T) {
	c, s := pyPlayers(t, QPTypeUD)
	pyTraffic(t, c, s, pyTrafficIters, 1024, WRSendWithImm)
}

// TestQPExUCTraffic runs u.traffic over UC, whose messages may span
// packets: 3000 bytes are three of a 1024-byte MTU.
func TestQPExUCTraffic(t *testing.T) {
	for _, tc := range []struct {
		size int
		op   WROpcode
	}{{0, WRSend}, {1024, WRSend}, {3000, WRSendWithImm}} {
		c, s := pyPlayers(t, QPTypeUC)
		pyTraffic(t, c, s, pyTrafficIters/4, tc.size, tc.op)
		for _, e := range []*rcEnd{c, s} {
			if err := e.dev.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestQPExUDPostRecvStateBadFlow is u.post_rq_state_bad_flow: a UD QP
// moved to RESET refuses receives (EINVAL).
func TestQPExUDPostRecvStateBadFlow(t *testing.T) {
	_, s := pyPlayers(t, QPTypeUD)
	mustModify(t, s.qp, step{QPAttr{QPState: QPStateReset, CurQPState: QPStateRTS}, QPAttrState})
	err := s.qp.PostRecv(&RecvWR{SGList: []SGE{s.mr.SGE(0, GRHSize+1024)}})
	wantErr(t, err, ErrInvalidState, "qp_state")
}

// TestQPExUDPostSendStateBadFlow is u.post_sq_state_bad_flow.
func TestQPExUDPostSendStateBadFlow(t *testing.T) {
	c, s := pyPlayers(t, QPTypeUD)
	mustModify(t, c.qp, step{QPAttr{QPState: QPStateReset, CurQPState: QPStateRTS}, QPAttrState})
	err := c.qp.PostSend(&SendWR{Opcode: WRSend, SGList: []SGE{c.mr.SGE(0, 1024)},
		UD: UDParams{AH: ahTo(t, c, s), RemoteQPN: s.qp.QPN(), RemoteQKey: udQKey}})
	wantErr(t, err, ErrInvalidState, "qp_state")
}

// TestQPExUDFullRQBadFlow is u.full_rq_bad_flow: max_recv_wr + 1 receives
// overflow the queue (ENOMEM).
func TestQPExUDFullRQBadFlow(t *testing.T) {
	_, s := pyPlayers(t, QPTypeUD)
	attr, _, err := s.qp.Query(QPAttrCap)
	if err != nil {
		t.Fatal(err)
	}
	for i := range attr.Cap.MaxRecvWR {
		mustPostRecv(t, s.qp, RecvWR{WRID: uint64(i), SGList: []SGE{s.mr.SGE(0, GRHSize+1024)}})
	}
	wantErr(t, s.qp.PostRecv(&RecvWR{SGList: []SGE{s.mr.SGE(0, GRHSize+1024)}}), ErrNoMemory, "rq")
}

// TestQPExUDRQLargerSGLBadFlow is u.create_rq_with_larger_sgl_bad_flow.
func TestQPExUDRQLargerSGLBadFlow(t *testing.T) {
	_, s := pyPlayers(t, QPTypeUD)
	attr, _, err := s.qp.Query(QPAttrCap)
	if err != nil {
		t.Fatal(err)
	}
	n := attr.Cap.MaxRecvSGE + 1
	sgl := make([]SGE, n)
	for i := range sgl {
		sgl[i] = s.mr.SGE(i*(1024/n), 1024/n)
	}
	wantErr(t, s.qp.PostRecv(&RecvWR{SGList: sgl}), ErrInvalidArgument, "num_sge")
}

// TestModifyUDQP is test_qp.py's test_modify_ud_qp: Q_Key and SQ PSN read
// back as set, and RESET is reached.
func TestModifyUDQP(t *testing.T) {
	d := newDevice(t)
	pd := mustPD(t, d)
	cq := mustCQ(t, d, 100)
	qp := mustQP(t, pd, QPTypeUD, cq)
	mustModify(t, qp, step{QPAttr{QPState: QPStateInit, PortNum: 1, QKey: 0x123}, QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrQKey})
	if a, _, _ := qp.Query(QPAttrQKey); a.QKey != 0x123 {
		t.Fatalf("QKey %#x", a.QKey)
	}
	mustModify(t, qp, step{QPAttr{QPState: QPStateRTR}, QPAttrState})
	mustModify(t, qp, step{QPAttr{QPState: QPStateRTS, SQPSN: 0x45}, QPAttrState | QPAttrSQPSN})
	if a, _, _ := qp.Query(QPAttrSQPSN); a.SQPSN != 0x45 {
		t.Fatalf("SQPSN %#x", a.SQPSN)
	}
	mustModify(t, qp, step{QPAttr{QPState: QPStateReset}, QPAttrState})
	if qp.State() != QPStateReset {
		t.Fatalf("state %v", qp.State())
	}
}

// TestCreateUDQPPrivilegedQKey is test_qp.py's
// test_create_ud_qp_with_privileged_qkey: the privileged Q_Key 0x80000000
// is set and read back (goroce has no CAP_NET_RAW rule: the process owns
// the whole device), and a datagram sent with it arrives at a QP using it.
func TestCreateUDQPPrivilegedQKey(t *testing.T) {
	const privileged = 0x80000000
	a := newTypedEnd(t, "127.0.1.1", QPTypeUD, endOpts{})
	b := newTypedEnd(t, "127.0.1.2", QPTypeUD, endOpts{})
	linkUD(t, a.qp, privileged)
	linkUD(t, b.qp, privileged)
	if attr, _, _ := a.qp.Query(QPAttrQKey); attr.QKey != privileged {
		t.Fatalf("QKey %#x", attr.QKey)
	}
	mustPostRecv(t, b.qp, RecvWR{SGList: []SGE{b.mr.SGE(0, GRHSize+8)}})
	// The high bit in the work request sends the QP's own Q_Key.
	mustPostSend(t, a.qp, SendWR{Opcode: WRSend, SGList: []SGE{a.mr.SGE(0, 8)},
		UD: UDParams{AH: ahTo(t, a, b), RemoteQPN: b.qp.QPN(), RemoteQKey: privileged}})
	if wc := waitN(t, b.cq, 1)[0]; wc.Status != WCSuccess || wc.ByteLen != GRHSize+8 {
		t.Fatalf("%+v", wc)
	}
}
