// Command goroce-pingpong is rdma-core's ibv_rc_pingpong on a goroce
// device: it exchanges messages over an RC queue pair with SEND and RECV,
// and is wire-compatible with ibv_rc_pingpong on any RoCEv2 device (rxe or
// hardware) in either role.
//
//	goroce-pingpong [options]          start a server and wait for a client
//	goroce-pingpong [options] <host>   connect to the server at <host>
//
// The two sides meet over TCP (port 18515 by default) and trade their QP
// number, starting PSN and GID in ibv_rc_pingpong's 52-byte message, the
// client ending with "done". Then, as in ibv_rc_pingpong, each side keeps
// rx-depth receives posted; the client sends first, and each side sends its
// next message only when its previous send has completed and the peer's
// message has arrived, for --iters round trips. Each side prints its own
// and its peer's address, then the throughput and the time per iteration,
// in ibv_rc_pingpong's format:
//
//	  local address:  LID 0x0000, QPN 0x000025, PSN 0xce973c, GID ::ffff:10.99.0.2
//	  remote address: LID 0x0000, QPN 0x000011, PSN 0x2812e2, GID ::ffff:10.99.0.3
//	16384 bytes in 0.03 seconds = 4.87 Mbit/sec
//	4 iters in 0.03 seconds = 6731.75 usec/iter
//
// # Options
//
// Those of ibv_rc_pingpong that apply to a software RoCE device, with the
// same defaults, plus --bind and --counters:
//
//	-p, --port=PORT       TCP port to listen on or connect to (18515)
//	-d, --ib-dev=NAME     name of the local goroce device (goroce0)
//	-i, --ib-port=PORT    port of the device (1, its only port)
//	-s, --size=BYTES      message size (4096)
//	-m, --mtu=BYTES       path MTU: 256, 512, 1024, 2048 or 4096 (1024)
//	-r, --rx-depth=N      receives kept posted (500)
//	-n, --iters=N         round trips (1000)
//	-l, --sl=SL           service level (0)
//	-e, --events          sleep on completion events instead of polling
//	-g, --gid-idx=INDEX   local GID index (1: the GID of the device address)
//	-c, --chk             validate the received data
//	    --bind=ADDR       IP address of the local device
//	    --counters        print the device's counters at the end
//
// A goroce device is opened on an IP address, which is also its GID and the
// source of its RoCEv2 packets. Without --bind the client uses the address
// its TCP connection to the server goes out from, and the server the address
// the client reached it on, so the default works whenever the TCP peers can
// reach each other's RoCEv2 port (UDP 4791). With --bind the server listens
// on that address only. The server serves one client and exits, as
// ibv_rc_pingpong does.
//
// RoCE carries a GRH in every packet, so unlike ibv_rc_pingpong the default
// is to send a GID (index 1); an ibv_rc_pingpong peer must be run with
// -g and the index of its IPv4-mapped or IPv6 GID (usually 1 on rxe).
//
// With -c the client writes ibv_rc_pingpong's pattern before the first send
// (the buffer is 0x7b bytes, with 0 at the start of each page) and both sides
// check that the last message received carries it: ibv_rc_pingpong's check,
// made on every byte. A page that differs is reported as "invalid data in
// page N" and makes the exit status 1.
//
// With --counters each side prints, after its report and once its device is
// closed, the device's counters (verbs.Counters), one "name value" line
// each, in rxe's hw_counters order and names (sent_pkts, rcvd_pkts,
// duplicate_request, ...) followed by goroce's own.
//
// Messages are received into and sent from one buffer, as in
// ibv_rc_pingpong, so each side echoes what it last received.
//
// Without -e, completions are polled as in ibv_rc_pingpong, but an empty
// CQ is not spun on: the program arms it and sleeps on its completion
// channel until the next completion. The device runs as goroutines of this
// process, and spinning would keep them from running (see pingpongCtx.poll).
// With -e the loop is ibv_rc_pingpong's event loop: wait for an event,
// re-arm, poll, and acknowledge all events at the end.
package main

import (
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
	"time"

	"github.com/goroce/goroce/verbs"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program: it parses args, runs the server (no host) or
// the client, prints to stdout as ibv_rc_pingpong does and returns the exit
// status. Errors are one line on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return (&program{stdout: stdout, stderr: stderr}).main(ctx, args)
}

// Defaults, those of ibv_rc_pingpong.
const (
	defaultTCPPort = 18515
	defaultSize    = 4096
	defaultMTU     = 1024
	defaultRxDepth = 500
	defaultIters   = 1000
	// defaultGIDIndex selects the GID of the device address; a goroce
	// device's GID 0 is a link-local GID that no route leads to.
	defaultGIDIndex = 1
)

// exchangeTimeout bounds the TCP exchange once a connection exists (and the
// client's connection attempt), so that a peer that stops talking half way
// is an error rather than a hang. Waiting for a client to connect is not
// bounded: that is what a server does.
const exchangeTimeout = 60 * time.Second

