package netio

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/wire"
)

// Handler receives the packets a Conn accepts.
type Handler interface {
	// HandlePacket is called on the Serve goroutine for each packet that
	// parsed and passed the ICRC check, in arrival order. p, info and
	// the bytes p refers to are valid only until HandlePacket returns:
	// the receive buffer is reused for the next batch. The path MTU is not
	// checked (Parse ran with mtu 0): the QP checks it.
	HandlePacket(p *wire.Packet, from netip.AddrPort, info *RecvInfo)
}

// HandlerFunc adapts a function to the Handler interface.
type HandlerFunc func(p *wire.Packet, from netip.AddrPort, info *RecvInfo)

// HandlePacket calls f.
func (f HandlerFunc) HandlePacket(p *wire.Packet, from netip.AddrPort, info *RecvInfo) {
	f(p, from, info)
}

// BatchEnder is implemented by a Handler that wants to know when the packets
// read by one system call have all been handed to it: it can then send
// what they caused (acknowledgements, further requests) together, in fewer
// and larger batches, instead of after each packet. EndBatch is called on
// the Serve goroutine after the last HandlePacket of each batch, and also
// after batches in which nothing was delivered. A long batch is ended early
// as well, after every Config.EndBatchEvery delivered packets, so that
// what the first packets caused does not wait for the last ones.
type BatchEnder interface {
	EndBatch()
}

// Unsealer is implemented by a Handler some of whose packets arrive sealed
// (internal/seal): their extension headers and payload are encrypted, so
// they do not parse until opened. Both methods run on the Serve goroutine.
type Unsealer interface {
	// Sealed reports whether udpPayload, a datagram not yet checked in
	// any way, is addressed to a destination that takes only sealed
	// packets. Such a datagram skips the parse, has its ICRC checked
	// and goes to Unseal.
	Sealed(udpPayload []byte) bool
	// Unseal authenticates and decrypts a sealed datagram whose ICRC
	// matched, in place, and returns the plain packet (BTH through an
	// ICRC-sized tail) to parse and hand to HandlePacket, or nil to drop
	// it, which the Unsealer counts.
	Unseal(udpPayload []byte, from netip.AddrPort) []byte
}

// RecvInfo describes how a packet arrived.
type RecvInfo struct {
	// Local is the address and port the packet was sent to.
	Local netip.AddrPort
	// IPID is the IPv4 identification the sender used, as recovered
	// from the ICRC: 0 for goroce peers and over IPv6.
	IPID uint16
	// IDRecovered reports that the ICRC matched only for a recovered
	// non-zero IPID, which makes it a 16-bit check (see
	// Config.StrictICRC).
	IDRecovered bool
	// ECN is the IP header's ECN field (IP_RECVTOS, IPV6_RECVTCLASS):
	// ECNCE when a queue on the way signalled congestion. ECNUnknown on
	// the portable path, which does not read it.
	ECN ECN
}

// ECN is the ECN field of an IP header (RFC 3168), or ECNUnknown.
type ECN uint8

// The ECN codepoints, and ECNUnknown for a path that cannot read them.
const (
	ECNNotECT  ECN = 0
	ECNECT1    ECN = 1
	ECNECT0    ECN = 2
	ECNCE      ECN = 3
	ECNUnknown ECN = 0xFF
)

// ecnMask selects the ECN field of a TOS or traffic class byte; ecnECT0 is
// the byte Config.ECT sends.
const (
	ecnMask = 3
	ecnECT0 = int(ECNECT0)
)

// PollReceives reports whether Conn.Poll reads the socket and delivers
// (Linux's batched path), or only reports the running Serve busy (the
// portable path: see "Platforms" in the package documentation).
const PollReceives = batchedReceive

// aLongTimeAgo is a deadline in the past, to wake a blocked read.
var aLongTimeAgo = time.Unix(1, 0)

// Serve runs the receive loop on the calling goroutine: it reads datagrams
// in batches (recvmmsg), parses each as a RoCEv2 packet, checks its ICRC,
// and calls h for each one that passes; the others are dropped and counted
// (Counters). It returns nil when the Conn is closed, ctx.Err() when ctx is
// done, and the error otherwise. Serve may be called again after it
// returned for ctx; only one Serve runs at a time. If h is a BatchEnder,
// its EndBatch is called after each batch.
//
// The loop does not allocate per packet.
func (c *Conn) Serve(ctx context.Context, h Handler) error {
	rx, err := c.startServing()
	if err != nil {
		return err
	}
	defer c.stopServing()
	if ctx.Done() != nil {
		// Cancel by expiring the read deadline, which wakes a blocked
		// read; undo it when leaving so a later Serve can read.
		fired := make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			c.uc.SetReadDeadline(aLongTimeAgo)
			close(fired)
		})
		defer func() {
			if !stop() {
				<-fired
			}
			c.uc.SetReadDeadline(time.Time{})
		}()
	}
	ft := c.faults
	if ft != nil {
		ft.disarm()
	}
	c.rxMu.Lock()
	rx.serve = serveState{c: c, ctx: ctx, h: h, ft: ft}
	rx.serve.be, _ = h.(BatchEnder)
	rx.serve.un, _ = h.(Unsealer)
	c.serveRx = rx
	c.rxMu.Unlock()
	defer func() {
		c.rxMu.Lock()
		rx.serve = serveState{}
		c.serveRx = nil
		c.rxMu.Unlock()
	}()
	for {
		if ft != nil {
			// Wake the read when the next held datagram is due.
			err := ft.arm(ctx, c)
			// Checked after arm, which may have replaced the
			// expired deadline by which Close wakes Serve (see
			// receiver.read).
			if c.closing.Load() {
				return nil
			}
			if err != nil {
				return err
			}
		}
		rx.serve.err = nil
		err := c.readSocket(rx)
		switch {
		case c.closing.Load():
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case rx.serve.err != nil:
			return rx.serve.err
		case ft != nil && errors.Is(err, os.ErrDeadlineExceeded):
			// The fault tap's deadline: deliver what is due.
			ft.disarm()
			c.rxMu.Lock()
			rx.clearRead()
			_, ok := rx.deliverBatch(false)
			c.rxMu.Unlock()
			if !ok {
				return nil
			}
		case err != nil:
			return err
		}
	}
}

