package oob

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/goroce/goroce/internal/ibv"
)

// PerftestKind names a perftest program. Their out-of-band sequences differ
// in where the QPs get connected, how many barriers there are and whether a
// bandwidth report is exchanged.
type PerftestKind uint8

// The perftest programs whose sequence PerftestSequence knows.
const (
	WriteBW   PerftestKind = iota + 1 // ib_write_bw
	ReadBW                            // ib_read_bw
	AtomicBW                          // ib_atomic_bw
	SendBW                            // ib_send_bw
	WriteLat                          // ib_write_lat
	ReadLat                           // ib_read_lat
	AtomicLat                         // ib_atomic_lat
	SendLat                           // ib_send_lat
)

var kindNames = [...]string{
	WriteBW: "ib_write_bw", ReadBW: "ib_read_bw", AtomicBW: "ib_atomic_bw", SendBW: "ib_send_bw",
	WriteLat: "ib_write_lat", ReadLat: "ib_read_lat", AtomicLat: "ib_atomic_lat", SendLat: "ib_send_lat",
}

// String returns the program name, e.g. "ib_write_bw".
func (k PerftestKind) String() string {
	if k.valid() {
		return kindNames[k]
	}
	return "PerftestKind(" + strconv.Itoa(int(k)) + ")"
}

func (k PerftestKind) valid() bool { return k >= WriteBW && k <= SendLat }

// PerftestOp is one step of a perftest sequence: a block exchange on the
// connection, or local work that falls between two exchanges.
type PerftestOp uint8

// The steps. Those marked "local" do no I/O on the connection; their place
// in the sequence is what keeps the two sides' QPs in step.
const (
	// OpVersions is exchange_versions and check_version_compatibility.
	OpVersions PerftestOp = iota + 1
	// OpSysData is check_sys_data.
	OpSysData
	// OpMTU is check_mtu. (negotiate_params follows in perftest 6.28+,
	// but only toward peers announcing 6.28 or later, which goroce never
	// does, so it has no step.)
	OpMTU
	// OpInit (local) creates the QPs and buffers with the agreed MTU and
	// sizes, giving each QP's Dest.
	OpInit
	// OpDest exchanges the key line of QP Step.QP and records the peer's.
	OpDest
	// OpConnect (local) moves the QPs to RTR and RTS toward the peer's
	// Dests (ctx_connect).
	OpConnect
	// OpBarrier is a ctx_hand_shake used only to synchronise.
	OpBarrier
	// OpPrepare (local), in the send tests, posts the receive WRs (or
	// prepares the send WRs) before the barrier that starts the traffic.
	OpPrepare
	// OpTraffic (local) runs the measurement; a side with nothing to do
	// (the server of a one-way RDMA test) returns at once.
	OpTraffic
	// OpReport is xchg_bw_reports.
	OpReport
	// OpClose is ctx_close_connection: a last barrier (and "done" before
	// 6.17), then close.
	OpClose
)

var opNames = [...]string{
	OpVersions: "versions", OpSysData: "sysdata", OpMTU: "mtu", OpInit: "init", OpDest: "dest",
	OpConnect: "connect", OpBarrier: "barrier", OpPrepare: "prepare", OpTraffic: "traffic",
	OpReport: "report", OpClose: "close",
}

// String names the step.
func (op PerftestOp) String() string {
	if op >= OpVersions && op <= OpClose {
		return opNames[op]
	}
	return "PerftestOp(" + strconv.Itoa(int(op)) + ")"
}

// Local reports whether op is local work rather than an exchange.
func (op PerftestOp) Local() bool {
	return op == OpInit || op == OpConnect || op == OpPrepare || op == OpTraffic
}

// PerftestStep is one step of a sequence.
type PerftestStep struct {
	Op PerftestOp
	// QP is the index of the QP whose key line an OpDest step carries.
	QP int
}

// String returns the op's name, with the QP index for OpDest ("dest[0]").
func (s PerftestStep) String() string {
	if s.Op == OpDest {
		return "dest[" + strconv.Itoa(s.QP) + "]"
	}
	return s.Op.String()
}

