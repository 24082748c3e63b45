package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/goroce/goroce/internal/plot"
)

// writePlot writes the plot of results to path (--plot), as SVG or PNG by
// its extension: the bandwidth, or in the latency tests the typical
// latency, against the message size, and the latency CDFs.
func writePlot(path string, cfg *config, side string, results []result) error {
	if len(results) == 0 {
		return fmt.Errorf("--plot: the %s has no results to plot", side)
	}
	f, ok := plot.FormatOf(path)
	if !ok {
		return fmt.Errorf("--plot %s: want a .svg or .png file", path)
	}
	var refs []plot.Ref
	if cfg.plotRef != "" {
		r, err := loadPlotRef(cfg.plotRef)
		if err != nil {
			return err
		}
		refs = append(refs, r)
	}
	var b bytes.Buffer
	if err := plotChart(cfg, side, results, refs).Encode(&b, f); err != nil {
		return fmt.Errorf("--plot %s: %w", path, err)
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// plotFormatOK reports whether --plot names a file goroce-perf can write.
func plotFormatOK(path string) bool {
	_, ok := plot.FormatOf(path)
	return ok
}

// plotChart is the chart of this side's results.
func plotChart(cfg *config, side string, results []result, refs []plot.Ref) *plot.Chart {
	what := "half round trip"
	switch {
	case !cfg.test.lat:
		what = "post to completion"
	case cfg.test.verb == verbRead || cfg.test.verb == verbAtomic:
		what = "round trip"
	}
	c := &plot.Chart{
		Title:       fmt.Sprintf("goroce-perf %s (%s, %s)", cfg.test.name, side, cfg.conn),
		ValueName:   "BW average [" + cfg.unitName() + "]",
		LatencyName: "latency, " + what + " [usec]",
		NoLatencies: "no latency samples on this side",
		Refs:        refs,
	}
	if cfg.test.lat {
		c.ValueName = "t_typical [usec]"
	}
	for _, r := range results {
		s := plot.Series{Size: r.size, Value: r.bwAvg, Latencies: r.samples}
		if cfg.test.lat {
			s.Value = r.tTyp
		}
		c.Series = append(c.Series, s)
	}
	return c
}

// loadPlotRef reads --plot-ref's LABEL=FILE: FILE holds one latency in
// microseconds per line; empty lines and lines starting with # are
// skipped.
func loadPlotRef(arg string) (plot.Ref, error) {
	label, path, ok := strings.Cut(arg, "=")
	if !ok || label == "" || path == "" {
		return plot.Ref{}, fmt.Errorf("--plot-ref %q: want LABEL=FILE", arg)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return plot.Ref{}, fmt.Errorf("--plot-ref: %w", err)
	}
	r, err := plot.ParseRef(label, path, b)
	if err != nil {
		return plot.Ref{}, fmt.Errorf("--plot-ref %w", err)
	}
	return r, nil
}
