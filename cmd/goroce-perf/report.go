package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/internal/oob"
)

// The table strings of perftest 6.06, the version goroce announces and the
// one the reference logs come from (newer perftests say MiB/sec).
const (
	resultLine    = "---------------------------------------------------------------------------------------\n"
	resultFmtMB   = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
	resultFmtGb   = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
	resultFmtLat  = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"
	reportFmtBW   = " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n"
	reportFmtLat  = " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n"
	waitingBanner = "\n************************************\n* Waiting for client to connect... *\n************************************\n"
)

// result is one line of the table: one message size on one side.
type result struct {
	side  string
	size  int
	iters uint64

	hasBW                  bool
	bwPeak, bwAvg, msgRate float64
	remote                 bool // the client's numbers, printed by a passive server

	hasLat                                    bool
	tMin, tMax, tTyp, tAvg, tStdev, p99, p999 float64

	p9999   float64   // µs; NaN when this side timed no messages
	p50     float64   // the median of samples (bandwidth tests), µs; NaN when none
	samples []float64 // the per-message latencies behind p9999, sorted (µs)
	bytes   float64   // payload moved
	cpu     time.Duration
	// cpuEnd, when set, is the process CPU time at the end of the
	// transfer, before the result was computed (sorting a few million
	// latencies takes a tenth of a second): cpu counts up to it.
	cpuEnd time.Duration
	// qpBW is each QP's share of this side's bwAvg (with -b, before the
	// peer's direction is added), in its unit, over the same span: the
	// fairness between the QPs of one run (-q N).
	qpBW []float64
}

func (r result) bwReport() oob.BWReport {
	return oob.BWReport{Size: uint64(r.size), Iters: r.iters, BWPeak: r.bwPeak, BWAvg: r.bwAvg, MsgRateAvg: r.msgRate}
}

// unitFactor is perftest's format_factor: bytes per reported unit.
func (c *config) unitFactor() float64 {
	if c.gbits {
		return 125000000
	}
	return 0x100000
}

func (c *config) unitName() string {
	if c.gbits {
		return "Gb/sec"
	}
	return "MB/sec"
}

// A stamp is a reading of the monotonic clock, in nanoseconds since the
// program started. The per-message logs of a run hold millions of them:
// time.Time holds a pointer (its Location), so the garbage collector
// scanned those logs (with -D they are sized for 4M messages), which was a
// quarter of a bandwidth run's CPU; a log of stamps holds no pointer.
type stamp int64

// clockBase is the origin of stamps.
var clockBase = time.Now()

// stampOf returns t as a stamp.
func stampOf(t time.Time) stamp { return stamp(t.Sub(clockBase)) }

// now returns the current stamp.
func now() stamp { return stamp(time.Since(clockBase)) }

// sub returns the seconds from u to s.
func (s stamp) sub(u stamp) float64 { return time.Duration(s - u).Seconds() }

// bwResult computes perftest's numbers (print_report_bw) from the post
// times of the work requests and the completion times, paired by rank:
// the average over the whole run, and the peak, the best rate over any
// window from a post to a later polled completion.
func bwResult(cfg *config, size int, posted, done []stamp) result {
	n := min(len(posted), len(done))
	r := result{size: size, iters: uint64(n), hasBW: true, p9999: math.NaN(), p50: math.NaN(), bytes: float64(size) * float64(n)}
	if n == 0 {
		return r
	}
	span := done[n-1].sub(posted[0])
	if span > 0 {
		r.bwAvg = float64(size) * float64(n) / span / cfg.unitFactor()
		r.msgRate = float64(n) / span / 1e6
	}
	// perftest scans every start and every completion; on long runs the
	// starts and ends are sampled so that the scan stays near 4M steps.
	cqMod := cfg.cqMod(size)
	stepI := max(1, n/2000)
	stepJ := max(cqMod, (n/2000)/cqMod*cqMod)
	best := math.Inf(1)
	for i := 0; i < n; i += stepI {
		start := (i+cqMod)/cqMod*cqMod - 1 // ROUND_UP(i+1, cq_mod) - 1
		for j := start; j < n; j += stepJ {
			if t := done[j].sub(posted[i]) / float64(j-i+1); t > 0 && t < best {
				best = t
			}
		}
		if j := n - 1; n%cqMod != 0 && j >= i {
			if t := done[j].sub(posted[i]) / float64(j-i+1); t > 0 && t < best {
				best = t
			}
		}
	}
	if !math.IsInf(best, 1) {
		r.bwPeak = float64(size) / best / cfg.unitFactor()
	}
	// Per-message latency under load: post to covering completion.
	lat := make([]float64, n)
	for k := range n {
		lat[k] = done[k].sub(posted[k]) * 1e6
	}
	slices.Sort(lat)
	r.p9999 = lat[min(n-1, int(math.Ceil(float64(n)*0.9999)))]
	r.p50 = lat[n/2]
	r.samples = lat
	return r
}

