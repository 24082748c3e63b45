package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/goroce/goroce/verbs"
)

// latResult is the outcome of the latency test, in microseconds.
type latResult struct {
	Test  string  `json:"test"` // write_lat
	Size  int     `json:"size"` // bytes per WRITE
	Iters int     `json:"iters"`
	Min   float64 `json:"min_us"`
	P50   float64 `json:"p50_us"`
	P99   float64 `json:"p99_us"`
	P999  float64 `json:"p99_9_us"`
	Max   float64 `json:"max_us"`
	Avg   float64 `json:"avg_us"`
	// Method says what one sample is: post to completion of a signaled
	// WRITE, a full round trip.
	Method string `json:"method"`
}

const latSize = 8

// latency measures iters 8-byte RDMA WRITEs, one at a time, each from
// PostSend to its completion (see the package comment), after a warm-up.
// Each WRITE carries its iteration number, and the target memory must hold
// the last one at the end.
func (p *pair) latency(ctx context.Context, iters int) (latResult, error) {
	warmup := min(iters/10, 1000)
	samples := make([]time.Duration, 0, iters)
	src := p.req.buf[:latSize]
	wr := verbs.SendWR{
		Opcode: verbs.WRRDMAWrite,
		// Inline: the 8 bytes are copied at post time, as perftest does
		// for small messages; no key lookup on the send path.
		SendFlags: verbs.SendSignaled | verbs.SendInline,
		SGList:    []verbs.SGE{p.req.mr.SGE(0, latSize)},
		RDMA:      verbs.RDMAParams{RemoteAddr: p.resp.mr.IOVA(), RKey: p.resp.mr.RKey()},
	}
	wc := make([]verbs.WorkCompletion, 1)
	// A watchdog ends the wait of an iteration that never completes.
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stall := time.AfterFunc(stallTimeout, cancel)
	defer stall.Stop()
	var seq uint64
	for i := range warmup + iters {
		seq = uint64(i) + 1
		binary.LittleEndian.PutUint64(src, seq)
		wr.WRID = seq
		stall.Reset(stallTimeout)
		start := time.Now()
		if err := p.req.qp.PostSend(&wr); err != nil {
			return latResult{}, err
		}
		if _, err := waitCQ(waitCtx, p.req.sendCQ, wc); err != nil {
			if ctx.Err() == nil {
				return latResult{}, fmt.Errorf("iteration %d: no completion within %v", i, stallTimeout)
			}
			return latResult{}, err
		}
		t := time.Since(start)
		if wc[0].Status != verbs.WCSuccess || wc[0].WRID != seq {
			return latResult{}, fmt.Errorf("iteration %d: completion of work request %d: %v", i, wc[0].WRID, wc[0].Status)
		}
		if i >= warmup {
			samples = append(samples, t)
		}
	}
	if got := binary.LittleEndian.Uint64(p.resp.buf[:latSize]); got != seq {
		return latResult{}, fmt.Errorf("data check: target holds WRITE %d, the last was %d", got, seq)
	}
	return summarize(samples), nil
}

// summarize computes the latency statistics of samples, which it sorts.
func summarize(samples []time.Duration) latResult {
	slices.Sort(samples)
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return latResult{
		Test:   "write_lat",
		Size:   latSize,
		Iters:  len(samples),
		Min:    us(samples[0]),
		P50:    us(percentile(samples, 50, 100)),
		P99:    us(percentile(samples, 99, 100)),
		P999:   us(percentile(samples, 999, 1000)),
		Max:    us(samples[len(samples)-1]),
		Avg:    us(sum / time.Duration(len(samples))),
		Method: "post to completion (round trip)",
	}
}

// percentile returns the num/den quantile of sorted (0 < num <= den) by
// the nearest-rank method: the smallest sample that at least num/den of all
// samples do not exceed. Integer arithmetic keeps exact ranks exact (in
// floating point 0.99×100 rounds up to rank 100).
func percentile(sorted []time.Duration, num, den int) time.Duration {
	rank := (num*len(sorted) + den - 1) / den // ceil(num/den × n), 1-based
	return sorted[max(0, min(rank-1, len(sorted)-1))]
}
