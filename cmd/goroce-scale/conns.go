package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/verbs"
)

// connReport is what the -conns measurement found: RC connections set up
// through the cm (REQ, REP, RTU over QP 1) between the two devices, and
// torn down (DREQ, DREP).
type connReport struct {
	Conns    int `json:"conns"`
	Parallel int `json:"parallel"` // connections being set up at once
	SQDepth  int `json:"sq_depth"`
	// Setup: from the first Dial to the passive side's last established
	// connection.
	SetupSeconds float64 `json:"setup_seconds"`
	SetupRate    float64 `json:"conns_per_sec"`
	// DialP50Ms and DialP99Ms are the active side's Dial times
	// (resolving, REQ, REP, both QPs to RTS, RTU sent).
	DialP50Ms float64 `json:"dial_p50_ms"`
	DialP99Ms float64 `json:"dial_p99_ms"`
	// Memory per connection: the growth while the connections were set
	// up, divided by their number; both ends (two QPs, two cm IDs and
	// connection records) are in this process.
	HeapBytes float64 `json:"heap_bytes_per_conn"`
	RSSBytes  float64 `json:"rss_bytes_per_conn"`
	// Teardown: from the first Close (DREQ) until every passive side's
	// connection has ended.
	TeardownSeconds float64 `json:"teardown_seconds"`
	TeardownRate    float64 `json:"teardowns_per_sec"`
	GoMaxProcs      int     `json:"gomaxprocs"`
}

func (r *connReport) writeTable(w io.Writer) {
	fmt.Fprintf(w, "| measure | value |\n|---|---|\n")
	row := func(name, format string, a ...any) {
		fmt.Fprintf(w, "| %s | %s |\n", name, fmt.Sprintf(format, a...))
	}
	row("RC connections through the cm", "%d (%d set up at once, send queue depth %d)", r.Conns, r.Parallel, r.SQDepth)
	row("setup", "%.2f s, %.0f connections/s", r.SetupSeconds, r.SetupRate)
	row("Dial time p50 / p99", "%.2f / %.2f ms", r.DialP50Ms, r.DialP99Ms)
	row("memory per connection, both ends (Go heap)", "%.0f bytes", r.HeapBytes)
	row("memory per connection, both ends (RSS)", "%.0f bytes", r.RSSBytes)
	row("teardown", "%.2f s, %.0f connections/s", r.TeardownSeconds, r.TeardownRate)
	row("GOMAXPROCS", "%d", r.GoMaxProcs)
}

// passive is the listening side: cfg.connParallel goroutines accept
// requests, each with a new QP, until stopped.
type passive struct {
	l     *cm.Listener
	e     *end
	cfg   *config
	mu    sync.Mutex
	conns []*cm.Conn
	qps   []*verbs.QP
	up    chan struct{} // one per established connection
	errc  chan error
	wg    sync.WaitGroup
}

func (p *passive) run(ctx context.Context) {
	for range p.cfg.connParallel {
		p.wg.Go(func() {
			for {
				req, err := p.l.Accept(ctx)
				if err != nil {
					if ctx.Err() == nil {
						p.errc <- fmt.Errorf("accept: %w", err)
					}
					return
				}
				qp, err := newQP(p.cfg, p.e)
				if err == nil {
					p.mu.Lock()
					p.qps = append(p.qps, qp)
					p.mu.Unlock()
					var c *cm.Conn
					if c, err = req.Accept(ctx, qp, nil); err == nil {
						p.mu.Lock()
						p.conns = append(p.conns, c)
						p.mu.Unlock()
						p.up <- struct{}{}
						continue
					}
				} else {
					_ = req.Reject(nil)
				}
				if ctx.Err() == nil {
					p.errc <- fmt.Errorf("accepting a connection: %w", err)
				}
				return
			}
		})
	}
}

