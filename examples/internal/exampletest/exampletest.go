// Package exampletest runs the examples' servers for their tests: both
// examples take -server, -addr and -port and print "server: listening on
// ADDR; ..." once they accept clients.
package exampletest

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

// The tests' devices: loopback addresses of the test process's own.
var (
	ServerAddr = testkit.Addr(1).String()
	ClientAddr = testkit.Addr(2).String()
)

// StartServer runs an example's run function as a server on ServerAddr and
// a free TCP port, with extra arguments, and returns the address it
// listens on and the running program.
func StartServer(t *testing.T, ctx context.Context, run func(context.Context, []string, io.Writer) error, extra ...string) (string, *testkit.Program) {
	t.Helper()
	args := append([]string{"-server", "-addr", ServerAddr, "-port", "0"}, extra...)
	p := testkit.Start(func(out io.Writer) error { return run(ctx, args, out) })
	addr, _, _ := strings.Cut(p.Await(t, ctx, "server: listening on "), ";")
	return addr, p
}

// WantArgError runs an example's run function with args, which it must
// refuse before doing anything, and fails t unless the error mentions want.
func WantArgError(t *testing.T, run func(context.Context, []string, io.Writer) error, args []string, want string) {
	t.Helper()
	var out strings.Builder
	if err := run(context.Background(), args, &out); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("run(%q) = %v, want an error mentioning %q", args, err, want)
	}
}