// serveState is what the RawConn.Read callback of Serve (receiver.read)
// needs: the arguments of the running Serve, and the error that ended the
// callback's work.
type serveState struct {
	c   *Conn
	ctx context.Context
	h   Handler
	be  BatchEnder
	un  Unsealer
	ft  *faultTap
	err error
}

// readHook, when set (by tests only, through SetReadHook), runs in Serve's
// goroutine before each batch it reads, holding no lock.
var readHook atomic.Pointer[func(*Conn)]

// SetReadHook makes Serve call h with its Conn before each batch it reads,
// holding no lock, so that a test may hold a Serve back while datagrams
// wait in its socket (for Poll to take, say); nil removes it. Only the
// Linux receive path calls it. For tests.
func SetReadHook(h func(*Conn)) {
	if h == nil {
		readHook.Store(nil)
		return
	}
	readHook.Store(&h)
}

// Poll reads what the receive socket holds, without waiting, and hands it
// to the running Serve's Handler on the calling goroutine, as Serve would
// have (EndBatch included). It returns the number of packets delivered. It
// lets a goroutine that busy-polls for the packets' effects (a CQ) receive
// them itself, without needing a processor for Serve's goroutine. While
// Serve or another Poll is reading, Poll returns 0 and busy at once: they
// deliver (a spinning caller should yield its processor then, in case the
// reader is a goroutine waiting for one). It also returns 0 when no Serve
// runs, when the Conn is closing and under a fault tap (which only Serve
// drives).
//
// Serve needs no other wake-up for what Poll leaves behind: it reads until
// the socket is empty after every readiness edge, and a datagram queued
// after its last read raises one (see read); a Poll that takes the datagram
// an edge announced only costs Serve an empty read.
func (c *Conn) Poll() (delivered int, busy bool) {
	if c.faults != nil || c.closing.Load() {
		return 0, false
	}
	if !c.rxMu.TryLock() {
		return 0, true
	}
	defer c.rxMu.Unlock()
	rx := c.serveRx
	if rx == nil {
		return 0, false
	}
	return c.pollSocket(rx)
}

// deliverBatch hands the datagrams just read to the running Serve's
// Handler and ends the batch (EndBatch); it returns deliver's results.
// polled says that Poll is delivering.
func (r *receiver) deliverBatch(polled bool) (delivered uint64, ok bool) {
	st := &r.serve
	delivered, ok = st.c.deliver(r, st.h, polled)
	if ok && st.be != nil {
		st.be.EndBatch()
	}
	return delivered, ok
}

func (c *Conn) startServing() (*receiver, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, net.ErrClosed
	case c.serving:
		return nil, ErrServing
	}
	c.serving = true
	if c.rx == nil {
		size := c.cfg.MaxDatagramSize
		if c.gro {
			size = max(size, groBufferSize)
		}
		c.rx = newReceiver(c.cfg.BatchSize, size)
	}
	return c.rx, nil
}

// stopServing ends a Serve; it closes the receive socket if Close was
// called meanwhile, which left that to it.
func (c *Conn) stopServing() {
	c.mu.Lock()
	c.serving = false
	closed := c.closed
	c.mu.Unlock()
	if closed {
		c.uc.Close()
	}
}

// rxTally counts what the receive loop did since it last added its counts
// to the Counters: at the end of each batch, and when it ends a long batch
// early: one atomic add per counter per batch, where counting each packet
// as it goes would cost several locked instructions per packet.
type rxTally struct {
	rxPackets, rxBytes, gro, malformed, icrcErrors, recovered, predicted, delivered uint64

	// batchDelivered is the number of packets delivered earlier in the
	// batch, whose counts are already added.
	batchDelivered uint64
}

