package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/oob"
	"github.com/goroce/goroce/verbs"
)

// exchangeTimeout bounds each out-of-band exchange once the peer is
// connected: perftest answers every block at once, except while it runs
// traffic, so a peer silent for this long is gone (or is not perftest).
const exchangeTimeout = 60 * time.Second

// side is one end of a test: its device and RDMA resources, the
// out-of-band connection and what it measured.
type side struct {
	cfg  *config
	role oob.Role
	out  io.Writer
	pc   *oob.PerftestConn
	addr netip.Addr // the device's address

	dev      *verbs.Device
	pd       *verbs.PD
	cq       *verbs.CQ // send completions
	rcq      *verbs.CQ // receive completions
	qps      []*verbs.QP
	ahs      []*verbs.AH // UD: one per QP, toward the peer's QP
	buf      []byte
	mr       *verbs.MR
	slot     int // perftest's BUFF_SIZE: bytes per QP and direction
	mtu      verbs.MTU
	gidIndex int // the GID sent from: -x, or picked for a kernel device
	outs     int // max_rd_atomic: READs/atomics in flight per QP
	agree    oob.PerftestAgreement

	local, remote []oob.Dest

	// -R: the rdma_cm port (the control connection's, which the data
	// connections use too), the server's name, the data connections.
	cmPort  int
	host    string
	cmConns []*cm.Conn

	pending []result // -b: this side's result, printed summed with the peer's
	posted  []int    // receives posted per QP in the current size (send tests)
	perQP   []int    // work requests each QP completed in the last bandwidth run

	regTime, deregTime time.Duration
	results            []result
	checked            bool           // --check validated the data
	counters           verbs.Counters // the device's, read after Close (--counters)
	progress           bool           // print a progress line on long runs
}

func (s *side) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, exchangeTimeout)
}

// run drives the whole test on an accepted or dialed connection and
// releases everything before returning. It reads as perftest's exchange
// (oob.PerftestSequence), one method per step:
//
//	negotiate      versions, system data, MTU: what the resources are made with
//	initResources  buffer, MR, CQs, QPs in INIT, and this side's key lines
//	exchangeKeys   key lines, QPs to RTR and RTS, key lines again
//	measure        barriers, traffic per size and reports, as the test has them
//	checkData      --check: what the traffic left in this side's memory
//	closeConn      the closing barrier, and close
func (s *side) run(ctx context.Context, nc net.Conn) (err error) {
	pcfg := oob.PerftestConfig{Role: s.role}
	if s.cfg.rdmaCM {
		pcfg.KeyFormat = oob.KeyFormatRDMACM
	}
	pc, err := oob.NewPerftestConn(nc, pcfg)
	if err != nil {
		_ = nc.Close()
		return err
	}
	s.pc = pc
	defer func() {
		if cerr := s.teardown(); err == nil {
			err = cerr
		}
	}()
	defer func() {
		if err != nil {
			_ = pc.Close(context.Background()) // after an error: only closes
		}
	}()
	if err := s.openDeviceFor(nc); err != nil {
		return err
	}
	if err := s.negotiate(ctx); err != nil {
		return err
	}
	if err := s.initResources(); err != nil {
		return err
	}
	if s.cfg.rdmaCM {
		if err := s.connectCM(ctx, s.host); err != nil {
			return err
		}
	}
	s.printBanner()
	if err := s.exchangeKeys(ctx); err != nil {
		return err
	}
	s.printAddresses()
	if err := s.fillForCheck(); err != nil {
		return err
	}
	if err := s.measure(ctx); err != nil {
		return err
	}
	if err := s.checkData(); err != nil {
		return err
	}
	s.printLine()
	return s.closeConn(ctx)
}

// openDeviceFor opens the device, unless the caller has, on the address
// the out-of-band connection nc uses unless --bind named one.
func (s *side) openDeviceFor(nc net.Conn) error {
	if s.dev != nil {
		return nil
	}
	if !s.addr.IsValid() {
		ap, err := netip.ParseAddrPort(nc.LocalAddr().String())
		if err != nil {
			return fmt.Errorf("local address of the TCP connection: %v", err)
		}
		s.addr = ap.Addr().Unmap()
	}
	return s.openDevice()
}

// negotiate runs the exchanges that settle the parameters both sides
// create their resources with: exchange_versions, check_sys_data and
// check_mtu.
func (s *side) negotiate(ctx context.Context) error {
	if err := s.step(ctx, s.exchangeVersions); err != nil {
		return err
	}
	if err := s.step(ctx, s.exchangeSysData); err != nil {
		return err
	}
	return s.step(ctx, s.exchangeMTU)
}

