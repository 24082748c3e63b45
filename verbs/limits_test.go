package verbs_test

import (
	"runtime"
	"testing"

	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/wire"
	"github.com/goroce/goroce/verbs"
)

// TestLimitsChurn: the device limits count live objects only. Creating up
// to the limit, failing one past it with an error naming the limit, and
// destroying everything, many times over, never leaks a unit; a creation
// refused for another reason (a capacity, a key) takes none either; Rereg
// does not count as a new region.
func TestLimitsChurn(t *testing.T) {
	d := rdmatest.OpenDevice(t, verbs.DeviceConfig{Limits: &verbs.DeviceAttr{MaxQP: 3, MaxMR: 3, MaxCQ: 2, MaxQPWR: 8, MaxSGE: 2}})
	pd := rdmatest.PD(t, d)
	for round := range 50 {
		cq := rdmatest.CQ(t, d, 4)
		cq2 := rdmatest.CQ(t, d, 4)
		_, err := d.CreateCQ(4, nil, 0)
		rdmatest.WantError(t, err, verbs.ErrResourceLimit, "max_cq")

		var qps []*verbs.QP
		for range 3 {
			// Refused on a capacity first: that must not count.
			_, err := pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq2, Cap: verbs.QPCap{MaxSendWR: 9}})
			rdmatest.WantError(t, err, verbs.ErrInvalidArgument, "max_send_wr")
			_, err = pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq2, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvSGE: 3}})
			rdmatest.WantError(t, err, verbs.ErrInvalidArgument, "max_recv_sge")
			qps = append(qps, mustQP(t, pd, verbs.QPTypeRC, cq))
		}
		_, err = pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq})
		rdmatest.WantError(t, err, verbs.ErrResourceLimit, "max_qp")

		var mrs []*verbs.MR
		for range 3 {
			mr := mustMR(t, pd, 64, verbs.AccessLocalWrite)
			if err := mr.Rereg(verbs.ReregChangeTranslation, nil, make([]byte, 32), 0); err != nil {
				t.Fatal(err)
			}
			mrs = append(mrs, mr)
		}
		_, err = pd.RegMR(make([]byte, 8), 0)
		rdmatest.WantError(t, err, verbs.ErrResourceLimit, "max_mr")

		for _, qp := range qps {
			if err := qp.Destroy(); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		for _, mr := range mrs {
			if err := mr.Dereg(); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []*verbs.CQ{cq, cq2} {
			if err := c.Destroy(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// linkRdAtomic moves local to RTS toward remote with the given initiator
// depth (max_rd_atomic) and responder resources (max_dest_rd_atomic).
func linkRdAtomic(t *testing.T, local, remote *rdmatest.End, lpsn, rpsn uint32, initiator, responder int) {
	t.Helper()
	gid, err := remote.Dev.QueryGID(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	rdmatest.Modify(t, local.QP, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: rdmatest.RCAccess},
		Mask: verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags})
	rdmatest.Modify(t, local.QP, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPNum: remote.QP.QPN(),
		RQPSN: rpsn, MaxDestRdAtomic: responder, MinRNRTimer: 1,
		AHAttr: verbs.AddressVector{DGID: gid, SGIDIndex: 1, HopLimit: 64, IsGlobal: true, PortNum: 1}},
		Mask: verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer})
	rdmatest.Modify(t, local.QP, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: lpsn, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: initiator},
		Mask: verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic})
}

