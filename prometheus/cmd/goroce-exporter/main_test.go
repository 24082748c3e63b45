package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	goroceprom "github.com/goroce/goroce/prometheus"
	"github.com/goroce/goroce/verbs"
)

// TestServeMetrics serves a device's counters over HTTP, as the command
// does, and finds them in the text exposition.
func TestServeMetrics(t *testing.T) {
	d := rdmatest.OpenDevice(t, verbs.DeviceConfig{Addr: testkit.Addr(4), NoStatsEndpoint: true})
	reg := newRegistry(goroceprom.Devices(d), 0)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := `goroce_sent_packets_total{addr="` + d.Addr().String() + `",device="goroce0"`
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		t.Errorf("GET /metrics: %s, want a line with %s in:\n%s", resp.Status, want, body)
	}

	out := filepath.Join(t.TempDir(), "metrics")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeOnce(reg, f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "# TYPE goroce_sent_packets_total counter") || !strings.Contains(string(b), want) {
		t.Errorf("-once wrote:\n%s", b)
	}
}
