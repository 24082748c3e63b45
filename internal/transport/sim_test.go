package transport

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/simnet"
	"github.com/goroce/goroce/internal/wire"
)

// sim drives two endpoints over a simnet network: packets get a real ICRC
// on the way out and go through wire.Packet.Parse and an ICRC check on the
// way in, so corrupted packets are dropped as a NIC drops them.
type sim struct {
	t     testing.TB
	net   *simnet.Network
	clk   *simnet.Clock
	eps   [2]*endpoint
	addrs [2]netip.AddrPort
	ips   [2][4]byte
	buf   []byte
	pkt   wire.Packet
	bad   int // packets dropped for a parse or ICRC error
	wls   []*workload
	// drop, if set, is asked about every packet endpoint from sends,
	// before the network: true drops it (a chosen loss).
	drop func(from int, pkt []byte) bool
}

func newSim(t testing.TB, seed int64, link simnet.LinkConfig, o pairOpts) *sim {
	s := &sim{t: t, net: simnet.New(seed)}
	s.net.SetDefaultLink(link)
	s.clk = s.net.Clock()
	s.eps[0], s.eps[1] = newPair(t, o)
	s.addrs = [2]netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:4791"), netip.MustParseAddrPort("127.0.0.2:4791")}
	s.ips = [2][4]byte{addrA, addrB}
	return s
}

func (s *sim) flush() {
	for i, e := range s.eps {
		for _, p := range e.out.Packets() {
			if s.drop != nil && s.drop(i, p.Bytes) {
				continue
			}
			s.buf = frame(s.buf, p.Bytes, s.ips[i], s.ips[1-i])
			s.net.Send(s.addrs[i], s.addrs[1-i], s.buf)
		}
		e.out.Reset()
	}
}

// step advances to the next event and handles it; it reports false when
// nothing is pending.
func (s *sim) step() bool {
	s.flush()
	next, ok := s.net.NextEvent()
	for _, e := range s.eps {
		if d, armed := e.qp.Deadline(); armed && (!ok || d.Before(next)) {
			next, ok = d, true
		}
	}
	if !ok {
		return false
	}
	s.clk.AdvanceTo(next)
	s.net.Deliver(s.clk.Now(), func(from, to netip.AddrPort, b []byte) {
		i := 0
		if to == s.addrs[1] {
			i = 1
		}
		if s.pkt.Parse(b, 0) != nil || !checkICRC(&s.pkt, s.ips[1-i], s.ips[i]) {
			s.bad++
			return
		}
		e := s.eps[i]
		if uint32(s.pkt.BTH.DestQP()) != e.qp.QPN() {
			s.bad++
			return
		}
		e.qp.HandlePacket(&s.pkt, s.clk.Now(), &e.out)
	})
	for _, e := range s.eps {
		e.qp.OnTimer(s.clk.Now(), &e.out)
	}
	return true
}

// run steps until every workload is finished or nothing is pending, within
// limit of virtual time. It reports whether all workloads finished.
func (s *sim) run(limit time.Duration) bool {
	end := s.clk.Now().Add(limit)
	for s.clk.Now().Before(end) {
		done := true
		for _, w := range s.wls {
			w.top(s.clk.Now())
			done = done && w.finished()
		}
		if done {
			return true
		}
		if !s.step() {
			break
		}
	}
	for _, w := range s.wls {
		if !w.finished() {
			return false
		}
	}
	return true
}

// simWR is one work request of a workload and what it must produce.
type simWR struct {
	w        SendWQE
	n        int
	slot     int    // local and remote slot index
	recv     int    // index of the receive it consumes, -1 if none
	orig     uint64 // expected original value of an atomic
	sigaled  bool
	complete int          // completions seen
	status   ibv.WCStatus // of the last completion
}

// workload posts a random mix of WRITE, READ, SEND and atomics from one
// endpoint to the other and checks every outcome.
type workload struct {
	t         testing.TB
	from, to  *endpoint
	rng       *rand.Rand
	wrs       []simWR
	posted    int
	mtu       int
	slotSize  int
	maxSQ     int
	local     []byte // from: one slot per WR
	writeDst  []byte // to: WRITE targets
	readSrc   []byte // to: READ sources
	recvBuf   []byte // to: receive buffers, one slot per consumer
	word      []byte // to: the atomic target
	lkey      uint32
	wkey      uint32
	rkey      uint32
	recvKey   uint32
	akey      uint32
	consumers []int // WR index of each receive consumer, in order
	recvs     int   // receives posted
	recvFrom  time.Time
	recvDone  int
	scqSeen   int
	rcqSeen   int
}

