package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// figures are one run's numbers as the table shows them.
type figures struct {
	throughput, p50, p99, p999, cpuClient, cpuServer, appOps, torn, load1, packets float64
}

// figuresOf computes a run's figures from its client's and server's
// results: CPU per request (the untimed first one included) or per GB of
// payload moved.
func figuresOf(c, s result) figures {
	per := func(r result) float64 { return 1e6 * (r.User + r.Sys) / float64(c.Ops+1) }
	tput := float64(c.Ops) / c.Secs
	if c.PerBytes {
		per = func(r result) float64 { return (r.User + r.Sys) / (float64(c.Bytes) / 1e9) }
		tput = float64(c.Bytes) / c.Secs / 1e6
	}
	load, _ := strconv.ParseFloat(c.Load1, 64)
	return figures{tput, c.P50, c.P99, c.P999, per(c), per(s), float64(s.AppOps), float64(c.Torn), load,
		float64(c.Packets) / float64(c.Ops+1)}
}

// report reads the JSON lines of runs, each client's line followed by its
// server's, and prints a Markdown table with a row per workload and
// transport: the median of its runs, field by field.
func report(r io.Reader, w io.Writer) error {
	type key struct{ app, net string }
	var order []key
	runs := map[key][]figures{}
	perBytes := map[string]bool{}
	var pending *result
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var res result
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			return fmt.Errorf("%q: %w", line, err)
		}
		switch {
		case res.Side == "client":
			pending = &res
		case res.Side == "server" && pending != nil && pending.Net == res.Net:
			k := key{pending.App, pending.Net}
			if _, ok := runs[k]; !ok {
				order = append(order, k)
			}
			runs[k] = append(runs[k], figuresOf(*pending, res))
			perBytes[k.app] = pending.PerBytes
			pending = nil
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	// Workloads in the order first seen, goroce before TCP.
	var apps []string
	for _, k := range order {
		if !slices.Contains(apps, k.app) {
			apps = append(apps, k.app)
		}
	}
	order = order[:0]
	for _, app := range apps {
		for _, net := range []string{"rdma", "tcp"} {
			if _, ok := runs[key{app, net}]; ok {
				order = append(order, key{app, net})
			}
		}
	}
	med := map[key]figures{}
	for _, k := range order {
		med[k] = median(runs[k])
	}
	fmt.Fprintln(w, "| workload | transport | runs | throughput | vs TCP | p50 µs | p99 µs | p99.9 µs | CPU client | CPU server | server app requests | RoCE packets per op | load1 |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, k := range order {
		f := med[k]
		unit, cpuUnit, prec := "req/s", "µs/req", 1
		if perBytes[k.app] {
			unit, cpuUnit, prec = "MB/s", "s/GB", 2
		}
		vs := "1"
		if t := med[key{k.app, "tcp"}].throughput; k.net != "tcp" && t > 0 {
			vs = fmt.Sprintf("%.2f", f.throughput/t)
		}
		app := k.app
		if f.torn > 0 {
			app += fmt.Sprintf(" (%.0f torn READs re-read)", f.torn)
		}
		net := map[string]string{"rdma": "goroce", "tcp": "TCP"}[k.net]
		pkts := "-"
		if k.net == "rdma" {
			pkts = fmt.Sprintf("%.1f", f.packets)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %.0f %s | %s | %.0f | %.0f | %.0f | %.*f %s | %.*f %s | %.0f | %s | %.2f |\n",
			app, net, len(runs[k]), f.throughput, unit, vs, f.p50, f.p99, f.p999,
			prec, f.cpuClient, cpuUnit, prec, f.cpuServer, cpuUnit, f.appOps, pkts, f.load1)
	}
	return nil
}

// median is the field-by-field median of runs (the lower middle of an
// even count).
func median(runs []figures) figures {
	field := func(get func(figures) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = get(r)
		}
		slices.Sort(v)
		return v[(len(v)-1)/2]
	}
	return figures{
		field(func(f figures) float64 { return f.throughput }),
		field(func(f figures) float64 { return f.p50 }),
		field(func(f figures) float64 { return f.p99 }),
		field(func(f figures) float64 { return f.p999 }),
		field(func(f figures) float64 { return f.cpuClient }),
		field(func(f figures) float64 { return f.cpuServer }),
		field(func(f figures) float64 { return f.appOps }),
		field(func(f figures) float64 { return f.torn }),
		field(func(f figures) float64 { return f.load1 }),
		field(func(f figures) float64 { return f.packets }),
	}
}
