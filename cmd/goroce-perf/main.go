// Command goroce-perf is perftest (ib_write_bw, ib_read_lat, ...) for
// goroce: it measures RDMA bandwidth and latency over goroce's RoCEv2 RC,
// UC and UD queue pairs, speaks perftest's out-of-band protocol on TCP port 18515,
// and prints perftest's table, so that a real perftest binary on a host
// with a RoCE NIC or Soft-RoCE can be either peer.
//
// Usage:
//
//	goroce-perf TEST [flags]                 # server
//	goroce-perf TEST [flags] SERVER-HOST     # client
//	goroce-perf TEST --loopback [flags]      # both, in this process
//
// TEST is write_bw, write_lat, read_bw, read_lat, send_bw, send_lat,
// atomic_bw or atomic_lat (an "ib_" prefix is accepted). The traffic is
// perftest's: in the bandwidth tests the client WRITEs to, READs from or
// runs atomics on the server's buffer while the server waits, and the
// server prints the client's report; ib_send_bw's server posts receives
// and measures too. In ib_write_lat both sides write the other's buffer and
// watch its last byte, ib_send_lat ping-pongs messages, and ib_read_lat and
// ib_atomic_lat time the client's round trips.
//
// perftest's flags are accepted where they apply: -s/--size, -a/--all,
// -n/--iters, -D/--duration, -p/--port, -m/--mtu, -q/--qp, -t/--tx-depth,
// -o/--outs, -u/--qp-timeout, -x/--gid-index, -d/--ib-dev, -A/--atomic_type, -I/--inline_size,
// -c/--connection (RC, UC, UD), --report_gbits and -F. goroce's own: --bind ADDR,
// the address the device binds (default: the address of the TCP
// connection); --loopback with --loopback-addrs SERVER,CLIENT; --udp-port;
// --check, which validates the data end to end between goroce peers (the
// sender's data is derived from its QP's starting PSN, which the receiver
// learns from the key line); --json, one JSON object per result line.
//
// After perftest's table, goroce-perf prints, per message size, the 99.99th
// percentile (of the half round trips in the latency tests, of the time
// from post to completion in the bandwidth tests) and the CPU seconds per
// GB moved (getrusage of the whole process, which with --loopback holds
// both sides), then the time it took to register and deregister the
// buffer.
//
// --counters prints, at the end, the device's counters (verbs.Counters)
// once it is closed: one "name value" line each, rxe's hw_counters first in
// rxe's order and names (sent_pkts, rcvd_pkts, duplicate_request, ...), then
// goroce's own; with --json, one object {"side": ..., "counters": {...}}.
//
// --plot FILE.svg (or FILE.png) draws the bandwidth (the typical latency
// in the latency tests) against the message size, meant for -a, next to
// the cumulative distribution of the per-message latencies of up to six
// sizes. --plot-ref LABEL=FILE adds a reference distribution to the CDF,
// FILE holding one latency in microseconds per line (bench/run.sh draws
// sockperf's UDP ping-pong there).
//
// Waiting: by default a side waiting for a completion parks in CQ.Wait,
// woken by the device, and one watching memory (ib_write_lat) sleeps 1 µs
// between looks, so an idle side burns no CPU and never holds a processor
// the device's receive goroutine needs. --busy-poll polls both in a tight
// loop instead, as perftest does: the lowest latency where a core is left
// for each device's receive goroutine, but with fewer cores than spinning
// sides plus receive goroutines (two cores, --loopback write_lat) the
// packets wait for the Go runtime's 10 ms background network poll.
//
// goroce announces perftest version 6.06 so that perftest 6.28 and later
// skip their binary parameter negotiation (see internal/oob).
//
// -c UC and -c UD follow perftest: UC runs the WRITE and SEND tests (no
// READ or atomics), UD the SEND tests. A UC QP is connected with a path and
// the PSNs only; a UD QP gets Q_Key 0x11111111 and sends through an address
// handle toward the peer's QP of the same index, whose number the key line
// carries. A UD message is one packet: sizes stop at the path MTU (the
// default size becomes it, -a stops there, a larger -s is an error), and
// every receive buffer holds the 40-byte GRH before the message. Neither
// has flow control, so the send tests post all their receives up front (up
// to 16000, perftest's UC_MAX_RX); a lost message is lost, and the side
// waiting for it fails after 10 s without progress. --check works on both;
// on the passive side of a UC WRITE test, which nothing tells when the
// WRITEs have landed, it first waits (up to 5 s) until the QP has taken in
// every packet of the run.
//
// -R / --rdma_cm is perftest's rdma_cm mode, RC only: no TCP at all. The
// client connects a control QP to the server's rdma_cm port (-p, 18515),
// on which every exchange above travels as one SEND per block (the keys
// as perftest's binary struct pingpong_dest); then, between two
// barriers, the server listens again on the port and the client connects
// each data QP through the cm, which chooses their PSNs, path MTU and READ
// depths (see rdmacm.go). The server needs --bind, its device's address.
//
// --hw (a binary built with cgo and -tags goroce_ibverbs) runs on the
// kernel RDMA device -d names (rxe0, mlx5_0) instead of a goroce device,
// through libibverbs (and librdmacm with -R), as perftest does: -x then
// defaults to the RoCE v2 GID of the local address (else the first of an
// IPv4 address), -m is the path MTU (at most the port's active one), and
// the flags that configure a goroce device (--udp-port, --receive-queues,
// --no-ecn, --rtt-cc, --rtt-target, --selective-repeat, --psk-file,
// --counters, --drop, --mark-ce) are refused. ib_write_lat looks at memory
// between polls there: the NIC does not report remote writes.
//
// Not supported yet: XRC, DC and SRD (-c), -R with UC or UD, -D in
// ib_send_* and ib_write_lat (both sides must stop together).
//
// Errors are one line on stderr. The exit status is 0 on success, 1 when
// the test fails (connection, peer, device, data check) and 2 for a bad
// command line.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/oob"
	"github.com/goroce/goroce/internal/tooldev"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// dialTimeout bounds the client's TCP connection attempt.
