package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// report reads the JSON lines of runs, each client's line followed by its
// server's, and prints a Markdown table with a row per run.
func report(r io.Reader, w io.Writer) error {
	var rows [][2]result
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
			rows = append(rows, [2]result{*pending, res})
			pending = nil
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	tcp := map[string]float64{} // throughput over TCP, per workload
	for _, row := range rows {
		if row[0].Net == "tcp" {
			tcp[row[0].App] = throughput(row[0])
		}
	}
	fmt.Fprintln(w, "| workload | transport | throughput | vs TCP | p50 µs | p99 µs | p99.9 µs | CPU client | CPU server | server app requests | load1 |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, row := range rows {
		c, s := row[0], row[1]
		unit, cpu := "req/s", func(r result) string { return fmt.Sprintf("%.1f µs/req", 1e6*(r.User+r.Sys)/float64(c.Ops+1)) }
		if c.PerBytes {
			unit = "MB/s"
			cpu = func(r result) string { return fmt.Sprintf("%.2f s/GB", (r.User+r.Sys)/(float64(c.Bytes)/1e9)) }
		}
		vs := "1"
		if t := tcp[c.App]; c.Net != "tcp" && t > 0 {
			vs = fmt.Sprintf("%.2f", throughput(c)/t)
		}
		net := map[string]string{"rdma": "goroce", "tcp": "TCP"}[c.Net]
		app := c.App
		if c.Torn > 0 {
			app += fmt.Sprintf(" (%d torn READs re-read)", c.Torn)
		}
		fmt.Fprintf(w, "| %s | %s | %.0f %s | %s | %.0f | %.0f | %.0f | %s | %s | %d | %s |\n",
			app, net, throughput(c), unit, vs, c.P50, c.P99, c.P999, cpu(c), cpu(s), s.AppOps, c.Load1)
	}
	return nil
}

// throughput is requests per second, or MB per second for bulk workloads.
func throughput(c result) float64 {
	if c.PerBytes {
		return float64(c.Bytes) / c.Secs / 1e6
	}
	return float64(c.Ops) / c.Secs
}