func newWorkload(t testing.TB, seed uint64, from, to *endpoint, count, mtu int) *workload {
	return newWorkloadMax(t, seed, from, to, count, mtu, 4*mtu+17)
}

// newWorkloadMax is newWorkload with messages of up to maxLen bytes.
func newWorkloadMax(t testing.TB, seed uint64, from, to *endpoint, count, mtu, maxLen int) *workload {
	w := &workload{t: t, from: from, to: to, rng: rand.New(rand.NewPCG(seed, 0x5EED)), mtu: mtu, maxSQ: 24}
	w.slotSize = maxLen + 64
	w.local = make([]byte, count*w.slotSize)
	w.writeDst = make([]byte, count*w.slotSize)
	w.readSrc = pattern(count*w.slotSize, byte(seed))
	w.recvBuf = make([]byte, count*w.slotSize)
	w.word = make([]byte, 16)
	w.lkey = from.mem.register(pd, w.local, 0x1_0000_0000, ibv.AccessLocalWrite)
	w.wkey = to.mem.register(pd, w.writeDst, 0x2_0000_0000, ibv.AccessRemoteWrite)
	w.rkey = to.mem.register(pd, w.readSrc, 0x3_0000_0000, ibv.AccessRemoteRead)
	w.recvKey = to.mem.register(pd, w.recvBuf, 0x4_0000_0000, ibv.AccessLocalWrite)
	w.akey = to.mem.register(pd, w.word, 0x5_0000_0000, ibv.AccessRemoteAtomic)
	var value uint64
	for i := range count {
		r := simWR{slot: i, recv: -1, sigaled: true}
		sizes := []int{0, 1, mtu - 1, mtu, mtu + 1, w.rng.IntN(4*mtu + 17), w.rng.IntN(64), w.rng.IntN(maxLen + 1)}
		r.n = sizes[w.rng.IntN(len(sizes))]
		off := i * w.slotSize
		sgl := []SGE{{Addr: 0x1_0000_0000 + uint64(off), Length: uint32(r.n), LKey: w.lkey}}
		if r.n > 8 && w.rng.IntN(2) == 0 { // split across two SGEs
			h := uint32(r.n / 3)
			sgl = []SGE{{sgl[0].Addr, h, w.lkey}, {sgl[0].Addr + uint64(h), uint32(r.n) - h, w.lkey}}
		}
		r.w = SendWQE{WRID: uint64(i), SGL: sgl, Imm: uint32(i) * 7}
		copy(w.local[off:off+r.n], pattern(r.n, byte(i)))
		switch k := w.rng.IntN(20); {
		case k < 7:
			r.w.Opcode = ibv.WRRDMAWrite
			if k == 0 {
				r.w.Opcode = ibv.WRRDMAWriteWithImm
			}
			r.w.RemoteAddr, r.w.RKey = 0x2_0000_0000+uint64(off), w.wkey
		case k < 12:
			r.w.Opcode = ibv.WRRDMARead
			r.w.RemoteAddr, r.w.RKey = 0x3_0000_0000+uint64(off), w.rkey
			clear(w.local[off : off+r.n])
		case k < 17:
			r.w.Opcode = ibv.WRSend
			if k == 16 {
				r.w.Opcode = ibv.WRSendWithImm
			}
		default:
			r.n = 8
			r.w.SGL = []SGE{{0x1_0000_0000 + uint64(off), 8, w.lkey}}
			r.w.RemoteAddr, r.w.RKey = 0x5_0000_0000+8, w.akey
			r.orig = value
			if k == 19 {
				r.w.Opcode, r.w.CompareAdd, r.w.Swap = ibv.WRAtomicCmpAndSwp, value, value*3+uint64(i)
				value = value*3 + uint64(i)
			} else {
				r.w.Opcode, r.w.CompareAdd = ibv.WRAtomicFetchAndAdd, uint64(i)+1
				value += uint64(i) + 1
			}
		}
		if isSend(r.w.Opcode) || r.w.Opcode == ibv.WRRDMAWriteWithImm {
			r.recv = len(w.consumers)
			w.consumers = append(w.consumers, i)
		}
		if !isReadOrAtomic(r.w.Opcode) && w.rng.IntN(5) == 0 {
			r.sigaled = false
		} else {
			r.w.Flags |= ibv.SendSignaled
		}
		if w.rng.IntN(4) == 0 {
			r.w.Flags |= ibv.SendSolicited
		}
		w.wrs = append(w.wrs, r)
	}
	binary.NativeEndian.PutUint64(w.word[8:], 0)
	return w
}

