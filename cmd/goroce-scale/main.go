// Command goroce-scale measures how goroce scales with the number of queue
// pairs and memory regions on one device: it opens two devices on loopback
// addresses in this process, creates N connected RC QP pairs between them
// and M memory regions, and reports
//
//   - memory per QP (Go heap growth and resident set growth, divided by the
//     QPs created on both devices) and the rate of creating and connecting
//     them;
//   - memory per MR, the registration rate and the deregistration rate;
//   - RDMA WRITE throughput with one QP and with -active QPs posting round
//     robin, and their ratio.
//
// Usage:
//
//	goroce-scale [-qps 10000] [-mrs 1000000] [-active 1000] [-size 65536]
//	             [-window 128] [-duration 2s] [-addrs 127.0.0.1,127.0.0.2]
//	             [-per-qp-reply-port] [-json]
//
// The MRs are -mr-size bytes each (4 KiB by default), carved in turn out of
// one -mr-buffer buffer (64 MiB by default) and wrapping around it, so MRs
// overlap as verbs allows: the buffer's memory is counted once and the
// figures per MR are the registration's own cost. A device holds at most
// max_mr MRs (1,048,576 by default, the memory key slots; -max-mr
// lowers it), so -mrs above that registers max_mr and says so.
//
// The throughput runs keep -window WRITEs of -size bytes outstanding in
// total, every one signaled: the single QP holds all of them; with -active
// QPs each holds at most ceil(window/active), and the poster moves round
// robin to the next QP with room, so every active QP carries traffic. Each
// QP's send queue is -sq-depth deep (default: the window).
//
// -conns N measures the connection manager instead: N RC connections set
// up through cm (Listen on the first device, Dial from the second,
// -conn-parallel at a time, on -cm-port), reporting connections per
// second, the Dial times, the memory per connection (both ends, which are
// in this process) and the time to close them all from the active side
// until every passive side has seen the DREQ:
//
//	goroce-scale -conns 10000 [-conn-parallel 16] [-cm-port 18520] [-sq-depth 16]
//
// The exit status is 0 on success, 1 when a measurement fails and 2 for a
// bad command line.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"time"

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
	qps      int
	mrs      int
	mrSize   int
	mrBuf    int
	active   int
	size     int
	window   int
	sqDepth  int
	duration time.Duration
	addrs    [2]netip.Addr
	udpPort  int
	json     bool
	maxMR    int
	cpuProf  string
	// conns > 0 measures connection setup through the cm instead
	// (measureConns), connParallel at a time, on cmPort.
	conns        int
	connParallel int
	cmPort       int
	// perQPReplies sends every ACK from its QP's own source port
	// (verbs.DeviceConfig.PerQPReplyPort), to measure what sharing one
	// gains.
	perQPReplies bool
}

