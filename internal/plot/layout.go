package plot

import (
	"image/color"
	"math"
	"strconv"
)

// The layout, in pixels: two panelW×panelH panels side by side, the left
// one plotLeftMargin from the edge, the right one plotPanelOffset further,
// the title above them, axis names and tick labels around them, the CDFs'
// legend right of the right panel.
const (
	plotW, plotH    = 1060, 440
	panelW, panelH  = 400, 320
	panelY          = 60
	maxCDFCurves    = 6
	plotLeftMargin  = 80
	plotPanelOffset = 500
	// The text sizes, in pixels: the SVG's font sizes, and for the PNG
	// the fixed 7×13 face, bold for the title.
	plotFontSize  = 12
	plotTitleSize = 16
)

var (
	plotBackground = color.RGBA{0xff, 0xff, 0xff, 0xff}
	plotTextColor  = color.RGBA{0x00, 0x00, 0x00, 0xff}
	plotAxisColor  = color.RGBA{0x33, 0x33, 0x33, 0xff}
	plotGridColor  = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	plotColors     = []color.RGBA{
		{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
		{0x94, 0x67, 0xbd, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x17, 0xbe, 0xcf, 0xff},
	}
)

// A drawing is a chart laid out in pixels: its marks in painting order,
// each later one over the earlier ones.
type drawing struct {
	width, height int
	marks         []mark
}

// mark is one of rectMark, lineMark, polylineMark, dotMark and textMark.
type mark interface{ isMark() }

// rectMark is a rectangle; a zero colour (alpha 0) means no fill or no
// outline. The outline is 1 pixel wide, centred on the edges.
type rectMark struct {
	x, y, w, h   float64
	fill, stroke color.RGBA
}

// lineMark is a 1 pixel wide line.
type lineMark struct {
	x1, y1, x2, y2 float64
	stroke         color.RGBA
}

// polylineMark is an open path of straight segments, with round joins.
type polylineMark struct {
	pts    []point
	width  float64
	stroke color.RGBA
}

// dotMark is a filled circle.
type dotMark struct {
	c    point
	r    float64
	fill color.RGBA
}

// textMark is one line of text. (x, y) is on its baseline, at its start,
// middle or end as anchor says; vertical text reads upwards, its baseline
// the vertical line through (x, y) and its glyphs left of it, like SVG's
// rotate(-90).
type textMark struct {
	x, y     float64
	s        string
	anchor   textAnchor
	size     int
	vertical bool
	fill     color.RGBA
}

type textAnchor int

const (
	anchorStart textAnchor = iota
	anchorMiddle
	anchorEnd
)

type point struct{ x, y float64 }

func (rectMark) isMark()     {}
func (lineMark) isMark()     {}
func (polylineMark) isMark() {}
func (dotMark) isMark()      {}
func (textMark) isMark()     {}

func (d *drawing) add(m mark) { d.marks = append(d.marks, m) }

func (d *drawing) text(x, y float64, s string, anchor textAnchor) {
	d.add(textMark{x: x, y: y, s: s, anchor: anchor, size: plotFontSize, fill: plotTextColor})
}

// layout lays out the chart c.
func layout(c *Chart) *drawing {
	d := &drawing{width: plotW, height: plotH}
	d.add(rectMark{w: plotW, h: plotH, fill: plotBackground})
	d.add(textMark{x: plotW / 2, y: 24, s: c.Title, anchor: anchorMiddle, size: plotTitleSize, fill: plotTextColor})
	d.valuePanel(c)
	d.cdfPanel(c)
	return d
}

// valuePanel draws the left panel: each series' value against
// log2(size), from 0 to a round number above the largest.
func (d *drawing) valuePanel(c *Chart) {
	var xs, ys []float64
	for _, s := range c.Series {
		xs = append(xs, math.Log2(float64(s.Size)))
		ys = append(ys, s.Value)
	}
	x0, x1 := minMax(xs)
	if x0 == x1 {
		x0, x1 = x0-1, x1+1
	}
	_, ymax := minMax(ys)
	ymax = niceCeil(ymax)
	left := panel{x: plotLeftMargin, y: panelY, x0: x0, x1: x1, y0: 0, y1: ymax}
	var xTicks, yTicks []tick
	for e := math.Ceil(x0); e <= x1; e++ {
		if int(e)%2 == 1 && x1-x0 > 8 {
			continue
		}
		xTicks = append(xTicks, tick{e, sizeLabel(int64(1) << int(e))})
	}
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		yTicks = append(yTicks, tick{v, tickLabel(v)})
	}
	d.axes(left, "message size [bytes]", c.ValueName, xTicks, yTicks)
	d.curve(left, xs, ys, plotColors[0], true)
}

