package main

import (
	"bytes"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// plotResults makes results for the sizes 2^lo to 2^hi, each with
// samples latencies (none if 0) that grow with the size, so that the CDF
// curves are apart.
func plotResults(lo, hi, samples int) []result {
	var rs []result
	for e := lo; e <= hi; e++ {
		size := 1 << e
		r := result{side: "client", size: size, iters: 1000, hasBW: true, hasLat: true,
			bwAvg: math.Min(float64(size)/100, 3000), tTyp: 2 + float64(size)/1000}
		base := 1 + float64(size)/500
		for k := range samples {
			r.samples = append(r.samples, base*(1+float64(k)/float64(samples)))
		}
		rs = append(rs, r)
	}
	return rs
}

func TestPlotFormats(t *testing.T) {
	nanPoint := plotResults(10, 14, 100)
	nanPoint[2].bwAvg = math.NaN()
	for _, tc := range []struct {
		name    string
		args    []string
		results []result
		cdfs    int // CDF curves drawn
	}{
		{"bandwidth, every size", []string{"write_bw", "-a"}, plotResults(1, runAllMaxPow, 1000), maxCDFCurves},
		{"bandwidth in Gb/sec, three sizes", []string{"read_bw", "-a", "--report_gbits"}, plotResults(12, 14, 50), 3},
		{"latency, one size", []string{"send_lat"}, plotResults(1, 1, 1000), 1},
		{"no latency samples", []string{"send_bw", "-a"}, plotResults(1, 8, 0), 0},
		{"a point that is not a number", []string{"write_bw", "-a"}, nanPoint, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseArgs(tc.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			svg, pngPath := filepath.Join(dir, "p.svg"), filepath.Join(dir, "p.PNG")
			for _, p := range []string{svg, pngPath} {
				if err := writePlot(p, cfg, "client", tc.results); err != nil {
					t.Fatal(err)
				}
			}
			checkPlot(t, svg, 1+tc.cdfs)
			if b, _ := os.ReadFile(svg); bytes.Contains(b, []byte("NaN")) {
				t.Error("the SVG has a NaN coordinate")
			}
			checkPNG(t, pngPath, tc.cdfs)
		})
	}
}

// checkPNG checks that the PNG is the plot's size, with the frames, the
// bandwidth curve in the left panel, the first cdfs curve colours and no
// others in the right one, and text under the panels.
func checkPNG(t *testing.T, path string, cdfs int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("plot: %v", err)
	}
	if got := img.Bounds(); got != image.Rect(0, 0, plotW, plotH) {
		t.Fatalf("plot is %v, want %dx%d", got, plotW, plotH)
	}
	left := image.Rect(plotLeftMargin, panelY, plotLeftMargin+panelW, panelY+panelH)
	right := left.Add(image.Pt(plotPanelOffset, 0))
	rgba := image.NewRGBA(img.Bounds())
	draw.Draw(rgba, rgba.Bounds(), img, image.Point{}, draw.Src)
	count := func(r image.Rectangle, c color.RGBA) int {
		n := 0
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				if rgba.RGBAAt(x, y) == c {
					n++
				}
			}
		}
		return n
	}
	// A 2 pixel line leaves whole pixels of its colour all along it; a
	// single point is a dot of radius 3.
	const minPixels = 10
	if n := count(left, plotColors[0]); n < minPixels {
		t.Errorf("bandwidth curve: %d pixels of %v in the left panel, want at least %d", n, plotColors[0], minPixels)
	}
	for i, c := range plotColors[1:] {
		if n := count(left, c); n != 0 {
			t.Errorf("%d pixels of CDF colour %d in the left panel", n, i+1)
		}
	}
	for i, c := range plotColors {
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

func TestPlotFormat(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"bw.svg", "svg"},
		{"dir.png/BW.SVG", "svg"},
		{"bw.png", "png"},
		{"/tmp/bw.Png", "png"},
		{"bw.pdf", ""},
		{"bw.svg.gz", ""},
		{"png", ""},
		{"", ""},
	} {
		if got := plotFormat(tc.path); got != tc.want {
			t.Errorf("plotFormat(%q) = %q, want %q", tc.path, got, tc.want)
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

// The PNG from a real run: the client's plot of a loopback read_lat.
func TestLoopbackPlotPNG(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "read_lat.png")
	code, _, errs := runCmd(t, 60*time.Second, "read_lat", "-n", "50", "--loopback",
		"--loopback-addrs", loopAddrs(40), "-p", "0", "--plot", plot)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	checkPNG(t, plot, 1)
}

// A reference distribution (--plot-ref) is one more CDF curve, labelled,
// and widens the latency axis to hold it.
func TestPlotRef(t *testing.T) {
	dir := t.TempDir()
	ref := filepath.Join(dir, "udp.txt")
	// Far slower than plotResults' samples: the axis must reach 10^4.
	if err := os.WriteFile(ref, []byte("# sockperf\n5000\n\n7000.5\n9000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	svg := filepath.Join(dir, "p.svg")
	cfg, err := parseArgs([]string{"write_lat", "--plot", svg, "--plot-ref", "kernel UDP=" + ref}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := writePlot(svg, cfg, "client", plotResults(3, 3, 100)); err != nil {
		t.Fatal(err)
	}
	checkPlot(t, svg, 1+1+1) // size panel, the 8-byte CDF, the reference
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{">kernel UDP<", ">10000<"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
}

func TestLoadPlotRefRejects(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ content, want string }{
		{"", "no latencies"},
		{"# only a comment\n", "no latencies"},
		{"12\nabc\n", ":2: \"abc\""},
		{"-3\n", "not a latency"},
		{"NaN\n", "not a latency"},
	} {
		f := filepath.Join(dir, "r.txt")
		if err := os.WriteFile(f, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := loadPlotRef("x=" + f); err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
			t.Errorf("%q: error %v, want %q", tc.content, err, tc.want)
		}
	}
}