// measureConns sets up cfg.conns RC connections from the second device to
// a listener on the first, cfg.connParallel at a time, then closes them
// from the active side.
func measureConns(ctx context.Context, cfg *config, log io.Writer) (*connReport, error) {
	rep := &connReport{Conns: cfg.conns, Parallel: cfg.connParallel, SQDepth: cfg.sqDepth, GoMaxProcs: runtime.GOMAXPROCS(0)}
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
	addr := net.JoinHostPort(cfg.addrs[0].String(), strconv.Itoa(cfg.cmPort))
	l, err := cm.Listen(addr)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	actx, stop := context.WithCancel(ctx)
	p := &passive{l: l, e: ea, cfg: cfg, up: make(chan struct{}, cfg.conns), errc: make(chan error, cfg.connParallel)}
	p.run(actx)
	defer func() {
		stop()
		p.wg.Wait()
		for _, qp := range p.qps {
			_ = qp.Destroy()
		}
	}()

	fmt.Fprintf(log, "goroce-scale: setting up %d connections through the cm, %d at once\n", cfg.conns, cfg.connParallel)
	m0 := sampleMem()
	start := time.Now()
	active, dials, err := dialAll(ctx, cfg, eb, addr)
	defer func() {
		for _, c := range active {
			if c != nil {
				_ = c.Close()
				_ = c.QP().Destroy()
			}
		}
	}()
	if err != nil {
		return nil, err
	}
	for range cfg.conns {
		select {
		case <-p.up:
		case err := <-p.errc:
			return nil, err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	el := time.Since(start)
	m1 := sampleMem()
	rep.SetupSeconds = el.Seconds()
	rep.SetupRate = float64(cfg.conns) / el.Seconds()
	rep.HeapBytes, rep.RSSBytes = perObject(m0, m1, cfg.conns)
	slices.Sort(dials)
	rep.DialP50Ms = ms(dials[len(dials)/2])
	rep.DialP99Ms = ms(dials[len(dials)*99/100])

	fmt.Fprintf(log, "goroce-scale: closing them from the active side\n")
	p.mu.Lock()
	peers := make(map[uint32]*cm.Conn, len(p.conns))
	for _, c := range p.conns {
		peers[c.Remote().QPN] = c
	}
	p.mu.Unlock()
	start = time.Now()
	if err := closeAll(ctx, cfg, active, peers); err != nil {
		return nil, err
	}
	el = time.Since(start)
	rep.TeardownSeconds = el.Seconds()
	rep.TeardownRate = float64(cfg.conns) / el.Seconds()
	return rep, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// dialAll connects cfg.conns QPs of e to addr, cfg.connParallel at a time,
// returning the connections (nil where none was made) and each Dial's
// time.
func dialAll(ctx context.Context, cfg *config, e *end, addr string) ([]*cm.Conn, []time.Duration, error) {
	conns := make([]*cm.Conn, cfg.conns)
	dials := make([]time.Duration, cfg.conns)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, cfg.connParallel)
	for w := range cfg.connParallel {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < cfg.conns; i = int(next.Add(1) - 1) {
				qp, err := newQP(cfg, e)
				if err != nil {
					errs[w] = fmt.Errorf("connection %d: %w", i, err)
					return
				}
				t0 := time.Now()
				c, err := cm.Dial(ctx, addr, qp, nil)
				if err != nil {
					_ = qp.Destroy()
					errs[w] = fmt.Errorf("connection %d: %w", i, err)
					return
				}
				dials[i], conns[i] = time.Since(t0), c
			}
		})
	}
	wg.Wait()
	return conns, dials, errors.Join(errs...)
}

// closeAll closes the connections from the active side, cfg.connParallel
// at a time: each closer sends a DREQ and waits until the passive side's
// connection (in peers, by the active QP's number) has ended by it, as
// Dial waits for the handshake. Closing all 10,000 at once instead
// overflows the passive device's queue of MADs (4096): DREQs dropped at its
// door are only retransmitted after the CM's response timeout.
func closeAll(ctx context.Context, cfg *config, conns []*cm.Conn, peers map[uint32]*cm.Conn) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, cfg.connParallel)
	for w := range cfg.connParallel {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(conns); i = int(next.Add(1) - 1) {
				peer := peers[conns[i].QP().QPN()]
				if peer == nil {
					errs[w] = fmt.Errorf("connection %d: no passive side for QP %#x", i, conns[i].QP().QPN())
					return
				}
				if err := conns[i].Close(); err != nil {
					errs[w] = err
					return
				}
				select {
				case <-peer.Done():
				case <-ctx.Done():
					errs[w] = ctx.Err()
					return
				}
				if err := peer.Err(); !errors.Is(err, cm.ErrDisconnected) {
					errs[w] = fmt.Errorf("connection %d: the passive side ended with %v, not the peer's DREQ", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
