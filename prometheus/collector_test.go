package prometheus

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
)

func TestMetricName(t *testing.T) {
	for name, want := range map[string]string{
		"sent_pkts":          "goroce_sent_packets_total",
		"sent_bytes":         "goroce_sent_bytes_total",
		"retry_exceeded_err": "goroce_retry_exceeded_errors_total",
		"dropped_msgs":       "goroce_dropped_messages_total",
		"icrc_err":           "goroce_icrc_errors_total",
		"tx_gso":             "goroce_tx_gso_total",
	} {
		if got := MetricName(name); got != want {
			t.Errorf("MetricName(%q) = %q, want %q", name, got, want)
		}
	}
}

// fixed is a Source of given documents, failing to read failed devices.
func fixed(failed int, docs ...verbs.Stats) Source {
	return func(context.Context) ([]verbs.Stats, int) { return docs, failed }
}

// TestCollectDocuments checks the exposition of two documents: every
// counter once per device, with the device's labels, QPs by type and state,
// failures counted across collections, and no lint problem (naming
// conventions, help, types).
func TestCollectDocuments(t *testing.T) {
	var zero verbs.Counters
	n := 0
	zero.Each(func(string, uint64) { n++ })
	docs := []verbs.Stats{{
		Device: "goroce0", PID: 17, Addr: "10.0.0.1", UDPPort: 4791,
		Counters: []verbs.Counter{{Name: "sent_pkts", Value: 12}, {Name: "retry_exceeded_err", Value: 1}, {Name: "future_drops", Value: 5}},
		QPs: []verbs.QPStats{
			{QPN: 1, Type: "RC", State: "RTS"}, {QPN: 2, Type: "RC", State: "RTS"}, {QPN: 3, Type: "UD", State: "RTS"},
		},
	}, {
		Device: "goroce0", PID: 18, Addr: "::1", UDPPort: 4791,
		Counters: []verbs.Counter{{Name: "sent_pkts", Value: 3}},
	}}
	c := NewCollector(fixed(1, docs...), 0)
	const want = `
# HELP goroce_sent_packets_total goroce device counter sent_pkts (goroce-stat's and, for rxe's hw_counters, rdma statistic's name).
# TYPE goroce_sent_packets_total counter
goroce_sent_packets_total{addr="10.0.0.1",device="goroce0",pid="17",udp_port="4791"} 12
goroce_sent_packets_total{addr="::1",device="goroce0",pid="18",udp_port="4791"} 3
# HELP goroce_retry_exceeded_errors_total goroce device counter retry_exceeded_err (goroce-stat's and, for rxe's hw_counters, rdma statistic's name).
# TYPE goroce_retry_exceeded_errors_total counter
goroce_retry_exceeded_errors_total{addr="10.0.0.1",device="goroce0",pid="17",udp_port="4791"} 1
# HELP goroce_future_drops_total goroce device counter future_drops (goroce-stat's and, for rxe's hw_counters, rdma statistic's name).
# TYPE goroce_future_drops_total counter
goroce_future_drops_total{addr="10.0.0.1",device="goroce0",pid="17",udp_port="4791"} 5
# HELP goroce_qps Live QPs of a goroce device, by QP type and state.
# TYPE goroce_qps gauge
goroce_qps{addr="10.0.0.1",device="goroce0",pid="17",state="RTS",type="RC",udp_port="4791"} 2
goroce_qps{addr="10.0.0.1",device="goroce0",pid="17",state="RTS",type="UD",udp_port="4791"} 1
# HELP goroce_exporter_read_failures_total Devices whose counters could not be read (gone between listing and reading, or no endpoint).
# TYPE goroce_exporter_read_failures_total counter
goroce_exporter_read_failures_total 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"goroce_sent_packets_total", "goroce_retry_exceeded_errors_total", "goroce_future_drops_total",
		"goroce_qps", "goroce_exporter_read_failures_total"); err != nil {
		t.Error(err)
	}
	// Failures accumulate across collections.
	reg := prom.NewPedanticRegistry()
	reg.MustRegister(NewCollector(fixed(2, docs...), 0))
	for range 2 {
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	if got := gathered(t, reg, "goroce_exporter_read_failures_total", nil); got != 6 {
		t.Errorf("read failures after three collections of 2: %v, want 6", got)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// gathered gathers reg and returns the value of the metric name whose labels
// include want, or -1 when there is none.
func gathered(t *testing.T, reg *prom.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue metrics
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// TestCollectDevices exports two devices of this process connected by an
// RC QP after a WRITE: the sender's packet and byte counters and its QP
// show, with its labels.
func TestCollectDevices(t *testing.T) {
	a, b := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	reg := prom.NewPedanticRegistry()
	reg.MustRegister(NewCollector(Devices(a.Dev, b.Dev), 0))
	labels := map[string]string{"device": a.Dev.Name(), "addr": a.Dev.Addr().String(),
		"udp_port": strconv.Itoa(int(a.Dev.UDPPort())), "pid": strconv.Itoa(os.Getpid())}
	before := gathered(t, reg, "goroce_sent_packets_total", labels)
	if before < 0 {
		t.Fatalf("no goroce_sent_packets_total for %v", labels)
	}
	wr, err := b.MR.Remote().Write(0, a.MR.SGE(0, 3000))
	if err != nil {
		t.Fatal(err)
	}
	wr.SendFlags = verbs.SendSignaled
	rdmatest.PostSend(t, a.QP, wr)
	if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE: %v", wc.Status)
	}
	if got := gathered(t, reg, "goroce_sent_packets_total", labels); got < before+1 {
		t.Errorf("goroce_sent_packets_total after a WRITE: %v, before %v", got, before)
	}
	if got := gathered(t, reg, "goroce_sent_bytes_total", labels); got < 3000 {
		t.Errorf("goroce_sent_bytes_total after a 3000-byte WRITE: %v", got)
	}
	qpLabels := map[string]string{"device": a.Dev.Name(), "addr": a.Dev.Addr().String(), "type": "RC", "state": "RTS"}
	if got := gathered(t, reg, "goroce_qps", qpLabels); got != 1 {
		t.Errorf("goroce_qps %v: %v, want 1", qpLabels, got)
	}
}
