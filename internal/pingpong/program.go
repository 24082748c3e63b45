package pingpong

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/internal/oob"
	"github.com/goroce/goroce/internal/tooldev"
	"github.com/goroce/goroce/verbs"
)

// Transport selects the rdma-core example a command stands in for.
type Transport int

// The four examples.
const (
	RC  Transport = iota // ibv_rc_pingpong: one RC QP
	UC                   // ibv_uc_pingpong: one UC QP
	UD                   // ibv_ud_pingpong: one UD QP and an address handle
	SRQ                  // ibv_srq_pingpong: -q RC QPs sharing a receive queue
)

// Command returns the name of the goroce command of t.
func (t Transport) Command() string {
	switch t {
	case RC:
		return "goroce-pingpong"
	case UC:
		return "goroce-uc-pingpong"
	case UD:
		return "goroce-ud-pingpong"
	case SRQ:
		return "goroce-srq-pingpong"
	}
	return "Transport(" + strconv.Itoa(int(t)) + ")"
}

func (t Transport) valid() bool { return t >= RC && t <= SRQ }

// Run is the whole program of t's command: it parses args, runs the server
// (no host) or the client, prints to stdout as the rdma-core example does
// and returns the exit status. Errors are one line on stderr.
func Run(ctx context.Context, t Transport, args []string, stdout, stderr io.Writer) int {
	if !t.valid() {
		fmt.Fprintf(stderr, "pingpong: unknown %s\n", t.Command())
		return 1
	}
	return (&program{transport: t, stdout: stdout, stderr: stderr}).main(ctx, args)
}

// Defaults, those of the rdma-core examples.
const (
	defaultTCPPort = 18515
	defaultSize    = 4096
	defaultSizeUD  = 1024 // ibv_ud_pingpong (its usage text says 2048)
	defaultMTU     = 1024
	defaultRxDepth = 500
	defaultIters   = 1000
	defaultNumQP   = 16 // ibv_srq_pingpong
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
	transport Transport
	host      string // "" for the server
	tcpPort   int
	ibDev     string
	ibPort    int
	size      int
	mtu       verbs.MTU
	numQP     int // 1 except with SRQ
	rxDepth   int
	iters     int
	sl        int
	events    bool
	gidIndex  int
	chk       bool
	bind      netip.Addr // invalid if not given
	counters  bool       // print the device's counters at the end
	hw        bool       // ibDev is a kernel RDMA device (verbs.OpenHardware)
	gidAuto   bool       // --hw without -g: the GID index is picked for the device
}

func (o *options) server() bool { return o.host == "" }

// usage returns the examples' usage, less the options a software device
// has no use for (on-demand paging, timestamps, device memory, the new
// send API), plus --bind and --counters.
func usage(t Transport) string {
	name := t.Command()
	var b strings.Builder
	fmt.Fprintf(&b, "Usage:\n  %s            start a server and wait for connection\n", name)
	fmt.Fprintf(&b, "  %s <host>     connect to server at <host>\n\nOptions:\n", name)
	b.WriteString("  -p, --port=<port>      listen on/connect to port <port> (default 18515)\n" +
		"  -d, --ib-dev=<dev>     name of the goroce device (default goroce0)\n" +
		"  -i, --ib-port=<port>   use port <port> of the device (default 1)\n")
	if t == UD {
		b.WriteString("  -s, --size=<size>      size of message to exchange (default 1024)\n")
	} else {
		b.WriteString("  -s, --size=<size>      size of message to exchange (default 4096)\n" +
			"  -m, --mtu=<size>       path MTU (default 1024)\n")
	}
	if t == SRQ {
		b.WriteString("  -q, --num-qp=<num>     number of QPs to use (default 16)\n")
	}
	b.WriteString("  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)\n")
	if t == SRQ {
		b.WriteString("  -n, --iters=<iters>    number of exchanges, all QPs together (default 1000)\n")
	} else {
		b.WriteString("  -n, --iters=<iters>    number of exchanges (default 1000)\n")
	}
	b.WriteString("  -l, --sl=<sl>          service level value\n" +
		"  -e, --events           sleep on CQ events (default poll)\n" +
		"  -g, --gid-idx=<gid index> local port gid index (default 1; with --hw the RoCE v2\n" +
		"                         GID of the local address, else of the first IPv4 one)\n" +
		"  -c, --chk              validate received buffer\n" +
		"      --bind=<addr>      IP address of the local device (default: the\n" +
		"                         address the TCP connection uses)\n" +
		"      --counters         print the device's counters at the end\n" +
		"      --hw               " + strings.ReplaceAll(tooldev.Usage, "\n", "\n                         ") + "\n")
	return b.String()
}

