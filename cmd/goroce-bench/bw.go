package main

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/goroce/goroce/internal/cputime"
	"github.com/goroce/goroce/verbs"
)

// bwResult is the outcome of one bandwidth test.
type bwResult struct {
	Test     string  `json:"test"`     // write_bw, read_bw or send_bw
	Size     int     `json:"size"`     // bytes per message
	Depth    int     `json:"depth"`    // work requests outstanding
	Messages int64   `json:"messages"` // messages completed
	Bytes    int64   `json:"bytes"`    // payload bytes completed
	Seconds  float64 `json:"seconds"`  // first post to last completion
	MBps     float64 `json:"mb_per_s"` // 10^6 bytes per second
	Gbps     float64 `json:"gbit_per_s"`
	// CPUPerGB is the process's CPU seconds (user+system) per 10^9 bytes.
	CPUPerGB float64 `json:"cpu_s_per_gb"`
	// Verified reports that the last message's bytes reached their
	// destination; a run whose check fails is an error instead.
	Verified bool `json:"verified"`
}

// pattern fills b with the bytes of source slot r. Two slots whose indices
// differ by less than 256 differ in every byte (r*97 is a bijection modulo
// 256), so a destination still holding an earlier message never passes for
// the last one; the position terms catch misplaced bytes.
func pattern(b []byte, r int) {
	k := byte(r*97 + 1)
	for j := range b {
		b[j] = byte(j)*31 ^ byte(j>>8) ^ k
	}
}

// opTestName names a bandwidth test by its opcode.
var opTestName = map[verbs.WROpcode]string{
	verbs.WRRDMAWrite: "write_bw",
	verbs.WRRDMARead:  "read_bw",
	verbs.WRSend:      "send_bw",
}

// stallTimeout is how long beyond its planned duration a test may wait for
// completions. A software device on loopback completes work in
// milliseconds, so reaching it means the transport lost work.
const stallTimeout = 30 * time.Second

// bandwidth runs one bandwidth test: op (RDMA WRITE, RDMA READ or SEND) with
// messages of size bytes, depth of them outstanding, for dur.
//
// Message k uses source slot k mod (depth+1) and destination slot k mod depth
// (WRITE, READ) or the next receive (SEND). A destination slot is reused
// only after its previous message completed, and it then receives another
// source slot's pattern, so the final check sees whether the last message
// arrived whole.
func (p *pair) bandwidth(ctx context.Context, op verbs.WROpcode, size, depth int, dur time.Duration) (bwResult, error) {
	res := bwResult{Test: opTestName[op], Size: size, Depth: depth}
	src, dst := p.req, p.resp
	if op == verbs.WRRDMARead {
		src, dst = p.resp, p.req
	}
	for r := range depth + 1 {
		pattern(src.slot(r, p.stride, size), r)
	}
	dstSlots := depth
	if op == verbs.WRSend {
		dstSlots = p.recvs
	}
	for i := range dstSlots {
		clear(dst.slot(i, p.stride, size))
	}

	// For SEND the responder's application must take each message out of
	// its receive queue and post a new receive, concurrently.
	var recvDone chan recvResult
	rctx, stopReceiver := context.WithCancel(ctx)
	defer stopReceiver()
	if op == verbs.WRSend {
		recvDone = make(chan recvResult, 1)
		go func() { recvDone <- p.receive(rctx, size) }()
	}

	done, elapsed, cpu, err := p.stream(ctx, op, size, depth, dur)
	if err != nil {
		return res, err
	}

	last := int(done - 1)
	dstSlot := last % depth
	if op == verbs.WRSend {
		stopReceiver()
		r := <-recvDone
		if r.err != nil {
			return res, r.err
		}
		if r.messages != done {
			return res, fmt.Errorf("%d messages received, %d sent", r.messages, done)
		}
		dstSlot = r.lastSlot
	}
	got, want := dst.slot(dstSlot, p.stride, size), src.slot(last%(depth+1), p.stride, size)
	if !bytes.Equal(got, want) {
		i := 0
		for i < size && got[i] == want[i] {
			i++
		}
		return res, fmt.Errorf("data check: the last message (%d) differs from its source at byte %d of %d", last, i, size)
	}

	res.Messages = done
	res.Bytes = done * int64(size)
	res.Seconds = elapsed.Seconds()
	res.MBps = float64(res.Bytes) / 1e6 / res.Seconds
	res.Gbps = float64(res.Bytes) * 8 / 1e9 / res.Seconds
	res.CPUPerGB = cpu.Seconds() / (float64(res.Bytes) / 1e9)
	res.Verified = true
	return res, nil
}

