package transport

import (
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/pcap"
	"github.com/goroce/goroce/internal/pcap/pcaptest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/wire"
)

// capturedRoCE returns the RoCEv2 frames of a capture of real rxe traffic
// (testkit.Captures), skipping the test if it is absent.
func capturedRoCE(t *testing.T, name string) []pcap.Frame {
	t.Helper()
	var out []pcap.Frame
	for _, fr := range pcaptest.Frames(t, testkit.Captures(t, name)[0]) {
		if fr.DstPort == wire.RoCEv2Port {
			out = append(out, fr.Frame)
		}
	}
	return out
}

// TestUDCapture replays rxe's ibv_ud_pingpong: every datagram is received
// by a UD QP standing in for its destination, with the GRH area holding the
// very IPv4 header the packet had on the wire; and a UD QP standing in for
// its source, given the same work request, sends the same bytes.
func TestUDCapture(t *testing.T) {
	frames := capturedRoCE(t, "ud_pingpong.pcap")
	if len(frames) < 4 {
		t.Fatalf("%d RoCE frames", len(frames))
	}
	var p wire.Packet
	for i, fr := range frames {
		must(t, p.Parse(fr.UDPPayload, 1024))
		src, dst, qkey := uint32(p.DETH.SrcQP()), uint32(p.BTH.DestQP()), p.DETH.QKey()
		ip := wire.IPv4(fr.IPHeader)

		// Receive.
		rx := &endpoint{mem: newTestMemory(), rcq: new(testCQ), scq: new(testCQ)}
		rx.qp = NewQP(Config{Type: ibv.QPTypeUD, QPN: dst, PD: pd, MaxRecvWR: 1, MaxSGE: 1, Memory: rx.mem, SendCQ: rx.scq, RecvCQ: rx.rcq})
		rx.qp.SetState(ibv.QPStateInit)
		rx.qp.SetQKey(qkey)
		rx.qp.SetState(ibv.QPStateRTR)
		buf := make([]byte, GRHLen+len(p.Payload))
		key := rx.mem.register(pd, buf, 0, ibv.AccessLocalWrite)
		must(t, rx.qp.PostRecv(&RecvWQE{WRID: uint64(i), SGL: []SGE{{0, uint32(len(buf)), key}}}))
		nh := NetHeader{Src: fr.Src, Dst: fr.Dst, IPID: ip.ID(), HopLimit: ip.TTL(), TrafficClass: ip.TOS()}
		rx.qp.HandlePacketFrom(&p, &nh, time.Unix(1, 0), &rx.out)
		wantCompletions(t, rx.rcq.take(), Completion{WRID: uint64(i), Opcode: ibv.WCRecv, ByteLen: uint32(len(buf)), QPN: dst, SrcQP: src, Flags: ibv.WCGRH})
		wantBytes(t, "GRH bytes 20-39 against the captured IPv4 header", buf[20:GRHLen], fr.IPHeader)
		wantBytes(t, "payload", buf[GRHLen:], p.Payload)

		// Send.
		tx := &endpoint{mem: newTestMemory(), rcq: new(testCQ), scq: new(testCQ)}
		tx.qp = NewQP(Config{Type: ibv.QPTypeUD, QPN: src, PD: pd, MaxSendWR: 1, MaxSGE: 1, Memory: tx.mem, SendCQ: tx.scq, RecvCQ: tx.rcq})
		tx.qp.SetState(ibv.QPStateInit)
		tx.qp.SetQKey(qkey)
		tx.qp.SetState(ibv.QPStateRTR)
		tx.qp.SetSQPSN(p.BTH.PSN())
		tx.qp.SetState(ibv.QPStateRTS)
		payload := append([]byte(nil), p.Payload...)
		k := tx.mem.register(pd, payload, 0, 0)
		must(t, tx.qp.PostSend(&SendWQE{Opcode: ibv.WRSend, SGL: []SGE{{0, uint32(len(payload)), k}}, RemoteQPN: dst, RemoteQKey: 0x80000000}, time.Unix(1, 0), &tx.out))
		wantBytes(t, "sent packet against the captured one", tx.out.Packets()[0].Bytes, fr.UDPPayload[:len(fr.UDPPayload)-wire.ICRCLen])
	}
}

