// Package prometheus exports the counters of goroce devices in Prometheus
// format: a prometheus.Collector over verbs.Stats documents, taken from
// devices of this process (Devices) or, on Linux, from every device open on
// the machine through their counters endpoints (Endpoints), as goroce-stat
// reads them. cmd/goroce-exporter serves it on /metrics.
//
// It is a module of its own (github.com/goroce/goroce/prometheus), so that
// the core module does not depend on the Prometheus client library.
//
// Metric names follow Prometheus conventions: each device counter (the
// names of Counters.Each: rxe's hw_counters, then goroce's own) becomes
// goroce_<name>_total, with rxe's abbreviations spelled out ("pkts" →
// "packets", "err" → "errors", "msgs" → "messages"), e.g.
// goroce_sent_packets_total, goroce_sent_bytes_total,
// goroce_retry_exceeded_errors_total. Labels name the device: device,
// addr, udp_port and pid (two processes may each have a goroce0). The live
// QPs are counted in the gauge goroce_qps by type and state; per-QP
// counters are not exported (a label per QP would grow without bound).
package prometheus

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/verbs"
)

// Source returns the Stats documents of the devices to export, and the
// number of devices it failed to read (which are left out).
type Source func(ctx context.Context) (docs []verbs.Stats, failed int)

// Devices is the Source of devices open in this process: their
// Device.Stats, read at each collection.
func Devices(devs ...*verbs.Device) Source {
	return func(context.Context) ([]verbs.Stats, int) {
		docs := make([]verbs.Stats, 0, len(devs))
		for _, d := range devs {
			docs = append(docs, d.Stats())
		}
		return docs, 0
	}
}

// Endpoints is the Source of every goroce device open on the machine (in
// this network namespace), read through their counters endpoints (Linux
// only: elsewhere every collection fails). A device that closes between
// the listing and the read counts as failed.
func Endpoints() Source {
	return func(ctx context.Context) ([]verbs.Stats, int) {
		names, err := stats.Endpoints()
		if err != nil {
			return nil, 1
		}
		var docs []verbs.Stats
		failed := 0
		for _, n := range names {
			s, err := stats.Read(ctx, n)
			if err != nil {
				failed++
				continue
			}
			docs = append(docs, s)
		}
		return docs, failed
	}
}

// deviceLabels are the labels of every per-device metric.
var deviceLabels = []string{"device", "addr", "udp_port", "pid"}

// Collector is a prometheus.Collector of goroce device counters.
type Collector struct {
	src     Source
	timeout time.Duration
	// counters maps a device counter's name to its metric; names it
	// does not know (a newer device, across processes) get one made
	// on the fly, so none is lost.
	counters map[string]*prom.Desc
	qps      *prom.Desc
	failed   *prom.Desc
	failures atomic.Uint64
}

// NewCollector returns a Collector of the devices src gives; a collection
// gives up reading them after timeout (0: 5 seconds).
func NewCollector(src Source, timeout time.Duration) *Collector {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	c := &Collector{
		src:      src,
		timeout:  timeout,
		counters: make(map[string]*prom.Desc),
		qps: prom.NewDesc("goroce_qps", "Live QPs of a goroce device, by QP type and state.",
			append(append([]string{}, deviceLabels...), "type", "state"), nil),
		failed: prom.NewDesc("goroce_exporter_read_failures_total",
			"Devices whose counters could not be read (gone between listing and reading, or no endpoint).", nil, nil),
	}
	var zero verbs.Counters
	zero.Each(func(name string, _ uint64) { c.counters[name] = counterDesc(name) })
	return c
}

// MetricName returns the Prometheus name of the device counter name (as
// Counters.Each names it).
func MetricName(name string) string {
	parts := strings.Split(name, "_")
	for i, p := range parts {
		switch p {
		case "pkts":
			parts[i] = "packets"
		case "err":
			parts[i] = "errors"
		case "msgs":
			parts[i] = "messages"
		}
	}
	return "goroce_" + strings.Join(parts, "_") + "_total"
}

func counterDesc(name string) *prom.Desc {
	return prom.NewDesc(MetricName(name),
		"goroce device counter "+name+" (goroce-stat's and, for rxe's hw_counters, rdma statistic's name).",
		deviceLabels, nil)
}

// Describe sends nothing: the Collector is unchecked (prometheus.Collector),
// because devices of other processes, built from another version, may have
// counters this build does not know, which it still exports.
func (c *Collector) Describe(chan<- *prom.Desc) {}

// Collect reads the devices and sends their metrics.
func (c *Collector) Collect(ch chan<- prom.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	docs, failed := c.src(ctx)
	c.failures.Add(uint64(failed))
	for i := range docs {
		c.collectDevice(ch, &docs[i])
	}
	ch <- prom.MustNewConstMetric(c.failed, prom.CounterValue, float64(c.failures.Load()))
}

// qpKey is a QP type and state, for goroce_qps.
type qpKey struct{ typ, state string }

func (c *Collector) collectDevice(ch chan<- prom.Metric, s *verbs.Stats) {
	labels := []string{s.Device, s.Addr, strconv.Itoa(int(s.UDPPort)), strconv.Itoa(s.PID)}
	for _, ctr := range s.Counters {
		d := c.counters[ctr.Name]
		if d == nil {
			d = counterDesc(ctr.Name) // a name this build does not know
		}
		ch <- prom.MustNewConstMetric(d, prom.CounterValue, float64(ctr.Value), labels...)
	}
	n := make(map[qpKey]int)
	for _, q := range s.QPs {
		n[qpKey{q.Type, q.State}]++
	}
	for k, v := range n {
		ch <- prom.MustNewConstMetric(c.qps, prom.GaugeValue, float64(v), append(labels, k.typ, k.state)...)
	}
}
