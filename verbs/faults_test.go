//go:build goroce_faults

package verbs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// These tests run only in binaries built with the goroce_faults tag; they
// use addresses 127.0.1.15 to 127.0.1.19.

// newFaultyEnd is newEnd on a device with fault injection f.
func newFaultyEnd(t *testing.T, addr string, f Faults, bufSize int) *rcEnd {
	t.Helper()
	e := &rcEnd{dev: openDevice(t, DeviceConfig{Addr: netip.MustParseAddr(addr), FaultInjection: &f})}
	e.pd = mustPD(t, e.dev)
	cq, err := e.dev.CreateCQ(512, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.cq = cq
	e.buf = make([]byte, bufSize)
	e.mr = mustMR2(t, e.pd, e.buf, rcAccess)
	e.qp, err = e.pd.CreateQP(QPInitAttr{QPType: QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestE2EFaults runs a mixed workload of WRITEs, READs, SENDs and
// FETCH_ADDs, most of them several packets long, between two devices that
// both drop, duplicate, corrupt, delay and reorder what they receive: every
// work request must complete exactly once, successfully, with the right
// data, and each atomic must have run exactly once.
func TestE2EFaults(t *testing.T) {
	f := Faults{Drop: 0.05, Duplicate: 0.05, Corrupt: 0.02, Reorder: 0.05, Jitter: 100 * time.Microsecond}
	fa, fb := f, f
	fa.Seed, fb.Seed = 1, 2
	a := newFaultyEnd(t, "127.0.1.15", fa, 1<<20)
	b := newFaultyEnd(t, "127.0.1.16", fb, 1<<20)
	// Losses are recovered by timeouts too: 67 ms (perftest's 14), as in
	// TestSoakFaults. With 4 ms (10), a receiver waiting (retry_cnt+1) × 4
	// ms for a CPU on a loaded machine ended the run in RETRY_EXC_ERR.
	link := defaultLink()
	link.timeout = 14
	connect(t, a, b, link, link)

	// Each work request of a round has a slot: 4 KiB in each area.
	const (
		rounds  = 20
		perRnd  = 20
		slot    = 4096
		srcArea = 0         // a: WRITE and SEND sources
		rdArea  = 128 << 10 // a: READ destinations; b: READ sources
		atArea  = 256 << 10 // a: FETCH_ADD results; b: SEND destinations
		dstArea = 384 << 10 // b: WRITE destinations
		counter = 512 << 10 // b: the FETCH_ADD target
	)
	const initial = 0x0100_0000_0000_0000
	binary.NativeEndian.PutUint64(b.buf[counter:], initial)
	sum := uint64(initial)
	ops := []WROpcode{WRRDMAWrite, WRRDMARead, WRSend, WRAtomicFetchAndAdd}
	wantWC := map[WROpcode]WCOpcode{WRRDMAWrite: WCRDMAWrite, WRRDMARead: WCRDMARead, WRSend: WCSend, WRAtomicFetchAndAdd: WCFetchAdd}
	seen := make(map[uint64]bool)
	for r := range rounds {
		type posted struct {
			op   WROpcode
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
			wr := SendWR{WRID: k, Opcode: op, SendFlags: SendSignaled}
			switch op {
			case WRRDMAWrite, WRSend:
				fill(a.buf[srcArea+off:srcArea+off+n], byte(k))
				p.want = append([]byte(nil), a.buf[srcArea+off:srcArea+off+n]...)
				wr.SGList = []SGE{a.mr.SGE(srcArea+off, n)}
				wr.RDMA = RDMAParams{RemoteAddr: b.mr.IOVA() + uint64(dstArea+off), RKey: b.mr.RKey()}
				if op == WRSend {
					clear(b.buf[atArea+off : atArea+off+slot])
					mustPostRecv(t, b.qp, RecvWR{WRID: k, SGList: []SGE{b.mr.SGE(atArea+off, slot)}})
					sends++
				} else {
					clear(b.buf[dstArea+off : dstArea+off+slot])
				}
			case WRRDMARead:
				fill(b.buf[rdArea+off:rdArea+off+n], byte(k))
				p.want = append([]byte(nil), b.buf[rdArea+off:rdArea+off+n]...)
				clear(a.buf[rdArea+off : rdArea+off+slot])
				wr.SGList = []SGE{a.mr.SGE(rdArea+off, n)}
				wr.RDMA = RDMAParams{RemoteAddr: b.mr.IOVA() + uint64(rdArea+off), RKey: b.mr.RKey()}
			case WRAtomicFetchAndAdd:
				p.n = 8
				p.orig = sum
				sum += k + 1
				wr.SGList = []SGE{a.mr.SGE(atArea+off, 8)}
				wr.Atomic = AtomicParams{RemoteAddr: b.mr.IOVA() + counter, RKey: b.mr.RKey(), CompareAdd: k + 1}
			}
			wrs[j] = p
			mustPostSend(t, a.qp, wr)
		}
		for _, wc := range waitN(t, a.cq, perRnd) {
			j := int(wc.WRID) - r*perRnd
			if j < 0 || j >= perRnd || seen[wc.WRID] {
				t.Fatalf("round %d: unexpected or repeated completion %+v", r, wc)
			}
			seen[wc.WRID] = true
			p := wrs[j]
			if wc.Status != WCSuccess || wc.Opcode != wantWC[p.op] {
				t.Fatalf("wr %d (%v): completion %+v", wc.WRID, p.op, wc)
			}
			off := j * slot
			what := fmt.Sprintf("wr %d (%v, %d bytes)", wc.WRID, p.op, p.n)
			switch p.op {
			case WRRDMAWrite:
				checkBytes(t, what, b.buf[dstArea+off:dstArea+off+p.n], p.want)
			case WRRDMARead:
				checkBytes(t, what, a.buf[rdArea+off:rdArea+off+p.n], p.want)
			case WRAtomicFetchAndAdd:
				if got := binary.NativeEndian.Uint64(a.buf[atArea+off:]); got != p.orig {
					t.Fatalf("%s: original value %#x, want %#x", what, got, p.orig)
				}
			}
		}
		for _, wc := range waitN(t, b.cq, sends) {
			j := int(wc.WRID) - r*perRnd
			if j < 0 || j >= perRnd || wrs[j].op != WRSend || seen[wc.WRID|1<<63] {
				t.Fatalf("round %d: unexpected or repeated receive completion %+v", r, wc)
			}
			seen[wc.WRID|1<<63] = true
			p := wrs[j]
			if wc.Status != WCSuccess || wc.Opcode != WCRecv || wc.ByteLen != uint32(p.n) {
				t.Fatalf("receive of wr %d: completion %+v, want %d bytes", wc.WRID, wc, p.n)
			}
			checkBytes(t, fmt.Sprintf("SEND %d", wc.WRID), b.buf[atArea+j*slot:atArea+j*slot+p.n], p.want)
		}
	}
	if got := binary.NativeEndian.Uint64(b.buf[counter:]); got != sum {
		t.Errorf("counter %#x after every FETCH_ADD, want %#x: an atomic ran twice or never", got, sum)
	}
	expectEmpty(t, a.cq)
	expectEmpty(t, b.cq)

	var icrc uint64
	for _, e := range []*rcEnd{a, b} {
		fc := e.dev.FaultCounters()
		if fc.Dropped == 0 || fc.Duplicated == 0 || fc.Corrupted == 0 || fc.Delayed == 0 {
			t.Errorf("%v: not every fault was injected: %+v", e.dev.Addr(), fc)
		}
		// The tap counts a corruption when it flips the bit; the
		// ICRC check that drops the packet may come later: after the
		// hold of a delayed packet, and the socket's counters after
		// the end of the packet's batch.
		var c Counters
		waitFor(t, "every corrupted packet checked", func() bool {
			c, fc = e.dev.Counters(), e.dev.FaultCounters()
			return c.ICRCErrors+c.Malformed >= fc.Corrupted
		})
		t.Logf("%v: %+v, ICRC errors %d, malformed %d, retries %d, duplicate requests %d",
			e.dev.Addr(), fc, c.ICRCErrors, c.Malformed, c.CompleterRetryErr, c.DuplicateRequest)
		if c.ICRCErrors+c.Malformed != fc.Corrupted {
			t.Errorf("ICRCErrors %d + Malformed %d, want the %d corrupted packets", c.ICRCErrors, c.Malformed, fc.Corrupted)
		}
		icrc += c.ICRCErrors
	}
	if icrc == 0 {
		t.Error("no corrupted packet was caught by the ICRC")
	}
	if ca, cb := a.dev.Counters(), b.dev.Counters(); ca.CompleterRetryErr == 0 || cb.DuplicateRequest == 0 {
		t.Errorf("recovery was not exercised: requester retries %d, duplicate requests %d", ca.CompleterRetryErr, cb.DuplicateRequest)
	}
}

// TestOpenFaultsInvalid checks that Open validates the fault injection
// settings.
func TestOpenFaultsInvalid(t *testing.T) {
	for _, f := range []Faults{{Drop: 1.5}, {Corrupt: -1}, {Jitter: -time.Second}, {Delay: time.Hour}} {
		d, err := Open(DeviceConfig{Addr: mustAddr("127.0.1.17"), FaultInjection: &f})
		if err == nil {
			d.Close()
		}
		wantErr(t, err, ErrInvalidArgument, "FaultInjection")
	}
	if !FaultInjectionBuilt {
		t.Error("FaultInjectionBuilt is false under the goroce_faults tag")
	}
	var e *Error
	if _, err := Open(DeviceConfig{Addr: mustAddr("127.0.1.17"), FaultInjection: &Faults{Drop: 2}}); !errors.As(err, &e) {
		t.Errorf("Open error %v is not an *Error", err)
	}
}
