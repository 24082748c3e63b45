package verbs

import (
	"encoding/json"
	"net"
	"os"
	"sync"
	"time"
)

// A goroce device lives inside a process, so there is no sysfs directory a
// tool can read its counters from, as `rdma statistic` reads rxe's
// hw_counters. Instead every open device answers on a Unix socket in
// Linux's abstract namespace (no file to leave behind, gone when the
// process dies): a client connects, the device writes one JSON Stats
// document and closes. The client (internal/stats, used by goroce-stat)
// finds the sockets by their name prefix in /proc/net/unix. The endpoint
// serves read-only counters and nothing else; DeviceConfig.NoStatsEndpoint
// turns it off.

// StatsSocketPrefix begins the abstract Unix socket name of every device's
// counters endpoint: "@goroce-stats/<pid>/<n>/<device name>".
const StatsSocketPrefix = "@goroce-stats/"

// Counter is one named counter of a Stats document.
type Counter struct {
	Name  string `json:"name"`
	Value uint64 `json:"value"`
}

// QPStats are the counters of one live QP.
type QPStats struct {
	QPN      uint32    `json:"qpn"`
	Type     string    `json:"type"`
	State    string    `json:"state"`
	Counters []Counter `json:"counters"`
}

// Stats is what a device's counters endpoint serves: the device's
// identity, its counters in Counters.Each order and its live QPs'.
type Stats struct {
	Device   string    `json:"device"`
	PID      int       `json:"pid"`
	Addr     string    `json:"addr"`
	UDPPort  uint16    `json:"udp_port"`
	Time     time.Time `json:"time"`
	Counters []Counter `json:"counters"`
	QPs      []QPStats `json:"qps"`
}

func counterList(c Counters) []Counter {
	var l []Counter
	c.Each(func(name string, v uint64) { l = append(l, Counter{name, v}) })
	return l
}

// Stats returns a snapshot of the device's counters and of its live QPs',
// as the counters endpoint serves it.
func (d *Device) Stats() Stats {
	s := Stats{
		Device:   d.name,
		PID:      os.Getpid(),
		Addr:     d.addr.String(),
		UDPPort:  d.udpPort,
		Time:     time.Now(),
		Counters: counterList(d.Counters()),
	}
	d.qps.Range(func(_, v any) bool {
		qp := v.(*QP)
		s.QPs = append(s.QPs, QPStats{
			QPN:      qp.QPN(),
			Type:     qp.Type().String(),
			State:    qp.State().String(),
			Counters: counterList(qp.Counters()),
		})
		return true
	})
	return s
}

// statsEndpoint serves Device.Stats on an abstract Unix socket until
// closed.
type statsEndpoint struct {
	ln   *net.UnixListener
	name string
	wg   sync.WaitGroup
}

func (e *statsEndpoint) serve(d *Device) {
	defer e.wg.Done()
	for {
		c, err := e.ln.AcceptUnix()
		if err != nil {
			return // closed
		}
		// One short document per connection, written from this
		// goroutine: a client that doesn't read is cut off by the
		// deadline rather than holding the endpoint.
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_ = json.NewEncoder(c).Encode(d.Stats())
		_ = c.Close()
	}
}

func (e *statsEndpoint) close() {
	_ = e.ln.Close()
	e.wg.Wait()
}

// StatsEndpoint returns the abstract socket name ("@goroce-stats/...") on
// which the device serves its counters, or "" if it has none.
func (d *Device) StatsEndpoint() string {
	if d.stats == nil {
		return ""
	}
	return d.stats.name
}
