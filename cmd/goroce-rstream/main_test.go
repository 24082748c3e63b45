package main

import (
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/rsperf/rsperftest"
)

// The tests run goroce-rstream's server and client against each other in
// this process, each with a device on one of testkit's loopback addresses.

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
			srv, cli := rsperftest.Pair(t, run, 10+2*i, 11+2*i, append(c.args, "-T", "v")...)
			rsperftest.CheckOutput(t, srv, c.want)
			rsperftest.CheckOutput(t, cli, c.want)
		})
	}
}

func TestBadArgs(t *testing.T) {
	rsperftest.BadArgs(t, run, [][]string{{"-S", "x"}, {"-C", "0"}, {"-T", "q"}, {"-T", "f"}, {"-f", "gid", "-b", "127.0.0.1"}, {"-p", "1"}, {"-k", "-1", "-b", "127.0.0.1"}})
}
