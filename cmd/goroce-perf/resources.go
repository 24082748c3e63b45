package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goroce/goroce/internal/oob"
	"github.com/goroce/goroce/internal/tooldev"
	"github.com/goroce/goroce/verbs"
)

// openDevice opens the device on s.addr, with the MTU asked for.
func (s *side) openDevice() error {
	// Busy polling drives the device's receive path from the polling
	// loop (DeviceConfig.BusyPoll): with two spinning sides on two
	// cores, nothing else would run the devices' receive goroutines.
	cfg := verbs.DeviceConfig{Name: s.cfg.ibDev, Addr: s.addr, Port: uint16(s.cfg.udpPort), BusyPoll: s.cfg.busyPoll,
		ReceiveQueues: s.cfg.rxQueues,
		CongestionControl: verbs.CongestionControl{NoECN: s.cfg.noECN, RTT: s.cfg.rttCC,
			RTTTarget: time.Duration(s.cfg.rttTarget) * time.Microsecond}}
	if s.cfg.mtu != 0 && !s.cfg.hw {
		cfg.MTU = verbs.MTUFromBytes(s.cfg.mtu)
	}
	dev, err := tooldev.Open(s.cfg.hw, s.cfg.ibDev, cfg, openDevice)
	if err != nil {
		return err
	}
	s.dev = dev
	pa, err := dev.QueryPort(1)
	if err != nil {
		return err
	}
	s.mtu = pa.ActiveMTU
	if s.cfg.hw && s.cfg.mtu != 0 {
		// A kernel device's MTU is its link's: -m is the path MTU,
		// which perftest's check_mtu refuses above the active one.
		m := verbs.MTUFromBytes(s.cfg.mtu)
		if m > pa.ActiveMTU {
			return fmt.Errorf("-m %d: above %s's active MTU %d", s.cfg.mtu, dev.Name(), pa.ActiveMTU.Bytes())
		}
		s.mtu = m
	}
	s.gidIndex = s.cfg.gidIndex
	if s.cfg.gidAuto {
		if s.gidIndex, err = tooldev.GIDIndex(dev, s.addr); err != nil {
			return err
		}
	}
	return checkLimits(s.cfg, dev)
}

// checkLimits refuses a run the device cannot do, before any traffic.
func checkLimits(cfg *config, dev *verbs.Device) error {
	pa, err := dev.QueryPort(1)
	if err != nil {
		return err
	}
	da := dev.Query()
	if ms := cfg.maxSize(); uint64(ms) > uint64(pa.MaxMsgSize) {
		return fmt.Errorf("message size %d is above the device's max_msg_sz %d", ms, pa.MaxMsgSize)
	}
	if cfg.inline > da.MaxInlineData {
		return fmt.Errorf("-I %d: above the device's max inline data %d", cfg.inline, da.MaxInlineData)
	}
	if cfg.txDepth > da.MaxQPWR {
		return fmt.Errorf("-t %d: above the device's max_qp_wr %d", cfg.txDepth, da.MaxQPWR)
	}
	if cfg.qps > da.MaxQP {
		return fmt.Errorf("-q %d: above the device's max_qp %d", cfg.qps, da.MaxQP)
	}
	return nil
}

const qpAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// initResources creates the buffer, MR, CQs and QPs (moved to INIT) and
// the local Dests, laid out as perftest does: per QP one slot of BUFF_SIZE
// bytes to send from (QP i at i×slot) and one the peer targets (at
// (qps+i)×slot), a slot being the largest message rounded up to the
// agreed cycle buffer.
func (s *side) initResources() error {
	cfg := s.cfg
	da := s.dev.Query()
	s.outs = 1
	if cfg.test.verb == verbRead || cfg.test.verb == verbAtomic {
		s.outs = da.MaxQPInitRdAtom
		if cfg.outs > 0 {
			s.outs = min(cfg.outs, da.MaxQPInitRdAtom)
		}
	}
	cycle := max(int(s.agree.SysData.CycleBuffer), defPageSize)
	s.slot = (max(s.maxSize()+s.recvExtra(), cycle) + cycle - 1) / cycle * cycle
	total := 2 * cfg.qps * s.slot
	if uint64(total) > da.MaxMRSize {
		return fmt.Errorf("buffer of %d bytes is above the device's max_mr_size", total)
	}

	pd, err := s.dev.AllocPD()
	if err != nil {
		return err
	}
	s.pd = pd
	s.buf = make([]byte, total)
	start := time.Now()
	s.mr, err = pd.RegMR(s.buf, qpAccess)
	s.regTime = time.Since(start)
	if err != nil {
		return err
	}
	rx := 0
	if cfg.test.verb == verbSend {
		rx = cfg.rxDepth()
	}
	s.cq, err = s.dev.CreateCQ(cfg.qps*cfg.txDepth+1, nil, 0)
	if err != nil {
		return err
	}
	s.rcq, err = s.dev.CreateCQ(cfg.qps*max(rx, 1)+1, nil, 0)
	if err != nil {
		return err
	}
	// INIT as ctx_modify_qp_to_init: a UD QP gets its Q_Key, the others
	// their access flags (a UC QP only those UC has).
	qpType := verbs.QPTypeRC
	init := verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: qpAccess}
	initMask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags
	switch cfg.conn {
	case "UC":
		qpType = verbs.QPTypeUC
		init.QPAccessFlags = verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	case "UD":
		qpType = verbs.QPTypeUD
		init.QPAccessFlags, init.QKey = 0, udQKey
		initMask = verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey
	}
	for range cfg.qps {
		qp, err := pd.CreateQP(verbs.QPInitAttr{QPType: qpType, SendCQ: s.cq, RecvCQ: s.rcq,
			Cap: verbs.QPCap{MaxSendWR: cfg.txDepth, MaxRecvWR: max(rx, 1), MaxSendSGE: 1, MaxRecvSGE: 1,
				MaxInlineData: cfg.inline}})
		if err != nil {
			return err
		}
		s.qps = append(s.qps, qp)
		if err := qp.Modify(&init, initMask); err != nil {
			return err
		}
	}
	gid, err := s.dev.QueryGID(1, s.gidIndex)
	if err != nil {
		return err
	}
	for i, qp := range s.qps {
		s.local = append(s.local, oob.Dest{
			OutReads: uint16(s.outs),
			QPN:      qp.QPN(),
			PSN:      randPSN(),
			RKey:     s.mr.RKey(),
			VAddr:    s.mr.IOVA() + uint64((cfg.qps+i)*s.slot),
			GID:      gid,
		})
	}
	return nil
}

// connect moves every QP to RTR and RTS toward the peer's Dests, with
// perftest's attributes (ctx_connect).
func (s *side) connect() error {
	switch s.cfg.conn {
	case "UC":
		return s.connectUC()
	case "UD":
		return s.connectUD()
	}
	da := s.dev.Query()
	for i, qp := range s.qps {
		r := s.remote[i]
		rdAtomic := 1
		if s.outs > 1 {
			rdAtomic = max(1, min(s.outs, int(r.OutReads)))
		}
		mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
			verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
		if s.cfg.sr {
			mask |= verbs.QPAttrSelectiveRepeat
		}
		if err := qp.Modify(&verbs.QPAttr{
			QPState: verbs.QPStateRTR, PathMTU: s.mtu, DestQPNum: r.QPN, RQPSN: r.PSN,
			MaxDestRdAtomic: da.MaxQPRdAtom, MinRNRTimer: defMinRNRTimer,
			AHAttr: verbs.AddressVector{DGID: verbs.GID(r.GID), SGIDIndex: s.gidIndex, HopLimit: defHopLimit,
				IsGlobal: true, PortNum: 1, UDPPort: uint16(s.cfg.udpPort)},
			SelectiveRepeat: s.cfg.sr,
		}, mask); err != nil {
			return fmt.Errorf("QP %d to RTR: %w", i, err)
		}
		if err := qp.Modify(&verbs.QPAttr{
			QPState: verbs.QPStateRTS, SQPSN: s.local[i].PSN, Timeout: uint8(s.cfg.qpTimeout),
			RetryCnt: defRetryCount, RNRRetry: defRNRRetry, MaxRdAtomic: rdAtomic,
		}, verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|
			verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic); err != nil {
			return fmt.Errorf("QP %d to RTS: %w", i, err)
		}
		s.outs = rdAtomic
	}
	return nil
}

