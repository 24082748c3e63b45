package main

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

// The tests run goroce-rstream's server and client against each other in
// this process, each with a device on one of testkit's loopback addresses.

const header = "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer\n"

// rstreamLine matches a result line: name, size, transfers, iterations,
// total, seconds, Gb/sec, usec/xfer, in rstream's columns.
var rstreamLine = regexp.MustCompile(`^(\S+) +(\S+) +(\S+) +(\S+) +(\S+) +\d+\.\d\ds +\d+\.\d\d +\d+\.\d\d$`)

// pair runs a server on testkit address a and a client from b with the
// same extra arguments, and returns both outputs.
func pair(t *testing.T, a, b int, args ...string) (server, client string) {
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

// checkOutput wants the header and one line per test named.
func checkOutput(t *testing.T, out string, want ...[5]string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(want)+1 || lines[0]+"\n" != header {
		t.Fatalf("output:\n%s\nwant the header and %d lines", out, len(want))
	}
	for i, w := range want {
		m := rstreamLine.FindStringSubmatch(lines[i+1])
		if m == nil || [5]string(m[1:6]) != w {
			t.Errorf("line %q, want %v", lines[i+1], w)
		}
	}
}

func TestCustomVerified(t *testing.T) {
	for i, c := range []struct {
		args []string
		want [5]string
	}{
		{[]string{"-S", "1000", "-C", "50"}, [5]string{"custom", "1000", "50", "1", "97k"}},
		{[]string{"-S", "65537", "-C", "20", "-I", "2"}, [5]string{"custom", "64k", "20", "2", "5m"}},
		{[]string{"-S", "3000000", "-C", "2", "-B", "65536"}, [5]string{"custom", "2.8m", "2", "1", "11m"}},
		{[]string{"-S", "100000", "-C", "10", "-T", "s"}, [5]string{"custom", "97k", "10", "1", "1.9m"}}, // TCP
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			srv, cli := pair(t, 10+2*i, 11+2*i, append(c.args, "-T", "v")...)
			checkOutput(t, srv, c.want)
			checkOutput(t, cli, c.want)
		})
	}
}

func TestBadArgs(t *testing.T) {
	for _, args := range [][]string{{"-S", "x"}, {"-C", "0"}, {"-T", "q"}, {"-T", "f"}, {"-f", "gid", "-b", "127.0.0.1"}, {"-p", "1"}, {"-k", "-1", "-b", "127.0.0.1"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}
