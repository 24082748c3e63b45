package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/goroce/goroce/internal/cputime"
	"github.com/goroce/goroce/internal/oob"
	"github.com/goroce/goroce/verbs"
)

// traffic runs this side's part of one message size and records the result.
func (s *side) traffic(ctx context.Context, size int) error {
	t := s.cfg.test
	var r result
	var err error
	cpu0 := cpuTime()
	switch {
	case !t.lat && t.verb == verbSend && s.cfg.bidir:
		r, err = s.runBW(ctx, size)
	case !t.lat && t.verb == verbSend && s.role == oob.Server:
		r, err = s.runRecvBW(ctx, size)
	case !t.lat:
		r, err = s.runBW(ctx, size)
	case t.verb == verbWrite:
		r, err = s.runLatWrite(ctx, size)
	case t.verb == verbSend:
		r, err = s.runLatSend(ctx, size)
	default:
		r, err = s.runLat(ctx, size)
	}
	if err != nil {
		return fmt.Errorf("%d-byte messages: %w", size, err)
	}
	cpu1 := cpuTime()
	if r.cpuEnd != 0 {
		cpu1 = r.cpuEnd
	}
	r.cpu = cpu1 - cpu0
	r.side = s.role.String()
	if s.cfg.bidir {
		s.pending = append(s.pending, r)
		return nil
	}
	s.addResult(r)
	return nil
}

// buildWR is the send work request QP i posts for one message.
func (s *side) buildWR(i, size int) verbs.SendWR {
	r := s.remote[i]
	wr := verbs.SendWR{SGList: []verbs.SGE{s.mr.SGE(s.sendSlot(i), size)}}
	switch s.cfg.test.verb {
	case verbWrite:
		wr.Opcode = verbs.WRRDMAWrite
		wr.RDMA = verbs.RDMAParams{RemoteAddr: r.VAddr, RKey: r.RKey}
	case verbRead:
		wr.Opcode = verbs.WRRDMARead
		wr.RDMA = verbs.RDMAParams{RemoteAddr: r.VAddr, RKey: r.RKey}
	case verbSend:
		wr.Opcode = verbs.WRSend
		if s.cfg.conn == "UD" {
			wr.UD = verbs.UDParams{AH: s.ahs[i], RemoteQPN: r.QPN, RemoteQKey: udQKey}
		}
	case verbAtomic:
		wr.Opcode = verbs.WRAtomicFetchAndAdd
		if s.cfg.atomicType == "CMP_AND_SWAP" {
			wr.Opcode = verbs.WRAtomicCmpAndSwp
		}
		wr.Atomic = verbs.AtomicParams{RemoteAddr: r.VAddr, RKey: r.RKey, CompareAdd: 1}
	}
	if (wr.Opcode == verbs.WRRDMAWrite || wr.Opcode == verbs.WRSend) && size <= s.cfg.inline {
		wr.SendFlags |= verbs.SendInline
	}
	return wr
}

// prepareWR makes wr the k-th work request (from 1) of QP q: its WRID, a
// signaled completion every cqMod requests and on the last, and for a
// compare-and-swap the operands that chain the values (k-1 → k).
func prepareWR(wr *verbs.SendWR, q, k, cqMod, iters int) {
	wr.WRID = uint64(q)<<48 | uint64(k)
	wr.SendFlags &^= verbs.SendSignaled
	if k%cqMod == 0 || k == iters {
		wr.SendFlags |= verbs.SendSignaled
	}
	if wr.Opcode == verbs.WRAtomicCmpAndSwp {
		wr.Atomic.CompareAdd, wr.Atomic.Swap = uint64(k-1), uint64(k)
	}
}

// pollAll polls cq into wc and fails on an unsuccessful completion.
func pollAll(cq *verbs.CQ, wc []verbs.WorkCompletion) (int, error) {
	n, err := cq.Poll(wc)
	if err != nil {
		return 0, err
	}
	for _, c := range wc[:n] {
		if c.Status != verbs.WCSuccess {
			return 0, fmt.Errorf("completion error: %v (wr_id %#x, vendor_err %#x)", c.Status, c.WRID, c.VendorErr)
		}
	}
	return n, nil
}

// sendSlot and recvSlot are the offsets of QP i's two areas in the buffer.
func (s *side) sendSlot(i int) int { return i * s.slot }
func (s *side) recvSlot(i int) int { return (s.cfg.qps + i) * s.slot }

// cpuTime returns the process's user+system CPU time.
func cpuTime() time.Duration { return cputime.Process() }

// randPSN returns a random 24-bit starting PSN, as perftest's
// lrand48() & 0xffffff.
func randPSN() uint32 { return rand.Uint32() & 0xffffff }
