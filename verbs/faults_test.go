//go:build goroce_faults

package verbs_test

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// These tests run only in binaries built with the goroce_faults tag.

// withFaults opens devices with fault injection f.
func withFaults(f verbs.Faults) func(verbs.DeviceConfig) (*verbs.Device, error) {
	return func(c verbs.DeviceConfig) (*verbs.Device, error) { return verbs.OpenWithFaults(c, f) }
}

// newFaultyEnd is newEnd on a device with fault injection f, with one SGE
// per work request and a buffer of bufSize bytes.
func newFaultyEnd(t *testing.T, host int, f verbs.Faults, bufSize int) *rdmatest.End {
	t.Helper()
	return newEnd(t, host, rdmatest.EndOptions{Open: withFaults(f), BufSize: bufSize,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
}

// awaitFaultTapEmpty waits until e's fault tap holds no packet; false when
// it never held one, so that there is nothing to settle again.
func awaitFaultTapEmpty(t *testing.T, e *rdmatest.End) bool {
	t.Helper()
	if e.Dev.FaultCounters().Delayed == 0 {
		return false
	}
	testkit.WaitFor(t, "the fault tap to release what it holds", func() bool {
		fc := e.Dev.FaultCounters()
		return fc.Delayed == fc.Released
	})
	return true
}

// TestE2EOpcodesLateDuplicates runs TestE2EOpcodes' work requests toward
// a responder that receives every packet twice, each copy held back up to
// 3 ms: a READ's later copy then arrives after the READ completed, and the
// responder replays it, reading the source the next work request refills.
// Each must still get its data, and under -race the replay must not race
// with the refill: runOpcode settles the connection before it returns,
// waiting for the tap to release every copy (settle).
func TestE2EOpcodesLateDuplicates(t *testing.T) {
	a := newEnd(t, 15, rdmatest.EndOptions{})
	b := newEnd(t, 16, rdmatest.EndOptions{Open: withFaults(verbs.Faults{Duplicate: 1, Jitter: 3 * time.Millisecond, Seed: 3})})
	rdmatest.Connect(t, a, b, rdmatest.DefaultLink(), rdmatest.DefaultLink())
	seed := byte(0)
	for _, n := range []int{1, 1024, 3000, 3*1024 + 7} {
		// A READ before each of the others, whose refill its replay
		// would race with.
		for _, op := range []verbs.WROpcode{verbs.WRRDMARead, verbs.WRSend, verbs.WRRDMARead, verbs.WRSendWithImm,
			verbs.WRRDMARead, verbs.WRRDMAWrite, verbs.WRRDMARead, verbs.WRRDMAWriteWithImm} {
			seed += 17
			t.Run(fmt.Sprintf("%v/%d", op, n), func(t *testing.T) {
				runOpcode(t, a, b, op, n, 1, seed)
			})
		}
	}
	if d := b.Dev.Counters().DuplicateRequest; d == 0 {
		t.Error("no duplicate request reached the responder")
	}
}

// TestE2EFaults runs a mixed workload of WRITEs, READs, SENDs and
// FETCH_ADDs, most of them several packets long, between two devices that
// both drop, duplicate, corrupt, delay and reorder what they receive: every
// work request must complete exactly once, successfully, with the right
// data, and each atomic must have run exactly once. Sealed, the same
// holds: retransmissions take fresh counters, the tap's duplicates are
// dropped as replays, its corruptions by the ICRC before authentication.
func TestE2EFaults(t *testing.T) {
	// With selective repeat (QPAttr.SelectiveRepeat) on both QPs too:
	// held and replayed requests, SACKs through the real packet path,
	// plain and sealed.
	for _, sr := range []bool{false, true} {
		for _, sealed := range []bool{false, true} {
			name := map[bool]string{false: "plain", true: "sealed"}[sealed]
			if sr {
				name += "/selective-repeat"
			}
			t.Run(name, func(t *testing.T) { e2eFaults(t, sealed, sr) })
		}
	}
}

func e2eFaults(t *testing.T, sealed, sr bool) {
	f := verbs.Faults{Drop: 0.05, Duplicate: 0.05, Corrupt: 0.02, Reorder: 0.05, Jitter: 100 * time.Microsecond}
	fa, fb := f, f
	fa.Seed, fb.Seed = 1, 2
	a := newFaultyEnd(t, 15, fa, 1<<20)
	b := newFaultyEnd(t, 16, fb, 1<<20)
	// Losses are recovered by timeouts too: 67 ms (perftest's 14), as in
	// TestSoakFaults. With 4 ms (10), a receiver waiting (retry_cnt+1) × 4
	// ms for a CPU on a loaded machine ended the run in RETRY_EXC_ERR.
	link := rdmatest.DefaultLink()
	link.Timeout = 14
	link.SelectiveRepeat = sr
	if sealed {
		if err := a.QP.SetPacketKeys(&testKeys); err != nil {
			t.Fatal(err)
		}
		if err := b.QP.SetPacketKeys(mirror(testKeys)); err != nil {
			t.Fatal(err)
		}
	}
	rdmatest.Connect(t, a, b, link, link)
	if sr {
		defer func() {
			if c := b.Dev.Counters(); c.SRHeld == 0 || c.SRSACKSent == 0 {
				t.Errorf("selective repeat did not run: %+v", c)
			}
		}()
	}

	// Each work request of a round has a slot: 4 KiB in each area.
	const (
		rounds  = 20
		perRnd  = 20
		slot    = 4096
		srcArea = 0         // a: WRITE and SEND sources
		rdArea  = 128 << 10 // a: READ destinations; b: READ sources of even rounds
		atArea  = 256 << 10 // a: FETCH_ADD results; b: SEND destinations
		dstArea = 384 << 10 // b: WRITE destinations
		counter = 512 << 10 // b: the FETCH_ADD target
		// b: the READ sources of odd rounds. A duplicate of a READ
		// that already completed (the tap's, or a retransmission that
		// crossed the response) is answered again from b's memory,
		// as IBTA wants: refilling the source the next round would
		// race with that replay. A replay would now have to come a
		// whole round late.
		rdArea2 = 576 << 10
	)
	const initial = 0x0100_0000_0000_0000
	binary.NativeEndian.PutUint64(b.Buf[counter:], initial)
	sum := uint64(initial)
	ops := []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMARead, verbs.WRSend, verbs.WRAtomicFetchAndAdd}
	wantWC := map[verbs.WROpcode]verbs.WCOpcode{verbs.WRRDMAWrite: verbs.WCRDMAWrite, verbs.WRRDMARead: verbs.WCRDMARead, verbs.WRSend: verbs.WCSend, verbs.WRAtomicFetchAndAdd: verbs.WCFetchAdd}
	seen := make(map[uint64]bool)
	for r := range rounds {
		type posted struct {
			op   verbs.WROpcode
			n    int
			want []byte // the data expected at the destination
			orig uint64 // FETCH_ADD: the value expected back
		}
		var wrs [perRnd]posted
		sends := 0
		for j := range perRnd {
			k := uint64(r*perRnd + j)
			op := ops[j%len(ops)]
			n := 1 + int(k*997)%(3*1024) // up to 3 packets of 1024 bytes
			off := j * slot
			p := posted{op: op, n: n}
			wr := verbs.SendWR{WRID: k, Opcode: op, SendFlags: verbs.SendSignaled}
			switch op {
			case verbs.WRRDMAWrite, verbs.WRSend:
				fill(a.Buf[srcArea+off:srcArea+off+n], byte(k))
				p.want = append([]byte(nil), a.Buf[srcArea+off:srcArea+off+n]...)
				wr.SGList = []verbs.SGE{a.MR.SGE(srcArea+off, n)}
				wr.RDMA = verbs.RDMAParams{RemoteAddr: b.MR.IOVA() + uint64(dstArea+off), RKey: b.MR.RKey()}
				if op == verbs.WRSend {
					clear(b.Buf[atArea+off : atArea+off+slot])
					rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: k, SGList: []verbs.SGE{b.MR.SGE(atArea+off, slot)}})
					sends++
				} else {
					clear(b.Buf[dstArea+off : dstArea+off+slot])
				}
			case verbs.WRRDMARead:
				src := rdArea + off
				if r%2 == 1 {
					src = rdArea2 + off
				}
				fill(b.Buf[src:src+n], byte(k))
				p.want = append([]byte(nil), b.Buf[src:src+n]...)
				clear(a.Buf[rdArea+off : rdArea+off+slot])
				wr.SGList = []verbs.SGE{a.MR.SGE(rdArea+off, n)}
				wr.RDMA = verbs.RDMAParams{RemoteAddr: b.MR.IOVA() + uint64(src), RKey: b.MR.RKey()}
			case verbs.WRAtomicFetchAndAdd:
				p.n = 8
				p.orig = sum
				sum += k + 1
				wr.SGList = []verbs.SGE{a.MR.SGE(atArea+off, 8)}
				wr.Atomic = verbs.AtomicParams{RemoteAddr: b.MR.IOVA() + counter, RKey: b.MR.RKey(), CompareAdd: k + 1}
			}
			wrs[j] = p
			rdmatest.PostSend(t, a.QP, wr)
		}
		for _, wc := range rdmatest.WaitN(t, a.CQ, perRnd) {
			j := int(wc.WRID) - r*perRnd
			if j < 0 || j >= perRnd || seen[wc.WRID] {
				t.Fatalf("round %d: unexpected or repeated completion %+v", r, wc)
			}
			seen[wc.WRID] = true
			p := wrs[j]
			if wc.Status != verbs.WCSuccess || wc.Opcode != wantWC[p.op] {
				t.Fatalf("wr %d (%v): completion %+v", wc.WRID, p.op, wc)
			}
			off := j * slot
			what := fmt.Sprintf("wr %d (%v, %d bytes)", wc.WRID, p.op, p.n)
			switch p.op {
			case verbs.WRRDMAWrite:
				checkBytes(t, what, b.Buf[dstArea+off:dstArea+off+p.n], p.want)
			case verbs.WRRDMARead:
				checkBytes(t, what, a.Buf[rdArea+off:rdArea+off+p.n], p.want)
			case verbs.WRAtomicFetchAndAdd:
				if got := binary.NativeEndian.Uint64(a.Buf[atArea+off:]); got != p.orig {
					t.Fatalf("%s: original value %#x, want %#x", what, got, p.orig)
				}
			}
		}
		for _, wc := range rdmatest.WaitN(t, b.CQ, sends) {
			j := int(wc.WRID) - r*perRnd
			if j < 0 || j >= perRnd || wrs[j].op != verbs.WRSend || seen[wc.WRID|1<<63] {
				t.Fatalf("round %d: unexpected or repeated receive completion %+v", r, wc)
			}
			seen[wc.WRID|1<<63] = true
			p := wrs[j]
			if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || wc.ByteLen != uint32(p.n) {
				t.Fatalf("receive of wr %d: completion %+v, want %d bytes", wc.WRID, wc, p.n)
			}
			checkBytes(t, fmt.Sprintf("SEND %d", wc.WRID), b.Buf[atArea+j*slot:atArea+j*slot+p.n], p.want)
		}
	}
	if got := binary.NativeEndian.Uint64(b.Buf[counter:]); got != sum {
		t.Errorf("counter %#x after every FETCH_ADD, want %#x: an atomic ran twice or never", got, sum)
	}
	rdmatest.ExpectEmpty(t, a.CQ)
	rdmatest.ExpectEmpty(t, b.CQ)

	var icrc uint64
	for _, e := range []*rdmatest.End{a, b} {
		fc := e.Dev.FaultCounters()
		if fc.Dropped == 0 || fc.Duplicated == 0 || fc.Corrupted == 0 || fc.Delayed == 0 {
			t.Errorf("%v: not every fault was injected: %+v", e.Dev.Addr(), fc)
		}
		// The tap counts a corruption when it flips the bit; the
		// ICRC check that drops the packet may come later: after the
		// hold of a delayed packet, and the socket's counters after
		// the end of the packet's batch.
		var c verbs.Counters
		testkit.WaitFor(t, "every corrupted packet checked", func() bool {
			c, fc = e.Dev.Counters(), e.Dev.FaultCounters()
			return c.ICRCErrors+c.Malformed >= fc.Corrupted
		})
		t.Logf("%v: %+v, ICRC errors %d, malformed %d, retries %d, duplicate requests %d",
			e.Dev.Addr(), fc, c.ICRCErrors, c.Malformed, c.CompleterRetryErr, c.DuplicateRequest)
		if c.ICRCErrors+c.Malformed != fc.Corrupted {
			t.Errorf("ICRCErrors %d + Malformed %d, want the %d corrupted packets", c.ICRCErrors, c.Malformed, fc.Corrupted)
		}
		icrc += c.ICRCErrors
		if sealed && (c.DroppedReplay == 0 || c.DroppedAuthFail != 0) {
			t.Errorf("%v sealed: dropped_replay %d (the tap's duplicates), dropped_auth_fail %d (want 0)",
				e.Dev.Addr(), c.DroppedReplay, c.DroppedAuthFail)
		}
	}
	if icrc == 0 {
		t.Error("no corrupted packet was caught by the ICRC")
	}
	if ca, cb := a.Dev.Counters(), b.Dev.Counters(); ca.CompleterRetryErr == 0 || cb.DuplicateRequest == 0 {
		t.Errorf("recovery was not exercised: requester retries %d, duplicate requests %d", ca.CompleterRetryErr, cb.DuplicateRequest)
	}
}