// TestLimitsRdAtomic: max_rd_atomic and max_dest_rd_atomic are checked
// against the device limits when set, and the requester keeps to its
// initiator depth: with as many responder resources as that depth, a long
// burst of READs and atomics completes without the responder ever
// dropping one for want of a resource, and never more than the depth are
// outstanding.
func TestLimitsRdAtomic(t *testing.T) {
	a, b := newEnd(t, 1, rdmatest.EndOptions{}), newEnd(t, 2, rdmatest.EndOptions{})
	attr := a.Dev.Query()
	rdmatest.Modify(t, a.QP, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: rdmatest.RCAccess},
		Mask: verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags})
	err := a.QP.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPNum: b.QP.QPN(), MaxDestRdAtomic: attr.MaxQPRdAtom + 1,
		AHAttr: verbs.AddressVector{DGID: verbs.GIDFromAddr(b.Dev.Addr()), SGIDIndex: 1, HopLimit: 64, IsGlobal: true, PortNum: 1}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
	rdmatest.WantError(t, err, verbs.ErrInvalidArgument, "max_dest_rd_atomic")
	rdmatest.Modify(t, a.QP, rdmatest.Transition{Attr: verbs.QPAttr{QPState: verbs.QPStateReset}, Mask: verbs.QPAttrState})

	const depth = 2
	linkRdAtomic(t, a, b, 0x10, 0x20, depth, 16)
	linkRdAtomic(t, b, a, 0x20, 0x10, 16, depth)
	err = a.QP.Modify(&verbs.QPAttr{MaxRdAtomic: attr.MaxQPInitRdAtom + 1}, verbs.QPAttrMaxQPRdAtomic)
	rdmatest.WantError(t, err, verbs.ErrInvalidArgument, "max_rd_atomic")

	const n = 48
	for i := range n {
		wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(dstOff+16*i, 16)}, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}}
		if i%3 == 2 {
			wr = fetchAdd(a, b.MR.IOVA()+8*uint64(i), b.MR.RKey())
			wr.WRID = uint64(i)
		}
		rdmatest.PostSend(t, a.QP, wr)
	}
	got := 0
	buf := make([]verbs.WorkCompletion, 8)
	testkit.WaitFor(t, "all READs and atomics completed", func() bool {
		out := verbs.QPSnapshot(a.QP).RdAtomicOut
		if out > depth {
			t.Fatalf("%d READs and atomics outstanding, max_rd_atomic is %d", out, depth)
		}
		k, err := a.CQ.Poll(buf)
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range buf[:k] {
			if wc.Status != verbs.WCSuccess || wc.WRID != uint64(got) {
				t.Fatalf("completion %+v, want %d successful", wc, got)
			}
			got++
		}
		return got == n
	})
	if c := b.QP.Counters(); c.DroppedBusy != 0 {
		t.Fatalf("responder dropped %d requests for want of a resource", c.DroppedBusy)
	}
}

