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
	"os"
	"os/signal"

	"github.com/goroce/goroce/internal/rsperf"
	"github.com/goroce/goroce/internal/tooldev"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is the parsed command line.
type config struct {
	rsperf.Options
	tcp       bool // -T s
	keepalive int  // -k, seconds
	hw        bool // --hw: the kernel RDMA device of the address
}

func parseArgs(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	f := rsperf.NewFlags("goroce-rstream", stderr, &c.Options, 1, "test options: s (TCP sockets), v (verify), a, b, n, r")
	f.FS.IntVar(&c.keepalive, "k", 0, "keepalive time in seconds (0: none)")
	f.FS.BoolVar(&c.hw, tooldev.Flag, false, "run on the kernel RDMA device that holds the local address\n"+
		"(-b, or the source address toward -s), through libibverbs and librdmacm\n(a build with -tags goroce_ibverbs)")
	err := f.Parse(args, func(letter string) error {
		switch letter {
		case "s":
			c.tcp = true
		case "a", "b", "n", "r":
		case "f":
			return errors.New("fork is not supported")
		default:
			return rsperf.ErrUnknownTest
		}
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case c.keepalive < 0:
		return nil, fmt.Errorf("-k %d: want seconds", c.keepalive)
	case c.hw && c.tcp:
		return nil, errors.New("--hw with -T s: TCP sockets need no RDMA device")
	case !c.tcp: // over TCP, no goroce device binds
		if err := c.CheckBind(); err != nil {
			return nil, err
		}
	}
	if err := tooldev.GorocOnly(f.FS, c.hw, "udp-port"); err != nil {
		return nil, err
	}
	return c, nil
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
