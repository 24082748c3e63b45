package plot

import (
	"bytes"
	"encoding/xml"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
)

// testSeries makes series for the sizes 2^lo to 2^hi, each with samples
// latencies (none if 0) that grow with the size, so that the CDF curves
// are apart.
func testSeries(lo, hi, samples int) []Series {
	var ss []Series
	for e := lo; e <= hi; e++ {
		size := 1 << e
		s := Series{Size: size, Value: math.Min(float64(size)/100, 3000)}
		base := 1 + float64(size)/500
		for k := range samples {
			s.Latencies = append(s.Latencies, base*(1+float64(k)/float64(samples)))
		}
		ss = append(ss, s)
	}
	return ss
}

func testChart(series []Series, refs ...Ref) *Chart {
	return &Chart{Title: "test chart", ValueName: "BW average [MB/sec]", LatencyName: "latency [usec]",
		Series: series, Refs: refs}
}

// encode renders c in format f.
func encode(t *testing.T, c *Chart, f Format) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := c.Encode(&b, f); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestFormats(t *testing.T) {
	nanPoint := testSeries(10, 14, 100)
	nanPoint[2].Value = math.NaN()
	// A single point, below the top of the panel (where half its dot
	// would be outside).
	oneSize := testSeries(1, 1, 1000)
	oneSize[0].Value = 2.002
	for _, tc := range []struct {
		name   string
		series []Series
		cdfs   int // CDF curves drawn
	}{
		{"every size", testSeries(1, 23, 1000), maxCDFCurves},
		{"three sizes", testSeries(12, 14, 50), 3},
		{"one size", oneSize, 1},
		{"no latency samples", testSeries(1, 8, 0), 0},
		{"a point that is not a number", nanPoint, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testChart(tc.series)
			svg := encode(t, c, SVG)
			if got := svgElements(t, svg)["polyline"]; got != 1+tc.cdfs {
				t.Errorf("the SVG has %d curves, want %d", got, 1+tc.cdfs)
			}
			if bytes.Contains(svg, []byte("NaN")) {
				t.Error("the SVG has a NaN coordinate")
			}
			checkPNG(t, encode(t, c, PNG), tc.cdfs)
		})
	}
}

// svgElements checks that b is well-formed XML and counts its elements by
// name.
func svgElements(t *testing.T, b []byte) map[string]int {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	n := map[string]int{}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatalf("SVG: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			n[se.Name.Local]++
		}
	}
}

// checkPNG checks that the PNG is the plot's size, with the frames, the
// value curve in the left panel, the first cdfs curve colours and no
// others in the right one, and text under the panels.
func checkPNG(t *testing.T, b []byte, cdfs int) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("PNG: %v", err)
	}
	if got := img.Bounds(); got != image.Rect(0, 0, Width, Height) {
		t.Fatalf("PNG is %v, want %dx%d", got, Width, Height)
	}
	left := image.Rect(plotLeftMargin, panelY, plotLeftMargin+panelW, panelY+panelH)
	right := left.Add(image.Pt(plotPanelOffset, 0))
	rgba := image.NewRGBA(img.Bounds())
	draw.Draw(rgba, rgba.Bounds(), img, image.Point{}, draw.Src)
	// The pixels of each colour in r, counted once per rectangle.
	hist := map[image.Rectangle]map[color.RGBA]int{}
	count := func(r image.Rectangle, c color.RGBA) int {
		h := hist[r]
		if h == nil {
			h = map[color.RGBA]int{}
			for y := r.Min.Y; y < r.Max.Y; y++ {
				for x := r.Min.X; x < r.Max.X; x++ {
					h[rgba.RGBAAt(x, y)]++
				}
			}
			hist[r] = h
		}
		return h[c]
	}
	// A 2 pixel line leaves whole pixels of its colour all along it; a
	// single point is a dot of radius 3.
	const minPixels = 10
	if n := count(left, SeriesColor(0)); n < minPixels {
		t.Errorf("value curve: %d pixels of %v in the left panel, want at least %d", n, SeriesColor(0), minPixels)
	}
	for i := 1; i < len(plotColors); i++ {
		if n := count(left, SeriesColor(i)); n != 0 {
			t.Errorf("%d pixels of CDF colour %d in the left panel", n, i)
		}
	}
	for i := range plotColors {
		c := SeriesColor(i)
		n := count(right, c)
		switch {
		case i < cdfs && n < minPixels:
			t.Errorf("CDF %d: %d pixels of %v in the right panel, want at least %d", i, n, c, minPixels)
		case i >= cdfs && n != 0:
			t.Errorf("%d pixels of %v in the right panel, which has %d CDF curves", n, c, cdfs)
		}
	}
	// The frame's top edge (under the curves that reach the top here and
	// there), and tick labels (black) below each panel.
	for _, r := range []image.Rectangle{left, right} {
		if cdfs == 0 && r == right {
			continue
		}
		if n := count(image.Rect(r.Min.X+1, r.Min.Y, r.Max.X-1, r.Min.Y+1), plotAxisColor); n < panelW/2 {
			t.Errorf("frame at %v: %d pixels of the axis colour along the top, want at least %d", r, n, panelW/2)
		}
		if n := count(image.Rect(r.Min.X-20, r.Max.Y+2, r.Max.X+20, r.Max.Y+45), plotTextColor); n < 50 {
			t.Errorf("panel at %v: %d text pixels under it", r, n)
		}
	}
}

