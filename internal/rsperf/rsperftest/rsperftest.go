// Package rsperftest runs goroce-rstream's and goroce-riostream's server
// and client against each other in a test's process and checks their
// output.
package rsperftest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

// Run is a command's whole program: it returns the exit status.
type Run func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// header is the line both commands print first, as rstream does (kept
// literal here, so that a change of rsperf.Header's format fails).
const header = "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer\n"

// resultLine matches a result line: name, size, transfers, iterations,
// total, seconds, Gb/sec, usec/xfer, in rstream's columns.
var resultLine = regexp.MustCompile(`^(\S+) +(\S+) +(\S+) +(\S+) +(\S+) +\d+\.\d\ds +\d+\.\d\d +\d+\.\d\d$`)

// Pair runs a server on testkit address a and a client from b with the
// same extra arguments, each a device of this process, and returns both
// outputs.
func Pair(t *testing.T, run Run, a, b int, args ...string) (server, client string) {
	t.Helper()
	ctx := testkit.Context(t)
	port := strconv.Itoa(int(testkit.Port()))
	var serr bytes.Buffer
	srv := testkit.Start(func(stdout io.Writer) error {
		if code := run(ctx, append([]string{"-b", testkit.Addr(a).String(), "-p", port}, args...), stdout, &serr); code != 0 {
			return fmt.Errorf("server exit %d: %s", code, serr.String())
		}
		return nil
	})
	srv.Await(t, ctx, "name")
	var out, cerr bytes.Buffer
	if code := run(ctx, append([]string{"-s", testkit.Addr(a).String(), "-b", testkit.Addr(b).String(), "-p", port}, args...), &out, &cerr); code != 0 {
		t.Fatalf("client exit %d: %s", code, cerr.String())
	}
	if err := srv.Wait(); err != nil {
		t.Fatal(err)
	}
	return srv.String(), out.String()
}

// CheckOutput wants the header and one line per test: its name, size,
// transfers, iterations and total as printed.
func CheckOutput(t *testing.T, out string, want ...[5]string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(want)+1 || lines[0]+"\n" != header {
		t.Fatalf("output:\n%s\nwant the header and %d lines", out, len(want))
	}
	for i, w := range want {
		m := resultLine.FindStringSubmatch(lines[i+1])
		if m == nil || [5]string(m[1:6]) != w {
			t.Errorf("line %q, want %v", lines[i+1], w)
		}
	}
}

// BadArgs wants exit status 2 from run for each of args.
func BadArgs(t *testing.T, run Run, args [][]string) {
	t.Helper()
	for _, a := range args {
		var out, errb bytes.Buffer
		if code := run(context.Background(), a, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", a, code, errb.String())
		}
	}
}
