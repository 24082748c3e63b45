// Package plot draws a benchmark's results as an SVG or PNG chart of two
// panels: a value (a bandwidth, a typical latency) against the message
// size, on a log2 axis, and the cumulative distribution of the
// per-message latencies of up to six of the sizes, on a log10 axis, with
// reference distributions if any (a kernel UDP ping-pong, say).
//
// The chart is laid out once, as marks in pixel coordinates, which the SVG
// and the PNG renderers then paint: the two formats cannot disagree on
// what the chart shows. It needs no font file and no cgo.
package plot

import (
	"bytes"
	"fmt"
	"image/color"
	"image/png"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Width and Height are the chart's size in pixels.
const (
	Width  = plotW
	Height = plotH
)

// Chart is what a plot shows.
type Chart struct {
	Title       string   // above both panels
	ValueName   string   // the value axis of the left panel, e.g. "BW average [MB/sec]"
	LatencyName string   // the latency axis of the right panel, e.g. "latency, round trip [usec]"
	NoLatencies string   // written in the right panel when no series has latencies; "" for a default
	Series      []Series // one point of the left panel each, in the order given
	Refs        []Ref    // drawn in the right panel after the series' CDFs, in black
}

// Series is one message size's results.
type Series struct {
	Size      int       // bytes; a power of two gives a tick label such as 4K
	Value     float64   // the left panel's y; a NaN or infinite value is left out
	Latencies []float64 // per-message latencies in µs, sorted; nil for no CDF
}

// Ref is a reference latency distribution drawn with the CDFs.
type Ref struct {
	Label   string
	Samples []float64 // µs, sorted, at least one
}

// SeriesColor is the colour of the i-th CDF curve of a chart and of its
// legend; the value curve of the left panel takes the first.
func SeriesColor(i int) color.RGBA { return plotColors[i%len(plotColors)] }

// Format is an image format a chart can be written in.
type Format string

const (
	SVG Format = "svg"
	PNG Format = "png"
)

// FormatOf is the format a file's extension names, case aside, or false
// for any other.
func FormatOf(path string) (Format, bool) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg":
		return SVG, true
	case ".png":
		return PNG, true
	}
	return "", false
}

// Encode writes the chart to w in format f.
func (c *Chart) Encode(w io.Writer, f Format) error {
	d := layout(c)
	switch f {
	case SVG:
		var b bytes.Buffer
		renderSVG(&b, d)
		_, err := w.Write(b.Bytes())
		return err
	case PNG:
		return png.Encode(w, renderPNG(d))
	}
	return fmt.Errorf("plot: unknown format %q", f)
}

// ParseRef reads a reference distribution: one latency in microseconds per
// line, empty lines and lines starting with # skipped. name (a file's)
// prefixes the errors.
func ParseRef(label, name string, data []byte) (Ref, error) {
	r := Ref{Label: label}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(line, 64)
		if err != nil || !(v >= 0) || math.IsInf(v, 0) {
			return Ref{}, fmt.Errorf("%s:%d: %q is not a latency in microseconds", name, i+1, line)
		}
		r.Samples = append(r.Samples, v)
	}
	if len(r.Samples) == 0 {
		return Ref{}, fmt.Errorf("%s: no latencies", name)
	}
	slices.Sort(r.Samples)
	return r, nil
}