// PerftestSequence returns the steps of kind's out-of-band exchange with
// numQPs QPs (-q), for the default run: one message size, one-way traffic,
// no rdma_cm, no --connectionless. The steps are the same for the client
// and the server; only the local traffic differs. With N QPs, "dest*" below
// is N OpDest steps, QP 0 to N-1:
//
//	ib_write_bw, ib_read_bw, ib_atomic_bw:
//	    versions sysdata mtu init dest* connect dest* barrier traffic barrier report close
//	ib_send_bw, ib_send_lat:
//	    versions sysdata mtu init dest* connect barrier dest* prepare barrier traffic close
//	ib_write_lat:
//	    versions sysdata mtu init dest[0] dest* connect dest* barrier traffic
//	ib_read_lat, ib_atomic_lat:
//	    versions sysdata mtu init dest[0] dest* connect dest* barrier traffic close
//
// These are the sequences in the sources of perftest 6.06 and 6.29 (which
// differ only in negotiate_params), and the ones recorded in the reference
// captures. ib_write_lat closes the socket without
// a closing barrier. The server of a one-way bandwidth test reaches the
// barrier after "traffic" at once and waits there for the client to finish.
// Other options change the sequence (--bidirectional adds barriers and a
// report per size, -a a barrier per size in the send tests, --write_with_imm
// a barrier before the traffic); the exchange methods of PerftestConn
// compose those.
func PerftestSequence(kind PerftestKind, numQPs int) ([]PerftestStep, error) {
	if !kind.valid() {
		return nil, fmt.Errorf("oob: unknown %v", kind)
	}
	if numQPs < 1 {
		return nil, fmt.Errorf("oob: %v with %d QPs", kind, numQPs)
	}
	s := []PerftestStep{{Op: OpVersions}, {Op: OpSysData}, {Op: OpMTU}, {Op: OpInit}}
	dests := func() {
		for i := 0; i < numQPs; i++ {
			s = append(s, PerftestStep{Op: OpDest, QP: i})
		}
	}
	op := func(ops ...PerftestOp) {
		for _, o := range ops {
			s = append(s, PerftestStep{Op: o})
		}
	}
	switch kind {
	case WriteBW, ReadBW, AtomicBW:
		dests()
		op(OpConnect)
		dests()
		op(OpBarrier, OpTraffic, OpBarrier, OpReport, OpClose)
	case SendBW, SendLat:
		dests()
		op(OpConnect, OpBarrier)
		dests()
		op(OpPrepare, OpBarrier, OpTraffic, OpClose)
	case WriteLat, ReadLat, AtomicLat:
		s = append(s, PerftestStep{Op: OpDest, QP: 0})
		dests()
		op(OpConnect)
		dests()
		op(OpBarrier, OpTraffic)
		if kind != WriteLat {
			op(OpClose)
		}
	}
	return s, nil
}

// PerftestAgreement is what the two sides settled on before creating their
// QPs.
type PerftestAgreement struct {
	RemoteVersion string
	// SysData is the larger of each side's values.
	SysData SysData
	// MTU is the smaller of the two sides' MTUs.
	MTU ibv.MTU
}

// PerftestPlan is what Run needs: the test, this side's parameters and the
// local work, as callbacks run at their place in the sequence.
type PerftestPlan struct {
	Kind PerftestKind
	// SysData is this side's page and cache line size (perftest:
	// sysconf(_SC_PAGESIZE) and the L1 data cache line size).
	SysData SysData
	// MTU is this side's active MTU.
	MTU ibv.MTU

	// Init creates the QPs and buffers for the agreed parameters and
	// returns one Dest per QP, at least one. Required.
	Init func(ctx context.Context, agreed PerftestAgreement) ([]Dest, error)
	// Connect moves the QPs to RTR and RTS toward the peer's Dests.
	// Required.
	Connect func(ctx context.Context, remote []Dest) error
	// Prepare posts receive (or prepares send) work requests before the
	// start barrier of the send tests. Optional.
	Prepare func(ctx context.Context) error
	// Traffic runs this side's part of the measurement and returns the
	// bandwidth report the bandwidth tests send to the peer (a server
	// that measured nothing returns the zero BWReport). Optional.
	Traffic func(ctx context.Context) (BWReport, error)
}

