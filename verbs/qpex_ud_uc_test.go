package verbs_test

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
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
func pyPlayers(t *testing.T, typ verbs.QPType) (client, server *rdmatest.End) {
	t.Helper()
	o := rdmatest.EndOptions{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	if typ == verbs.QPTypeUD {
		return newUDEnd(t, 1, o), newUDEnd(t, 2, o)
	}
	return newUCPair(t, verbs.MTU1024, o)
}

// pyTraffic is u.traffic: iters rounds of a client send answered by a
// server send, each side validating what it received.
func pyTraffic(t *testing.T, client, server *rdmatest.End, iters, size int, op verbs.WROpcode) {
	t.Helper()
	typ := client.QP.Type()
	grh := 0
	if typ == verbs.QPTypeUD {
		grh = verbs.GRHSize
	}
	const imm = 0x1234 // pyverbs IMM_DATA
	var toServer, toClient verbs.UDParams
	if typ == verbs.QPTypeUD {
		toServer = verbs.UDParams{AH: ahTo(t, client, server), RemoteQPN: server.QP.QPN(), RemoteQKey: rdmatest.UDQKey}
		toClient = verbs.UDParams{AH: ahTo(t, server, client), RemoteQPN: client.QP.QPN(), RemoteQKey: rdmatest.UDQKey}
	}
	// Send from offset 64 KiB - size; receive at 0.
	sendOff := len(client.Buf) - 4096
	recv := func(e *rdmatest.End) {
		rdmatest.PostRecv(t, e.QP, verbs.RecvWR{SGList: []verbs.SGE{e.MR.SGE(0, grh+size)}})
	}
	check := func(e *rdmatest.End, from *rdmatest.End, want byte) {
		t.Helper()
		wc := rdmatest.WaitN(t, e.CQ, 1)[0]
		if typ != verbs.QPTypeUD {
			wc = rdmatest.ConnectedRecv(wc, from.QP.QPN())
		}
		wantLen := uint32(grh + size)
		if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || wc.ByteLen != wantLen || wc.SrcQP != from.QP.QPN() {
			t.Fatalf("receive completion %+v", wc)
		}
		if op == verbs.WRSendWithImm && (wc.WCFlags&verbs.WCWithImm == 0 || wc.ImmData != imm) {
			t.Fatalf("immediate data: %+v", wc)
		}
		if typ == verbs.QPTypeUD && wc.WCFlags&verbs.WCGRH == 0 {
			t.Fatalf("no GRH flag: %+v", wc)
		}
		if !bytes.Equal(e.Buf[grh:grh+size], bytes.Repeat([]byte{want}, size)) {
			t.Fatalf("data validation failure: received %q", e.Buf[grh:grh+size])
		}
	}
	send := func(e *rdmatest.End, ud verbs.UDParams, fillWith byte) {
		t.Helper()
		copy(e.Buf[sendOff:sendOff+size], bytes.Repeat([]byte{fillWith}, size))
		rdmatest.PostSend(t, e.QP, verbs.SendWR{Opcode: op, SendFlags: verbs.SendSignaled, ImmData: imm, UD: ud,
			SGList: []verbs.SGE{e.MR.SGE(sendOff, size)}})
		if wc := rdmatest.WaitN(t, e.CQ, 1)[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCSend {
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
	c, s := pyPlayers(t, verbs.QPTypeUD)
	pyTraffic(t, c, s, pyTrafficIters, 1024, verbs.WRSend)
}

func TestQPExUDZeroSize(t *testing.T) {
	c, s := pyPlayers(t, verbs.QPTypeUD)
	pyTraffic(t, c, s, pyTrafficIters, 0, verbs.WRSend)
}

func TestQPExUDSendImm(t *testing.T) {
	c, s := pyPlayers(t, verbs.QPTypeUD)
	pyTraffic(t, c, s, pyTrafficIters, 1024, verbs.WRSendWithImm)
}

// TestQPExUCTraffic runs u.traffic over UC, whose messages may span
// packets: 3000 bytes are three of a 1024-byte MTU.
func TestQPExUCTraffic(t *testing.T) {
	for _, tc := range []struct {
		size int
		op   verbs.WROpcode
	}{{0, verbs.WRSend}, {1024, verbs.WRSend}, {3000, verbs.WRSendWithImm}} {
		c, s := pyPlayers(t, verbs.QPTypeUC)
		pyTraffic(t, c, s, pyTrafficIters/4, tc.size, tc.op)
		for _, e := range []*rdmatest.End{c, s} {
			if err := e.Dev.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestQPExUDPostRecvStateBadFlow is u.post_rq_state_bad_flow: a UD QP
// moved to RESET refuses receives (EINVAL).
func TestQPExUDPostRecvStateBadFlow(t *testing.T) {
	_, s := pyPlayers(t, verbs.QPTypeUD)
	rdmatest.Modify(t, s.QP, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateReset, CurQPState: verbs.QPStateRTS}, Mask: verbs.QPAttrState})
	err := s.QP.PostRecv(&verbs.RecvWR{SGList: []verbs.SGE{s.MR.SGE(0, verbs.GRHSize+1024)}})
	rdmatest.WantError(t, err, verbs.ErrInvalidState, "qp_state")
}

// TestQPExUDPostSendStateBadFlow is u.post_sq_state_bad_flow.
func TestQPExUDPostSendStateBadFlow(t *testing.T) {
	c, s := pyPlayers(t, verbs.QPTypeUD)
	rdmatest.Modify(t, c.QP, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateReset, CurQPState: verbs.QPStateRTS}, Mask: verbs.QPAttrState})
	err := c.QP.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{c.MR.SGE(0, 1024)},
		UD: verbs.UDParams{AH: ahTo(t, c, s), RemoteQPN: s.QP.QPN(), RemoteQKey: rdmatest.UDQKey}})
	rdmatest.WantError(t, err, verbs.ErrInvalidState, "qp_state")
}

// TestQPExUDFullRQBadFlow is u.full_rq_bad_flow: max_recv_wr + 1 receives
// overflow the queue (ENOMEM).
func TestQPExUDFullRQBadFlow(t *testing.T) {
	rdmatest.SkipOnHardware(t, "rxe's receive queue holds more than max_recv_wr, so it does not fill where the test expects")
	_, s := pyPlayers(t, verbs.QPTypeUD)
	attr, _, err := s.QP.Query(verbs.QPAttrCap)
	if err != nil {
		t.Fatal(err)
	}
	for i := range attr.Cap.MaxRecvWR {
		rdmatest.PostRecv(t, s.QP, verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{s.MR.SGE(0, verbs.GRHSize+1024)}})
	}
	rdmatest.WantError(t, s.QP.PostRecv(&verbs.RecvWR{SGList: []verbs.SGE{s.MR.SGE(0, verbs.GRHSize+1024)}}), verbs.ErrNoMemory, "rq")
}

