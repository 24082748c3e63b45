package main

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/oob"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

// -R runs perftest's rdma_cm mode: the exchanges over an rdma_cm control
// connection, the data QPs connected by the cm. --check proves the data
// arrived where the keys said, from the PSNs the cm chose.
func TestRDMACMLoopback(t *testing.T) {
	for i, tc := range []struct {
		test  string
		extra []string
	}{
		{"write_bw", []string{"-q", "2"}},
		{"read_bw", []string{"-q", "2", "-s", "5000"}},
		{"send_bw", []string{"-s", "3000", "-t", "16"}},
		{"write_lat", []string{"-s", "100"}},
		{"read_lat", nil},
	} {
		t.Run(tc.test, func(t *testing.T) {
			if raceEnabled && tc.test == "write_lat" {
				t.Skip("write_lat polls memory the device writes; not race-clean")
			}
			args := append(append([]string{tc.test, "-R"}, loopback(60+i)...), "--json", "--check", "-n", "50")
			code, out, errs := runCmd(t, 60*time.Second, append(args, tc.extra...)...)
			if code != 0 {
				t.Fatalf("exit %d, stderr: %s", code, errs)
			}
			sides := map[string]bool{}
			for _, l := range jsonLines(t, out) {
				side, _ := l["side"].(string)
				sides[side] = true
				if l["test"] != tc.test {
					t.Errorf("line %v", l)
				}
				if n, _ := l["iterations"].(float64); n <= 0 {
					t.Errorf("line %v: no iterations", l)
				}
			}
			if !sides["client"] {
				t.Errorf("no client result in %s", out)
			}
		})
	}
}

// A server and a client of their own (not --loopback): the client starts
// first and retries, as perftest's does, until the server listens; the
// banner says rdma_cm.
func TestRDMACMServerClient(t *testing.T) {
	srv, cli := host(141), host(142)
	port := "18600"
	done := make(chan struct{})
	var code int
	var out, errs string
	go func() {
		defer close(done)
		code, out, errs = runCmd(t, 60*time.Second, "write_bw", "-R", "--bind", cli, "-p", port, "-n", "100", "-u", "18", srv)
	}()
	// A head start for the client: its first REQs may find no listener
	// (either order must work).
	time.Sleep(150 * time.Millisecond)
	scode, sout, serrs := runCmd(t, 60*time.Second, "write_bw", "-R", "--bind", srv, "-p", port, "-u", "18")
	<-done
	if code != 0 || scode != 0 {
		t.Fatalf("client exit %d: %s\nserver exit %d: %s", code, errs, scode, serrs)
	}
	for _, want := range []string{" rdma_cm QPs\t : ON\n", " Data ex. method : rdma_cm\n", " 65536      100 "} {
		if !strings.Contains(out, want) || !strings.Contains(sout, want) {
			t.Errorf("client or server output lacks %q:\n%s\n%s", want, out, sout)
		}
	}
}

func TestRDMACMRefusals(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"send_bw", "-R", "-c", "UD", "--loopback"}, 2, "-R connects RC QPs only"},
		{[]string{"write_bw", "-R", "-c", "UC", "--loopback"}, 2, "-R connects RC QPs only"},
		{[]string{"write_bw", "-R"}, 1, "--bind"},
		// Nobody listens on the server's device: REJ "invalid service ID"
		// after perftest's ten tries.
		{[]string{"write_bw", "-R", "--bind", host(144), "-p", "18601", host(144)}, 1, "invalid service ID"},
	} {
		code, _, errs := runCmd(t, 30*time.Second, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%q: exit %d, %q; want %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
}

// The control connection carries one block per message: a message of
// another size than the block read is refused, not split or joined.
func TestCtrlConnMessageSizes(t *testing.T) {
	ctx := testkit.Context(t)
	open := func(n int) *side {
		s := &side{cfg: &config{udpPort: 4791, ibDev: "goroce0", qpTimeout: 18, test: testKind{verb: verbWrite}},
			addr: testkit.Addr(n)}
		if err := s.openDevice(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.teardown() })
		return s
	}
	srv, cli := open(146), open(147)
	l, err := cm.Listen(net.JoinHostPort(srv.addr.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := srv.acceptCtrl(ctx, l)
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	cli.cfg.port = int(l.Addr().Port())
	cc, err := cli.dialCtrl(ctx, srv.addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sc := <-accepted
	if sc == nil {
		return
	}
	defer sc.Close()
	if _, err := cc.Write([]byte("12345678")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 8)
	if _, err := io.ReadFull(sc, b); err != nil || string(b) != "12345678" {
		t.Fatalf("read %q, %v", b, err)
	}
	if _, err := cc.Write([]byte("1234")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(sc, b); !errors.Is(err, oob.ErrMalformed) {
		t.Errorf("4 bytes read as a block of 8: %v", err)
	}
	// The peer's disconnection is the end of the stream.
	_ = cc.Close()
	if _, err := io.ReadFull(sc, b); !errors.Is(err, io.EOF) {
		t.Errorf("after the peer closed: %v", err)
	}
}

// --psk-file seals the -R connections: with the same key data moves and
// checks out; with another key on the server the client's connection is
// refused and says why; without -R the flag is refused.
func TestRDMACMSealed(t *testing.T) {
	dir := t.TempDir()
	key, other := filepath.Join(dir, "key"), filepath.Join(dir, "other")
	if err := os.WriteFile(key, []byte("  a pre-shared key of 32 bytes..\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, []byte("another pre-shared key, 32 bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCmd(t, 60*time.Second, append(append([]string{"write_bw", "-R", "--psk-file", key}, loopback(70)...),
		"--json", "--check", "-n", "50", "-s", "5000")...)
	if code != 0 || !strings.Contains(out, `"check":"passed"`) {
		t.Fatalf("sealed loopback: exit %d, stderr %s, output %s", code, errs, out)
	}

	srv, cli := host(146), host(147)
	port := "18602"
	done := make(chan struct{})
	go func() {
		defer close(done)
		code, _, errs = runCmd(t, 60*time.Second, "write_bw", "-R", "--psk-file", key, "--bind", cli, "-p", port, "-n", "10", srv)
	}()
	time.Sleep(150 * time.Millisecond)
	_, _, serrs := runCmd(t, 60*time.Second, "write_bw", "-R", "--psk-file", other, "--bind", srv, "-p", port)
	<-done
	if code == 0 || !strings.Contains(errs, "pre-shared key") {
		t.Errorf("mismatched keys: client exit %d, %q (server %q)", code, errs, serrs)
	}

	code, _, errs = runCmd(t, 30*time.Second, "write_bw", "--psk-file", key, "--loopback")
	if code != 2 || !strings.Contains(errs, "--psk-file needs -R") {
		t.Errorf("--psk-file without -R: exit %d, %q", code, errs)
	}
}
