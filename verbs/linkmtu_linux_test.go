package verbs

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestActiveMTUFollowsLink opens devices on a veth pair inside a network
// namespace of the test's own, changes the link's MTU and watches the
// port's active MTU follow: the first change through the periodic
// re-read, the others by expiring the cache. It needs root and ip(8).
func TestActiveMTUFollowsLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespace, veth)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8)")
	}
	ns := fmt.Sprintf("goroce-mtu-%d", os.Getpid())
	ip := func(args ...string) error {
		out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %v: %v: %s", args, err, out)
		}
		return nil
	}
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	for _, args := range [][]string{
		{"link", "add", "gva", "type", "veth", "peer", "name", "gvb"},
		{"addr", "add", "10.97.0.1/24", "dev", "gva"},
		{"addr", "add", "10.97.0.2/24", "dev", "gva"},
		{"addr", "add", "fd97::1/64", "dev", "gva", "nodad"},
		{"link", "set", "gva", "mtu", "1500", "up"},
		{"link", "set", "gvb", "up"},
		{"link", "set", "lo", "up"},
	} {
		if err := ip(args...); err != nil {
			t.Fatal(err)
		}
	}
	// The devices live in the namespace: open and query them from a
	// thread that entered it, and let that thread end with the test.
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			t.Error(err)
			return
		}
		followLink(t, ip)
	}()
	<-done
}

// followLink is TestActiveMTUFollowsLink's part inside the namespace. It
// runs on a goroutine of its own, so it reports with t.Error and returns.
func followLink(t *testing.T, ip func(...string) error) {
	var devs []*Device
	defer func() {
		for _, d := range devs {
			d.Close()
		}
	}()
	for _, c := range []DeviceConfig{
		{Addr: netip.MustParseAddr("10.97.0.1")},
		{Addr: netip.MustParseAddr("fd97::1")},
		{Addr: netip.MustParseAddr("127.0.0.1")},
		{Addr: netip.MustParseAddr("10.97.0.2"), MTU: MTU512},
	} {
		c.NoStatsEndpoint = true
		d, err := Open(c)
		if err != nil {
			t.Error(err)
			return
		}
		devs = append(devs, d)
	}
	v4, v6, lo, fixed := devs[0], devs[1], devs[2], devs[3]
	active := func(d *Device) MTU {
		p, err := d.QueryPort(1)
		if err != nil {
			t.Error(err)
		}
		return p.ActiveMTU
	}
	expire := func(d *Device) {
		d.mtu.mu.Lock()
		d.mtu.read = time.Time{}
		d.mtu.mu.Unlock()
	}
	if got := active(v4); got != MTU1024 {
		t.Errorf("IPv4 at link MTU 1500: %v, want 1024", got)
	}
	if got := active(v6); got != MTU1024 {
		t.Errorf("IPv6 at link MTU 1500: %v, want 1024", got)
	}
	// The first change shows by itself within linkMTURefresh.
	if err := ip("link", "set", "gva", "mtu", "9000"); err != nil {
		t.Error(err)
		return
	}
	deadline := time.Now().Add(30 * linkMTURefresh)
	for active(v4) != MTU4096 && time.Now().Before(deadline) {
		time.Sleep(linkMTURefresh / 10)
	}
	if got := active(v4); got != MTU4096 {
		t.Errorf("IPv4 after link MTU 1500 → 9000: %v, want 4096", got)
		return
	}
	steps := []struct {
		link       string
		want4      MTU
		want6      MTU // 0: not checked (IPv6 leaves a link below 1280)
		wantFixed  MTU
		wantLoback MTU
	}{
		{"4200", MTU4096, MTU4096, MTU512, MTU4096},
		{"4176", MTU4096, MTU2048, MTU512, MTU4096},
		{"2200", MTU2048, MTU2048, MTU512, MTU4096},
		{"1500", MTU1024, MTU1024, MTU512, MTU4096},
		{"1100", MTU512, 0, MTU512, MTU4096},
		{"9000", MTU4096, 0, MTU512, MTU4096},
	}
	for _, s := range steps {
		if err := ip("link", "set", "gva", "mtu", s.link); err != nil {
			t.Error(err)
			return
		}
		for _, d := range []*Device{v4, v6, lo, fixed} {
			expire(d)
		}
		if got := active(v4); got != s.want4 {
			t.Errorf("IPv4 at link MTU %s: %v, want %v", s.link, got, s.want4)
		}
		if got := active(v6); s.want6 != 0 && got != s.want6 {
			t.Errorf("IPv6 at link MTU %s: %v, want %v", s.link, got, s.want6)
		}
		if got := active(fixed); got != s.wantFixed {
			t.Errorf("DeviceConfig.MTU 512 at link MTU %s: %v, want it kept", s.link, got)
		}
		if got := active(lo); got != s.wantLoback {
			t.Errorf("loopback while the veth is at %s: %v, want 4096", s.link, got)
		}
	}
}
