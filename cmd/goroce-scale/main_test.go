package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

// The tests bind testkit's addresses of this process's own, which no other
// test process uses.

// addrs is the -addrs value for testkit's addresses number a and b.
func addrs(a, b int) string { return testkit.Addr(a).String() + "," + testkit.Addr(b).String() }

func runScale(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code = run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestSmallRun(t *testing.T) {
	// 3,000 MRs: ~1 MB of registrations, well above the heap's noise
	// between two samples (a few hundred MRs measured negative once).
	code, out, errs := runScale(t, "-qps", "20", "-mrs", "3000", "-mr-size", "4096", "-mr-buffer", "65536",
		"-active", "8", "-size", "8192", "-window", "16", "-duration", "200ms",
		"-addrs", addrs(1, 2), "-json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	switch {
	case r.QPs != 20 || r.SQDepth != 16 || r.Active != 8 || r.Window != 16:
		t.Errorf("configuration not reported: %+v", r)
	case r.MRs != 3000 || r.MRsAsked != 3000 || r.MRSize != 4096:
		t.Errorf("MRs: %+v", r)
	case r.QPHeapBytes <= 0 || r.MRHeapBytes <= 0:
		// Each QP and MR holds device state on the Go heap.
		t.Errorf("memory per object not positive: QP %.0f, MR %.0f", r.QPHeapBytes, r.MRHeapBytes)
	case r.QPRate <= 0 || r.RegRate <= 0 || r.DeregRate <= 0:
		t.Errorf("rates: %+v", r)
	case r.OneQPMBps <= 0 || r.ManyQPMBps <= 0 || r.ManyQPRatio <= 0:
		t.Errorf("throughput: %+v", r)
	case r.ActiveTouched != 8:
		// Round robin must give every active QP traffic.
		t.Errorf("%d of 8 active QPs carried traffic", r.ActiveTouched)
	}
}

func TestTable(t *testing.T) {
	code, out, errs := runScale(t, "-qps", "2", "-mrs", "10", "-mr-buffer", "65536", "-active", "2",
		"-size", "4096", "-window", "4", "-duration", "100ms", "-addrs", addrs(3, 4))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"| measure | value |", "| connected QP pairs | 2 (send queue depth 4) |",
		"| memory regions | 10 of 4096 bytes |", "| 2 QPs / 1 QP |", "| losses, 2 QP run |"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// More MRs than a device holds: register max_mr and say so, rather than
// fail after a long registration loop.
func TestMRsCappedAtMaxMR(t *testing.T) {
	code, out, errs := runScale(t, "-qps", "1", "-active", "0", "-mrs", "3000", "-max-mr", "2000", "-mr-buffer", "65536",
		"-addrs", addrs(5, 6), "-json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.MaxMR != 2000 || r.MRs != r.MaxMR || r.MRsAsked != 3000 {
		t.Fatalf("registered %d of %d asked, max_mr %d", r.MRs, r.MRsAsked, r.MaxMR)
	}
	if !strings.Contains(errs, "above the device's max_mr") {
		t.Errorf("no notice of the cap on stderr: %q", errs)
	}
}

func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-qps", "0"}, "at least one QP pair"},
		{[]string{"-active", "11", "-qps", "10"}, "-active 11"},
		{[]string{"-addrs", testkit.Addr(1).String()}, "want FIRST,SECOND"},
		{[]string{"-addrs", addrs(1, 1)}, "must differ"},
		{[]string{"-addrs", testkit.Addr(1).String() + ",nope"}, "-addrs"},
		{[]string{"-mr-size", "8192", "-mr-buffer", "4096"}, "-mr-size"},
		{[]string{"-window", "64", "-sq-depth", "8"}, "-sq-depth 8"},
		{[]string{"-duration", "0s"}, "-duration"},
		{[]string{"-udp-port", "70000"}, "not a UDP port"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		code, _, errs := runScale(t, tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}

// -conns sets up connections through the cm and closes them: every one
// must reach both sides (the measurement waits for each passive side's
// connection, then for its end by the peer's DREQ).
func TestConns(t *testing.T) {
	code, out, errs := runScale(t, "-conns", "40", "-conn-parallel", "4", "-cm-port", "18530",
		"-addrs", addrs(7, 8), "-json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r connReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	switch {
	case r.Conns != 40 || r.Parallel != 4 || r.SQDepth != 16:
		t.Errorf("configuration not reported: %+v", r)
	case r.SetupRate <= 0 || r.TeardownRate <= 0 || r.DialP50Ms <= 0 || r.DialP99Ms < r.DialP50Ms:
		t.Errorf("rates: %+v", r)
	case r.HeapBytes <= 0:
		// Each connection holds two QPs and the cm's records.
		t.Errorf("memory per connection not positive: %+v", r)
	}
	code, out, errs = runScale(t, "-conns", "3", "-conn-parallel", "2", "-cm-port", "18531", "-addrs", addrs(9, 10))
	if code != 0 || !strings.Contains(out, "| RC connections through the cm | 3 (2 set up at once, send queue depth 16) |") {
		t.Errorf("exit %d: %s%s", code, out, errs)
	}
}

func TestConnsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-conns", "-1"}, {"-conns", "5", "-conn-parallel", "65"}, {"-conns", "5", "-cm-port", "0"}} {
		if code, _, _ := runScale(t, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}
