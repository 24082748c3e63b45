package main

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"os"
	"strconv"
	"strings"
)

// The plot is an SVG of two panels: the bandwidth (or, in the latency
// tests, the typical latency) against the message size, and the
// cumulative distribution of the per-message latencies for up to
// maxCDFCurves of the sizes.
const (
	plotW, plotH    = 1000, 440
	panelW, panelH  = 400, 320
	panelY          = 60
	maxCDFCurves    = 6
	plotFontFamily  = "font-family=\"sans-serif\""
	plotAxisColor   = "#333"
	plotGridColor   = "#ddd"
	plotLeftMargin  = 80
	plotPanelOffset = 500
)

var plotColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf"}

// writePlot writes the SVG for results to path.
func writePlot(path string, cfg *config, side string, results []result) error {
	if len(results) == 0 {
		return fmt.Errorf("--plot: the %s has no results to plot", side)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s font-size="12">`+"\n",
		plotW, plotH, plotW, plotH, plotFontFamily)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="16" text-anchor="middle">%s</text>`+"\n", plotW/2,
		html.EscapeString(fmt.Sprintf("goroce-perf %s (%s, %s)", cfg.test.name, side, cfg.conn)))

	// Left panel: y against log2(size).
	var xs, ys []float64
	yName := "BW average [" + cfg.unitName() + "]"
	for _, r := range results {
		xs = append(xs, math.Log2(float64(r.size)))
		if cfg.test.lat {
			ys = append(ys, r.tTyp)
		} else {
			ys = append(ys, r.bwAvg)
		}
	}
	if cfg.test.lat {
		yName = "t_typical [usec]"
	}
	x0, x1 := minMax(xs)
	if x0 == x1 {
		x0, x1 = x0-1, x1+1
	}
	_, ymax := minMax(ys)
	ymax = niceCeil(ymax)
	left := panel{x: plotLeftMargin, y: panelY, x0: x0, x1: x1, y0: 0, y1: ymax}
	left.frame(&b, "message size [bytes]", yName)
	for e := math.Ceil(x0); e <= x1; e++ {
		if int(e)%2 == 1 && x1-x0 > 8 {
			continue
		}
		left.xTick(&b, e, sizeLabel(int64(1)<<int(e)))
	}
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		left.yTick(&b, v, strconv.FormatFloat(v, 'g', 4, 64))
	}
	left.curve(&b, xs, ys, plotColors[0], true)

	// Right panel: the latency CDFs, on a log10 axis.
	var curves []result
	for _, r := range results {
		if len(r.samples) > 0 {
			curves = append(curves, r)
		}
	}
	if len(curves) > maxCDFCurves {
		picked := make([]result, 0, maxCDFCurves)
		for i := range maxCDFCurves {
			picked = append(picked, curves[i*(len(curves)-1)/(maxCDFCurves-1)])
		}
		curves = picked
	}
	what := "half round trip"
	switch {
	case !cfg.test.lat:
		what = "post to completion"
	case cfg.test.verb == verbRead || cfg.test.verb == verbAtomic:
		what = "round trip"
	}
	if len(curves) == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">no latency samples on this side</text>`+"\n",
			plotPanelOffset+plotLeftMargin+panelW/2, panelY+panelH/2)
	} else {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, r := range curves {
			lo, hi = math.Min(lo, r.samples[0]), math.Max(hi, r.samples[len(r.samples)-1])
		}
		lo, hi = math.Floor(math.Log10(math.Max(lo, 1e-3))), math.Ceil(math.Log10(math.Max(hi, 1e-3)))
		if lo == hi {
			hi++
		}
		right := panel{x: plotPanelOffset + plotLeftMargin, y: panelY, x0: lo, x1: hi, y0: 0, y1: 1}
		right.frame(&b, "latency, "+what+" [usec]", "fraction of messages")
		for e := lo; e <= hi; e++ {
			right.xTick(&b, e, strconv.FormatFloat(math.Pow(10, e), 'g', -1, 64))
		}
		for i := 0; i <= 4; i++ {
			right.yTick(&b, float64(i)/4, strconv.FormatFloat(float64(i)/4, 'f', 2, 64))
		}
		for i, r := range curves {
			var cx, cy []float64
			n := len(r.samples)
			step := max(1, n/500)
			for k := 0; k < n; k += step {
				cx = append(cx, math.Log10(math.Max(r.samples[k], 1e-3)))
				cy = append(cy, float64(k+1)/float64(n))
			}
			cx = append(cx, math.Log10(math.Max(r.samples[n-1], 1e-3)))
			cy = append(cy, 1)
			color := plotColors[i%len(plotColors)]
			right.curve(&b, cx, cy, color, false)
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", right.x+panelW+8, right.y+14+16*i, color,
				html.EscapeString(sizeLabel(int64(r.size))+" B"))
		}
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// panel maps data coordinates onto a panelW×panelH box at (x, y).
type panel struct {
	x, y           int
	x0, x1, y0, y1 float64
}

func (p panel) px(v float64) float64 { return float64(p.x) + (v-p.x0)/(p.x1-p.x0)*panelW }
func (p panel) py(v float64) float64 { return float64(p.y+panelH) - (v-p.y0)/(p.y1-p.y0)*panelH }

func (p panel) frame(b *bytes.Buffer, xName, yName string) {
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="%s"/>`+"\n", p.x, p.y, panelW, panelH, plotAxisColor)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", p.x+panelW/2, p.y+panelH+40, html.EscapeString(xName))
	fmt.Fprintf(b, `<text transform="translate(%d,%d) rotate(-90)" text-anchor="middle">%s</text>`+"\n",
		p.x-60, p.y+panelH/2, html.EscapeString(yName))
}

func (p panel) xTick(b *bytes.Buffer, v float64, label string) {
	x := p.px(v)
	fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", x, p.y, x, p.y+panelH, plotGridColor)
	fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, p.y+panelH+18, html.EscapeString(label))
}

func (p panel) yTick(b *bytes.Buffer, v float64, label string) {
	y := p.py(v)
	fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", p.x, y, p.x+panelW, y, plotGridColor)
	fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", p.x-6, y+4, html.EscapeString(label))
}

func (p panel) curve(b *bytes.Buffer, xs, ys []float64, color string, dots bool) {
	var pts []string
	for i := range xs {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", p.px(xs[i]), p.py(ys[i])))
	}
	fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
	if dots {
		for i := range xs {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", p.px(xs[i]), p.py(ys[i]), color)
		}
	}
}

func minMax(v []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range v {
		if math.IsNaN(x) {
			continue
		}
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	if math.IsInf(lo, 0) {
		return 0, 1
	}
	return lo, hi
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if !(v > 0) || math.IsInf(v, 0) {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}

// sizeLabel prints a power-of-two size as perftest users write it: 512,
// 4K, 8M.
func sizeLabel(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "M"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "K"
	}
	return strconv.FormatInt(n, 10)
}