// cdfPanel draws the right panel: the latency CDFs of up to maxCDFCurves
// of the series that have latencies, spread over the sizes, then the
// references, on a log10 axis of whole decades, with a legend right of it.
func (d *drawing) cdfPanel(c *Chart) {
	var curves []Series
	for _, s := range c.Series {
		if len(s.Latencies) > 0 {
			curves = append(curves, s)
		}
	}
	if len(curves) > maxCDFCurves {
		picked := make([]Series, 0, maxCDFCurves)
		for i := range maxCDFCurves {
			picked = append(picked, curves[i*(len(curves)-1)/(maxCDFCurves-1)])
		}
		curves = picked
	}
	if len(curves) == 0 {
		note := c.NoLatencies
		if note == "" {
			note = "no latency samples"
		}
		d.text(plotPanelOffset+plotLeftMargin+panelW/2, panelY+panelH/2, note, anchorMiddle)
		return
	}
	var refs []Ref
	for _, r := range c.Refs {
		if len(r.Samples) > 0 {
			refs = append(refs, r)
		}
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range curves {
		lo, hi = math.Min(lo, s.Latencies[0]), math.Max(hi, s.Latencies[len(s.Latencies)-1])
	}
	for _, r := range refs {
		lo, hi = math.Min(lo, r.Samples[0]), math.Max(hi, r.Samples[len(r.Samples)-1])
	}
	lo, hi = math.Floor(math.Log10(math.Max(lo, 1e-3))), math.Ceil(math.Log10(math.Max(hi, 1e-3)))
	if lo == hi {
		hi++
	}
	right := panel{x: plotPanelOffset + plotLeftMargin, y: panelY, x0: lo, x1: hi, y0: 0, y1: 1}
	var xTicks, yTicks []tick
	for e := lo; e <= hi; e++ {
		xTicks = append(xTicks, tick{e, strconv.FormatFloat(math.Pow(10, e), 'g', -1, 64)})
	}
	for i := 0; i <= 4; i++ {
		yTicks = append(yTicks, tick{float64(i) / 4, strconv.FormatFloat(float64(i)/4, 'f', 2, 64)})
	}
	d.axes(right, c.LatencyName, "fraction of messages", xTicks, yTicks)
	legend := func(i int, s string, c color.RGBA) {
		// Right of the panel.
		d.add(textMark{x: float64(right.x + panelW + 8), y: float64(right.y + 14 + 16*i), s: s,
			size: plotFontSize, fill: c})
	}
	for i, s := range curves {
		c := SeriesColor(i)
		d.cdf(right, s.Latencies, c)
		legend(i, sizeLabel(int64(s.Size))+" B", c)
	}
	for i, r := range refs {
		d.cdf(right, r.Samples, plotTextColor)
		legend(len(curves)+i, r.Label, plotTextColor)
	}
}

// cdf draws the cumulative distribution of the sorted samples, thinned to
// about 500 points, on a log10 x axis.
func (d *drawing) cdf(p panel, samples []float64, c color.RGBA) {
	var cx, cy []float64
	n := len(samples)
	step := max(1, n/500)
	for k := 0; k < n; k += step {
		cx = append(cx, math.Log10(math.Max(samples[k], 1e-3)))
		cy = append(cy, float64(k+1)/float64(n))
	}
	cx = append(cx, math.Log10(math.Max(samples[n-1], 1e-3)))
	cy = append(cy, 1)
	d.curve(p, cx, cy, c, false)
}

// panel maps data coordinates onto a panelW×panelH box at (x, y).
type panel struct {
	x, y           int
	x0, x1, y0, y1 float64
}

// tick is a grid line at v, in data coordinates, and its label.
type tick struct {
	v     float64
	label string
}

func (p panel) px(v float64) float64 { return float64(p.x) + (v-p.x0)/(p.x1-p.x0)*panelW }
func (p panel) py(v float64) float64 { return float64(p.y+panelH) - (v-p.y0)/(p.y1-p.y0)*panelH }

// axes draws the panel's grid, frame, tick labels and axis names. The grid
// goes first so that the frame stays on top of the outermost grid lines.
func (d *drawing) axes(p panel, xName, yName string, xTicks, yTicks []tick) {
	top, bottom := float64(p.y), float64(p.y+panelH)
	l, r := float64(p.x), float64(p.x+panelW)
	for _, t := range xTicks {
		d.add(lineMark{p.px(t.v), top, p.px(t.v), bottom, plotGridColor})
	}
	for _, t := range yTicks {
		d.add(lineMark{l, p.py(t.v), r, p.py(t.v), plotGridColor})
	}
	d.add(rectMark{x: l, y: top, w: panelW, h: panelH, stroke: plotAxisColor})
	for _, t := range xTicks {
		d.text(p.px(t.v), bottom+18, t.label, anchorMiddle)
	}
	for _, t := range yTicks {
		d.text(l-6, p.py(t.v)+4, t.label, anchorEnd)
	}
	d.text(l+panelW/2, bottom+40, xName, anchorMiddle)
	d.add(textMark{x: l - 60, y: top + panelH/2, s: yName, anchor: anchorMiddle, size: plotFontSize, vertical: true,
		fill: plotTextColor})
}

// curve draws the series (xs, ys) in data coordinates, leaving out points
// that are not numbers, with a dot on each point if dots.
func (d *drawing) curve(p panel, xs, ys []float64, c color.RGBA, dots bool) {
	var pts []point
	for i := range xs {
		pt := point{p.px(xs[i]), p.py(ys[i])}
		if math.IsNaN(pt.x) || math.IsInf(pt.x, 0) || math.IsNaN(pt.y) || math.IsInf(pt.y, 0) {
			continue
		}
		pts = append(pts, pt)
	}
	d.add(polylineMark{pts: pts, width: 2, stroke: c})
	if dots {
		for _, pt := range pts {
			d.add(dotMark{c: pt, r: 3, fill: c})
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

// tickLabel prints an axis value to four significant digits without an
// exponent, so that 20000 MB/sec reads 20000 rather than 2e+04.
func tickLabel(v float64) string {
	r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
	if err != nil || math.Abs(r) >= 1e9 || r != 0 && math.Abs(r) < 1e-4 {
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
	return strconv.FormatFloat(r, 'f', -1, 64)
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
