// Command goroce-bench measures goroce on one host: it opens two devices in
// one process, connects an RC queue pair between them with the connection
// manager over loopback TCP, and measures
//
//   - bandwidth of RDMA WRITE, RDMA READ and SEND for each message size
//     (-sizes) with -depth work requests outstanding, for -d per test, with
//     the CPU time the process spent per GB moved;
//   - the latency of an 8-byte RDMA WRITE over -n iterations;
//   - the cost of registering and deregistering memory (RegMR + Dereg).
//
// With no arguments it uses 127.0.0.1 and 127.0.0.2:
//
//	goroce-bench
//	goroce-bench -sizes 1K,4K,64K,1M -d 5s
//	goroce-bench -json | jq .
//
// # What is measured
//
// Bandwidth: the device on -a posts work requests to its QP, keeping -depth
// of them outstanding (every one signaled), for -d; the test then waits for
// the last completion. MB/s is 10^6 bytes per second of completed messages,
// Gb/s is 10^9 bits per second of payload (headers excluded), from the first
// post to the last completion. WRITE and SEND carry data from -a to -b, READ
// from -b to -a. For SEND, a goroutine on -b takes the receive completions
// and reposts the receives, as a receiving application would; about 512
// receives stay posted, as in ib_send_bw. The data are checked at the end of
// each run: the last message's bytes must be in their destination. Each
// outstanding message has its own slot on each side, and sources rotate over
// one slot more than destinations, so a slot that missed the last message
// would still hold different bytes.
//
// Waiting for completions: both sides poll their CQ and, when it is empty,
// sleep on its completion channel rather than spin as perftest does. In Go
// spinning is slower: the devices' receive goroutines wait in the runtime's
// network poller, which the scheduler consults when a processor runs out of
// work, so a goroutine spinning on a CQ delays the very packets it waits
// for (on 2 cores, an 8-byte WRITE took a median 14 µs this way, 35 µs
// spinning with runtime.Gosched and 135 µs spinning without).
//
// CPU s/GB is the user and system CPU time of the whole process
// (getrusage) during the run divided by the GB (10^9 bytes) moved. Both
// devices and both applications run in this process, so it is the cost of
// both ends of the transfer.
//
// Latency: post+poll completion round trip, not ib_write_lat's ping-pong. The
// device on -a posts one 8-byte RDMA WRITE (inline, signaled) and waits for
// its completion: the time covers the WRITE going out, being placed in -b's
// memory and the ACK coming back, so it is a full round trip (ib_write_lat
// prints half of its ping-pong round trip). Polling the target memory for
// the change, as ib_write_lat does, would be a data race in Go: the device's
// receive goroutine stores into memory that another goroutine reads without
// synchronisation. The first iterations (a tenth, at most 1000) warm up and
// are not counted.
//
// Registration: a buffer of each -reg-sizes size is registered and
// deregistered repeatedly (at most -n times, for about a quarter of -d);
// the table shows the time per RegMR+Dereg pair and per MiB registered.
// goroce neither pins nor touches the pages it registers, so the cost is
// per registration and the per-MiB figure falls with the size; on hardware,
// where registration pins and maps every page, it is the per-MiB figure
// that stays roughly constant.
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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/verbs"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2) // the usage is printed
	case err != nil:
		fmt.Fprintln(os.Stderr, "goroce-bench:", err)
		os.Exit(1)
	}
}

// Test names for -tests.
const (
	testWrite = "write"
	testRead  = "read"
	testSend  = "send"
	testLat   = "lat"
	testReg   = "reg"
)

var allTests = []string{testWrite, testRead, testSend, testLat, testReg}

// config is the parsed command line.
type config struct {
	a, b     netip.Addr // the requester's and the responder's device
	mtu      verbs.MTU
	sizes    []int // bandwidth message sizes, bytes
	depth    int   // work requests outstanding in bandwidth tests
	duration time.Duration
	iters    int   // latency iterations; cap on registration iterations
	regSizes []int // registration sizes, bytes
	tests    []string
	json     bool
}

func (c *config) want(test string) bool { return slices.Contains(c.tests, test) }

// maxBuffer bounds the memory a bandwidth test registers on one side.
const maxBuffer = 1 << 30

