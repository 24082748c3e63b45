package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

// openDevice opens a device with a name unique to the test and a QP, so
// the output has something to show.
func openDevice(t *testing.T, name, addr string) *verbs.Device {
	t.Helper()
	d, err := verbs.Open(verbs.DeviceConfig{Name: name, Addr: netip.MustParseAddr(addr)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	if d.StatsEndpoint() == "" {
		t.Fatal("device has no stats endpoint")
	}
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(4, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	return d
}

func runStat(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String() + errb.String(), code
}

func TestShowsOpenDevices(t *testing.T) {
	openDevice(t, "stattest0", "127.0.6.50")
	openDevice(t, "stattest1", "127.0.6.51")

	out, code := runStat(t, "-d", "stattest0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	if !strings.HasPrefix(out, "link stattest0/1 pid ") || !strings.Contains(out, "addr 127.0.6.50:4791 sent_pkts 0 rcvd_pkts 0 ") {
		t.Errorf("output:\n%s", out)
	}
	if strings.Contains(out, "stattest1") || strings.Count(out, "\n") != 1 {
		t.Errorf("-d stattest0 printed other devices:\n%s", out)
	}

	out, code = runStat(t, "--qp", "-v")
	if code != 0 || !strings.Contains(out, "link stattest1/1") || !strings.Contains(out, "\n    sent_pkts ") ||
		!strings.Contains(out, "type RC state RESET") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}

	out, code = runStat(t, "-j", "-d", "stattest1", "--qp")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	var s verbs.Stats
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if s.Device != "stattest1" || s.Addr != "127.0.6.51" || len(s.QPs) != 1 || len(s.Counters) == 0 || s.Counters[0].Name != "sent_pkts" {
		t.Errorf("JSON: %+v", s)
	}

	out, code = runStat(t, "-d", "stattest1", "-i", "10ms", "-c", "2", "-z")
	if code != 0 || strings.Count(out, "link stattest1/1") != 2 || strings.Contains(out, "sent_pkts") {
		t.Errorf("rates: exit %d, output:\n%s", code, out)
	}
}

func TestCountersMove(t *testing.T) {
	d := openDevice(t, "stattest2", "127.0.6.52")
	c, err := net.Dial("udp", "127.0.6.52:4791")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A datagram too short to be RoCEv2: the device counts it as
	// malformed, and the endpoint must show that.
	for range 3 {
		if _, err := c.Write([]byte("not roce")); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		s, err := verbs.ReadStats(d.StatsEndpoint(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var malformed uint64
		for _, c := range s.Counters {
			if c.Name == "malformed" {
				malformed = c.Value
			}
		}
		if malformed == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("malformed = %d, want 3; stats %+v", malformed, s)
		}
		time.Sleep(10 * time.Millisecond)
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
	if _, err := verbs.ReadStats("/tmp/not-goroce", 1e9); err == nil {
		t.Error("ReadStats accepted a name without the prefix")
	}
}