// pathTo is the address vector toward the peer's QP i (ctx_modify_qp_to_rtr).
func (s *side) pathTo(i int) verbs.AddressVector {
	return verbs.AddressVector{DGID: verbs.GID(s.remote[i].GID), SGIDIndex: s.gidIndex, HopLimit: defHopLimit,
		IsGlobal: true, PortNum: 1, UDPPort: uint16(s.cfg.udpPort)}
}

// connectUC moves every UC QP to RTR and RTS: a path, the PSNs and nothing
// else, UC having no acknowledgements, retries, RNR NAKs or READs.
func (s *side) connectUC() error {
	for i, qp := range s.qps {
		r := s.remote[i]
		if err := qp.Modify(&verbs.QPAttr{
			QPState: verbs.QPStateRTR, PathMTU: s.mtu, DestQPNum: r.QPN, RQPSN: r.PSN, AHAttr: s.pathTo(i),
		}, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN); err != nil {
			return fmt.Errorf("QP %d to RTR: %w", i, err)
		}
		if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: s.local[i].PSN},
			verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
			return fmt.Errorf("QP %d to RTS: %w", i, err)
		}
	}
	return nil
}

// connectUD moves every UD QP to RTR and RTS, which take no path, and
// creates an address handle toward the peer's QP of the same index, which
// every send names along with that QP's number and perftest's Q_Key.
func (s *side) connectUD() error {
	for i, qp := range s.qps {
		if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR}, verbs.QPAttrState); err != nil {
			return fmt.Errorf("QP %d to RTR: %w", i, err)
		}
		if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: s.local[i].PSN},
			verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
			return fmt.Errorf("QP %d to RTS: %w", i, err)
		}
		ah, err := s.pd.CreateAH(s.pathTo(i))
		if err != nil {
			return fmt.Errorf("QP %d: address handle: %w", i, err)
		}
		s.ahs = append(s.ahs, ah)
	}
	return nil
}

// recvExtra is what a receive buffer holds beyond the message: the GRH of
// a UD datagram, before it (perftest's UD_ADDITION).
func (s *side) recvExtra() int {
	if s.cfg.conn == "UD" {
		return verbs.GRHSize
	}
	return 0
}

// sizes returns the message sizes this side runs: the command line's, but
// with UD none above the path MTU, as perftest's check_mtu has it: -a stops
// at the MTU and the default size becomes the MTU (an explicit larger -s is
// an error, reported by run).
func (s *side) sizes() []int {
	sz := s.cfg.sizes()
	if s.cfg.conn != "UD" || !s.mtu.Valid() {
		return sz
	}
	var fit []int
	for _, n := range sz {
		if n <= s.mtu.Bytes() {
			fit = append(fit, n)
		}
	}
	if len(fit) == 0 {
		fit = []int{s.mtu.Bytes()}
	}
	return fit
}

// maxSize is the largest message of the run, which sizes the buffers.
func (s *side) maxSize() int {
	sz := s.sizes()
	return sz[len(sz)-1]
}

// teardown releases the resources, timing the deregistration.
func (s *side) teardown() error {
	if s.pc != nil {
		_ = s.pc.Close(context.Background())
		s.pc = nil
	}
	s.closeCM()
	if s.dev == nil {
		return nil
	}
	var errs []error
	for _, qp := range s.qps {
		errs = append(errs, qp.Destroy())
	}
	for _, ah := range s.ahs {
		errs = append(errs, ah.Destroy())
	}
	if s.mr != nil {
		start := time.Now()
		errs = append(errs, s.mr.Dereg())
		s.deregTime = time.Since(start)
	}
	errs = append(errs, s.dev.Close())
	// Destroyed QPs leave their counters in the device's: read now, they
	// cover the whole run.
	s.counters = s.dev.Counters()
	s.dev = nil
	return errors.Join(errs...)
}