// stream keeps depth work requests of op outstanding on the requester's QP
// for dur, then waits for the last completion. It returns how many
// messages completed (all it posted), the time from the first post to the
// last completion and the CPU time the process spent meanwhile.
func (p *pair) stream(ctx context.Context, op verbs.WROpcode, size, depth int, dur time.Duration) (done int64, elapsed, cpu time.Duration, err error) {
	wr := verbs.SendWR{Opcode: op, SendFlags: verbs.SendSignaled, SGList: make([]verbs.SGE, 1)}
	wcs := make([]verbs.WorkCompletion, depth)
	var posted int64
	// A transport that stops completing work must not hang the benchmark.
	waitCtx, cancelWait := context.WithTimeout(ctx, dur+stallTimeout)
	defer cancelWait()
	stopping := false
	cpu0 := cpuTime()
	start := time.Now()
	for !stopping || done < posted {
		for !stopping && posted-done < int64(depth) {
			k := int(posted % int64(depth+1)) // source slot
			d := int(posted % int64(depth))   // destination slot
			wr.WRID = uint64(posted)
			switch op {
			case verbs.WRRDMAWrite:
				wr.SGList[0] = p.req.mr.SGE(k*p.stride, size)
				wr.RDMA = verbs.RDMAParams{RemoteAddr: p.resp.mr.IOVA() + uint64(d*p.stride), RKey: p.resp.mr.RKey()}
			case verbs.WRRDMARead:
				wr.SGList[0] = p.req.mr.SGE(d*p.stride, size)
				wr.RDMA = verbs.RDMAParams{RemoteAddr: p.resp.mr.IOVA() + uint64(k*p.stride), RKey: p.resp.mr.RKey()}
			case verbs.WRSend:
				wr.SGList[0] = p.req.mr.SGE(k*p.stride, size)
			}
			if err := p.req.qp.PostSend(&wr); err != nil {
				return 0, 0, 0, err
			}
			posted++
		}
		n, err := waitCQ(waitCtx, p.req.sendCQ, wcs)
		if err != nil {
			if ctx.Err() == nil && waitCtx.Err() != nil {
				return 0, 0, 0, fmt.Errorf("stalled: %d of %d work requests outstanding after %v", posted-done, posted, dur+stallTimeout)
			}
			return 0, 0, 0, err
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				return 0, 0, 0, fmt.Errorf("work request %d: %v", wc.WRID, wc.Status)
			}
			if wc.WRID != uint64(done) {
				return 0, 0, 0, fmt.Errorf("completion of work request %d, expected %d", wc.WRID, done)
			}
			done++
		}
		stopping = stopping || time.Since(start) >= dur
	}
	return done, time.Since(start), cpuTime() - cpu0, nil
}

// recvResult is what the responder's receiving goroutine saw.
type recvResult struct {
	messages int64
	lastSlot int // the slot of the last message
	err      error
}

// receive plays the receiving application of the SEND test: it takes each
// message's completion from the responder's receive CQ, checks it and
// reposts its receive, until ctx ends. Then it collects what is left in the
// CQ and returns: the sender cancels ctx once its last SEND completed, and a
// SEND completes only after the receiver's device queued the receive
// completion and acknowledged the message.
func (p *pair) receive(ctx context.Context, size int) recvResult {
	var r recvResult
	wcs := make([]verbs.WorkCompletion, p.recvs)
	for {
		n, err := waitCQ(ctx, p.resp.recvCQ, wcs)
		if err != nil {
			if ctx.Err() == nil {
				r.err = err
				return r
			}
			if n, err = p.resp.recvCQ.Poll(wcs); err != nil {
				r.err = err
				return r
			}
			if n == 0 {
				return r
			}
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess || wc.ByteLen != uint32(size) {
				r.err = fmt.Errorf("receive %d: %v, %d bytes (want %d)", r.messages, wc.Status, wc.ByteLen, size)
				return r
			}
			r.messages++
			r.lastSlot = int(wc.WRID)
			if err := p.postRecv(r.lastSlot); err != nil {
				r.err = err
				return r
			}
		}
	}
}

// cpuTime returns the process's user+system CPU time.
func cpuTime() time.Duration { return cputime.Process() }