// latResult is print_report_lat: the deltas between consecutive posts,
// sorted, without the two largest; rtt is 2 for the ping-pong tests (half
// a round trip is reported) and 1 for READ and atomics.
func latResult(cfg *config, size int, posted []stamp, rtt float64) result {
	r := result{size: size, iters: uint64(len(posted)), hasLat: true, p9999: math.NaN(),
		bytes: float64(size) * float64(len(posted))}
	if cfg.test.verb == verbWrite || cfg.test.verb == verbSend {
		r.bytes *= 2 // both directions
	}
	cnt := len(posted) - 1
	if cnt < 3 {
		return r
	}
	d := make([]float64, cnt)
	for i := range cnt {
		d[i] = posted[i+1].sub(posted[i]) * 1e6 / rtt
	}
	slices.Sort(d)
	m := cnt - 2 // LAT_MEASURE_TAIL
	if (m-1)%2 != 0 {
		r.tTyp = (d[m/2] + d[m/2-1]) / 2
	} else {
		r.tTyp = d[m/2]
	}
	var sum float64
	for _, v := range d[:m] {
		sum += v
	}
	r.tAvg = sum / float64(m)
	var sq float64
	for _, v := range d[:m] {
		sq += (v - r.tAvg) * (v - r.tAvg)
	}
	r.tStdev = math.Sqrt(sq / float64(m))
	r.tMin, r.tMax = d[0], d[m]
	at := func(q float64) float64 { return d[min(cnt-1, int(math.Ceil(float64(m)*q)))] }
	r.p99, r.p999, r.p9999 = at(0.99), at(0.999), at(0.9999)
	r.samples = d
	return r
}

// addResult records r and prints its table line.
func (s *side) addResult(r result) {
	s.results = append(s.results, r)
	if s.cfg.json {
		return
	}
	if r.hasLat {
		fmt.Fprintf(s.out, reportFmtLat, r.size, r.iters, r.tMin, r.tMax, r.tTyp, r.tAvg, r.tStdev, r.p99, r.p999)
		return
	}
	fmt.Fprintf(s.out, reportFmtBW, r.size, r.iters, r.bwPeak, r.bwAvg, r.msgRate)
}

// addRemoteResult is the passive server's line: the client's report.
func (s *side) addRemoteResult(rep oob.BWReport, cpu time.Duration) {
	s.addResult(result{side: s.role.String(), size: int(rep.Size), iters: rep.Iters, hasBW: true, remote: true,
		bwPeak: rep.BWPeak, bwAvg: rep.BWAvg, msgRate: rep.MsgRateAvg, p9999: math.NaN(), p50: math.NaN(),
		bytes: float64(rep.Size) * float64(rep.Iters), cpu: cpu})
}

func (s *side) printf(format string, a ...any) {
	if !s.cfg.json {
		fmt.Fprintf(s.out, format, a...)
	}
}

func (s *side) printLine() { s.printf("%s", resultLine) }

// printBanner prints perftest's test description block.
func (s *side) printBanner() {
	cfg, t := s.cfg, s.cfg.test
	title := t.title
	if t.verb == verbAtomic {
		title += " " + cfg.atomicType
	}
	if t.lat {
		title += " Latency Test"
	} else {
		title += " BW Test"
	}
	s.printLine()
	s.printf("                    %s\n", title)
	s.printf(" Dual-port       : OFF\t\tDevice         : %s\n", cfg.ibDev)
	s.printf(" Number of qps   : %d\t\tTransport type : IB\n", cfg.qps)
	s.printf(" Connection type : %s\t\tUsing SRQ      : OFF\n", cfg.conn)
	relax := "ON"
	if t.lat && t.verb == verbWrite {
		relax = "OFF"
	}
	s.printf(" PCIe relax order: %s\n", relax)
	s.printf(" ibv_wr* API     : OFF\n")
	switch {
	case t.verb == verbSend && s.role == oob.Server:
		s.printf(" RX depth        : %d\n", cfg.rxDepth())
	case s.role == oob.Client || t.verb == verbSend:
		s.printf(" TX depth        : %d\n", cfg.txDepth)
	}
	if !t.lat {
		s.printf(" CQ Moderation   : %d\n", cfg.cqMod(s.maxSize()))
		if cfg.warnCQMod(s.maxSize()) {
			s.printf(" Warning: Large message requested and CQ moderation enabled\n")
			s.printf(" Warning: It can lead to inaccurate results\n")
		}
	}
	s.printf(" Mtu             : %d[B]\n", s.mtu.Bytes())
	s.printf(" Link type       : Ethernet\n")
	s.printf(" GID index       : %d\n", s.gidIndex)
	if t.verb == verbRead || t.verb == verbAtomic {
		s.printf(" Outstand reads  : %d\n", s.outs)
	} else {
		s.printf(" Max inline data : %d[B]\n", cfg.inline)
	}
	if s.cfg.rdmaCM {
		s.printf(" rdma_cm QPs\t : ON\n")
		s.printf(" Data ex. method : rdma_cm\n")
	} else {
		s.printf(" rdma_cm QPs\t : OFF\n")
		s.printf(" Data ex. method : Ethernet\n")
	}
	s.printLine()
}

