package main

import (
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/rsperf"
	"github.com/goroce/goroce/internal/rsperf/rsperftest"
	"github.com/goroce/goroce/verbs"
)

// The tests run goroce-riostream's server and client against each other
// in this process, each with a device on one of testkit's loopback
// addresses.

// riostream's custom test, data verified on both sides. Each side watches
// the last byte of its mapped buffer, which the peer's device stores
// into: the race detector reports that poll as a race with the device's
// copy (see verbs' package documentation), so this test runs without
// -race only (scripts/test.sh runs it so).
func TestCustomVerified(t *testing.T) {
	if raceDetector {
		t.Skip("polls memory the device stores into: run without -race")
	}
	for i, c := range []struct {
		args []string
		want [5]string
	}{
		{[]string{"-S", "64", "-C", "1", "-I", "500"}, [5]string{"custom", "64", "1", "500", "62k"}},
		{[]string{"-S", "1000", "-C", "50"}, [5]string{"custom", "1000", "50", "1", "97k"}},
		{[]string{"-S", "65537", "-C", "20", "-I", "2"}, [5]string{"custom", "64k", "20", "2", "5m"}},
		{[]string{"-S", "3000000", "-C", "2", "-B", "65536"}, [5]string{"custom", "2.8m", "2", "1", "11m"}},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			srv, cli := rsperftest.Pair(t, run, 10+2*i, 11+2*i, append(c.args, "-T", "v")...)
			rsperftest.CheckOutput(t, srv, c.want)
			rsperftest.CheckOutput(t, cli, c.want)
		})
	}
}

// recv_xfer's check: the bytes before the marker against verify_buf's
// counter, carried from transfer to transfer; a byte that differs and
// stays so (no store moves the region's count) is reported as riostream
// does.
func TestVerify(t *testing.T) {
	dev, err := verbs.Open(verbs.DeviceConfig{Addr: testkit.Addr(30)})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 300)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	tr := &tester{cfg: &config{Options: rsperf.Options{Verify: true}}, settle: time.Millisecond}
	ctx := testkit.Context(t)
	for round := range 2 {
		for i := range buf[:299] {
			buf[i] = byte(round*299 + i)
		}
		buf[299] = byte(round)
		if err := tr.recvXfer(ctx, mr, buf, byte(round)); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	if tr.verified != 598 {
		t.Fatalf("verified %d bytes, want 598", tr.verified)
	}
	for i := range buf[:299] {
		buf[i] = byte(598 + i)
	}
	buf[17]++ // the 18th byte of the third transfer is wrong
	buf[299] = 2
	err = tr.recvXfer(ctx, mr, buf, 2)
	if err == nil || err.Error() != "data verification failed byte 615" {
		t.Fatalf("recvXfer of a wrong byte: %v, want data verification failed byte 615", err)
	}
}

func TestBadArgs(t *testing.T) {
	rsperftest.BadArgs(t, run, [][]string{{"-S", "x"}, {"-S", "1"}, {"-C", "0"}, {"-T", "q"}, {"-T", "s"}, {"-f", "gid", "-b", "127.0.0.1"}, {"-p", "1"}, {"-k", "1"}})
}
