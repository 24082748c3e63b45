// Command goroce-rstream is rstream (rdma-core's librdmacm/examples,
// packaged in rdmacm-utils) for goroce: a stream latency and bandwidth
// test over rsockets, on the wire as librdmacm's rsockets, so that either
// side can be the real rstream on a host with Soft-RoCE or a RoCE NIC.
//
// Usage, as rstream's:
//
//	goroce-rstream -b addr [-p port] [-B size] [-S size|all] [-C count] [-I iters] [-T opts]   (server)
//	goroce-rstream -s addr [-b addr] [-p port] [-B size] [-S size|all] [-C count] [-I iters] [-T opts]
//
// Without -S N, -C or -I it runs rstream's tests: a latency test per size
// (ping-pong of one transfer, size_to_count iterations) on one
// connection, then a bandwidth test per size (size_to_count transfers
// each way) on a second; -S all adds the intermediate sizes. With any of
// them it runs one "custom" test of -I iterations of -C transfers of -S
// bytes each way. Each test prints rstream's line: name, transfer size,
// transfers, iterations, total bytes (both ways), seconds, Gb/sec and
// microseconds per transfer.
//
// -T v verifies the data (rstream's byte counter); -T s runs over TCP
// instead (rstream's sockets mode), for comparison; a, b, n and r change
// how rstream waits and resolves, and nothing here. -B sets the socket
// buffer sizes as rstream does (setsockopt SO_SNDBUF and SO_RCVBUF, which
// rsockets doubles; 512 KiB when absent). -k N turns keepalive probes on,
// every N idle seconds (rstream's SO_KEEPALIVE and TCP_KEEPIDLE). -i, the
// inline size, is accepted and ignored.
//
// goroce is a device of this process, bound to an address: the server's
// is -b (rstream's default, every address, has no goroce equivalent), the
// client's -b, or the address the kernel's routing picks toward -s.
//
// The exit status is 0 on success, 1 when a test fails and 2 for a bad
// command line.
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
	"strings"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is the parsed command line.
type config struct {
	server     string // -s: the server's address (client mode)
	bind       string // -b
	port       string
	bufSize    int
	iterations int
	count      int
	size       int
	custom     bool
	allSizes   bool // -S all
	verify     bool
	tcp        bool // -T s
	udpPort    int  // goroce's: the devices' RoCEv2 port
	keepalive  int  // -k, seconds
}

func parseArgs(args []string, stderr io.Writer) (*config, error) {
	c := &config{iterations: 1, count: 1000, size: 1000}
	fs := flag.NewFlagSet("goroce-rstream", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.server, "s", "", "server address (client mode)")
	fs.StringVar(&c.bind, "b", "", "bind address")
	format := fs.String("f", "", "address format: ip or name (gid is not supported)")
	fs.IntVar(&c.bufSize, "B", 0, "buffer size (SO_SNDBUF and SO_RCVBUF; 0: 512 KiB)")
	fs.Int("i", 64, "inline size (ignored)")
	fs.IntVar(&c.keepalive, "k", 0, "keepalive time in seconds (0: none)")
	var iters, count, size, tests string
	fs.StringVar(&iters, "I", "", "iterations")
	fs.StringVar(&count, "C", "", "transfer count")
	fs.StringVar(&size, "S", "", "transfer size or all")
	fs.StringVar(&c.port, "p", "7471", "port number")
	fs.StringVar(&tests, "T", "", "test options: s (TCP sockets), v (verify), a, b, n, r")
	fs.IntVar(&c.udpPort, "udp-port", 4791, "RoCEv2 UDP port of the device (goroce peers only)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, n := range []struct {
		flag, s string
		dst     *int
	}{{"-I", iters, &c.iterations}, {"-C", count, &c.count}} {
		if n.s == "" {
			continue
		}
		v, err := strconv.Atoi(n.s)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%s %q: want a positive number", n.flag, n.s)
		}
		*n.dst, c.custom = v, true
	}
	switch {
	case strings.HasPrefix(strings.ToLower(size), "all"):
		c.allSizes = true
	case size != "":
		v, err := strconv.Atoi(size)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("-S %q: want a size or all", size)
		}
		c.size, c.custom = v, true
	}
	if err := c.testOptions(tests); err != nil {
		return nil, err
	}
	switch {
	case strings.HasPrefix(strings.ToLower(*format), "gid"):
		return nil, errors.New("-f gid: AF_IB addresses are not supported")
	case c.keepalive < 0:
		return nil, fmt.Errorf("-k %d: want seconds", c.keepalive)
	case c.bufSize < 0:
		return nil, fmt.Errorf("-B %d: want a size", c.bufSize)
	case c.udpPort < 1 || c.udpPort > 65535:
		return nil, fmt.Errorf("-udp-port %d: not a UDP port", c.udpPort)
	case c.server == "" && c.bind == "" && !c.tcp:
		return nil, errors.New("-b ADDR is required for the server: goroce's device binds it")
	}
	if c.bind != "" && !c.tcp {
		if _, err := netip.ParseAddr(c.bind); err != nil {
			return nil, fmt.Errorf("-b: %v", err)
		}
	}
	return c, nil
}

// testOptions applies -T: single letters or rstream's words.
func (c *config) testOptions(s string) error {
	if s == "" {
		return nil
	}
	words := map[string]string{"socket": "s", "async": "a", "block": "b", "nonblock": "n", "resolve": "r", "verify": "v", "fork": "f"}
	opt := strings.ToLower(s)
	if len(opt) > 1 {
		for w, l := range words {
			if strings.HasPrefix(opt, w) {
				opt = l
			}
		}
	}
	switch opt {
	case "s":
		c.tcp = true
	case "v":
		c.verify = true
	case "a", "b", "n", "r":
	case "f":
		return errors.New("-T f: fork is not supported")
	default:
		return fmt.Errorf("-T %q: unknown test option", s)
	}
	return nil
}

// run is the whole program: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "goroce-rstream:", err)
		return 2
	}
	if err := newTester(cfg, stdout).run(ctx); err != nil {
		fmt.Fprintln(stderr, "goroce-rstream:", err)
		return 1
	}
	return 0
}

// hostPort joins an address and the port.
func hostPort(host, port string) string { return net.JoinHostPort(host, port) }