// cHex formats v as C's "%#0*x": zero-padded to width including the "0x",
// and without the "0x" for zero.
func cHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, 0)
	}
	return "0x" + fmt.Sprintf("%0*x", max(width-2, 0), v)
}

func (s *side) printDest(which string, d oob.Dest) {
	t := s.cfg.test
	line := fmt.Sprintf(" %s address: LID %s QPN %s PSN %s", which, cHex(uint64(d.LID), 4), cHex(uint64(d.QPN), 6), cHex(uint64(d.PSN), 8))
	if t.verb == verbRead {
		line += " OUT " + cHex(uint64(d.OutReads), 4)
	}
	if t.verb == verbWrite || t.verb == verbRead {
		line += " RKey " + cHex(uint64(d.RKey), 8) + " VAddr " + cHex(d.VAddr, 16)
	}
	s.printf("%s\n", line)
	parts := make([]string, 16)
	for i, b := range d.GID {
		parts[i] = fmt.Sprintf("%02d", b)
	}
	s.printf(" GID: %s\n", strings.Join(parts, ":"))
}

// printAddresses prints the local and remote QP descriptions.
func (s *side) printAddresses() {
	for i := range s.local {
		s.printDest("local", s.local[i])
	}
	for i := range s.remote {
		s.printDest("remote", s.remote[i])
	}
	s.printLine()
}

func (s *side) printTableHeader() {
	switch {
	case s.cfg.test.lat:
		s.printf("%s", resultFmtLat)
	case s.cfg.gbits:
		s.printf("%s", resultFmtGb)
	default:
		s.printf("%s", resultFmtMB)
	}
}

// usecPerMiB is a time per MiB of buffer.
func (s *side) usecPerMiB(d time.Duration) float64 {
	return d.Seconds() * 1e6 / (float64(len(s.buf)) / (1 << 20))
}

// cpuPerGB is CPU seconds per 10^9 bytes moved.
func cpuPerGB(r result) float64 {
	if r.bytes == 0 {
		return math.NaN()
	}
	return r.cpu.Seconds() / (r.bytes / 1e9)
}