// options is the parsed command line.
type options struct {
	host     string // "" for the server
	tcpPort  int
	ibDev    string
	ibPort   int
	size     int
	mtu      verbs.MTU
	rxDepth  int
	iters    int
	sl       int
	events   bool
	gidIndex int
	chk      bool
	bind     netip.Addr // invalid if not given
	counters bool       // print the device's counters at the end
}

func (o *options) server() bool { return o.host == "" }

// usageText is ibv_rc_pingpong's usage, less the options a software
// device has no use for (on-demand paging, timestamps, device memory, the
// new send API), plus --bind.
const usageText = `Usage:
  goroce-pingpong            start a server and wait for connection
  goroce-pingpong <host>     connect to server at <host>

Options:
  -p, --port=<port>      listen on/connect to port <port> (default 18515)
  -d, --ib-dev=<dev>     name of the goroce device (default goroce0)
  -i, --ib-port=<port>   use port <port> of the device (default 1)
  -s, --size=<size>      size of message to exchange (default 4096)
  -m, --mtu=<size>       path MTU (default 1024)
  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)
  -n, --iters=<iters>    number of exchanges (default 1000)
  -l, --sl=<sl>          service level value
  -e, --events           sleep on CQ events (default poll)
  -g, --gid-idx=<gid index> local port gid index (default 1)
  -c, --chk              validate received buffer
      --bind=<addr>      IP address of the local device (default: the
                         address the TCP connection uses)
      --counters         print the device's counters at the end
`

// maxMessage is the largest message an RC QP carries (2^31 bytes).
const maxMessage = 1 << 31

// parseArgs parses the command line. Options may follow the host, as GNU
// getopt allows for ibv_rc_pingpong. A request for help returns
// flag.ErrHelp.
func parseArgs(args []string) (*options, error) {
	fs := flag.NewFlagSet("goroce-pingpong", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run prints the error and the usage
	o := &options{}
	var mtu int
	var bind string
	alias := func(short, long string, def int, p *int) {
		fs.IntVar(p, short, def, "")
		fs.IntVar(p, long, def, "")
	}
	alias("p", "port", defaultTCPPort, &o.tcpPort)
	alias("i", "ib-port", 1, &o.ibPort)
	alias("s", "size", defaultSize, &o.size)
	alias("m", "mtu", defaultMTU, &mtu)
	alias("r", "rx-depth", defaultRxDepth, &o.rxDepth)
	alias("n", "iters", defaultIters, &o.iters)
	alias("l", "sl", 0, &o.sl)
	alias("g", "gid-idx", defaultGIDIndex, &o.gidIndex)
	fs.StringVar(&o.ibDev, "d", verbs.DefaultDeviceName, "")
	fs.StringVar(&o.ibDev, "ib-dev", verbs.DefaultDeviceName, "")
	fs.BoolVar(&o.events, "e", false, "")
	fs.BoolVar(&o.events, "events", false, "")
	fs.BoolVar(&o.chk, "c", false, "")
	fs.BoolVar(&o.chk, "chk", false, "")
	fs.StringVar(&bind, "bind", "", "")
	fs.BoolVar(&o.counters, "counters", false, "")

	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			positional = append(positional, rest...) // after "--": no options
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	switch len(positional) {
	case 0:
	case 1:
		o.host = positional[0]
	default:
		return nil, fmt.Errorf("unexpected argument %q", positional[1])
	}

	switch {
	case o.tcpPort < 0 || o.tcpPort > 65535 || (o.tcpPort == 0 && !o.server()):
		return nil, fmt.Errorf("--port %d: want 1 to 65535", o.tcpPort)
	case o.ibPort < 1:
		return nil, fmt.Errorf("--ib-port %d: want 1 or more", o.ibPort)
	case o.size < 1 || o.size > maxMessage:
		return nil, fmt.Errorf("--size %d: want 1 to %d bytes", o.size, maxMessage)
	case o.rxDepth < 1:
		return nil, fmt.Errorf("--rx-depth %d: want 1 or more", o.rxDepth)
	case o.iters < 1:
		return nil, fmt.Errorf("--iters %d: want 1 or more", o.iters)
	case o.sl < 0 || o.sl > 15:
		return nil, fmt.Errorf("--sl %d: want 0 to 15", o.sl)
	case o.gidIndex < 0:
		return nil, fmt.Errorf("--gid-idx %d: RoCE needs a GID, want an index of the GID table", o.gidIndex)
	case o.ibDev == "":
		return nil, errors.New("--ib-dev: empty device name")
	}
	if o.mtu = verbs.MTUFromBytes(mtu); !o.mtu.Valid() || o.mtu.Bytes() != mtu {
		return nil, fmt.Errorf("--mtu %d: want 256, 512, 1024, 2048 or 4096", mtu)
	}
	if bind != "" {
		a, err := netip.ParseAddr(bind)
		if err != nil {
			return nil, fmt.Errorf("--bind: %v", err)
		}
		if a = a.Unmap(); a.IsUnspecified() {
			return nil, fmt.Errorf("--bind %v: the device needs the address it is reached at", a)
		}
		o.bind = a
	}
	return o, nil
}

// program is one run, with what tests can change.
type program struct {
	stdout, stderr io.Writer

	// listening, if not nil, is told the server's TCP address once it
	// listens (tests run the server on port 0).
	listening func(net.Addr)
	// exchangeTimeout overrides the package constant if not zero.
	exchangeTimeout time.Duration
}

// main runs the program and returns the exit status.
func (p *program) main(ctx context.Context, args []string) int {
	o, err := parseArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(p.stdout, usageText)
		return 0
	}
	if err != nil {
		fmt.Fprintf(p.stderr, "goroce-pingpong: %v\n", err)
		fmt.Fprint(p.stderr, usageText)
		return 1
	}
	if err := p.pingpong(ctx, o); err != nil {
		fmt.Fprintf(p.stderr, "goroce-pingpong: %v\n", err)
		return 1
	}
	return 0
}

