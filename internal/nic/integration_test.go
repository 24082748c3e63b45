//go:build linux

package nic

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/libgoroce"
)

// The tests below run C programs against a daemon in this process:
// test/libgoroce/harness.c, and rdma-core's and perftest's tools when
// installed. They need gcc and libibverbs-dev (Debian's headers and
// libibverbs.so, which the programs link and libgoroce.so replaces).

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
	libPath   string
)

// buildC builds libgoroce.so and the harness once per test binary.
func buildC(t *testing.T) (lib, harness string) {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		t.Skip("libibverbs-dev not installed")
	}
	if _, err := os.Stat("/usr/include/rdma/rdma_cma.h"); err != nil {
		t.Skip("librdmacm-dev not installed")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "goroce-nic-test-")
		if buildErr != nil {
			return
		}
		libPath, buildErr = libgoroce.Build(buildDir, "")
		if buildErr != nil {
			return
		}
		out, err := exec.Command("gcc", "-O1", "-g", "-Wall", "-Werror", "-o", filepath.Join(buildDir, "harness"),
			"../../test/libgoroce/harness.c", "-libverbs", "-lpthread").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("harness: %v\n%s", err, out)
			return
		}
		out, err = exec.Command("gcc", "-O1", "-g", "-Wall", "-Werror", "-o", filepath.Join(buildDir, "cmharness"),
			"../../test/libgoroce/cmharness.c", "-lrdmacm", "-libverbs").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("cmharness: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return libPath, filepath.Join(buildDir, "harness")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// program runs argv with libgoroce.so preloaded against srv, within timeout.
func program(ctx context.Context, lib string, srv *Server, argv ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, "GOROCE_NIC_SOCKET="+srv.Addr(), "GOROCE_DEBUG=1")
	cmd.WaitDelay = time.Second
	return cmd
}

func TestHarness(t *testing.T) {
	lib, harness := buildC(t)
	srv := startServer(t)
	for _, args := range [][]string{
		{"loop", "goroce0", "goroce1"},
		{"loop", "goroce0", "goroce1", "4"},
		{"errors", "goroce0"},
		{"twoproc", "goroce1"},
		{"fork", "goroce0", "goroce1"},
		{"freed", "goroce0", "goroce1"},
		{"memrace", "goroce0", "500"},
	} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := program(ctx, lib, srv, append([]string{harness}, args...)...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), args[0]+": ") {
				t.Fatalf("%v\n%s", err, out)
			}
			waitNoSessions(t, srv)
		})
	}
}

// TestDaemonDeath stops the daemon under a program that uses a device: the
// program gets IBV_EVENT_DEVICE_FATAL and errors from its verbs, never a
// hang (the harness checks, under the test's timeout).
func TestDaemonDeath(t *testing.T) {
	lib, harness := buildC(t)
	srv := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := program(ctx, lib, srv, harness, "fatal", "goroce0")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	if err != nil || line != "fatal: ready\n" {
		cmd.Wait()
		t.Fatalf("harness: %q %v\n%s", line, err, stderr.String())
	}
	srv.Close()
	stdin.Write([]byte("go\n"))
	rest, _ := io.ReadAll(out)
	if err := cmd.Wait(); err != nil || !strings.Contains(string(rest), "fatal: ok") {
		t.Fatalf("harness: %v\n%s%s", err, rest, stderr.String())
	}
}

// TestTools runs unmodified Debian binaries: ibv_devinfo and the
// rdma-core pingpongs between goroce0 and goroce1.
func TestTools(t *testing.T) {
	lib, _ := buildC(t)
	if _, err := exec.LookPath("ibv_devinfo"); err != nil {
		t.Skip("ibverbs-utils not installed")
	}
	srv := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := program(ctx, lib, srv, "ibv_devinfo", "-v").CombinedOutput()
	if err != nil {
		t.Fatalf("ibv_devinfo: %v\n%s", err, out)
	}
	for _, want := range []string{"hca_id:\tgoroce0", "hca_id:\tgoroce1", "PORT_ACTIVE", "::ffff:" + testkit.Addr(1).String() + ", RoCE v2", "active_mtu:\t\t4096"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("ibv_devinfo -v lacks %q:\n%s", want, out)
		}
	}
	for i, tool := range []string{"ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong"} {
		t.Run(tool, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			port := fmt.Sprint(18600 + os.Getpid()%1000*4 + i)
			args := []string{"-g", "1", "-n", "200", "-p", port}
			server := program(ctx, lib, srv, append([]string{tool, "-d", "goroce0"}, args...)...)
			var sout strings.Builder
			server.Stdout, server.Stderr = &sout, &sout
			if err := server.Start(); err != nil {
				t.Fatal(err)
			}
			// The client retries until the server listens.
			var cout []byte
			var cerr error
			for {
				cout, cerr = program(ctx, lib, srv, append([]string{tool, "-d", "goroce1"}, append(args, "127.0.0.1")...)...).CombinedOutput()
				if cerr == nil || ctx.Err() != nil || !strings.Contains(string(cout), "Couldn't connect") {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			serr := server.Wait()
			if cerr != nil || serr != nil || !strings.Contains(string(cout), "iters in") {
				t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, cout, serr, sout.String())
			}
		})
	}
	waitNoSessions(t, srv)
}
