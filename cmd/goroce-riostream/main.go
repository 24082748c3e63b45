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
	hw bool // --hw: the kernel RDMA device of the address
}

func parseArgs(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	// The marker is the last byte: a transfer has at least one more.
	f := rsperf.NewFlags("goroce-riostream", stderr, &c.Options, 2, "test options: v (verify), a, b, n")
	f.FS.BoolVar(&c.hw, tooldev.Flag, false, "run on the kernel RDMA device that holds the local address\n"+
		"(-b, or the source address toward -s), through libibverbs and librdmacm\n(a build with -tags goroce_ibverbs)")
	err := f.Parse(args, func(letter string) error {
		switch letter {
		case "a", "b", "n":
			return nil
		}
		return rsperf.ErrUnknownTest
	})
	if err == nil {
		err = c.CheckBind()
	}
	if err == nil {
		err = tooldev.GorocOnly(f.FS, c.hw, "udp-port")
	}
	if err != nil {
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
		fmt.Fprintln(stderr, "goroce-riostream:", err)
		return 2
	}
	if err := newTester(cfg, stdout).run(ctx); err != nil {
		fmt.Fprintln(stderr, "goroce-riostream:", err)
		return 1
	}
	return 0
}