// top posts send WRs up to the SQ budget and receives as they become due.
func (w *workload) top(now time.Time) {
	w.collect()
	for w.recvs < len(w.consumers) && w.to.qp.Snapshot().RQDepth < 32 && !now.Before(w.recvFrom) &&
		w.to.qp.State() != ibv.QPStateErr {
		off := uint64(w.recvs * w.slotSize)
		must(w.t, w.to.qp.PostRecv(&RecvWQE{WRID: uint64(w.recvs), SGL: []SGE{{0x4_0000_0000 + off, uint32(w.slotSize), w.recvKey}}}))
		w.recvs++
	}
	for w.posted < len(w.wrs) && w.from.qp.Snapshot().SQDepth < w.maxSQ && w.from.qp.State() != ibv.QPStateErr {
		r := &w.wrs[w.posted]
		must(w.t, w.from.qp.PostSend(&r.w, now, &w.from.out))
		w.posted++
	}
}

// collect checks the completions produced so far.
func (w *workload) collect() {
	for _, c := range w.from.scq.c[w.scqSeen:] {
		w.scqSeen++
		if c.WRID >= uint64(len(w.wrs)) {
			w.t.Fatalf("unknown send WRID %d", c.WRID)
		}
		r := &w.wrs[c.WRID]
		r.complete++
		r.status = c.Status
		if r.complete > 1 {
			w.t.Fatalf("WR %d completed twice: %+v", c.WRID, c)
		}
		if c.Status != ibv.WCSuccess {
			continue // checked by the caller
		}
		if !r.sigaled {
			w.t.Fatalf("unsignaled WR %d completed: %+v", c.WRID, c)
		}
		if c.Opcode != wcOpcode(r.w.Opcode) || int(c.ByteLen) != r.n {
			w.t.Fatalf("WR %d (%d bytes, op %d): %+v", c.WRID, r.n, r.w.Opcode, c)
		}
	}
	for _, c := range w.to.rcq.c[w.rcqSeen:] {
		w.rcqSeen++
		if c.Status != ibv.WCSuccess {
			continue
		}
		if int(c.WRID) != w.recvDone {
			w.t.Fatalf("receive %d completed out of order (want %d)", c.WRID, w.recvDone)
		}
		r := &w.wrs[w.consumers[w.recvDone]]
		w.recvDone++
		want := Completion{WRID: c.WRID, Opcode: ibv.WCRecv, ByteLen: uint32(r.n), QPN: w.to.qp.QPN(), SrcQP: w.from.qp.QPN(),
			Solicited: r.w.Flags&ibv.SendSolicited != 0}
		if r.w.Opcode == ibv.WRRDMAWriteWithImm {
			want.Opcode = ibv.WCRecvRDMAWithImm
		}
		if r.w.Opcode == ibv.WRSendWithImm || r.w.Opcode == ibv.WRRDMAWriteWithImm {
			want.Imm, want.Flags = r.w.Imm, ibv.WCWithImm
		}
		if c != want {
			w.t.Fatalf("receive completion %+v, want %+v", c, want)
		}
	}
}

func (w *workload) finished() bool {
	w.collect()
	if w.from.qp.State() == ibv.QPStateErr {
		return true
	}
	return w.posted == len(w.wrs) && w.from.qp.Snapshot().SQDepth == 0 && w.recvDone == len(w.consumers)
}

// verify checks that every WR succeeded exactly once and left the right
// bytes everywhere.
func (w *workload) verify() {
	if failed := w.verifyUpTo(); failed >= 0 {
		w.t.Fatalf("WR %d failed: %v", failed, w.wrs[failed].status)
	}
}