const dialTimeout = 10 * time.Second

// run is the whole program: it returns the exit status, after printing
// any error as one line on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "goroce-perf:", err)
		return 2
	}
	if cfg.cpuProfile != "" {
		stopProfile, err := tooldev.StartCPUProfile(cfg.cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "goroce-perf:", err)
			return 1
		}
		defer stopProfile()
	}
	switch {
	case cfg.loopback:
		err = runLoopback(ctx, cfg, stdout)
	case cfg.host == "":
		err = runServer(ctx, cfg, stdout)
	default:
		err = runClient(ctx, cfg, stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "goroce-perf:", err)
		return 1
	}
	return 0
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func newSide(cfg *config, role oob.Role, out io.Writer) *side {
	s := &side{cfg: cfg, role: role, out: out, progress: !cfg.json && isTerminal(out)}
	if cfg.bind != "" {
		s.addr = netip.MustParseAddr(cfg.bind)
	}
	return s
}

// finish prints what comes after the table once the resources are
// released (the deregistration time is part of it).
func (s *side) finish(w io.Writer) error {
	s.printExtras(w)
	if err := s.printJSON(w); err != nil {
		return err
	}
	if s.cfg.counters {
		if err := s.printCounters(w); err != nil {
			return err
		}
	}
	if s.cfg.plot != "" && (s.role == oob.Client || !s.cfg.loopback) {
		return writePlot(s.cfg.plot, s.cfg, s.role.String(), s.results)
	}
	return nil
}

func listenAddr(cfg *config, host string) string {
	return net.JoinHostPort(host, strconv.Itoa(cfg.port))
}

// runServer accepts one client, as perftest's server does, and runs the
// test with it.
func runServer(ctx context.Context, cfg *config, stdout io.Writer) error {
	if cfg.rdmaCM {
		return runServerCM(ctx, cfg, stdout)
	}
	ln, err := net.Listen("tcp", listenAddr(cfg, cfg.bind))
	if err != nil {
		return err
	}
	s := newSide(cfg, oob.Server, stdout)
	defer s.teardown()
	if s.addr.IsValid() {
		// Refuse what the device cannot do before waiting for a client.
		if err := s.openDevice(); err != nil {
			_ = ln.Close()
			return err
		}
	}
	if !cfg.json {
		fmt.Fprint(stdout, resultLine+waitingBanner)
	}
	nc, err := accept(ctx, ln)
	if err != nil {
		return err
	}
	err = s.run(ctx, nc)
	if err == nil {
		err = s.finish(stdout)
	}
	return err
}

// accept waits for one connection or for ctx, then closes the listener.
func accept(ctx context.Context, ln net.Listener) (net.Conn, error) {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	nc, err := ln.Accept()
	_ = ln.Close()
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nc, err
}

func runClient(ctx context.Context, cfg *config, stdout io.Writer) error {
	s := newSide(cfg, oob.Client, stdout)
	defer s.teardown()
	if !s.addr.IsValid() {
		// The address the kernel would send from to the server: a UDP
		// "connection" only looks up the route.
		uc, err := net.Dial("udp", listenAddr(cfg, cfg.host))
		if err != nil {
			return fmt.Errorf("cannot reach the server: %w", err)
		}
		ap, perr := netip.ParseAddrPort(uc.LocalAddr().String())
		_ = uc.Close()
		if perr != nil {
			return perr
		}
		s.addr = ap.Addr().Unmap()
	}
	// Refuse what the device cannot do before connecting.
	if err := s.openDevice(); err != nil {
		return err
	}
	var nc net.Conn
	var err error
	if cfg.rdmaCM {
		s.host = cfg.host
		nc, err = s.dialCtrl(ctx, cfg.host)
	} else {
		nc, err = dial(ctx, cfg, cfg.host, s.addr)
	}
	if err != nil {
		return err
	}
	err = s.run(ctx, nc)
	if err == nil {
		err = s.finish(stdout)
	}
	return err
}