func (p *program) timeout() time.Duration {
	if p.exchangeTimeout > 0 {
		return p.exchangeTimeout
	}
	return exchangeTimeout
}

// errInvalidData reports a -c check that failed (the pages are printed).
var errInvalidData = errors.New("invalid data received")

// pingpong runs one side: it sets up the device and QP, meets the peer over
// TCP, runs the traffic and prints the results.
func (p *program) pingpong(ctx context.Context, o *options) (err error) {
	var pp *pingpongCtx
	defer func() {
		if pp != nil {
			if cerr := pp.close(); err == nil {
				err = cerr
			}
		}
	}()
	// With --bind the device comes first, as in ibv_rc_pingpong: a device
	// that cannot be opened fails before any peer is involved. Without it,
	// the address is the TCP connection's, known once it exists.
	if o.bind.IsValid() {
		if pp, err = p.setup(o, o.bind); err != nil {
			return err
		}
	}

	var nc net.Conn
	if o.server() {
		nc, err = p.accept(ctx, o)
	} else {
		nc, err = p.dial(ctx, o)
	}
	if err != nil {
		return err
	}
	defer nc.Close()
	if pp == nil {
		local := nc.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
		if pp, err = p.setup(o, local); err != nil {
			return err
		}
	}

	xctx, cancel := context.WithTimeout(ctx, p.timeout())
	defer cancel()
	remote, err := pp.exchange(xctx, nc, o)
	if err != nil {
		return fmt.Errorf("exchange with %v: %w", nc.RemoteAddr(), err)
	}
	nc.Close() // as ibv_rc_pingpong does, before the traffic
	fmt.Fprintf(p.stdout, "  remote address: %s\n", remote)
	if !o.server() {
		if err := pp.connect(remote); err != nil {
			return err
		}
	}

	res, err := pp.run(ctx)
	if err != nil {
		return err
	}
	usec := float64(res.elapsed.Nanoseconds()) / 1e3
	bytes := int64(o.size) * int64(o.iters) * 2
	fmt.Fprintf(p.stdout, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec/1e6, float64(bytes)*8/usec)
	fmt.Fprintf(p.stdout, "%d iters in %.2f seconds = %.2f usec/iter\n", o.iters, usec/1e6, usec/float64(o.iters))
	if o.chk {
		if bad := pp.invalidPages(); len(bad) > 0 {
			for _, page := range bad {
				fmt.Fprintf(p.stdout, "invalid data in page %d\n", page)
			}
			return fmt.Errorf("%w in %d page(s)", errInvalidData, len(bad))
		}
	}
	// Closing destroys the QP, whose counters stay in the device's: read
	// after, they include everything the run did.
	dev := pp.dev
	if err := pp.close(); err != nil {
		return err
	}
	if o.counters {
		printCounters(p.stdout, dev.Counters())
	}
	return nil
}

// printCounters prints c, one "name value" line per counter, in the order
// of verbs.Counters.Each (rxe's first).
func printCounters(w io.Writer, c verbs.Counters) {
	c.Each(func(name string, v uint64) {
		fmt.Fprintf(w, "%-22s %d\n", name, v)
	})
}

// setup opens the device on addr, creates the QP in INIT with its receives
// posted and prints the local address.
func (p *program) setup(o *options, addr netip.Addr) (*pingpongCtx, error) {
	pp, err := newPingpongCtx(o, addr)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(p.stdout, "  local address:  %s\n", pp.local)
	return pp, nil
}

// accept listens on the TCP port (on the --bind address only, if given)
// and returns the first connection, as ibv_rc_pingpong's server serves one
// client.
func (p *program) accept(ctx context.Context, o *options) (net.Conn, error) {
	host := ""
	if o.bind.IsValid() {
		host = o.bind.String()
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(o.tcpPort)))
	if err != nil {
		return nil, fmt.Errorf("couldn't listen to port %d: %w", o.tcpPort, err)
	}
	defer l.Close()
	if p.listening != nil {
		p.listening(l.Addr())
	}
	// Accept has no context: closing the listener interrupts it.
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	nc, err := l.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("accept: %w", err)
	}
	return nc, nil
}

// dial connects to the server.
func (p *program) dial(ctx context.Context, o *options) (net.Conn, error) {
	d := net.Dialer{Timeout: p.timeout()}
	addr := net.JoinHostPort(o.host, strconv.Itoa(o.tcpPort))
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("couldn't connect to %s: %w", addr, err)
	}
	return nc, nil
}
