package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// openDevice opens a device named name on the test process's address
// number host, with a QP, so the output has something to show. The
// names carry the process id: goroce-stat sees the devices of every
// process, and another run of these tests may have its own open.
func openDevice(t *testing.T, name string, host int) *verbs.Device {
	t.Helper()
	e := rdmatest.NewEnd(t, rdmatest.EndOptions{Addr: testkit.Addr(host), Device: verbs.DeviceConfig{Name: name},
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if e.Dev.StatsEndpoint() == "" {
		t.Fatal("device has no stats endpoint")
	}
	return e.Dev
}

// devName is the name of the test's device n.
func devName(n int) string { return fmt.Sprintf("stattest%d-%d", os.Getpid(), n) }

func runStat(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String() + errb.String(), code
}

func TestShowsOpenDevices(t *testing.T) {
	dev0, dev1 := devName(0), devName(1)
	openDevice(t, dev0, 50)
	openDevice(t, dev1, 51)

	out, code := runStat(t, "-d", dev0)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	if !strings.HasPrefix(out, "link "+dev0+"/1 pid ") || !strings.Contains(out, "addr "+testkit.Addr(50).String()+":4791 sent_pkts 0 rcvd_pkts 0 ") {
		t.Errorf("output:\n%s", out)
	}
	if strings.Contains(out, dev1) || strings.Count(out, "\n") != 1 {
		t.Errorf("-d %s printed other devices:\n%s", dev0, out)
	}

	out, code = runStat(t, "--qp", "-v")
	if code != 0 || !strings.Contains(out, "link "+dev1+"/1") || !strings.Contains(out, "\n    sent_pkts ") ||
		!strings.Contains(out, "type RC state RESET") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}

	out, code = runStat(t, "-j", "-d", dev1, "--qp")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	var s verbs.Stats
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if s.Device != dev1 || s.Addr != testkit.Addr(51).String() || len(s.QPs) != 1 || len(s.Counters) == 0 || s.Counters[0].Name != "sent_pkts" {
		t.Errorf("JSON: %+v", s)
	}

	out, code = runStat(t, "-d", strconv.Itoa(os.Getpid())+"/"+dev1, "-i", "10ms", "-c", "2", "-z")
	if code != 0 || strings.Count(out, "link "+dev1+"/1") != 2 || strings.Contains(out, "sent_pkts") {
		t.Errorf("rates: exit %d, output:\n%s", code, out)
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-d", "no-such-device"}, 1, `no goroce device "no-such-device" is open`},
		{[]string{"extra"}, 2, "unexpected argument"},
		{[]string{"-c", "-1"}, 2, "must not be negative"},
		{[]string{"--bogus"}, 2, "flag provided but not defined"},
	} {
		out, code := runStat(t, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, output %q; want exit %d and %q", tc.args, code, out, tc.code, tc.want)
		}
	}
}
