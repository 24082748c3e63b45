package main

import (
	"context"
	"io"
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

// TestWorkloads runs every workload briefly against its server, over
// goroce and (one of each application) over TCP, on loopback: each client
// checks the data it gets back, and the report has a row for each.
func TestWorkloads(t *testing.T) {
	addr := netip.AddrPortFrom(testkit.Addr(1), testkit.Port()).String()
	var results strings.Builder
	for _, c := range []struct{ workload, net string }{
		{"grpc-unary", "rdma"}, {"grpc-stream", "rdma"}, {"http", "rdma"}, {"http-1m", "rdma"},
		{"kv-get", "rdma"}, {"kv-put", "rdma"},
		{"grpc-unary", "tcp"}, {"http", "tcp"}, {"kv-get", "tcp"},
	} {
		ctx := testkit.Context(t)
		sctx, stop := context.WithCancel(ctx)
		app := workloads[c.workload].app
		srv := testkit.Start(func(out io.Writer) error {
			return run(sctx, []string{"serve", "-app", app, "-net", c.net, "-addr", addr, "-keys", "500"}, out, nil)
		})
		srv.Await(t, ctx, "server: listening on ")
		var out strings.Builder
		err := run(ctx, []string{"run", "-workload", c.workload, "-net", c.net, "-addr", addr,
			"-local", testkit.Addr(2).String(), "-keys", "500", "-d", "50ms"}, &out, nil)
		stop()
		if serr := srv.Wait(); serr != nil {
			t.Fatalf("%s server over %s: %v", app, c.net, serr)
		}
		if err != nil {
			t.Fatalf("%s over %s: %v", c.workload, c.net, err)
		}
		results.WriteString(out.String())
		for line := range strings.Lines(srv.String()) {
			if strings.HasPrefix(line, "{") {
				results.WriteString(line)
			}
		}
	}
	var table strings.Builder
	if err := report(strings.NewReader(results.String()), &table); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"| grpc-unary | goroce | 1 |", "| grpc-unary | TCP | 1 |", "| grpc-stream | goroce | 1 |",
		"| http-1m | goroce | 1 |", "| kv-get | goroce | 1 |", "| kv-get | TCP | 1 |", "| kv-put | goroce | 1 |"} {
		if !strings.Contains(table.String(), row) {
			t.Errorf("report has no row %q:\n%s", row, table.String())
		}
	}
	// The server's goroutines see no GET over goroce: the READs bypass them.
	for line := range strings.Lines(table.String()) {
		if strings.HasPrefix(line, "| kv-get | goroce |") && strings.Split(line, "|")[11] != " 0 " {
			t.Errorf("kv-get over goroce reached the server's goroutines: %s", line)
		}
	}
}

func TestArgErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "usage"},
		{[]string{"serve", "-net", "udp", "-addr", "x"}, "-net"},
		{[]string{"serve", "-app", "ftp", "-net", "tcp", "-addr", "127.0.0.1:0"}, "-app"},
		{[]string{"run", "-workload", "nope", "-addr", "127.0.0.1:1"}, "-workload"},
		{[]string{"run", "-workload", "http"}, "-addr"},
		{[]string{"dance", "-addr", "x"}, "unknown subcommand"},
	} {
		var out strings.Builder
		if err := run(context.Background(), c.args, &out, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run(%q) = %v, want an error mentioning %q", c.args, err, c.want)
		}
	}
}
