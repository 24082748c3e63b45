package rsocket

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

// A connection with keepalive posts probes, which the peer's device
// acknowledges without its program seeing anything: the connection stays
// up and carries data afterwards.
func TestKeepAliveProbes(t *testing.T) {
	testkit.CheckLeaks(t)
	client, server := pair(t, 60, 61, Config{KeepAlive: time.Millisecond})
	probes := func() uint64 {
		client.mu.Lock()
		defer client.mu.Unlock()
		client.progress()
		if client.err != nil {
			t.Fatalf("the connection broke: %v", client.err)
		}
		return client.ka.probes
	}
	testkit.WaitFor(t, "three keepalive probes", func() bool { return probes() >= 3 })
	probes()
	say(t, client, server, "after the probes")
	say(t, server, client, "both ways")
	// Off: no more probes once the one in flight (if any) is posted.
	if err := client.SetKeepAlive(false); err != nil {
		t.Fatal(err)
	}
	if err := client.SetKeepAlivePeriod(-1); err != nil { // the default, still off
		t.Fatal(err)
	}
	client.mu.Lock()
	on := client.ka.on
	client.mu.Unlock()
	if on {
		t.Fatal("keepalive still on")
	}
}

// helperEnv names the role of the test binary re-executed as a peer.
const helperEnv = "GOROCE_RSOCKET_HELPER"

// TestHelperPeer is the peer process of TestKeepAliveVanishedPeer: it
// listens, accepts one connection, reports it and waits to be killed.
// Run normally, it does nothing.
func TestHelperPeer(t *testing.T) {
	if os.Getenv(helperEnv) != "listen" {
		t.Skip("helper process of TestKeepAliveVanishedPeer")
	}
	l, err := Listen("rdma", net.JoinHostPort(testkit.Addr(62).String(), strconv.Itoa(int(testkit.Port()))))
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("listening " + l.Addr().String() + "\n")
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	os.Stdout.WriteString("accepted\n")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent kills it
}

// A peer that vanishes (its process killed: no disconnect, no packet
// more) leaves Read waiting forever unless a keepalive probe finds it
// gone: with one, Read returns the transport's error within a probe
// period plus the retries (8 local ACK timeouts of about 0.5 s), long
// before the deadline that would otherwise end it.
func TestKeepAliveVanishedPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the transport's retries (about 4 s)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperPeer$")
	cmd.Env = append(os.Environ(), helperEnv+"=listen", testkit.HelperEnv())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(out)
	var addr string
	if !lines.Scan() || len(lines.Text()) < 10 {
		t.Fatalf("helper said %q, want its address", lines.Text())
	}
	addr = lines.Text()[len("listening "):]
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Timeout)
	defer cancel()
	d := Dialer{LocalAddr: testkit.Addr(63), Config: Config{KeepAlive: 50 * time.Millisecond}}
	nc, err := d.DialContext(ctx, "rdma", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := nc.(*Conn)
	defer c.Close()
	if !lines.Scan() || lines.Text() != "accepted" {
		t.Fatalf("helper said %q, want accepted", lines.Text())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	// Without keepalive nothing is posted to the dead peer and Read
	// reaches this bound; with it, the probe's failure ends Read first.
	if err := c.SetReadDeadline(time.Now().Add(2 * time.Minute)); err != nil {
		t.Fatal(err)
	}
	n, err := c.Read(make([]byte, 16))
	switch {
	case n != 0 || err == nil:
		t.Fatalf("Read from a dead peer = %d, %v", n, err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		t.Fatalf("Read waited until its deadline: no probe found the peer gone (%v)", err)
	case err == io.EOF:
		t.Fatalf("Read returned EOF: the killed peer cannot have disconnected")
	}
	t.Logf("Read: %v", err)
	if _, err := c.Write([]byte("x")); err == nil {
		t.Fatal("Write after the connection failed succeeded")
	}
}