// TestOpenFaultsInvalid checks that OpenWithFaults validates the fault
// injection settings. (Without the goroce_faults tag, OpenWithFaults does
// not exist: no binary built without it can inject faults.)
func TestOpenFaultsInvalid(t *testing.T) {
	for _, f := range []verbs.Faults{{Drop: 1.5}, {Corrupt: -1}, {Jitter: -time.Second}, {Delay: time.Hour}} {
		d, err := verbs.OpenWithFaults(verbs.DeviceConfig{Addr: testkit.Addr(17)}, f)
		if err == nil {
			d.Close()
		}
		rdmatest.WantError(t, err, verbs.ErrInvalidArgument, "Faults")
	}
	d, err := verbs.OpenWithFaults(verbs.DeviceConfig{Addr: testkit.Addr(17)}, verbs.Faults{Drop: 0.5})
	if err != nil {
		t.Fatalf("valid faults: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestE2ECongestionNotification: a responder whose received packets are
// marked CE (as by a congested queue) answers with CNPs, and the requester
// limits its rate; the data still arrives whole. With ECN off nothing is
// ECN-capable, so nothing is marked and nothing changes.
func TestE2ECongestionNotification(t *testing.T) {
	for _, noECN := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoECN=%v", noECN), func(t *testing.T) {
			cc := verbs.CongestionControl{NoECN: noECN}
			open := func(f *verbs.Faults) func(verbs.DeviceConfig) (*verbs.Device, error) {
				return func(c verbs.DeviceConfig) (*verbs.Device, error) {
					c.CongestionControl = cc
					if f == nil {
						return verbs.Open(c)
					}
					return verbs.OpenWithFaults(c, *f)
				}
			}
			a := newEnd(t, 17, rdmatest.EndOptions{Open: open(nil), BufSize: 1 << 20})
			b := newEnd(t, 18, rdmatest.EndOptions{Open: open(&verbs.Faults{MarkCE: 0.2, Seed: 5}), BufSize: 1 << 20})
			rdmatest.Connect(t, a, b, rdmatest.DefaultLink(), rdmatest.DefaultLink())
			for i := range 8 {
				runOpcode(t, a, b, verbs.WRRDMAWrite, 64<<10, 1, byte(i))
			}
			ac, bc := a.Dev.Counters(), b.Dev.Counters()
			marked := b.Dev.FaultCounters().MarkedCE
			t.Logf("marked %d, np_ecn_marked %d, np_cnp_sent %d, rp_cnp_handled %d, rp_rate_decreases %d",
				marked, bc.NPECNMarkedRoCEPackets, bc.NPCNPSent, ac.RPCNPHandled, ac.RPRateDecreases)
			if noECN {
				if marked != 0 || bc.NPCNPSent != 0 || ac.RPCNPHandled != 0 {
					t.Fatalf("with ECN off: %d marked, %d CNPs sent, %d handled", marked, bc.NPCNPSent, ac.RPCNPHandled)
				}
				return
			}
			if marked == 0 || bc.NPECNMarkedRoCEPackets != marked {
				t.Errorf("%d packets marked CE, %d counted by the notification point", marked, bc.NPECNMarkedRoCEPackets)
			}
			if bc.NPCNPSent == 0 || ac.RPCNPHandled == 0 || ac.RPCNPHandled > bc.NPCNPSent || ac.RPRateDecreases == 0 {
				t.Errorf("CNPs: %d sent, %d handled, %d rate decreases", bc.NPCNPSent, ac.RPCNPHandled, ac.RPRateDecreases)
			}
		})
	}
}