func parseArgs(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("goroce-scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addrs := "127.0.0.1,127.0.0.2"
	fs.IntVar(&c.qps, "qps", 10000, "connected QP pairs to create between the two devices")
	fs.IntVar(&c.mrs, "mrs", 1000000, "memory regions to register on one device (capped at its max_mr)")
	fs.StringVar(&c.cpuProf, "cpuprofile", "", "write a CPU profile of the measurements to `file`")
	fs.IntVar(&c.maxMR, "max-mr", 0, "lower the device's max_mr to `N` (0: the default)")
	fs.IntVar(&c.mrSize, "mr-size", 4096, "bytes per memory region")
	fs.IntVar(&c.mrBuf, "mr-buffer", 64<<20, "bytes of the buffer the memory regions are carved from")
	fs.IntVar(&c.active, "active", 1000, "QPs carrying traffic in the many-QP throughput run (0: skip the runs)")
	fs.IntVar(&c.size, "size", 65536, "bytes per RDMA WRITE in the throughput runs")
	fs.IntVar(&c.window, "window", 128, "WRITEs outstanding in total in the throughput runs")
	fs.IntVar(&c.sqDepth, "sq-depth", 0, "send queue depth of every QP (default: -window)")
	fs.DurationVar(&c.duration, "duration", 2*time.Second, "length of each throughput run")
	fs.StringVar(&addrs, "addrs", addrs, "the two devices' loopback addresses, FIRST,SECOND")
	fs.IntVar(&c.udpPort, "udp-port", 4791, "RoCEv2 UDP port of both devices")
	fs.BoolVar(&c.json, "json", false, "print one JSON object instead of the table")
	fs.BoolVar(&c.perQPReplies, "per-qp-reply-port", false, "send every ACK from its QP's own UDP source port, as rxe does (DeviceConfig.PerQPReplyPort)")
	fs.IntVar(&c.conns, "conns", 0, "instead: set up `N` RC connections through the cm, then close them")
	fs.IntVar(&c.connParallel, "conn-parallel", 16, "with -conns: connections set up (and closed) at once")
	fs.IntVar(&c.cmPort, "cm-port", 18520, "with -conns: the rdma_cm port the first device listens on")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if c.conns > 0 && c.sqDepth == 0 {
		c.sqDepth = 16 // a connection's queues, not the throughput runs' window
	}
	if c.sqDepth == 0 {
		c.sqDepth = c.window
	}
	parts := strings.Split(addrs, ",")
	if len(parts) != 2 {
		return nil, fmt.Errorf("-addrs %q: want FIRST,SECOND", addrs)
	}
	for i, p := range parts {
		a, err := netip.ParseAddr(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("-addrs: %v", err)
		}
		c.addrs[i] = a
	}
	switch {
	case c.addrs[0] == c.addrs[1]:
		return nil, errors.New("-addrs: the two addresses must differ (one device each)")
	case c.qps < 1:
		return nil, fmt.Errorf("-qps %d: at least one QP pair", c.qps)
	case c.mrs < 0:
		return nil, fmt.Errorf("-mrs %d: must not be negative", c.mrs)
	case c.mrSize < 1 || c.mrBuf < c.mrSize:
		return nil, fmt.Errorf("-mr-size %d, -mr-buffer %d: want 1 <= size <= buffer", c.mrSize, c.mrBuf)
	case c.active < 0 || c.active > c.qps:
		return nil, fmt.Errorf("-active %d: want 0..%d (-qps)", c.active, c.qps)
	case c.size < 1:
		return nil, fmt.Errorf("-size %d: at least one byte", c.size)
	case c.window < 1:
		return nil, fmt.Errorf("-window %d: at least one WRITE", c.window)
	case c.sqDepth < 1:
		return nil, fmt.Errorf("-sq-depth %d: at least one", c.sqDepth)
	case c.conns == 0 && c.active > 0 && c.sqDepth < c.window:
		// The single-QP run keeps the whole window on one QP.
		return nil, fmt.Errorf("-sq-depth %d: the single-QP run needs at least -window %d", c.sqDepth, c.window)
	case c.duration <= 0:
		return nil, fmt.Errorf("-duration %v: must be positive", c.duration)
	case c.conns < 0:
		return nil, fmt.Errorf("-conns %d: must not be negative", c.conns)
	case c.connParallel < 1 || c.connParallel > 64:
		// The cm keeps at most 64 half-open requests per source.
		return nil, fmt.Errorf("-conn-parallel %d: want 1..64", c.connParallel)
	case c.cmPort < 1 || c.cmPort > 65535:
		return nil, fmt.Errorf("-cm-port %d: not a port", c.cmPort)
	case c.udpPort < 1 || c.udpPort > 65535:
		return nil, fmt.Errorf("-udp-port %d: not a UDP port", c.udpPort)
	}
	return c, nil
}

// run is the whole program: it returns the exit status, after printing any
// error as one line on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "goroce-scale:", err)
		return 2
	}
	if cfg.cpuProf != "" {
		stop, err := tooldev.StartCPUProfile(cfg.cpuProf)
		if err != nil {
			fmt.Fprintln(stderr, "goroce-scale:", err)
			return 1
		}
		defer stop()
	}
	if cfg.conns > 0 {
		return runConns(ctx, cfg, stdout, stderr)
	}
	rep, err := measure(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "goroce-scale:", err)
		return 1
	}
	if cfg.json {
		err = rep.writeJSON(stdout)
	} else {
		rep.writeTable(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "goroce-scale:", err)
		return 1
	}
	return 0
}

// runConns is run for -conns.
func runConns(ctx context.Context, cfg *config, stdout, stderr io.Writer) int {
	rep, err := measureConns(ctx, cfg, stderr)
	if err == nil && cfg.json {
		err = json.NewEncoder(stdout).Encode(rep)
	} else if err == nil {
		rep.writeTable(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "goroce-scale:", err)
		return 1
	}
	return 0
}
