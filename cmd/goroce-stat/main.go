// Command goroce-stat prints the counters of the goroce devices open on this
// machine, as `rdma statistic show` prints rxe's hw_counters.
//
// A goroce device lives inside the process that opened it; each open device
// serves its counters on an abstract Unix socket (verbs.StatsSocketPrefix),
// which goroce-stat finds in /proc/net/unix (internal/stats). Only devices in the same
// network namespace are visible.
//
// Usage:
//
//	goroce-stat                 one line per device: link NAME/1 counter value ...
//	goroce-stat -v              one counter per line
//	goroce-stat --qp            also one line per live QP
//	goroce-stat -d NAME         only devices named NAME (or pid/NAME)
//	goroce-stat -i 1s [-c N]    every interval, the change per second
//	goroce-stat -j              JSON documents, one per device
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/verbs"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	verbose  bool
	qps      bool
	jsonOut  bool
	device   string
	interval time.Duration
	count    int
	nonzero  bool
}

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("goroce-stat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&o.verbose, "v", false, "one counter per line")
	fs.BoolVar(&o.qps, "qp", false, "also print the counters of every live QP")
	fs.BoolVar(&o.jsonOut, "j", false, "print JSON, one document per device")
	fs.StringVar(&o.device, "d", "", "only the device `NAME` (or PID/NAME)")
	fs.DurationVar(&o.interval, "i", 0, "print the change per second every `interval`")
	fs.IntVar(&o.count, "c", 0, "with -i, stop after `N` reports (0: until interrupted)")
	fs.BoolVar(&o.nonzero, "z", false, "leave out counters that are zero (or did not change, with -i)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "goroce-stat: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if o.interval < 0 || o.count < 0 {
		fmt.Fprintln(stderr, "goroce-stat: -i and -c must not be negative")
		return 2
	}
	if err := show(context.Background(), o, stdout); err != nil {
		fmt.Fprintln(stderr, "goroce-stat:", err)
		return 1
	}
	return 0
}

// readTimeout bounds the reading of one device's stats: a process that
// does not answer (stopped in a debugger, say) is left out.
const readTimeout = 2 * time.Second

// collect reads every matching device's stats.
func collect(ctx context.Context, o options) ([]verbs.Stats, error) {
	names, err := stats.Endpoints()
	if err != nil {
		return nil, err
	}
	var all []verbs.Stats
	for _, n := range names {
		rctx, cancel := context.WithTimeout(ctx, readTimeout)
		s, err := stats.Read(rctx, n)
		cancel()
		if err != nil {
			continue // the device closed between listing and reading
		}
		if o.device != "" && o.device != s.Device && o.device != strconv.Itoa(s.PID)+"/"+s.Device {
			continue
		}
		all = append(all, s)
	}
	if len(all) == 0 {
		if o.device != "" {
			return nil, fmt.Errorf("no goroce device %q is open", o.device)
		}
		return nil, errors.New("no goroce device is open")
	}
	return all, nil
}

func show(ctx context.Context, o options, w io.Writer) error {
	cur, err := collect(ctx, o)
	if err != nil {
		return err
	}
	if o.interval == 0 {
		return report(o, w, cur, nil, 0)
	}
	for i := 0; o.count == 0 || i < o.count; i++ {
		time.Sleep(o.interval)
		next, err := collect(ctx, o)
		if err != nil {
			return err
		}
		if err := report(o, w, next, cur, o.interval); err != nil {
			return err
		}
		cur = next
	}
	return nil
}

// key identifies a device across readings.
func key(s verbs.Stats) string { return strconv.Itoa(s.PID) + "/" + s.Device + "/" + s.Addr }

// rates turns counters into changes per second against an earlier reading
// of the same device (absent counters count from zero).
func rates(now, before []verbs.Counter, dt time.Duration) []verbs.Counter {
	prev := make(map[string]uint64, len(before))
	for _, c := range before {
		prev[c.Name] = c.Value
	}
	out := make([]verbs.Counter, len(now))
	for i, c := range now {
		d := c.Value - prev[c.Name]
		if c.Value < prev[c.Name] {
			d = 0
		}
		out[i] = verbs.Counter{Name: c.Name, Value: uint64(float64(d)/dt.Seconds() + 0.5)}
	}
	return out
}

func report(o options, w io.Writer, now, before []verbs.Stats, dt time.Duration) error {
	prev := make(map[string]verbs.Stats, len(before))
	for _, s := range before {
		prev[key(s)] = s
	}
	for _, s := range now {
		if before != nil {
			p := prev[key(s)]
			s.Counters = rates(s.Counters, p.Counters, dt)
			pq := make(map[uint32][]verbs.Counter, len(p.QPs))
			for _, q := range p.QPs {
				pq[q.QPN] = q.Counters
			}
			for i := range s.QPs {
				s.QPs[i].Counters = rates(s.QPs[i].Counters, pq[s.QPs[i].QPN], dt)
			}
		}
		if !o.qps {
			s.QPs = nil
		}
		if o.jsonOut {
			if err := json.NewEncoder(w).Encode(s); err != nil {
				return err
			}
			continue
		}
		unit := ""
		if before != nil {
			unit = "/s"
		}
		head := fmt.Sprintf("link %s/1 pid %d addr %s", s.Device, s.PID, addrPort(s))
		writeCounters(w, o, head, s.Counters, unit)
		for _, q := range s.QPs {
			writeCounters(w, o, fmt.Sprintf("qp %s/1 qpn %d type %s state %s", s.Device, q.QPN, q.Type, q.State), q.Counters, unit)
		}
	}
	return nil
}

func addrPort(s verbs.Stats) string {
	if strings.Contains(s.Addr, ":") {
		return "[" + s.Addr + "]:" + strconv.Itoa(int(s.UDPPort))
	}
	return s.Addr + ":" + strconv.Itoa(int(s.UDPPort))
}

func writeCounters(w io.Writer, o options, head string, cs []verbs.Counter, unit string) {
	if o.verbose {
		fmt.Fprintln(w, head)
		for _, c := range cs {
			if o.nonzero && c.Value == 0 {
				continue
			}
			fmt.Fprintf(w, "    %-28s %d%s\n", c.Name, c.Value, unit)
		}
		return
	}
	var b strings.Builder
	b.WriteString(head)
	for _, c := range cs {
		if o.nonzero && c.Value == 0 {
			continue
		}
		fmt.Fprintf(&b, " %s %d%s", c.Name, c.Value, unit)
	}
	fmt.Fprintln(w, b.String())
}