// verifyUpTo checks what a run that may have exhausted its retry budget
// guarantees: WRs complete exactly once, in order: successes (unsignaled
// ones silently) with the right bytes, then at most one RETRY_EXC_ERR, then
// flushes of everything posted after it. It returns the index of the
// failed WR, or -1.
func (w *workload) verifyUpTo() int {
	t := w.t
	w.collect()
	failed := -1
	for i, r := range w.wrs {
		if failed >= 0 {
			if i < w.posted && (r.complete != 1 || r.status != ibv.WCWRFlushErr) {
				t.Fatalf("WR %d after the failed WR %d: %d completions, %v", i, failed, r.complete, r.status)
			}
			continue
		}
		if r.complete == 1 && r.status != ibv.WCSuccess {
			if r.status != ibv.WCRetryExcErr {
				t.Fatalf("WR %d failed with %v", i, r.status)
			}
			failed = i
			continue
		}
		want := 0
		if r.sigaled {
			want = 1
		}
		if r.complete != want {
			t.Fatalf("WR %d (op %d, signaled %v) completed %d times", i, r.w.Opcode, r.sigaled, r.complete)
		}
		off := r.slot * w.slotSize
		loc := w.local[off : off+r.n]
		switch op := r.w.Opcode; {
		case isWrite(op):
			wantBytes(t, fmt.Sprintf("WRITE %d", i), w.writeDst[off:off+r.n], pattern(r.n, byte(i)))
		case op == ibv.WRRDMARead:
			wantBytes(t, fmt.Sprintf("READ %d", i), loc, w.readSrc[off:off+r.n])
		case isAtomic(op):
			if got := binary.NativeEndian.Uint64(loc); got != r.orig {
				t.Fatalf("atomic %d returned %d, want %d", i, got, r.orig)
			}
		}
		if op := r.w.Opcode; isSend(op) {
			roff := r.recv * w.slotSize
			wantBytes(t, fmt.Sprintf("SEND %d", i), w.recvBuf[roff:roff+r.n], pattern(r.n, byte(i)))
		}
	}
	if failed >= 0 {
		return failed // the atomic word may hold the effect of a WR whose ACK was lost
	}
	var value uint64
	for _, r := range w.wrs {
		switch r.w.Opcode {
		case ibv.WRAtomicFetchAndAdd:
			value += r.w.CompareAdd
		case ibv.WRAtomicCmpAndSwp:
			value = r.w.Swap
		}
	}
	if got := binary.NativeEndian.Uint64(w.word[8:]); got != value {
		t.Fatalf("atomic word %d, want %d", got, value)
	}
	return -1
}

// simOpts are the QP attributes of the simulations: a 1 ms retransmit
// timeout over a 10 µs link.
func simOpts() pairOpts {
	o := defaultOpts()
	o.timeout = 8 // 1.05 ms
	o.minRNR = 4  // 40 µs
	o.maxSendWR = 32
	return o
}