func fmtFloat(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// printExtras prints goroce's additions after perftest's table: the
// 99.99th percentile, the CPU cost per GB and the registration cost.
func (s *side) printExtras(w io.Writer) {
	if s.cfg.json || len(s.buf) == 0 {
		return
	}
	if len(s.results) > 0 {
		fmt.Fprintf(w, " goroce %s: p99.99 is per message (bw: post to completion), CPU is the whole process (getrusage)\n", s.role)
		fmt.Fprintf(w, " #bytes     p99.99[usec]    CPU[sec/GB]\n")
		for _, r := range s.results {
			fmt.Fprintf(w, " %-7d    %-12s    %s\n", r.size, fmtFloat(r.p9999), fmtFloat(cpuPerGB(r)))
		}
	}
	fmt.Fprintf(w, " MR %.2f MiB: reg %.1f usec (%.2f usec/MiB), dereg %.1f usec (%.2f usec/MiB)\n",
		float64(len(s.buf))/(1<<20), s.regTime.Seconds()*1e6, s.usecPerMiB(s.regTime),
		s.deregTime.Seconds()*1e6, s.usecPerMiB(s.deregTime))
	if s.cfg.check {
		fmt.Fprintf(w, " data check: %s\n", s.checkState())
	}
	fmt.Fprint(w, resultLine)
}

func (s *side) checkState() string {
	switch {
	case !s.cfg.check:
		return "off"
	case s.checked:
		return "passed"
	default:
		return "peer" // the data lands on the peer, which checks it
	}
}

// jsonResult is the --json form of a result line.
type jsonResult struct {
	Test       string    `json:"test"`
	Side       string    `json:"side"`
	Bytes      int       `json:"bytes"`
	Iterations uint64    `json:"iterations"`
	Remote     bool      `json:"remote_report,omitempty"`
	BWUnit     string    `json:"bw_unit,omitempty"`
	BWPeak     *float64  `json:"bw_peak,omitempty"`
	BWAvg      *float64  `json:"bw_average,omitempty"`
	QPBW       []float64 `json:"qp_bw_average,omitempty"` // per QP, in order, same unit and span as bw_average; with -b this side's direction only
	MsgRate    *float64  `json:"msg_rate_mpps,omitempty"`
	TMin       *float64  `json:"t_min_usec,omitempty"`
	TMax       *float64  `json:"t_max_usec,omitempty"`
	TTypical   *float64  `json:"t_typical_usec,omitempty"`
	TAvg       *float64  `json:"t_avg_usec,omitempty"`
	TStdev     *float64  `json:"t_stdev_usec,omitempty"`
	P99        *float64  `json:"p99_usec,omitempty"`
	P999       *float64  `json:"p99_9_usec,omitempty"`
	P9999      *float64  `json:"p99_99_usec,omitempty"`
	P50        *float64  `json:"p50_usec,omitempty"` // bandwidth tests: the median message, as p99_99_usec
	CPUPerGB   *float64  `json:"cpu_sec_per_gb,omitempty"`
	RegMiB     float64   `json:"reg_mib"`
	RegUsec    float64   `json:"reg_usec_per_mib"`
	DeregUsec  float64   `json:"dereg_usec_per_mib"`
	MTU        int       `json:"mtu"`
	Check      string    `json:"check"`
}

func num(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// printJSON prints one JSON object per result.
func (s *side) printJSON(w io.Writer) error {
	if !s.cfg.json {
		return nil
	}
	enc := json.NewEncoder(w)
	for _, r := range s.results {
		j := jsonResult{Test: s.cfg.test.name, Side: s.role.String(), Bytes: r.size, Iterations: r.iters,
			Remote: r.remote, CPUPerGB: num(cpuPerGB(r)), P9999: num(r.p9999),
			RegMiB: float64(len(s.buf)) / (1 << 20), RegUsec: s.usecPerMiB(s.regTime),
			DeregUsec: s.usecPerMiB(s.deregTime), MTU: s.mtu.Bytes(), Check: s.checkState()}
		if r.hasBW {
			j.BWUnit, j.BWPeak, j.BWAvg, j.MsgRate = s.cfg.unitName(), num(r.bwPeak), num(r.bwAvg), num(r.msgRate)
			j.P50 = num(r.p50)
			j.QPBW = r.qpBW
		}
		if r.hasLat {
			j.TMin, j.TMax, j.TTypical, j.TAvg = num(r.tMin), num(r.tMax), num(r.tTyp), num(r.tAvg)
			j.TStdev, j.P99, j.P999 = num(r.tStdev), num(r.p99), num(r.p999)
		}
		if err := enc.Encode(j); err != nil {
			return err
		}
	}
	return nil
}

// progress prints a progress line on runs over 2 s when stdout is a
// terminal.
type progress struct {
	out         io.Writer
	size        int
	start, last time.Time
	shown       bool
}

func (s *side) newProgress(size int) *progress {
	if !s.progress {
		return nil
	}
	now := time.Now()
	return &progress{out: s.out, size: size, start: now, last: now}
}

func (p *progress) update(now time.Time, count int) {
	if p == nil || now.Sub(p.start) < 2*time.Second || now.Sub(p.last) < time.Second {
		return
	}
	p.last, p.shown = now, true
	el := now.Sub(p.start).Seconds()
	fmt.Fprintf(p.out, "\r %d bytes: %d messages in %.0f s, %.2f MB/sec ", p.size, count, el,
		float64(p.size)*float64(count)/el/0x100000)
}

func (p *progress) finish() {
	if p != nil && p.shown {
		fmt.Fprint(p.out, "\r\x1b[K")
	}
}

// printCounters prints the device counters read at teardown, one
// "name value" line each in verbs.Counters.Each's order, or with --json
// one object holding them all.
func (s *side) printCounters(w io.Writer) error {
	if s.cfg.json {
		m := map[string]uint64{}
		s.counters.Each(func(name string, v uint64) { m[name] = v })
		return json.NewEncoder(w).Encode(struct {
			Side     string            `json:"side"`
			Counters map[string]uint64 `json:"counters"`
		}{s.role.String(), m})
	}
	fmt.Fprintf(w, " goroce %s device counters:\n", s.role)
	s.counters.Each(func(name string, v uint64) {
		fmt.Fprintf(w, " %-22s %d\n", name, v)
	})
	return nil
}