// maxMessage is the largest message an RC or UC QP carries (2^31 bytes).
const maxMessage = 1 << 31

// parseArgs parses t's command line. Options may follow the host, as GNU
// getopt allows for the examples. A request for help returns flag.ErrHelp.
func parseArgs(t Transport, args []string) (*options, error) {
	fs := flag.NewFlagSet(t.Command(), flag.ContinueOnError)
	fs.SetOutput(io.Discard) // main prints the error and the usage
	o := &options{transport: t, numQP: 1}
	var mtu int
	var bind string
	alias := func(short, long string, def int, p *int) {
		fs.IntVar(p, short, def, "")
		fs.IntVar(p, long, def, "")
	}
	alias("p", "port", defaultTCPPort, &o.tcpPort)
	alias("i", "ib-port", 1, &o.ibPort)
	if t == UD {
		alias("s", "size", defaultSizeUD, &o.size)
		mtu = defaultMTU // ibv_ud_pingpong has no -m
	} else {
		alias("s", "size", defaultSize, &o.size)
		alias("m", "mtu", defaultMTU, &mtu)
	}
	if t == SRQ {
		alias("q", "num-qp", defaultNumQP, &o.numQP)
	}
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
	fs.BoolVar(&o.hw, tooldev.Flag, false, "")

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
	if err := tooldev.GorocOnly(fs, o.hw, "counters"); err != nil {
		return nil, err
	}
	o.gidAuto = o.hw && !tooldev.Given(fs, "g", "gid-idx")
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
	case o.numQP < 1 || o.numQP >= oob.PingpongSRQMaxQP:
		return nil, fmt.Errorf("--num-qp %d: want 1 to %d", o.numQP, oob.PingpongSRQMaxQP-1)
	case o.numQP > o.rxDepth:
		return nil, fmt.Errorf("--rx-depth %d is too small for %d QPs: at least one receive per QP", o.rxDepth, o.numQP)
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
	transport      Transport
	stdout, stderr io.Writer

	// listening, if not nil, is told the server's TCP address once it
	// listens (tests run the server on port 0).
	listening func(net.Addr)
	// exchangeTimeout overrides the package constant if not zero.
	exchangeTimeout time.Duration
}

// main runs the program and returns the exit status.
func (p *program) main(ctx context.Context, args []string) int {
	name := p.transport.Command()
	o, err := parseArgs(p.transport, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(p.stdout, usage(p.transport))
		return 0
	}
	if err != nil {
		fmt.Fprintf(p.stderr, "%s: %v\n", name, err)
		fmt.Fprint(p.stderr, usage(p.transport))
		return 1
	}
	if err := p.pingpong(ctx, o); err != nil {
		fmt.Fprintf(p.stderr, "%s: %v\n", name, err)
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

// pingpong runs one side: it sets up the device and QPs, meets the peer
// over TCP, runs the traffic and prints the results.
func (p *program) pingpong(ctx context.Context, o *options) (err error) {
	var pp *pingpongCtx
	defer func() {
		if pp != nil {
			if cerr := pp.close(); err == nil {
				err = cerr
			}
		}
	}()
	// With --bind the device comes first, as in the examples: a device
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
	nc.Close() // as the examples do, before the traffic
	for _, r := range remote {
		fmt.Fprintf(p.stdout, "  remote address: %s\n", r)
	}
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
	if len(pp.qps) > 1 {
		pp.drain(ctx)
	}
	// Closing destroys the QPs, whose counters stay in the device's: read
	// after, they include everything the run did. The device has stopped
	// writing the buffer then too.
	dev := pp.dev
	if err := pp.close(); err != nil {
		return err
	}
	if o.chk {
		if bad := pp.invalidPages(); len(bad) > 0 {
			for _, page := range bad {
				fmt.Fprintf(p.stdout, "invalid data in page %d\n", page)
			}
			return fmt.Errorf("%w in %d page(s)", errInvalidData, len(bad))
		}
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

// setup opens the device on addr, creates the QPs in INIT with the
// receives posted and prints the local addresses.
func (p *program) setup(o *options, addr netip.Addr) (*pingpongCtx, error) {
	pp, err := newPingpongCtx(o, addr)
	if err != nil {
		return nil, err
	}
	for _, l := range pp.local {
		fmt.Fprintf(p.stdout, "  local address:  %s\n", l.localString(o.transport))
	}
	return pp, nil
}

// accept listens on the TCP port (on the --bind address only, if given)
// and returns the first connection, as the examples' server serves one
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