// TestQPExUDRQLargerSGLBadFlow is u.create_rq_with_larger_sgl_bad_flow.
func TestQPExUDRQLargerSGLBadFlow(t *testing.T) {
	_, s := pyPlayers(t, verbs.QPTypeUD)
	attr, _, err := s.QP.Query(verbs.QPAttrCap)
	if err != nil {
		t.Fatal(err)
	}
	n := attr.Cap.MaxRecvSGE + 1
	sgl := make([]verbs.SGE, n)
	for i := range sgl {
		sgl[i] = s.MR.SGE(i*(1024/n), 1024/n)
	}
	rdmatest.WantError(t, s.QP.PostRecv(&verbs.RecvWR{SGList: sgl}), verbs.ErrInvalidArgument, "num_sge")
}

// TestModifyUDQP is test_qp.py's test_modify_ud_qp: Q_Key and SQ PSN read
// back as set, and RESET is reached.
func TestModifyUDQP(t *testing.T) {
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	cq := rdmatest.CQ(t, d, 100)
	qp := mustQP(t, pd, verbs.QPTypeUD, cq)
	rdmatest.Modify(t, qp, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QKey: 0x123}, Mask: verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey})
	if a, _, _ := qp.Query(verbs.QPAttrQKey); a.QKey != 0x123 {
		t.Fatalf("QKey %#x", a.QKey)
	}
	rdmatest.Modify(t, qp, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateRTR}, Mask: verbs.QPAttrState})
	rdmatest.Modify(t, qp, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: 0x45}, Mask: verbs.QPAttrState | verbs.QPAttrSQPSN})
	if a, _, _ := qp.Query(verbs.QPAttrSQPSN); a.SQPSN != 0x45 {
		t.Fatalf("SQPSN %#x", a.SQPSN)
	}
	rdmatest.Modify(t, qp, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateReset}, Mask: verbs.QPAttrState})
	if qp.State() != verbs.QPStateReset {
		t.Fatalf("state %v", qp.State())
	}
}

// TestCreateUDQPPrivilegedQKey is test_qp.py's
// test_create_ud_qp_with_privileged_qkey: the privileged Q_Key 0x80000000
// is set and read back (goroce has no CAP_NET_RAW rule: the process owns
// the whole device), and a datagram sent with it arrives at a QP using it.
func TestCreateUDQPPrivilegedQKey(t *testing.T) {
	const privileged = 0x80000000
	a := newTypedEnd(t, 1, verbs.QPTypeUD, rdmatest.EndOptions{})
	b := newTypedEnd(t, 2, verbs.QPTypeUD, rdmatest.EndOptions{})
	linkUD(t, a.QP, privileged)
	linkUD(t, b.QP, privileged)
	if attr, _, _ := a.QP.Query(verbs.QPAttrQKey); attr.QKey != privileged {
		t.Fatalf("QKey %#x", attr.QKey)
	}
	rdmatest.PostRecv(t, b.QP, verbs.RecvWR{SGList: []verbs.SGE{b.MR.SGE(0, verbs.GRHSize+8)}})
	// The high bit in the work request sends the QP's own Q_Key.
	rdmatest.PostSend(t, a.QP, verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.MR.SGE(0, 8)},
		UD: verbs.UDParams{AH: ahTo(t, a, b), RemoteQPN: b.QP.QPN(), RemoteQKey: privileged}})
	if wc := rdmatest.WaitN(t, b.CQ, 1)[0]; wc.Status != verbs.WCSuccess || wc.ByteLen != verbs.GRHSize+8 {
		t.Fatalf("%+v", wc)
	}
}