// PerftestResult is what Run learned from the peer.
type PerftestResult struct {
	PerftestAgreement
	// Remote holds the peer's Dests, one per QP, as last received.
	Remote []Dest
	// Report is the peer's bandwidth report, valid if HasReport (the
	// bandwidth tests other than ib_send_bw).
	Report    BWReport
	HasReport bool
}

// Run drives the whole out-of-band exchange of plan.Kind, calling plan's
// callbacks at their place in PerftestSequence, and closes the connection
// when done or on the first error. ctx bounds every exchange and is passed
// to the callbacks. The result holds what was learned, also on error.
func (c *PerftestConn) Run(ctx context.Context, plan PerftestPlan) (PerftestResult, error) {
	var res PerftestResult
	if plan.Init == nil || plan.Connect == nil {
		c.abort()
		return res, errors.New("oob: perftest plan needs Init and Connect")
	}
	// The sequence is built for one QP to check the kind; OpDest steps are
	// expanded to the real number of QPs once Init has said it.
	steps, err := PerftestSequence(plan.Kind, 1)
	if err != nil {
		c.abort()
		return res, err
	}
	var local []Dest
	var report BWReport
	closed := false
	for i := 0; i < len(steps); i++ {
		step := steps[i]
		switch step.Op {
		case OpVersions:
			res.RemoteVersion, err = c.ExchangeVersions(ctx)
		case OpSysData:
			var remote SysData
			remote, err = c.ExchangeSysData(ctx, plan.SysData)
			res.SysData = plan.SysData
			if err == nil && remote != (SysData{}) {
				res.SysData = plan.SysData.Max(remote)
			}
		case OpMTU:
			var remote ibv.MTU
			remote, err = c.ExchangeMTU(ctx, plan.MTU)
			res.MTU = min(plan.MTU, remote)
		case OpInit:
			local, err = plan.Init(ctx, res.PerftestAgreement)
			if err == nil && len(local) == 0 {
				err = errors.New("the Init callback returned no QP")
			}
			if err == nil {
				// Every sequence starts with the same four steps,
				// so i stays on OpInit in the expanded one.
				steps, err = PerftestSequence(plan.Kind, len(local))
				res.Remote = make([]Dest, len(local))
			}
			if err != nil {
				err = fmt.Errorf("oob: %v init: %w", plan.Kind, err)
			}
		case OpDest:
			res.Remote[step.QP], err = c.ExchangeDest(ctx, local[step.QP])
		case OpConnect:
			if err = plan.Connect(ctx, res.Remote); err != nil {
				err = fmt.Errorf("oob: %v connect: %w", plan.Kind, err)
			}
		case OpBarrier:
			err = c.Barrier(ctx)
		case OpPrepare:
			if plan.Prepare != nil {
				if err = plan.Prepare(ctx); err != nil {
					err = fmt.Errorf("oob: %v prepare: %w", plan.Kind, err)
				}
			}
		case OpTraffic:
			if plan.Traffic != nil {
				if report, err = plan.Traffic(ctx); err != nil {
					err = fmt.Errorf("oob: %v traffic: %w", plan.Kind, err)
				}
			}
		case OpReport:
			res.Report, err = c.ExchangeBWReport(ctx, report)
			res.HasReport = err == nil
		case OpClose:
			err, closed = c.Close(ctx), true
		}
		if err != nil {
			if !closed {
				c.abort()
			}
			return res, err
		}
	}
	if !closed {
		if err := c.abort(); err != nil {
			return res, c.fail(fmt.Errorf("close: %w", err))
		}
	}
	return res, nil
}
