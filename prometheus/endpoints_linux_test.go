package prometheus

import (
	"os"
	"strconv"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

// TestCollectEndpoints reads a device of this process through its counters
// endpoint, as the exporter reads those of other processes.
func TestCollectEndpoints(t *testing.T) {
	d := rdmatest.NewEnd(t, rdmatest.EndOptions{Addr: testkit.Addr(3)}).Dev
	if d.StatsEndpoint() == "" {
		t.Fatal("the device has no counters endpoint")
	}
	reg := prom.NewPedanticRegistry()
	reg.MustRegister(NewCollector(Endpoints(), 0))
	labels := map[string]string{"device": d.Name(), "addr": d.Addr().String(), "pid": strconv.Itoa(os.Getpid())}
	if got := gathered(t, reg, "goroce_sent_packets_total", labels); got != 0 {
		t.Errorf("goroce_sent_packets_total %v of an idle device: %v, want 0", labels, got)
	}
	if got := gathered(t, reg, "goroce_qps", map[string]string{"device": d.Name(), "addr": d.Addr().String(), "type": "RC", "state": "RESET"}); got != 1 {
		t.Errorf("goroce_qps of the device's RESET QP: %v, want 1", got)
	}
}