// The texts a caller chooses are where it put them; the note of a chart
// without latencies has a default.
func TestTexts(t *testing.T) {
	c := testChart(testSeries(3, 5, 10))
	svg := string(encode(t, c, SVG))
	for _, want := range []string{">test chart<", ">BW average [MB/sec]<", ">latency [usec]<", ">8 B<", ">32 B<",
		">message size [bytes]<", ">fraction of messages<"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
	c = testChart(testSeries(3, 5, 0))
	if svg := string(encode(t, c, SVG)); !strings.Contains(svg, ">no latency samples<") {
		t.Error("a chart without latencies lacks the default note")
	}
	c.NoLatencies = "none on this side"
	if svg := string(encode(t, c, SVG)); !strings.Contains(svg, ">none on this side<") {
		t.Error("a chart without latencies lacks its note")
	}
}

// A chart with nothing to show, or a reference without samples, still
// renders: an empty left panel, the note on the right.
func TestEmpty(t *testing.T) {
	for _, c := range []*Chart{testChart(nil), testChart(nil, Ref{Label: "empty"}), testChart(testSeries(4, 4, 3), Ref{Label: "empty"})} {
		if n := svgElements(t, encode(t, c, SVG))["polyline"]; n != 1+min(1, len(c.Series)) {
			t.Errorf("%d series: %d curves", len(c.Series), n)
		}
	}
	// The PNG of the empty chart: a polyline without points paints nothing.
	if err := testChart(nil).Encode(io.Discard, PNG); err != nil {
		t.Fatal(err)
	}
	if err := testChart(nil).Encode(io.Discard, "pdf"); err == nil {
		t.Error("Encode in an unknown format did not fail")
	}
}

func TestFormatOf(t *testing.T) {
	for _, tc := range []struct {
		path string
		want Format
		ok   bool
	}{
		{"bw.svg", SVG, true},
		{"dir.png/BW.SVG", SVG, true},
		{"bw.png", PNG, true},
		{"/tmp/bw.Png", PNG, true},
		{"bw.pdf", "", false},
		{"bw.svg.gz", "", false},
		{"png", "", false},
		{"", "", false},
	} {
		if got, ok := FormatOf(tc.path); got != tc.want || ok != tc.ok {
			t.Errorf("FormatOf(%q) = %q, %v, want %q, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

func TestTickLabel(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{0, "0"},
		{0.25, "0.25"},
		{0.05 * 3 / 4, "0.0375"},
		{15000, "15000"},
		{20000, "20000"},
		{1234567, "1235000"},
		{2e10, "2e+10"},
		{1e-5, "1e-05"},
	} {
		if got := tickLabel(tc.v); got != tc.want {
			t.Errorf("tickLabel(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

// A reference distribution is one more CDF curve, labelled, and widens the
// latency axis to hold it.
func TestRef(t *testing.T) {
	// Far slower than testSeries' samples: the axis must reach 10^4.
	ref, err := ParseRef("kernel UDP", "udp.txt", []byte("# sockperf\n5000\n\n7000.5\n9000\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []float64{5000, 7000.5, 9000}; !slices.Equal(ref.Samples, want) {
		t.Errorf("samples %v, want %v", ref.Samples, want)
	}
	b := encode(t, testChart(testSeries(3, 3, 100), ref), SVG)
	if n := svgElements(t, b)["polyline"]; n != 1+1+1 { // size panel, the 8-byte CDF, the reference
		t.Errorf("%d curves, want 3", n)
	}
	for _, want := range []string{">kernel UDP<", ">10000<"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
}

func TestParseRefSorts(t *testing.T) {
	r, err := ParseRef("x", "f", []byte("3\n1\n  2  \n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []float64{1, 2, 3}; !slices.Equal(r.Samples, want) || r.Label != "x" {
		t.Errorf("got %q %v, want x %v", r.Label, r.Samples, want)
	}
}

func TestParseRefRejects(t *testing.T) {
	for _, tc := range []struct{ content, want string }{
		{"", "f.txt: no latencies"},
		{"# only a comment\n", "f.txt: no latencies"},
		{"12\nabc\n", "f.txt:2: \"abc\" is not a latency in microseconds"},
		{"-3\n", "f.txt:1: \"-3\" is not a latency"},
		{"NaN\n", "not a latency"},
		{"+Inf\n", "not a latency"},
	} {
		if _, err := ParseRef("x", "f.txt", []byte(tc.content)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.content, err, tc.want)
		}
	}
}
