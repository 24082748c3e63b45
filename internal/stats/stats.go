// Package stats is the client of the counters endpoint every goroce device
// serves (see verbs.Device.StatsEndpoint): it finds the endpoints of the
// devices open on the machine and reads their verbs.Stats documents, as
// goroce-stat does.
//
// The package is internal while goroce-stat and the Prometheus exporter
// (the module in ./prometheus, whose import path lies under this one's) are
// its only users; a third party would make it public, which changes
// nothing but the import path.
package stats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/goroce/goroce/verbs"
)

// ErrNotEndpoint is the error of Read for a name that is not a goroce
// counters endpoint.
var ErrNotEndpoint = errors.New("stats: not a goroce counters endpoint")

// Read fetches the Stats document of the endpoint named name (as Endpoints
// lists it, or Device.StatsEndpoint returns it), giving up when ctx ends.
func Read(ctx context.Context, name string) (verbs.Stats, error) {
	var s verbs.Stats
	if !strings.HasPrefix(name, verbs.StatsSocketPrefix) {
		return s, fmt.Errorf("%w: %q", ErrNotEndpoint, name)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", name)
	if err != nil {
		return s, err
	}
	defer c.Close()
	// The endpoint writes one document and closes; closing the
	// connection when ctx ends bounds the read.
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	if err := json.NewDecoder(c).Decode(&s); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return s, fmt.Errorf("stats: reading %s: %w", name, err)
	}
	return s, nil
}