// TestSimLossy runs mixed WRITE/READ/SEND/atomic workloads in both
// directions at once over lossy, reordering, duplicating and corrupting
// links, for many seeds. Up to 20% loss every WR must succeed with the right
// bytes. At 30% loss a stalled PSN may still exhaust retry_cnt 7 (which is
// not infinite) now and then, as on any IBTA transport; such runs must fail
// safely: every WR completes exactly once, successes first with the right
// bytes, then RETRY_EXC_ERR, then flushes.
func TestSimLossy(t *testing.T) {
	seeds := 50
	if testing.Short() {
		seeds = 5
	}
	scenarios := []struct {
		name string
		link simnet.LinkConfig
		mtu  int
		// lossy: the loss is high enough for retry_cnt 7 to run out
		// now and then (see TestSimLossy's doc).
		lossy bool
	}{
		{"perfect", simnet.LinkConfig{Delay: 10 * time.Microsecond}, 1024, false},
		{"loss1%", simnet.LinkConfig{Delay: 10 * time.Microsecond, Jitter: 2 * time.Microsecond, Loss: 0.01}, 1024, false},
		{"loss5%+reorder+dup", simnet.LinkConfig{Delay: 10 * time.Microsecond, Jitter: 5 * time.Microsecond, Loss: 0.05,
			Reorder: 0.05, ReorderDelay: 30 * time.Microsecond, Duplicate: 0.03}, 256, false},
		{"loss10%+reorder+dup+corrupt", simnet.LinkConfig{Delay: 10 * time.Microsecond, Jitter: 10 * time.Microsecond, Loss: 0.10,
			Reorder: 0.1, ReorderDelay: 50 * time.Microsecond, Duplicate: 0.05, Corrupt: 0.02}, 1024, false},
		{"loss20%+reorder+dup", simnet.LinkConfig{Delay: 10 * time.Microsecond, Jitter: 10 * time.Microsecond, Loss: 0.20,
			Reorder: 0.1, ReorderDelay: 50 * time.Microsecond, Duplicate: 0.05}, 1024, false},
		{"loss20%+corrupt", simnet.LinkConfig{Delay: 10 * time.Microsecond, Jitter: 2 * time.Microsecond, Loss: 0.20,
			Corrupt: 0.02}, 4096, false},
		{"loss30%+reorder+dup", simnet.LinkConfig{Delay: 10 * time.Microsecond, Jitter: 10 * time.Microsecond, Loss: 0.30,
			Reorder: 0.1, ReorderDelay: 50 * time.Microsecond, Duplicate: 0.05}, 4096, true},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			var virtual time.Duration
			exhausted := 0
			for seed := range seeds {
				o := simOpts()
				o.mtu = sc.mtu
				s := newSim(t, int64(seed), sc.link, o)
				a, b := s.eps[0], s.eps[1]
				// Both directions at once: each QP is requester and
				// responder.
				s.wls = []*workload{
					newWorkload(t, uint64(seed), a, b, 60, sc.mtu),
					newWorkload(t, uint64(seed)+1000, b, a, 30, sc.mtu),
				}
				start := s.clk.Now()
				if !s.run(10 * time.Second) {
					t.Fatalf("seed %d: not finished after %v: a %+v b %+v", seed, s.clk.Since(start), a.qp.Snapshot(), b.qp.Snapshot())
				}
				if sc.lossy && (a.qp.State() == ibv.QPStateErr || b.qp.State() == ibv.QPStateErr) {
					// Let the surviving side run out of retries too.
					for s.step() {
					}
					for _, w := range s.wls {
						w.verifyUpTo()
					}
					exhausted++
					virtual += s.clk.Since(start)
					continue
				}
				if a.qp.State() != ibv.QPStateRTS || b.qp.State() != ibv.QPStateRTS {
					t.Fatalf("seed %d: states %v %v; completions %+v %+v", seed, a.qp.State(), b.qp.State(), a.scq.c, b.scq.c)
				}
				for _, w := range s.wls {
					w.verify()
				}
				// Let the last ACKs land, then everything is quiet.
				for s.step() {
				}
				checkIdle(t, a, b)
				virtual += s.clk.Since(start)
			}
			t.Logf("%d seeds, mean virtual time %v, %d ran out of retries", seeds, virtual/time.Duration(seeds), exhausted)
			// With 30% loss each way a retry round (request and
			// response both through) succeeds about half the time; the
			// copies of the head of each retransmission (QP.retry) make
			// a round that makes no progress rare, so few runs exhaust
			// retry_cnt 7, all safely (verifyUpTo). A broken
			// retransmission would fail them all.
			if exhausted*10 > seeds {
				t.Errorf("%d of %d runs ran out of retries", exhausted, seeds)
			}
		})
	}
}

// TestSimLargeMessages mixes messages of up to 150 packets, READ replies of
// several bursts among them, with loss, reordering and duplication.
func TestSimLargeMessages(t *testing.T) {
	seeds := 20
	if testing.Short() {
		seeds = 3
	}
	link := simnet.LinkConfig{Delay: 10 * time.Microsecond, Jitter: 5 * time.Microsecond, Loss: 0.03,
		Reorder: 0.05, ReorderDelay: 30 * time.Microsecond, Duplicate: 0.02}
	for seed := range seeds {
		o := simOpts()
		o.mtu = 256
		o.rdAtomic = 4
		s := newSim(t, int64(seed), link, o)
		a, b := s.eps[0], s.eps[1]
		s.wls = []*workload{
			newWorkloadMax(t, uint64(seed), a, b, 30, 256, 150*256),
			newWorkloadMax(t, uint64(seed)+77, b, a, 30, 256, 150*256),
		}
		if !s.run(10*time.Second) || a.qp.State() != ibv.QPStateRTS || b.qp.State() != ibv.QPStateRTS {
			t.Fatalf("seed %d: states %v %v", seed, a.qp.State(), b.qp.State())
		}
		for _, w := range s.wls {
			w.verify()
		}
		for s.step() {
		}
		checkIdle(t, a, b)
	}
}