// add adds the tally to ctr, the packets delivered to Polled as well when
// polled, and clears it. RxPackets comes last: a reader that sees it
// include a datagram sees the other counters include what was done with
// it (see Counters).
func (tl *rxTally) add(ctr *Counters, polled bool) {
	ctr.RxBytes.Add(tl.rxBytes)
	ctr.RxGRO.Add(tl.gro)
	ctr.Malformed.Add(tl.malformed)
	ctr.ICRCErrors.Add(tl.icrcErrors)
	ctr.ICRCIDRecovered.Add(tl.recovered)
	ctr.ICRCIDPredicted.Add(tl.predicted)
	if polled {
		ctr.Polled.Add(tl.delivered)
	}
	ctr.Delivered.Add(tl.delivered)
	ctr.RxPackets.Add(tl.rxPackets)
	*tl = rxTally{batchDelivered: tl.batchDelivered + tl.delivered}
}

// deliver processes the datagrams just read (and, with the fault tap, the
// held datagrams now due), adds their counts, and returns how many packets
// it handed to h; ok false means the Conn was closed meanwhile and the rest
// was dropped. polled says that Poll is delivering.
func (c *Conn) deliver(rx *receiver, h Handler, polled bool) (delivered uint64, ok bool) {
	var tl rxTally
	defer func() {
		tl.add(&c.counters, polled)
		delivered = tl.batchDelivered
	}()
	var now time.Duration
	if ft := c.faults; ft != nil {
		// Held datagrams due by now arrived before this batch.
		now = ft.now()
		if !ft.release(c, rx, h, &tl, now) {
			return 0, false
		}
	}
	return 0, c.deliverRead(rx, h, &tl, now, polled)
}

// deliverDatagram checks and delivers the packets of one datagram of data
// received from from on local: one packet, or, when seg is above 0 and
// below its length, a coalesced (GRO) run of packets of seg bytes, the
// last one possibly shorter, each a datagram of its own to the checks and
// to the fault tap. false means the Conn was closed meanwhile.
func (c *Conn) deliverDatagram(rx *receiver, h Handler, data []byte, from, local netip.AddrPort, seg int, ecn ECN, tl *rxTally, now time.Duration, polled bool) bool {
	if seg <= 0 || seg >= len(data) {
		seg = len(data) // one packet
	} else {
		tl.gro++
	}
	ft := c.faults
	for off := 0; ; {
		if off > 0 && c.closing.Load() {
			return false
		}
		end := min(off+seg, len(data))
		pkt := data[off:end]
		tl.rxPackets++
		tl.rxBytes += uint64(len(pkt))
		switch {
		case len(pkt) > c.cfg.MaxDatagramSize:
			tl.malformed++
		case ft != nil:
			ft.admit(c, rx, h, pkt, from, local, ecn, tl, now)
		default:
			c.accept(rx, h, pkt, from, local, ecn, tl)
			c.endBatchEarly(rx, tl, polled)
		}
		if off = end; off >= len(data) {
			return true
		}
	}
}

// endBatchEarly ends the batch being delivered (EndBatch), after adding
// its counts so far, when it has delivered Config.EndBatchEvery packets
// since it began or was last ended.
func (c *Conn) endBatchEarly(rx *receiver, tl *rxTally, polled bool) {
	be := rx.serve.be
	every := c.cfg.EndBatchEvery
	if be == nil || every <= 0 || tl.delivered < uint64(every) {
		return
	}
	tl.add(&c.counters, polled)
	be.EndBatch()
}

// accept parses one datagram received from from on local with the ECN
// field ecn, checks its ICRC and hands it to h, or counts why it was
// dropped.
func (c *Conn) accept(rx *receiver, h Handler, data []byte, from, local netip.AddrPort, ecn ECN, tl *rxTally) {
	if from.Addr().Is6() != local.Addr().Is6() {
		tl.malformed++
		return
	}
	// A sealed packet parses once opened, after its ICRC check: damage
	// in transit counts as an ICRC error, not as a forgery.
	un := rx.serve.un
	sealed := un != nil && un.Sealed(data)
	if !sealed && rx.pkt.Parse(data, 0) != nil {
		tl.malformed++
		return
	}
	// In the receiver, not on the stack: HandlePacket takes a pointer
	// (a 40-byte struct passed by value was copied through the stack
	// with overlapping moves that stalled on the stores before them).
	info := &rx.info
	info.Local, info.IPID, info.IDRecovered, info.ECN = local, 0, false, ecn
	res, id := rx.icrc.Check(from, local, data, c.cfg.StrictICRC)
	switch res {
	case wire.ICRCBad:
		tl.icrcErrors++
		return
	case wire.ICRCIDPredicted:
		tl.predicted++
		info.IPID = id
	case wire.ICRCIDRecovered:
		tl.recovered++
		info.IPID, info.IDRecovered = id, true
	}
	if tap := c.tap.Load(); tap != nil {
		tap.record(&c.counters, from, local, info.IPID, data, false)
	}
	if sealed {
		plain := un.Unseal(data, from)
		if plain == nil {
			return
		}
		if rx.pkt.Parse(plain, 0) != nil {
			tl.malformed++
			return
		}
	}
	tl.delivered++
	h.HandlePacket(&rx.pkt, from, info)
}
