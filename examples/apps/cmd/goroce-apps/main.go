// Command goroce-apps runs the applications of examples/apps (gRPC,
// net/http, the key-value store) over goroce and over TCP, for
// bench/apps.sh: one process serves one application on one transport,
// another runs one workload against it and prints what it measured, and
// the report subcommand makes a table of both sides' results.
//
//	goroce-apps serve  -app grpc|http|kv -net rdma|tcp -addr IP:PORT
//	goroce-apps run    -workload W -net rdma|tcp -addr IP:PORT -local IP
//	goroce-apps report < results.jsonl
//
// The server runs until SIGTERM or SIGINT, then prints its CPU time
// (getrusage: the whole process, from its start, so registering memory,
// accepting connections and tearing them down count) as a JSON line. The
// client prints one JSON line: throughput and latency percentiles of the
// timed loop, and its own CPU time over its whole life (opening the
// device, registering, connecting, the untimed first request, closing).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/goroce/goroce/verbs"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "goroce-apps:", err)
		os.Exit(1)
	}
}

// options are the flags of serve and run.
type options struct {
	app, workload, net, addr, local, profile string
	size, keys, valueMax                     int
	duration                                 time.Duration
	dev                                      *verbs.Device // rdma: the run's device
}

func run(ctx context.Context, args []string, stdout io.Writer, stdin io.Reader) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: goroce-apps serve|run|report [flags]")
	}
	if args[0] == "report" {
		return report(stdin, stdout)
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	var o options
	fs.StringVar(&o.app, "app", "", "serve: grpc, http or kv")
	fs.StringVar(&o.workload, "workload", "", "run: "+workloadNames())
	fs.StringVar(&o.net, "net", "rdma", "rdma (goroce) or tcp")
	fs.StringVar(&o.addr, "addr", "", "the server's IP:port")
	fs.StringVar(&o.local, "local", "", "run: the client's IP address")
	fs.StringVar(&o.profile, "cpuprofile", "", "write a CPU profile of the whole process to this file")
	fs.IntVar(&o.size, "size", 0, "run: message, body or value size in bytes (0: the workload's)")
	fs.IntVar(&o.keys, "keys", 10000, "kv: keys the server preloads and the client picks from")
	fs.IntVar(&o.valueMax, "value", 256, "kv: value size in bytes")
	fs.DurationVar(&o.duration, "d", 5*time.Second, "run: length of the timed loop")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if o.net != "rdma" && o.net != "tcp" {
		return fmt.Errorf("-net %q: rdma or tcp", o.net)
	}
	if o.addr == "" {
		return fmt.Errorf("-addr is required")
	}
	if o.profile != "" {
		f, err := os.Create(o.profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	defer func() {
		if o.dev != nil {
			o.dev.Close()
		}
	}()
	switch args[0] {
	case "serve":
		ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		return serve(ctx, &o, stdout)
	case "run":
		return runClient(ctx, &o, stdout)
	}
	return fmt.Errorf("unknown subcommand %q", args[0])
}

// cpuSeconds is the process's user and system CPU time so far.
func cpuSeconds() (user, sys float64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()).Seconds(), time.Duration(ru.Stime.Nano()).Seconds()
}

// result is one side's JSON line.
type result struct {
	Side     string  `json:"side"` // "client" or "server"
	App      string  `json:"app"`  // the client's workload, the server's application
	Net      string  `json:"net"`
	Ops      int     `json:"ops,omitempty"`
	Bytes    int64   `json:"bytes,omitempty"` // payload bytes carried, both directions
	Secs     float64 `json:"secs,omitempty"`  // the timed loop
	P50      float64 `json:"p50_us,omitempty"`
	P99      float64 `json:"p99_us,omitempty"`
	P999     float64 `json:"p999_us,omitempty"`
	User     float64 `json:"cpu_user_s"`
	Sys      float64 `json:"cpu_sys_s"`
	AppOps   uint64  `json:"server_app_ops"`       // requests the server's goroutines handled
	Torn     uint64  `json:"torn_reads,omitempty"` // kv over RDMA: READs discarded as torn
	Packets  uint64  `json:"packets,omitempty"`    // goroce: RoCE packets the device sent and received
	Load1    string  `json:"load1,omitempty"`
	PerBytes bool    `json:"per_bytes,omitempty"` // report CPU per GB, not per request
}

// openDevice opens the goroce device of a run (rdma) on addr, whose
// packet counters its result reports; run closes it at the end.
func openDevice(o *options, addr netip.Addr) (*verbs.Device, error) {
	d, err := verbs.Open(verbs.DeviceConfig{Addr: addr})
	o.dev = d
	return d, err
}

func emit(w io.Writer, o *options, r result) error {
	r.User, r.Sys = cpuSeconds()
	if o.dev != nil {
		c := o.dev.Counters()
		r.Packets = c.SentPkts + c.RcvdPkts
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		var l string
		fmt.Sscan(string(b), &l)
		r.Load1 = l
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