// TestFloodBoundedMemory: a peer blasting valid packets (every ICRC
// right) at an established QP cannot make the device's memory grow: SENDs
// to a QP without receives (RNR NAKs), duplicate READs of a huge length,
// duplicates of a READ and of an atomic the responder remembers (each
// answered again), requests far ahead of the window, stale
// acknowledgements, packets for unknown QPs and with a bad ICRC. Afterwards
// the QP still works.
func TestFloodBoundedMemory(t *testing.T) {
	total := 200_000
	if testing.Short() || raceDetector {
		total = 20_000
	}
	h := newHostileTarget(t, verbs.DefaultUDPPort)
	h.reset(t, 0)

	// A READ and an atomic the responder will remember, for duplicates.
	readPSN := h.snapshot().ExpectedPSN
	rd := h.request(wire.RCRDMAReadRequest, 0)
	rd.dmaLen = rwLen
	h.deliver(t, rd.build(), false, false)
	atomicPSN := h.snapshot().ExpectedPSN
	at := h.request(wire.RCFetchAdd, 0)
	at.swap = 1
	h.deliver(t, at.build(), false, false)
	h.peer.drain(t)

	epsn := h.snapshot().ExpectedPSN
	kinds := []func() hostilePkt{
		func() hostilePkt { return hostilePkt{op: wire.RCSendOnly, payload: make([]byte, 64), psn: epsn} },
		func() hostilePkt {
			return hostilePkt{op: wire.RCRDMAReadRequest, psn: epsn.Add(psn.Mask - 100), va: h.rw.IOVA(), rkey: h.rw.RKey(), dmaLen: 0x7FFF_FFFF}
		},
		func() hostilePkt {
			return hostilePkt{op: wire.RCRDMAReadRequest, psn: readPSN, va: h.rw.IOVA(), rkey: h.rw.RKey(), dmaLen: rwLen}
		},
		func() hostilePkt {
			return hostilePkt{op: wire.RCFetchAdd, psn: atomicPSN, va: h.rw.IOVA(), rkey: h.rw.RKey(), swap: 1}
		},
		func() hostilePkt {
			return hostilePkt{op: wire.RCRDMAWriteOnly, psn: epsn.Add(5000), va: h.rw.IOVA(), rkey: h.rw.RKey(), dmaLen: 8, payload: make([]byte, 8)}
		},
		func() hostilePkt { return hostilePkt{op: wire.RCAcknowledge, psn: epsn} },
		func() hostilePkt {
			return hostilePkt{op: wire.RCSendOnly, qpn: 0x77777, payload: make([]byte, 64), psn: epsn}
		},
	}
	pkts := make([][]byte, len(kinds))
	for i, k := range kinds {
		p := k()
		if p.qpn == 0 {
			p.qpn = h.qp.QPN()
		}
		p.pkey, p.ackReq, p.pad = verbs.DefaultPKey, true, wire.PadCount(len(p.payload))
		pkts[i] = p.build()
	}

	before := heapInUse()
	c0 := h.dev.Counters()
	for i := range total {
		h.peer.send(t, h.dst, pkts[i%len(pkts)], i%101 == 0)
		if i%4096 == 0 {
			h.peer.drain(t) // keep the peer's socket from filling up
		}
	}
	// Wait until the device has read what the kernel kept of the flood:
	// a last, distinct packet (an unknown QP's) shows up in the counters.
	last := hostilePkt{op: wire.RCSendOnly, qpn: 0x66666, pkey: verbs.DefaultPKey, psn: epsn}
	// The socket may have dropped some of the flood, and may drop the
	// marker: it is sent again until it arrives.
	unknown0 := h.dev.Counters().DroppedUnknownQP
	testkit.WaitFor(t, "the device read the flood", func() bool {
		h.peer.send(t, h.dst, last.build(), false)
		h.peer.drain(t)
		return h.dev.Counters().DroppedUnknownQP > unknown0
	})
	// The device's answers may still be on their way to the peer: a
	// duplicate WRITE asking for an ACK is answered after all of them.
	dup := h.request(wire.RCRDMAWriteOnly, 8)
	dup.psn = epsn.Add(psn.Mask)
	testkit.WaitFor(t, "the device's answers to the flood", func() bool {
		h.peer.send(t, h.dst, dup.build(), false)
		for _, p := range h.peer.drain(t) {
			if p.BTH.Opcode() == wire.RCAcknowledge && p.AETH.Syndrome().Kind() == wire.AETHAck && p.BTH.PSN() == dup.psn {
				return true
			}
		}
		return false
	})
	after := heapInUse()
	c := verbs.SubCounters(h.dev.Counters(), c0)
	t.Logf("flood of %d datagrams: device read %d (ICRC errors %d), RNR NAKs %d, duplicates %d, out of sequence %d; heap %d -> %d bytes",
		total, c.RcvdPkts+c.ICRCErrors+c.Malformed, c.ICRCErrors, c.SendRNRErr, c.DuplicateRequest, c.OutOfSeqRequest, before, after)
	if c.SendRNRErr == 0 || c.DuplicateRequest == 0 {
		t.Fatalf("the flood did not reach the responder: %+v", c)
	}
	const bound = 16 << 20
	if after > before+bound {
		t.Fatalf("heap grew from %d to %d bytes under the flood (bound %d)", before, after, bound)
	}
	if s := h.qp.State(); s != verbs.QPStateRTS {
		t.Fatalf("QP in %v after the flood", s)
	}

	// The device still works: a WRITE and a READ of it on a fresh start.
	h.reset(t, recvSlots)
	w := h.request(wire.RCRDMAWriteOnly, 32)
	fill(w.payload, 9)
	h.deliver(t, w.build(), false, false)
	r := h.request(wire.RCRDMAReadRequest, 0)
	r.dmaLen, r.psn = 32, w.psn.Next() // the WRITE's one PSN, whether or not deliver saw it
	h.deliver(t, r.build(), false, false)
	// Copies of the markers above sent after the one that was answered
	// may still fill the device's socket, which then drops the WRITE or
	// the READ (and deliver took a copy for them): both are sent again
	// until answered. A copy is a duplicate, answered as the original
	// (an ACK, coalesced into the READ's PSN once the READ is in; the
	// READ replayed).
	acked, read := false, false
	testkit.WaitFor(t, "the WRITE's ACK and the READ's data after the flood", func() bool {
		if !acked {
			h.peer.send(t, h.dst, w.build(), false)
		}
		if !read {
			h.peer.send(t, h.dst, r.build(), false)
		}
		for _, p := range h.peer.drain(t) {
			switch {
			case p.BTH.Opcode() == wire.RCAcknowledge && (p.BTH.PSN() == w.psn || p.BTH.PSN() == r.psn):
				if p.AETH.Syndrome().Kind() != wire.AETHAck {
					t.Fatalf("WRITE after the flood answered %v", p.AETH.Syndrome())
				}
				acked = true
			case p.Info().IsReadResponse() && p.BTH.PSN() == r.psn:
				if string(p.Payload) != string(w.payload) {
					t.Fatal("READ after the flood returned other bytes than the WRITE's")
				}
				read = true
			}
		}
		return acked && read
	})
}

// heapInUse returns the bytes of live heap objects after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