func dial(ctx context.Context, cfg *config, host string, local netip.Addr) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	if local.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: local.AsSlice()}
	}
	nc, err := d.DialContext(ctx, "tcp", listenAddr(cfg, host))
	if err != nil {
		return nil, fmt.Errorf("cannot connect to the server: %w", err)
	}
	return nc, nil
}

// runLoopback runs the server and the client in this process, each with
// its own device, the server on the first --loopback-addrs address. The
// client's output is printed as it runs and the server's after it.
func runLoopback(ctx context.Context, cfg *config, stdout io.Writer) error {
	srvAddr, cliAddr := cfg.loopbackAddrs[0], cfg.loopbackAddrs[1]
	srv := newSide(cfg, oob.Server, nil)
	srv.addr = srvAddr
	defer srv.teardown()
	if err := srv.openDevice(); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	acceptOne, port, err := loopbackListener(ctx, cfg, srv)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var srvOut bytes.Buffer
	srv.out, srv.progress = &srvOut, false
	var srvErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		nc, err := acceptOne(ctx)
		if err == nil {
			err = srv.run(ctx, nc)
		}
		if err != nil {
			srvErr = fmt.Errorf("server: %w", err)
			cancel() // do not leave the client waiting for a dead server
		}
	}()

	// The listener is bound before the client dials; with -p 0 it has
	// picked a free port.
	ccfg := *cfg
	ccfg.port = port
	cli := newSide(&ccfg, oob.Client, stdout)
	cli.addr = cliAddr
	defer cli.teardown()
	err = cli.openDevice()
	var nc net.Conn
	switch {
	case err == nil && cfg.rdmaCM:
		cli.host = srvAddr.String()
		nc, err = cli.dialCtrl(ctx, cli.host)
	case err == nil:
		nc, err = dial(ctx, &ccfg, srvAddr.String(), cliAddr)
	}
	if err == nil {
		err = cli.run(ctx, nc)
	}
	if err != nil {
		err = fmt.Errorf("client: %w", err)
		cancel()
	}
	wg.Wait()
	switch {
	case err == nil:
		err = srvErr
	case srvErr != nil && !errors.Is(srvErr, context.Canceled):
		// The server's failure is the cause; the client saw the cancel.
		err = srvErr
	}
	if err != nil {
		return err
	}
	if err := cli.finish(stdout); err != nil {
		return err
	}
	if !cfg.json {
		fmt.Fprint(stdout, "\n server side:\n")
	}
	if _, err := stdout.Write(srvOut.Bytes()); err != nil {
		return err
	}
	return srv.finish(stdout)
}

// loopbackListener listens for the client of --loopback: on TCP, or with
// -R on the cm (on the server's device). It returns how to accept the
// one connection and the port it listens on (-p 0 picks one).
func loopbackListener(ctx context.Context, cfg *config, srv *side) (func(context.Context) (net.Conn, error), int, error) {
	addr := listenAddr(cfg, srv.addr.String())
	if cfg.rdmaCM {
		l, err := cm.Listen(addr)
		if err != nil {
			return nil, 0, err
		}
		return func(ctx context.Context) (net.Conn, error) { return srv.acceptCtrl(ctx, l) }, int(l.Addr().Port()), nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, 0, err
	}
	return func(ctx context.Context) (net.Conn, error) { return accept(ctx, ln) }, ln.Addr().(*net.TCPAddr).Port, nil
}

// runServerCM is runServer for -R: the client connects to the cm on the
// --bind device.
func runServerCM(ctx context.Context, cfg *config, stdout io.Writer) error {
	if cfg.bind == "" {
		return errors.New("-R: the server needs --bind ADDR, the address of its device")
	}
	s := newSide(cfg, oob.Server, stdout)
	defer s.teardown()
	if err := s.openDevice(); err != nil {
		return err
	}
	l, err := cm.Listen(listenAddr(cfg, cfg.bind))
	if err != nil {
		return err
	}
	if !cfg.json {
		fmt.Fprint(stdout, resultLine+waitingBanner)
	}
	nc, err := s.acceptCtrl(ctx, l)
	if err != nil {
		return err
	}
	err = s.run(ctx, nc)
	if err == nil {
		err = s.finish(stdout)
	}
	return err
}