// TestUCCapture replays rxe's ibv_uc_pingpong (SEND FIRST and LAST, no
// ACKs): each 2048-byte message is received whole, and a UC QP given the
// same work request sends the same packets.
func TestUCCapture(t *testing.T) {
	frames := capturedRoCE(t, "uc_pingpong.pcap")
	if len(frames) < 4 || len(frames)%2 != 0 {
		t.Fatalf("%d RoCE frames", len(frames))
	}
	var first, last wire.Packet
	for i := 0; i < len(frames); i += 2 {
		must(t, first.Parse(frames[i].UDPPayload, 1024))
		must(t, last.Parse(frames[i+1].UDPPayload, 1024))
		dst, P := uint32(first.BTH.DestQP()), first.BTH.PSN()
		msg := append(append([]byte(nil), first.Payload...), last.Payload...)

		// Receive: the source QP is not in the packets; any will do.
		rx := &endpoint{mem: newTestMemory(), rcq: new(testCQ), scq: new(testCQ)}
		rx.qp = NewQP(Config{Type: ibv.QPTypeUC, QPN: dst, PD: pd, MaxRecvWR: 1, MaxSGE: 1, Memory: rx.mem, SendCQ: rx.scq, RecvCQ: rx.rcq})
		rx.qp.SetState(ibv.QPStateInit)
		must(t, rx.qp.SetPathMTU(1024))
		rx.qp.SetDestQPN(0x77)
		rx.qp.SetRQPSN(P)
		rx.qp.SetState(ibv.QPStateRTR)
		buf := make([]byte, len(msg))
		key := rx.mem.register(pd, buf, 0, ibv.AccessLocalWrite)
		must(t, rx.qp.PostRecv(&RecvWQE{WRID: 1, SGL: []SGE{{0, uint32(len(buf)), key}}}))
		rx.qp.HandlePacket(&first, time.Unix(1, 0), &rx.out)
		rx.qp.HandlePacket(&last, time.Unix(1, 0), &rx.out)
		wantCompletions(t, rx.rcq.take(), Completion{WRID: 1, Opcode: ibv.WCRecv, ByteLen: uint32(len(msg)), QPN: dst, SrcQP: 0x77})
		wantBytes(t, "message", buf, msg)
		if rx.out.Len() != 0 {
			t.Fatal("the UC responder answered")
		}

		// Send.
		tx := &endpoint{mem: newTestMemory(), rcq: new(testCQ), scq: new(testCQ)}
		tx.qp = NewQP(Config{Type: ibv.QPTypeUC, QPN: 0x77, PD: pd, MaxSendWR: 1, MaxSGE: 1, Memory: tx.mem, SendCQ: tx.scq, RecvCQ: tx.rcq})
		tx.qp.SetState(ibv.QPStateInit)
		must(t, tx.qp.SetPathMTU(1024))
		tx.qp.SetDestQPN(dst)
		tx.qp.SetState(ibv.QPStateRTR)
		tx.qp.SetSQPSN(P)
		tx.qp.SetState(ibv.QPStateRTS)
		k := tx.mem.register(pd, msg, 0, 0)
		must(t, tx.qp.PostSend(&SendWQE{Opcode: ibv.WRSend, SGL: []SGE{{0, uint32(len(msg)), k}}}, time.Unix(1, 0), &tx.out))
		pkts := tx.out.Packets()
		if len(pkts) != 2 {
			t.Fatalf("%d packets", len(pkts))
		}
		for j, fr := range frames[i : i+2] {
			wantBytes(t, "sent packet against the captured one", pkts[j].Bytes, fr.UDPPayload[:len(fr.UDPPayload)-wire.ICRCLen])
		}
	}
}