// TestSimPartition: a partition longer than the retry budget fails the
// oldest WR with RETRY_EXC_ERR and flushes every other outstanding one;
// every WR completes exactly once.
func TestSimPartition(t *testing.T) {
	for seed := range 5 {
		o := simOpts()
		o.sqSigAll = true
		s := newSim(t, int64(seed), simnet.LinkConfig{Delay: 10 * time.Microsecond, Loss: 0.02}, o)
		a, b := s.eps[0], s.eps[1]
		w := newWorkload(t, uint64(seed), a, b, 80, o.mtu)
		for i := range w.wrs {
			w.wrs[i].sigaled = true
		}
		s.wls = []*workload{w}
		// Let some traffic through, then cut the link for good.
		s.run(30 * time.Microsecond)
		s.net.Partition(s.addrs[0], s.addrs[1])
		start := s.clk.Now()
		s.run(time.Minute)
		if a.qp.State() != ibv.QPStateErr {
			t.Fatalf("seed %d: state %v after the partition", seed, a.qp.State())
		}
		// 1 + retry_cnt transmissions of the oldest PSN, a timeout each.
		if got, max := s.clk.Since(start), 9*a.qp.timeoutDuration(); got > max {
			t.Errorf("seed %d: gave up after %v, more than %v", seed, got, max)
		}
		seen := map[uint64]bool{}
		var failed bool
		for _, c := range a.scq.c {
			if seen[c.WRID] {
				t.Fatalf("WR %d completed twice", c.WRID)
			}
			seen[c.WRID] = true
			switch {
			case c.Status == ibv.WCSuccess && !failed:
			case c.Status == ibv.WCRetryExcErr && !failed:
				failed = true
			case c.Status == ibv.WCWRFlushErr && failed:
			default:
				t.Fatalf("seed %d: unexpected completion sequence at %+v", seed, c)
			}
		}
		if !failed || len(seen) != w.posted {
			t.Fatalf("seed %d: %d completions for %d posted, failed=%v", seed, len(seen), w.posted, failed)
		}
	}
}

// TestSimPartitionHeals: a partition shorter than the retry budget only
// delays the work.
func TestSimPartitionHeals(t *testing.T) {
	o := simOpts()
	s := newSim(t, 7, simnet.LinkConfig{Delay: 10 * time.Microsecond}, o)
	a, b := s.eps[0], s.eps[1]
	s.wls = []*workload{newWorkload(t, 7, a, b, 80, o.mtu)}
	s.run(30 * time.Microsecond)
	s.net.PartitionUntil(s.addrs[0], s.addrs[1], s.clk.Now().Add(4*a.qp.timeoutDuration()))
	if !s.run(time.Minute) || a.qp.State() != ibv.QPStateRTS {
		t.Fatalf("state %v", a.qp.State())
	}
	s.wls[0].verify()
	if a.qp.Counters().Timeouts == 0 {
		t.Fatal("the partition caused no timeout")
	}
}

// TestSimRNRRecovery: receives are posted late; SENDs are RNR-NAKed and
// retried until they land (rnr_retry 7).
func TestSimRNRRecovery(t *testing.T) {
	for _, sr := range []bool{false, true} {
		t.Run(fmt.Sprintf("sr=%v", sr), func(t *testing.T) { testSimRNRRecovery(t, sr) })
	}
}

// testSimRNRRecovery is TestSimRNRRecovery, with selective repeat (SENDs
// held while no receive is posted, refused at replay, kept) or without.
func testSimRNRRecovery(t *testing.T, sr bool) {
	var held uint64
	for seed := range 5 {
		o := simOpts()
		o.sr = sr
		s := newSim(t, int64(seed), simnet.LinkConfig{Delay: 10 * time.Microsecond, Loss: 0.02, Jitter: 3 * time.Microsecond}, o)
		a, b := s.eps[0], s.eps[1]
		w := newWorkload(t, uint64(seed), a, b, 60, o.mtu)
		w.recvFrom = s.clk.Now().Add(3 * time.Millisecond)
		s.wls = []*workload{w}
		if !s.run(10 * time.Second) {
			t.Fatalf("seed %d: not finished", seed)
		}
		if a.qp.State() != ibv.QPStateRTS {
			t.Fatalf("seed %d: state %v, completions %+v", seed, a.qp.State(), a.scq.c)
		}
		w.verify()
		if len(w.consumers) > 0 && b.qp.Counters().RNRNakSent == 0 {
			t.Fatalf("seed %d: no RNR NAK", seed)
		}
		held += b.qp.Counters().HeldRequests
	}
	if sr && held == 0 {
		t.Error("no request was held")
	}
}
