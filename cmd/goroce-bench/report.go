package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"strconv"
)

// reporter writes results as they come: aligned tables, one section per
// kind of test, or one JSON object per line with -json. It keeps the first
// write error.
type reporter struct {
	w       io.Writer
	cfg     *config
	enc     *json.Encoder
	section string // the table whose header was printed last
	err     error
}

func newReporter(w io.Writer, cfg *config) *reporter {
	r := &reporter{w: w, cfg: cfg}
	if cfg.json {
		r.enc = json.NewEncoder(w)
	}
	return r
}

func (r *reporter) printf(format string, args ...any) {
	if r.err == nil {
		_, r.err = fmt.Fprintf(r.w, format, args...)
	}
}

func (r *reporter) emit(v any) {
	if r.err == nil {
		r.err = r.enc.Encode(v)
	}
}

// header describes the setup (tables only).
func (r *reporter) header(p *pair) {
	if r.enc != nil {
		return
	}
	r.printf("goroce-bench: RC QP %#x on %v -> QP %#x on %v, path MTU %v, UDP over loopback, GOMAXPROCS %d\n",
		p.req.qp.QPN(), r.cfg.a, p.resp.qp.QPN(), r.cfg.b, p.mtu, runtime.GOMAXPROCS(0))
}

// startSection prints a table's title and column names before its first row.
func (r *reporter) startSection(name, title, columns string) {
	if r.section == name {
		return
	}
	r.section = name
	r.printf("\n%s\n%s\n", title, columns)
}

func (r *reporter) bandwidth(b bwResult) {
	if r.enc != nil {
		r.emit(b)
		return
	}
	r.startSection("bw",
		fmt.Sprintf("Bandwidth: %d work requests outstanding, %v per test; CPU s/GB is both ends' (one process)", r.cfg.depth, r.cfg.duration),
		fmt.Sprintf("%-10s %7s %10s %10s %8s %9s  %s", "test", "size", "messages", "MB/s", "Gb/s", "CPU s/GB", "data"))
	check := "ok"
	if !b.Verified {
		check = "unchecked"
	}
	r.printf("%-10s %7s %10d %10s %8s %9s  %s\n", b.Test, sizeString(b.Size), b.Messages, sig(b.MBps), sig(b.Gbps), sig(b.CPUPerGB), check)
}

func (r *reporter) latency(l latResult) {
	if r.enc != nil {
		r.emit(l)
		return
	}
	r.startSection("lat",
		fmt.Sprintf("Latency, µs: %d-byte RDMA WRITE (inline), %s, %d iterations", l.Size, l.Method, l.Iters),
		fmt.Sprintf("%-10s %7s %8s %8s %8s %8s %8s %8s", "test", "size", "min", "p50", "p99", "p99.9", "max", "avg"))
	r.printf("%-10s %7s %8s %8s %8s %8s %8s %8s\n", l.Test, sizeString(l.Size), sig(l.Min), sig(l.P50), sig(l.P99), sig(l.P999), sig(l.Max), sig(l.Avg))
}

func (r *reporter) registration(g regResult) {
	if r.enc != nil {
		r.emit(g)
		return
	}
	r.startSection("reg", "Memory registration: RegMR + Dereg of one buffer, repeated",
		fmt.Sprintf("%-10s %7s %8s %10s %10s", "test", "size", "iters", "µs/reg", "µs/MiB"))
	r.printf("%-10s %7s %8d %10s %10s\n", g.Test, sizeString(g.Size), g.Iters, sig(g.USPerReg), sig(g.USPerMiB))
}

// sig formats v with four significant digits (at most six decimals), so
// that tables show small values such as the Gb/s of 1-byte messages
// instead of rounding them to zero.
func sig(v float64) string {
	decimals := 0
	if v > 0 {
		decimals = min(max(3-int(math.Floor(math.Log10(v))), 0), 6)
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// sizeString prints a byte count as KiB or MiB when it is a whole number
// of them.
func sizeString(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n)
}