// exchangeVersions trades the version blocks; the peer's decides the
// format of what follows.
func (s *side) exchangeVersions(ctx context.Context) error {
	rv, err := s.pc.ExchangeVersions(ctx)
	s.agree.RemoteVersion = rv
	return err
}

// exchangeSysData trades the page and cache line sizes; both sides take
// the larger of each (a peer too old to send them leaves ours).
func (s *side) exchangeSysData(ctx context.Context) error {
	local := oob.SysData{CycleBuffer: defPageSize, CacheLineSize: defCacheLine}
	remote, err := s.pc.ExchangeSysData(ctx, local)
	s.agree.SysData = local
	if remote != (oob.SysData{}) {
		s.agree.SysData = local.Max(remote)
	}
	return err
}

// exchangeMTU trades the active MTUs; both sides take the smaller. A UD
// datagram is one packet: an explicit -s above it is an error.
func (s *side) exchangeMTU(ctx context.Context) error {
	remote, err := s.pc.ExchangeMTU(ctx, s.mtu)
	if err != nil {
		return err
	}
	s.mtu = min(s.mtu, remote)
	if c := s.cfg; c.conn == "UD" && c.sizeSet && !c.all && c.size > s.mtu.Bytes() {
		return fmt.Errorf("-s %d: a UD message cannot be larger than the MTU (%d)", c.size, s.mtu.Bytes())
	}
	return nil
}

// exchangeKeys trades the QPs' key lines (ctx_hand_shake), moves the QPs
// to RTR and RTS toward the peer's (ctx_connect) and trades the lines
// again. The latency tests other than ib_send_lat trade QP 0's line once
// more first; the send tests meet at a barrier after connecting.
func (s *side) exchangeKeys(ctx context.Context) error {
	t := s.cfg.test
	if t.lat && t.verb != verbSend {
		if err := s.step(ctx, s.exchangeFirstDest); err != nil {
			return err
		}
	}
	if err := s.step(ctx, s.exchangeDests); err != nil {
		return err
	}
	if !s.cfg.rdmaCM { // -R: the cm connected them
		if err := s.connect(); err != nil {
			return err
		}
	}
	if t.verb == verbSend {
		if err := s.barrier(ctx); err != nil {
			return err
		}
	}
	return s.step(ctx, s.exchangeDests)
}

// exchangeFirstDest trades QP 0's key line, which the latency tests do
// before the others; the peer's is traded again with them.
func (s *side) exchangeFirstDest(ctx context.Context) error {
	_, err := s.pc.ExchangeDest(ctx, s.local[0])
	return err
}

// exchangeDests trades the key lines of every QP, recording the peer's.
func (s *side) exchangeDests(ctx context.Context) error {
	r, err := s.pc.ExchangeDests(ctx, s.local)
	s.remote = r
	return err
}

// barrier is a ctx_hand_shake that only synchronises, under the exchange
// timeout.
func (s *side) barrier(ctx context.Context) error { return s.step(ctx, s.pc.Barrier) }

// measure runs the traffic of each message size between the barriers and
// the report exchanges of the test's kind, printing the table header
// first.
func (s *side) measure(ctx context.Context) error {
	t := s.cfg.test
	switch {
	case t.verb == verbSend:
		return s.measureSend(ctx)
	case !t.lat && s.cfg.bidir:
		return s.measureBidirBW(ctx)
	case !t.lat:
		return s.measureBW(ctx)
	default:
		return s.measureLat(ctx)
	}
}

