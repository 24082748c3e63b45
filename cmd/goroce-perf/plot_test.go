package main

import (
	"bytes"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/plot"
)

// plotResults makes results for the sizes 2^lo to 2^hi, each with its own
// bandwidth and typical latency and samples latencies (none if 0).
func plotResults(lo, hi, samples int) []result {
	var rs []result
	for e := lo; e <= hi; e++ {
		r := result{side: "client", size: 1 << e, iters: 1000, hasBW: true, hasLat: true,
			bwAvg: float64(100 * e), tTyp: float64(e)}
		r.samples = make([]float64, samples)
		for k := range r.samples {
			r.samples[k] = float64(e) + float64(k)/float64(samples)
		}
		rs = append(rs, r)
	}
	return rs
}

// The chart names the test, the side and the connection, plots the
// bandwidth or (latency tests) the typical latency, and names the latency
// the test measures.
func TestPlotChart(t *testing.T) {
	results := plotResults(3, 5, 10)
	for _, tc := range []struct {
		args               []string
		title, value, what string
		values             func(result) float64
	}{
		{[]string{"write_bw"}, "goroce-perf write_bw (client, RC)", "BW average [MB/sec]", "latency, post to completion [usec]",
			func(r result) float64 { return r.bwAvg }},
		{[]string{"read_bw", "--report_gbits", "-c", "RC"}, "goroce-perf read_bw (client, RC)", "BW average [Gb/sec]", "latency, post to completion [usec]",
			func(r result) float64 { return r.bwAvg }},
		{[]string{"send_lat", "-c", "UD"}, "goroce-perf send_lat (client, UD)", "t_typical [usec]", "latency, half round trip [usec]",
			func(r result) float64 { return r.tTyp }},
		{[]string{"write_lat", "-c", "UC"}, "goroce-perf write_lat (client, UC)", "t_typical [usec]", "latency, half round trip [usec]",
			func(r result) float64 { return r.tTyp }},
		{[]string{"read_lat"}, "goroce-perf read_lat (client, RC)", "t_typical [usec]", "latency, round trip [usec]",
			func(r result) float64 { return r.tTyp }},
		{[]string{"atomic_lat"}, "goroce-perf atomic_lat (client, RC)", "t_typical [usec]", "latency, round trip [usec]",
			func(r result) float64 { return r.tTyp }},
	} {
		cfg, err := parseArgs(tc.args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		c := plotChart(cfg, "client", results, nil)
		if c.Title != tc.title || c.ValueName != tc.value || c.LatencyName != tc.what {
			t.Errorf("%v: %q, %q, %q; want %q, %q, %q", tc.args, c.Title, c.ValueName, c.LatencyName, tc.title, tc.value, tc.what)
		}
		if len(c.Series) != len(results) {
			t.Fatalf("%v: %d series, want %d", tc.args, len(c.Series), len(results))
		}
		for i, s := range c.Series {
			r := results[i]
			if s.Size != r.size || s.Value != tc.values(r) || len(s.Latencies) != len(r.samples) {
				t.Errorf("%v: series %d is %d B, %v, %d latencies; want %d B, %v, %d", tc.args, i,
					s.Size, s.Value, len(s.Latencies), r.size, tc.values(r), len(r.samples))
			}
		}
	}
}

// The PNG from a real run: the client's plot of a loopback read_lat, one
// size, so one CDF curve in the first series colour and none in the others.
func TestLoopbackPlotPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "read_lat.png")
	code, _, errs := runCmd(t, 60*time.Second, append([]string{"read_lat", "-n", "50", "--plot", path}, loopback(40)...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("plot: %v", err)
	}
	if got := img.Bounds(); got != image.Rect(0, 0, plot.Width, plot.Height) {
		t.Fatalf("plot is %v, want %dx%d", got, plot.Width, plot.Height)
	}
	rgba := image.NewRGBA(img.Bounds())
	draw.Draw(rgba, rgba.Bounds(), img, image.Point{}, draw.Src)
	// The right half holds the CDF panel and its legend.
	n := map[color.RGBA]int{}
	for y := range plot.Height {
		for x := plot.Width / 2; x < plot.Width; x++ {
			n[rgba.RGBAAt(x, y)]++
		}
	}
	if got := n[plot.SeriesColor(0)]; got < 100 {
		t.Errorf("%d pixels of the first CDF's colour in the right half, want a curve", got)
	}
	for i := 1; i < 6; i++ {
		if got := n[plot.SeriesColor(i)]; got != 0 {
			t.Errorf("%d pixels of CDF colour %d in the right half, want one CDF", got, i)
		}
	}
}

// A reference distribution (--plot-ref) is one more CDF curve, labelled.
func TestPlotRef(t *testing.T) {
	dir := t.TempDir()
	ref := filepath.Join(dir, "udp.txt")
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
	if !bytes.Contains(b, []byte(">kernel UDP<")) {
		t.Error("the SVG lacks the reference's label")
	}
}

func TestWritePlotRejects(t *testing.T) {
	dir := t.TempDir()
	cfg, err := parseArgs([]string{"write_bw"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := writePlot(filepath.Join(dir, "p.svg"), cfg, "server", nil); err == nil || err.Error() != "--plot: the server has no results to plot" {
		t.Errorf("no results: %v", err)
	}
	if err := writePlot(filepath.Join(dir, "p.pdf"), cfg, "client", plotResults(3, 3, 1)); err == nil || !strings.Contains(err.Error(), "want a .svg or .png file") {
		t.Errorf("a PDF: %v", err)
	}
}

func TestLoadPlotRefRejects(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "r.txt")
	for _, tc := range []struct{ arg, content, want string }{
		{"x=" + f, "", "--plot-ref " + f + ": no latencies"},
		{"x=" + f, "# only a comment\n", "no latencies"},
		{"x=" + f, "12\nabc\n", "--plot-ref " + f + ":2: \"abc\""},
		{"x=" + f, "-3\n", "not a latency"},
		{"x=" + f, "NaN\n", "not a latency"},
		{f, "1\n", "want LABEL=FILE"},
		{"=" + f, "1\n", "want LABEL=FILE"},
		{"x=" + filepath.Join(dir, "none.txt"), "1\n", "--plot-ref: open "},
	} {
		if err := os.WriteFile(f, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := loadPlotRef(tc.arg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: error %v, want %q", tc.arg, tc.content, err, tc.want)
		}
	}
}
