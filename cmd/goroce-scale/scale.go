package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/verbs"
)

// report is what one run measured.
type report struct {
	QPs           int     `json:"qps"`              // QP pairs created
	QPHeapBytes   float64 `json:"qp_heap_bytes"`    // Go heap growth per QP
	QPRSSBytes    float64 `json:"qp_rss_bytes"`     // resident set growth per QP
	QPRate        float64 `json:"qp_pairs_per_sec"` // pairs created and connected per second
	SQDepth       int     `json:"sq_depth"`
	MRsAsked      int     `json:"mrs_requested"`
	MRs           int     `json:"mrs"` // MRs registered
	MaxMR         int     `json:"max_mr"`
	MRSize        int     `json:"mr_size"`
	MRHeapBytes   float64 `json:"mr_heap_bytes"`
	MRRSSBytes    float64 `json:"mr_rss_bytes"`
	RegRate       float64 `json:"reg_mrs_per_sec"`
	DeregRate     float64 `json:"dereg_mrs_per_sec"`
	Size          int     `json:"write_size"`
	Window        int     `json:"window"`
	Active        int     `json:"active_qps"`
	OneQPMBps     float64 `json:"one_qp_mb_per_sec"`
	ManyQPMBps    float64 `json:"many_qp_mb_per_sec"`
	ManyQPRatio   float64 `json:"many_over_one"`
	ActiveTouched int     `json:"active_qps_with_traffic"` // QPs that completed at least one WRITE
	// Losses behind the throughput figures: the requester's
	// retransmission timeouts, and the datagrams the kernel dropped for
	// a full UDP receive buffer (system-wide, from /proc/net/snmp).
	OneQPTimeouts      uint64 `json:"one_qp_retry_timeouts"`
	OneQPRcvbufErrors  uint64 `json:"one_qp_udp_rcvbuf_errors"`
	ManyQPTimeouts     uint64 `json:"many_qp_retry_timeouts"`
	ManyQPRcvbufErrors uint64 `json:"many_qp_udp_rcvbuf_errors"`
	// ManyQPCounters are the device counters (verbs.Counters names) that
	// moved during the many-QP run, of the sending and the target device.
	ManyQPCounters map[string]map[string]uint64 `json:"many_qp_counters,omitempty"`
	GoMaxProcs     int                          `json:"gomaxprocs"`
}

// pair is one connected QP pair: a sends, b is the target.
type pair struct{ a, b *verbs.QP }

// end is one device with a PD and a CQ shared by all its QPs.
type end struct {
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
}

const access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead

func openEnd(cfg *config, i int) (*end, error) {
	dc := verbs.DeviceConfig{Addr: cfg.addrs[i], Port: uint16(cfg.udpPort), PerQPReplyPort: cfg.perQPReplies}
	if cfg.maxMR > 0 {
		dc.Limits = &verbs.DeviceAttr{MaxMR: cfg.maxMR}
	}
	dev, err := verbs.Open(dc)
	if err != nil {
		return nil, err
	}
	e := &end{dev: dev}
	if e.pd, err = dev.AllocPD(); err == nil {
		// Every completion of the runs lands here: at most the window.
		e.cq, err = dev.CreateCQ(cfg.window+1, nil, 0)
	}
	if err != nil {
		_ = dev.Close()
		return nil, err
	}
	return e, nil
}

// counterDelta returns the counters that grew from c0 to c1, by name.
func counterDelta(c0, c1 verbs.Counters) map[string]uint64 {
	before := map[string]uint64{}
	c0.Each(func(name string, v uint64) { before[name] = v })
	d := map[string]uint64{}
	c1.Each(func(name string, v uint64) {
		if v > before[name] {
			d[name] = v - before[name]
		}
	})
	return d
}

// drops are the loss counters read around a throughput run.
type drops struct{ timeouts, rcvbuf uint64 }

func sampleDrops(e *end) drops {
	return drops{timeouts: e.dev.Counters().RetryTimeouts, rcvbuf: udpRcvbufErrors()}
}

