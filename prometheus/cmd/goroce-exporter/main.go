// Command goroce-exporter serves the counters of every goroce device open
// on the machine (Linux: through their counters endpoints, as goroce-stat
// reads them) in Prometheus format on /metrics.
//
//	goroce-exporter [-listen ADDR] [-timeout DURATION] [-once]
//
// -once prints the metrics to standard output once and exits.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	goroceprom "github.com/goroce/goroce/prometheus"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9879", "address to serve /metrics on")
	timeout := flag.Duration("timeout", 5*time.Second, "how long one collection may take to read the devices")
	once := flag.Bool("once", false, "print the metrics once to standard output and exit")
	flag.Parse()
	reg := newRegistry(goroceprom.Endpoints(), *timeout)
	if *once {
		if err := writeOnce(reg, os.Stdout); err != nil {
			log.Fatal(err)
		}
		return
	}
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	log.Printf("goroce-exporter: serving /metrics on %s", *listen)
	log.Fatal(http.ListenAndServe(*listen, nil))
}

// newRegistry returns a registry with the goroce collector of src.
func newRegistry(src goroceprom.Source, timeout time.Duration) *prom.Registry {
	reg := prom.NewRegistry()
	reg.MustRegister(goroceprom.NewCollector(src, timeout))
	return reg
}

// writeOnce gathers reg and writes it in the text format.
func writeOnce(reg *prom.Registry, w *os.File) error {
	mfs, err := reg.Gather()
	if err != nil {
		return err
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return fmt.Errorf("goroce-exporter: %w", err)
		}
	}
	return nil
}