// measureSend is the send tests' part, ib_send_bw's and ib_send_lat's: per
// size the receives posted, a barrier and the traffic (a report exchange
// after it with -b, another barrier after it with -a in ib_send_bw).
func (s *side) measureSend(ctx context.Context) error {
	s.printTableHeader()
	for _, size := range s.sizes() {
		if err := s.prepareRecvs(size); err != nil {
			return err
		}
		if err := s.barrier(ctx); err != nil {
			return err
		}
		if err := s.traffic(ctx, size); err != nil {
			return err
		}
		if s.cfg.bidir {
			if err := s.exchangeDuplex(ctx); err != nil {
				return err
			}
		}
		if s.cfg.all && !s.cfg.test.lat {
			if err := s.barrier(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// measureBidirBW is the bidirectional WRITE, READ and atomic bandwidth
// tests' part, where both sides run traffic: a barrier, then per size a
// barrier, the traffic (a barrier after it with -a) and a report exchange;
// each side prints the sum of both directions.
func (s *side) measureBidirBW(ctx context.Context) error {
	if err := s.barrier(ctx); err != nil {
		return err
	}
	s.printTableHeader()
	for _, size := range s.sizes() {
		if err := s.barrier(ctx); err != nil {
			return err
		}
		if err := s.traffic(ctx, size); err != nil {
			return err
		}
		if s.cfg.all {
			if err := s.barrier(ctx); err != nil {
				return err
			}
		}
		if err := s.exchangeDuplex(ctx); err != nil {
			return err
		}
	}
	return nil
}

// measureBW is the one-way WRITE, READ and atomic bandwidth tests' part: a
// barrier, the client's traffic of every size, a barrier and the report
// exchange. The server is passive and prints the client's report.
func (s *side) measureBW(ctx context.Context) error {
	if err := s.barrier(ctx); err != nil {
		return err
	}
	s.printTableHeader()
	cpu0 := cpuTime()
	if s.role == oob.Client {
		for _, size := range s.sizes() {
			if err := s.traffic(ctx, size); err != nil {
				return err
			}
		}
	}
	// The passive server waits here while the client runs: no exchange
	// timeout.
	if err := s.pc.Barrier(ctx); err != nil {
		return err
	}
	return s.exchangeReport(ctx, cpuTime()-cpu0)
}

// exchangeReport is xchg_bw_reports after a one-way bandwidth run: each
// side sends its last result (the passive server's is empty), and the
// server adds the client's to its table, with its own CPU time.
func (s *side) exchangeReport(ctx context.Context, cpu time.Duration) error {
	var mine oob.BWReport
	if n := len(s.results); n > 0 {
		mine = s.results[n-1].bwReport()
	}
	var theirs oob.BWReport
	if err := s.step(ctx, func(c context.Context) error {
		var err error
		theirs, err = s.pc.ExchangeBWReport(c, mine)
		return err
	}); err != nil {
		return err
	}
	if s.role == oob.Server {
		s.addRemoteResult(theirs, cpu)
	}
	return nil
}

// measureLat is the part of ib_write_lat, ib_read_lat and ib_atomic_lat:
// a barrier, then the traffic of each size, on both sides in ib_write_lat,
// on the client only in the others (the server's QP answers by itself).
func (s *side) measureLat(ctx context.Context) error {
	if err := s.barrier(ctx); err != nil {
		return err
	}
	s.printTableHeader()
	if s.cfg.test.verb == verbWrite || s.role == oob.Client {
		for _, size := range s.sizes() {
			if err := s.traffic(ctx, size); err != nil {
				return err
			}
		}
	}
	return nil
}

// exchangeDuplex exchanges the last size's report with the peer, in a
// bidirectional run, and prints the sum of both directions, as perftest's
// print_full_bw_report does.
func (s *side) exchangeDuplex(ctx context.Context) error {
	n := len(s.pending)
	if n == 0 {
		return errors.New("no result to report")
	}
	mine := s.pending[n-1]
	s.pending = s.pending[:n-1]
	// The peer may still be finishing its own traffic: no exchange
	// timeout here; the traffic loops have their own stall detection.
	theirs, err := s.pc.ExchangeBWReport(ctx, mine.bwReport())
	if err != nil {
		return err
	}
	mine.bwPeak += theirs.BWPeak
	mine.bwAvg += theirs.BWAvg
	mine.msgRate += theirs.MsgRateAvg
	mine.bytes += float64(theirs.Size) * float64(theirs.Iters)
	s.addResult(mine)
	return nil
}

// step runs one exchange under the exchange timeout.
func (s *side) step(ctx context.Context, f func(context.Context) error) error {
	c, cancel := s.ctx(ctx)
	defer cancel()
	return f(c)
}

// closeConn runs perftest's closing barrier and closes the connection;
// ib_write_lat closes the socket without a last barrier. The server of
// ib_read_lat and ib_atomic_lat reaches the barrier at once and waits
// there for the whole run of the client, so it waits without the exchange
// timeout.
func (s *side) closeConn(ctx context.Context) error {
	defer s.closeCM()
	pc := s.pc
	s.pc = nil
	t := s.cfg.test
	switch {
	case t.lat && t.verb == verbWrite:
		return pc.NetConn().Close()
	case s.role == oob.Server && t.lat && (t.verb == verbRead || t.verb == verbAtomic):
		return pc.Close(ctx)
	}
	c, cancel := s.ctx(ctx)
	defer cancel()
	return pc.Close(c)
}