// udpRcvbufErrors is the kernel's count of UDP datagrams dropped for a
// full receive buffer (RcvbufErrors in /proc/net/snmp), or 0 where that is
// not available.
func udpRcvbufErrors() uint64 {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return 0
	}
	var names []string
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, name := range names {
			if name == "RcvbufErrors" && i < len(f) {
				v, _ := strconv.ParseUint(f[i], 10, 64)
				return v
			}
		}
	}
	return 0
}

// memSample is the Go heap in use after a collection and the resident set.
type memSample struct{ heap, rss uint64 }

func sampleMem() memSample {
	// Twice: the first collection moves sync.Pool contents to their
	// victim caches, the second frees them, so memory released before the
	// sample is not counted against what is created after it.
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSample{heap: ms.HeapAlloc, rss: rss()}
}

// perObject returns the growth from m0 to m1 divided by n.
func perObject(m0, m1 memSample, n int) (heap, rss float64) {
	if n == 0 {
		return 0, 0
	}
	return (float64(m1.heap) - float64(m0.heap)) / float64(n), (float64(m1.rss) - float64(m0.rss)) / float64(n)
}

// rss is the process's resident set size (VmRSS in /proc/self/status), or
// 0 where that is not available.
func rss() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// measure runs every measurement.
func measure(ctx context.Context, cfg *config, log io.Writer) (*report, error) {
	rep := &report{QPs: cfg.qps, SQDepth: cfg.sqDepth, MRsAsked: cfg.mrs, MRSize: cfg.mrSize,
		Size: cfg.size, Window: cfg.window, Active: cfg.active, GoMaxProcs: runtime.GOMAXPROCS(0)}
	ea, err := openEnd(cfg, 0)
	if err != nil {
		return nil, err
	}
	defer ea.dev.Close()
	eb, err := openEnd(cfg, 1)
	if err != nil {
		return nil, err
	}
	defer eb.dev.Close()
	for _, e := range []*end{ea, eb} {
		if da := e.dev.Query(); cfg.qps > da.MaxQP {
			return nil, fmt.Errorf("-qps %d: above the device's max_qp %d", cfg.qps, da.MaxQP)
		}
	}

	fmt.Fprintf(log, "goroce-scale: creating and connecting %d QP pairs\n", cfg.qps)
	m0 := sampleMem()
	start := time.Now()
	pairs, err := createPairs(ctx, cfg, ea, eb)
	if err != nil {
		return nil, err
	}
	el := time.Since(start)
	m1 := sampleMem()
	rep.QPHeapBytes, rep.QPRSSBytes = perObject(m0, m1, 2*len(pairs))
	rep.QPRate = float64(len(pairs)) / el.Seconds()

	if cfg.active > 0 {
		fmt.Fprintf(log, "goroce-scale: WRITE throughput, 1 QP then %d QPs, %v each\n", cfg.active, cfg.duration)
		src, dst, err := runBuffers(cfg, ea, eb)
		if err != nil {
			return nil, err
		}
		d0 := sampleDrops(ea)
		one, _, err := throughput(ctx, cfg, ea.cq, pairs[:1], src, dst)
		if err != nil {
			return nil, fmt.Errorf("1 QP: %w", err)
		}
		d1 := sampleDrops(ea)
		ca, cb := ea.dev.Counters(), eb.dev.Counters()
		many, touched, err := throughput(ctx, cfg, ea.cq, pairs[:cfg.active], src, dst)
		if err != nil {
			return nil, fmt.Errorf("%d QPs: %w", cfg.active, err)
		}
		d2 := sampleDrops(ea)
		rep.ManyQPCounters = map[string]map[string]uint64{
			"sender": counterDelta(ca, ea.dev.Counters()), "target": counterDelta(cb, eb.dev.Counters())}
		rep.OneQPMBps, rep.ManyQPMBps, rep.ActiveTouched = one, many, touched
		rep.OneQPTimeouts, rep.OneQPRcvbufErrors = d1.timeouts-d0.timeouts, d1.rcvbuf-d0.rcvbuf
		rep.ManyQPTimeouts, rep.ManyQPRcvbufErrors = d2.timeouts-d1.timeouts, d2.rcvbuf-d1.rcvbuf
		if one > 0 {
			rep.ManyQPRatio = many / one
		}
		if err := errors.Join(src.Dereg(), dst.Dereg()); err != nil {
			return nil, err
		}
	}

	if cfg.mrs > 0 {
		rep.MaxMR = ea.dev.Query().MaxMR
		n := min(cfg.mrs, rep.MaxMR)
		if n < cfg.mrs {
			fmt.Fprintf(log, "goroce-scale: -mrs %d is above the device's max_mr %d: registering %d\n", cfg.mrs, rep.MaxMR, n)
		}
		fmt.Fprintf(log, "goroce-scale: registering %d MRs of %d bytes\n", n, cfg.mrSize)
		if err := registerMRs(cfg, ea.pd, n, rep); err != nil {
			return nil, err
		}
	}

	for _, p := range pairs {
		if err := errors.Join(p.a.Destroy(), p.b.Destroy()); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// createPairs creates cfg.qps QPs on each end and connects them in pairs.
func createPairs(ctx context.Context, cfg *config, ea, eb *end) ([]pair, error) {
	ga, err := ea.dev.QueryGID(1, 1)
	if err != nil {
		return nil, err
	}
	gb, err := eb.dev.QueryGID(1, 1)
	if err != nil {
		return nil, err
	}
	pa, err := ea.dev.QueryPort(1)
	if err != nil {
		return nil, err
	}
	mtu := pa.ActiveMTU
	pairs := make([]pair, 0, cfg.qps)
	for i := range cfg.qps {
		if i%1024 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		a, err := newQP(cfg, ea)
		if err != nil {
			return nil, fmt.Errorf("QP pair %d: %w", i, err)
		}
		b, err := newQP(cfg, eb)
		if err != nil {
			return nil, fmt.Errorf("QP pair %d: %w", i, err)
		}
		psnA, psnB := uint32(i)*7919&0xffffff, uint32(i)*104729&0xffffff
		if err := connectQP(cfg, a, b.QPN(), gb, mtu, psnA, psnB); err != nil {
			return nil, fmt.Errorf("QP pair %d: %w", i, err)
		}
		if err := connectQP(cfg, b, a.QPN(), ga, mtu, psnB, psnA); err != nil {
			return nil, fmt.Errorf("QP pair %d: %w", i, err)
		}
		pairs = append(pairs, pair{a, b})
	}
	return pairs, nil
}

func newQP(cfg *config, e *end) (*verbs.QP, error) {
	qp, err := e.pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: verbs.QPCap{MaxSendWR: cfg.sqDepth, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	err = qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: access},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	return qp, err
}

// connectQP moves qp to RTR and RTS toward the remote QP, with perftest's
// attributes.
func connectQP(cfg *config, qp *verbs.QP, remote uint32, gid verbs.GID, mtu verbs.MTU, lpsn, rpsn uint32) error {
	if err := qp.Modify(&verbs.QPAttr{
		QPState: verbs.QPStateRTR, PathMTU: mtu, DestQPNum: remote, RQPSN: rpsn,
		MaxDestRdAtomic: 1, MinRNRTimer: 12,
		AHAttr: verbs.AddressVector{DGID: gid, SGIDIndex: 1, HopLimit: 64, IsGlobal: true, PortNum: 1,
			UDPPort: uint16(cfg.udpPort)},
	}, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
		verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return fmt.Errorf("to RTR: %w", err)
	}
	if err := qp.Modify(&verbs.QPAttr{
		QPState: verbs.QPStateRTS, SQPSN: lpsn, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1,
	}, verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|
		verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic); err != nil {
		return fmt.Errorf("to RTS: %w", err)
	}
	return nil
}

// runBuffers registers the source of the WRITEs on ea and their target on
// eb: every QP writes the same bytes to the same place, which is what
// perftest's write_bw does per QP and keeps the buffers small.
func runBuffers(cfg *config, ea, eb *end) (src, dst *verbs.MR, err error) {
	src, err = ea.pd.RegMR(make([]byte, cfg.size), access)
	if err != nil {
		return nil, nil, err
	}
	dst, err = eb.pd.RegMR(make([]byte, cfg.size), access)
	if err != nil {
		_ = src.Dereg()
		return nil, nil, err
	}
	return src, dst, nil
}

// stallTimeout is how long a throughput run waits for a completion before
// it gives up.
const stallTimeout = 10 * time.Second

// throughput runs signaled WRITEs on pairs for cfg.duration, keeping
// cfg.window outstanding in total and at most ceil(window/len(pairs)) per
// QP, posting round robin. It returns MB/s (2^20 bytes, as perftest's
// MB/sec) and how many QPs completed at least one WRITE.
func throughput(ctx context.Context, cfg *config, cq *verbs.CQ, pairs []pair, src, dst *verbs.MR) (float64, int, error) {
	nq := len(pairs)
	perQP := (cfg.window + nq - 1) / nq
	out := make([]int, nq)
	done := make([]int, nq)
	wc := make([]verbs.WorkCompletion, 64)
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{src.SGE(0, cfg.size)},
		RDMA:   verbs.RDMAParams{RemoteAddr: dst.IOVA(), RKey: dst.RKey()}}
	total, next, completed := 0, 0, 0
	start := time.Now()
	deadline := start.Add(cfg.duration)
	posting := true
	var end time.Time
	for posting || total > 0 {
		if posting && time.Now().After(deadline) {
			posting = false
		}
		// Fill the window, visiting each QP at most once per round.
		for tries := 0; posting && total < cfg.window && tries < nq; tries++ {
			q := next
			next = (next + 1) % nq
			if out[q] >= perQP {
				continue
			}
			wr.WRID = uint64(q)
			if err := pairs[q].a.PostSend(&wr); err != nil {
				return 0, 0, err
			}
			out[q]++
			total++
			tries = -1 // posted: keep filling from the next QP
		}
		if total == 0 {
			break
		}
		wctx, cancel := context.WithTimeout(ctx, stallTimeout)
		n, err := cq.Wait(wctx, wc)
		cancel()
		if err != nil {
			return 0, 0, fmt.Errorf("waiting for completions (%d outstanding): %w", total, err)
		}
		end = time.Now()
		for _, c := range wc[:n] {
			if c.Status != verbs.WCSuccess {
				return 0, 0, fmt.Errorf("completion error on QP %d: %v (vendor_err %#x)", c.WRID, c.Status, c.VendorErr)
			}
			q := int(c.WRID)
			out[q]--
			done[q]++
			total--
			completed++
		}
	}
	touched := 0
	for _, d := range done {
		if d > 0 {
			touched++
		}
	}
	span := end.Sub(start).Seconds()
	if span <= 0 {
		return 0, touched, nil
	}
	return float64(completed) * float64(cfg.size) / span / (1 << 20), touched, nil
}

// registerMRs registers n MRs of cfg.mrSize bytes over one buffer, then
// deregisters them, filling in the MR figures of rep.
func registerMRs(cfg *config, pd *verbs.PD, n int, rep *report) error {
	buf := make([]byte, cfg.mrBuf)
	slots := cfg.mrBuf / cfg.mrSize
	mrs := make([]*verbs.MR, 0, n)
	m0 := sampleMem()
	start := time.Now()
	for i := range n {
		off := i % slots * cfg.mrSize
		mr, err := pd.RegMR(buf[off:off+cfg.mrSize:off+cfg.mrSize], access)
		if err != nil {
			for _, mr := range mrs {
				_ = mr.Dereg()
			}
			return fmt.Errorf("MR %d: %w", i, err)
		}
		mrs = append(mrs, mr)
	}
	el := time.Since(start)
	m1 := sampleMem()
	rep.MRs = len(mrs)
	rep.RegRate = float64(len(mrs)) / el.Seconds()
	// mrs was allocated before m0: the tool's pointers are not counted.
	rep.MRHeapBytes, rep.MRRSSBytes = perObject(m0, m1, len(mrs))
	start = time.Now()
	for _, mr := range mrs {
		if err := mr.Dereg(); err != nil {
			return err
		}
	}
	rep.DeregRate = float64(len(mrs)) / time.Since(start).Seconds()
	runtime.KeepAlive(buf)
	return nil
}