// parseConfig parses the command line.
func parseConfig(args []string, out io.Writer) (*config, error) {
	fs := flag.NewFlagSet("goroce-bench", flag.ContinueOnError)
	fs.SetOutput(out)
	a := fs.String("a", "127.0.0.1", "IP address of the device that posts work requests")
	b := fs.String("b", "127.0.0.2", "IP address of the device at the other end")
	mtu := fs.Int("mtu", 4096, "path MTU in bytes: 256, 512, 1024, 2048 or 4096")
	sizes := fs.String("sizes", "4K,64K", "bandwidth message sizes (bytes; K and M suffixes are KiB and MiB)")
	depth := fs.Int("depth", 16, "work requests outstanding in bandwidth tests")
	dur := fs.Duration("d", 2*time.Second, "duration of each bandwidth test")
	iters := fs.Int("n", 10000, "latency iterations (and the most RegMR+Dereg repetitions per size)")
	regSizes := fs.String("reg-sizes", "1M,64M", "region sizes for the RegMR+Dereg cost")
	tests := fs.String("tests", strings.Join(allTests, ","), "tests to run, from "+strings.Join(allTests, ","))
	jsonOut := fs.Bool("json", false, "print one JSON object per result instead of tables")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}

	c := &config{depth: *depth, duration: *dur, iters: *iters, json: *jsonOut}
	var err error
	if c.a, err = netip.ParseAddr(*a); err != nil {
		return nil, fmt.Errorf("-a: %v", err)
	}
	if c.b, err = netip.ParseAddr(*b); err != nil {
		return nil, fmt.Errorf("-b: %v", err)
	}
	if c.a == c.b {
		return nil, errors.New("-a and -b must differ: each device binds its own address")
	}
	if c.mtu = verbs.MTUFromBytes(*mtu); !c.mtu.Valid() || c.mtu.Bytes() != *mtu {
		return nil, fmt.Errorf("-mtu %d: want 256, 512, 1024, 2048 or 4096", *mtu)
	}
	if c.sizes, err = parseSizes(*sizes); err != nil {
		return nil, fmt.Errorf("-sizes: %v", err)
	}
	if c.regSizes, err = parseSizes(*regSizes); err != nil {
		return nil, fmt.Errorf("-reg-sizes: %v", err)
	}
	if c.depth < 1 || c.depth > 4096 {
		return nil, fmt.Errorf("-depth %d: want 1 to 4096", c.depth)
	}
	if slots := int64(recvCount(c.depth, slices.Max(c.sizes))); slots*int64(slices.Max(c.sizes)) > maxBuffer {
		return nil, fmt.Errorf("-depth %d with messages of %d bytes needs more than 1 GiB per side", c.depth, slices.Max(c.sizes))
	}
	if c.duration <= 0 {
		return nil, fmt.Errorf("-d %v: want a positive duration", c.duration)
	}
	if c.iters < 1 {
		return nil, fmt.Errorf("-n %d: want at least 1", c.iters)
	}
	for _, t := range strings.Split(*tests, ",") {
		if t = strings.TrimSpace(t); !slices.Contains(allTests, t) {
			return nil, fmt.Errorf("-tests: unknown test %q (want some of %s)", t, strings.Join(allTests, ","))
		}
		c.tests = append(c.tests, t)
	}
	return c, nil
}

// parseSizes parses a comma-separated list of byte counts, each a number
// with an optional K/KiB or M/MiB (binary) suffix.
func parseSizes(s string) ([]int, error) {
	var sizes []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		num, mult := f, 1
		for _, u := range []struct {
			suffix string
			mult   int
		}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"K", 1 << 10}, {"M", 1 << 20}, {"k", 1 << 10}} {
			if n, ok := strings.CutSuffix(f, u.suffix); ok {
				num, mult = n, u.mult
				break
			}
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 || n > maxBuffer/mult {
			return nil, fmt.Errorf("bad size %q: want 1 byte to 1 GiB", f)
		}
		sizes = append(sizes, n*mult)
	}
	return sizes, nil
}

// run parses args, runs the selected tests and writes the results to
// stdout. It fails on the first test that fails, including a data check.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	cfg, err := parseConfig(args, stdout)
	if err != nil {
		return err
	}
	rep := newReporter(stdout, cfg)
	p, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer p.close()
	rep.header(p)

	ops := []struct {
		test string
		op   verbs.WROpcode
	}{{testWrite, verbs.WRRDMAWrite}, {testRead, verbs.WRRDMARead}, {testSend, verbs.WRSend}}
	for _, o := range ops {
		if !cfg.want(o.test) {
			continue
		}
		for _, size := range cfg.sizes {
			r, err := p.bandwidth(ctx, o.op, size, cfg.depth, cfg.duration)
			if err != nil {
				return fmt.Errorf("%s bandwidth, %d bytes: %w", o.test, size, err)
			}
			rep.bandwidth(r)
		}
	}
	if cfg.want(testLat) {
		r, err := p.latency(ctx, cfg.iters)
		if err != nil {
			return fmt.Errorf("write latency: %w", err)
		}
		rep.latency(r)
	}
	if cfg.want(testReg) {
		for _, size := range cfg.regSizes {
			r, err := registrationCost(p.req.pd, size, cfg.duration/4, cfg.iters)
			if err != nil {
				return fmt.Errorf("registration, %d bytes: %w", size, err)
			}
			rep.registration(r)
		}
	}
	return rep.err
}
