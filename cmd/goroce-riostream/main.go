// Command goroce-riostream is riostream (rdma-core's librdmacm/examples,
// packaged in rdmacm-utils) for goroce: a latency and bandwidth test of
// rsockets' iomap, on the wire as librdmacm's, so that either side can be
// the real riostream on a host with Soft-RoCE or a RoCE NIC.
//
// Usage, as riostream's:
//
//	goroce-riostream -b addr [-p port] [-B size] [-S size|all] [-C count] [-I iters] [-T opts]   (server)
//	goroce-riostream -s addr [-b addr] [-p port] [-B size] [-S size|all] [-C count] [-I iters] [-T opts]
//
// Each side maps its transfer buffer for the peer (riomap, Conn.IOMap:
// an iomap table of one entry, RDMA_IOMAPSIZE 1), the two exchange 16
// bytes each way over the stream, then each iteration the client writes
// -C transfers of -S bytes straight into the server's buffer (riowrite,
// Conn.IOWrite: RDMA WRITEs that the server does not see), the last one
// carrying a marker in its last byte, which the server watches for; the
// server answers the same way. Without -S N, -C or -I it runs riostream's
// tests: a latency test per size on one connection, then a bandwidth test
// per size on a second; -S all adds the intermediate sizes. Each test
// prints riostream's line: name, transfer size, transfers, iterations,
// total bytes (both ways), seconds, Gb/sec and microseconds per transfer.
//
// -T v verifies the data (riostream's byte counter over all but the
// marker byte of each side's last transfer); a, b and n change how
// riostream waits, and nothing here. -B sets the socket buffer sizes as
// riostream does (SO_SNDBUF and SO_RCVBUF, which rsockets doubles; 512
// KiB when absent). -i, the inline size, is accepted and ignored.
//
// A command of its own rather than a mode of goroce-rstream: riostream's
// flags are rstream's minus -k and -T s, its test is another (one-sided
// writes and a watched byte instead of reads), and the interop tests pair
// each goroce command with the rdmacm-utils tool of the same name.
//
// goroce is a device of this process, bound to an address: the server's
// is -b, the client's -b, or the address the kernel's routing picks
// toward -s.
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
	udpPort    int // goroce's: the devices' RoCEv2 port
}

func parseArgs(args []string, stderr io.Writer) (*config, error) {
	c := &config{iterations: 1, count: 1000, size: 1000}
	fs := flag.NewFlagSet("goroce-riostream", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.server, "s", "", "server address (client mode)")
	fs.StringVar(&c.bind, "b", "", "bind address")
	format := fs.String("f", "", "address format: ip or name (gid is not supported)")
	fs.IntVar(&c.bufSize, "B", 0, "buffer size (SO_SNDBUF and SO_RCVBUF; 0: 512 KiB)")
	fs.Int("i", 64, "inline size (ignored)")
	var iters, count, size, tests string
	fs.StringVar(&iters, "I", "", "iterations")
	fs.StringVar(&count, "C", "", "transfer count")
	fs.StringVar(&size, "S", "", "transfer size or all")
	fs.StringVar(&c.port, "p", "7471", "port number")
	fs.StringVar(&tests, "T", "", "test options: v (verify), a, b, n")
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
		// The marker is the last byte: a transfer has at least one more.
		v, err := strconv.Atoi(size)
		if err != nil || v < 2 {
			return nil, fmt.Errorf("-S %q: want a size of 2 bytes or more, or all", size)
		}
		c.size, c.custom = v, true
	}
	if err := c.testOptions(tests); err != nil {
		return nil, err
	}
	switch {
	case strings.HasPrefix(strings.ToLower(*format), "gid"):
		return nil, errors.New("-f gid: AF_IB addresses are not supported")
	case c.bufSize < 0:
		return nil, fmt.Errorf("-B %d: want a size", c.bufSize)
	case c.udpPort < 1 || c.udpPort > 65535:
		return nil, fmt.Errorf("-udp-port %d: not a UDP port", c.udpPort)
	case c.server == "" && c.bind == "":
		return nil, errors.New("-b ADDR is required for the server: goroce's device binds it")
	}
	if c.bind != "" {
		if _, err := netip.ParseAddr(c.bind); err != nil {
			return nil, fmt.Errorf("-b: %v", err)
		}
	}
	return c, nil
}

// testOptions applies -T: a letter or riostream's word.
func (c *config) testOptions(s string) error {
	if s == "" {
		return nil
	}
	opt := strings.ToLower(s)
	if len(opt) > 1 {
		for w, l := range map[string]string{"async": "a", "block": "b", "nonblock": "n", "verify": "v"} {
			if strings.HasPrefix(opt, w) {
				opt = l
			}
		}
	}
	switch opt {
	case "v":
		c.verify = true
	case "a", "b", "n":
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
		fmt.Fprintln(stderr, "goroce-riostream:", err)
		return 2
	}
	if err := newTester(cfg, stdout).run(ctx); err != nil {
		fmt.Fprintln(stderr, "goroce-riostream:", err)
		return 1
	}
	return 0
}
