// Package testkit is the half of goroce's test harness that needs no
// device: loopback addresses of the test process's own, waiting with a
// deadline, goroutine leak checks and error matching.
//
// rdmatest builds devices and connected QPs on it. Packages that verbs
// imports (netio, transport) and verbs' own internal tests cannot import
// rdmatest, which imports verbs, so they use testkit directly.
package testkit

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Timeout bounds every wait of a test for something that should happen:
// reaching it means the awaited event never happened, so the test fails
// rather than hangs. Nothing is asserted about how long things take.
const Timeout = 10 * time.Second

// Context returns a context that ends after Timeout or when the test ends.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)
	return ctx
}

// WaitFor polls cond until it holds, failing t if it does not within
// Timeout; what names the awaited event in the failure.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not within %v", what, Timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// CheckLeaks fails t if goroutines started after the call are still
// running when the returned check runs: at the latest when t ends (call
// CheckLeaks first, so that its cleanup runs after the test's others), or
// earlier by calling it. Goroutines take a moment to finish after the
// objects that own them are closed, so the check waits up to Timeout for
// the count to come down before it fails, with every goroutine's stack.
func CheckLeaks(t testing.TB) (check func()) {
	before := runtime.NumGoroutine()
	var once sync.Once
	check = func() {
		t.Helper()
		once.Do(func() {
			deadline := time.Now().Add(Timeout)
			for runtime.NumGoroutine() > before {
				if time.Now().After(deadline) {
					t.Errorf("goroutine leak: %d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), stacks())
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	t.Cleanup(check)
	return check
}

// WaitGone waits up to Timeout until no goroutine runs a function whose
// name contains one of frames (say "goroce/verbs.(*engine)"), failing t
// otherwise. It is CheckLeaks for tests that cannot count goroutines,
// because something else (the fuzzing engine) starts its own meanwhile.
func WaitGone(t testing.TB, frames ...string) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		s := stacks()
		left := false
		for _, f := range frames {
			left = left || strings.Contains(s, f)
		}
		if !left {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines of %q left behind:\n%s", frames, s)
		}
		time.Sleep(time.Millisecond)
	}
}

func stacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// WantErr fails t unless err matches every target with errors.Is; with no
// target, unless err is nil.
func WantErr(t testing.TB, err error, targets ...error) {
	t.Helper()
	if msg := errProblem(err, targets); msg != "" {
		t.Fatal(msg)
	}
}

// WantErrAs is WantErr for one target, followed by check on err's first
// error of type E (which must exist): check returns what is wrong with it,
// or "" if nothing is.
func WantErrAs[E error](t testing.TB, err, target error, check func(E) string) {
	t.Helper()
	WantErr(t, err, target)
	if target == nil {
		return
	}
	var e E
	if !errors.As(err, &e) {
		t.Fatalf("error %q (%T) is not a %T", err, err, e)
	}
	if msg := check(e); msg != "" {
		t.Fatalf("error %q: %s", err, msg)
	}
}

// WantFieldErr is WantErrAs for an error type whose values name the field
// at fault (fieldOf) and whose messages begin with prefix (a package's
// "verbs: "): err's first E must name field, unless field is empty.
func WantFieldErr[E error](t testing.TB, err, target error, field string, fieldOf func(E) string, prefix string) {
	t.Helper()
	WantErrAs(t, err, target, func(e E) string {
		if got := fieldOf(e); field != "" && got != field {
			return fmt.Sprintf("names field %q, want %q", got, field)
		}
		if !strings.HasPrefix(err.Error(), prefix) {
			return fmt.Sprintf("lacks the prefix %q", prefix)
		}
		return ""
	})
}

func errProblem(err error, targets []error) string {
	switch {
	case len(targets) == 0 || len(targets) == 1 && targets[0] == nil:
		if err != nil {
			return fmt.Sprintf("unexpected error: %v", err)
		}
		return ""
	case err == nil:
		return fmt.Sprintf("no error, want %v", targets)
	}
	for _, target := range targets {
		if !errors.Is(err, target) {
			return fmt.Sprintf("error %q does not match %q", err, target)
		}
	}
	return ""
}

// BlockEnv is the environment variable through which a helper process
// (a test binary re-executed by its test) shares its parent's addresses:
// see HelperEnv.
const BlockEnv = "GOROCE_TEST_BLOCK"

// blocks is the number of address blocks: 127.128.0.0 to 127.255.255.0.
const blocks = 128 * 256

// block is this process's block of loopback addresses.
var block = func() int {
	if n, err := strconv.Atoi(os.Getenv(BlockEnv)); err == nil && n >= 0 && n < blocks {
		return n
	}
	return os.Getpid() % blocks
}()

// Addr returns the loopback address number i (1 to 254) of this test
// process: 127.B.X.i, with B (128 to 255) and X derived from the process
// id. Linux routes all of 127.0.0.0/8 to the loopback interface, and every
// device binds the RoCEv2 port of its address, so the test binaries that
// `go test ./...` runs at the same time (and those of another checkout)
// must not share one: processes whose ids differ by less than 32,768 get
// distinct blocks. Addresses below 127.128.0.0 stay for the tools'
// defaults (127.0.0.1) and tests of their own.
func Addr(i int) netip.Addr {
	if i < 1 || i > 254 {
		panic(fmt.Sprintf("testkit.Addr(%d): want 1 to 254", i))
	}
	return netip.AddrFrom4([4]byte{127, byte(128 + block/256), byte(block % 256), byte(i)})
}

// Port returns a UDP port of this test process's own, for devices on an
// address every process shares (::1): from 20,000 to 29,999, below the
// kernel's ephemeral range, distinct for processes whose ids differ by
// less than 10,000.
func Port() uint16 { return uint16(20000 + block%10000) }

// CapturesEnv names a directory of rxe captures to use instead of
// shared/rxe-vm/captures beside the repository (for a checkout elsewhere).
const CapturesEnv = "GOROCE_CAPTURES"

// Captures returns the paths of the real rxe captures (shared/rxe-vm, see
// its README) named, or all *.pcap files if none is named, skipping the
// test if there are none: the tests that decode them need ../shared beside
// the repository, which a bare checkout lacks.
func Captures(t testing.TB, names ...string) []string {
	t.Helper()
	dir := CapturesDir()
	var paths []string
	if len(names) == 0 {
		paths, _ = filepath.Glob(filepath.Join(dir, "*.pcap"))
	}
	for _, n := range names {
		if p := filepath.Join(dir, n); fileExists(p) {
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 || len(paths) < len(names) {
		t.Skipf("rxe captures %q not in %s", names, dir)
	}
	return paths
}

// CapturesDir is the directory of the rxe captures: $GOROCE_CAPTURES, or
// shared/rxe-vm/captures beside the repository (the directory above the
// one holding go.mod, found from the working directory up).
func CapturesDir() string {
	if d := os.Getenv(CapturesEnv); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for !fileExists(filepath.Join(dir, "go.mod")) {
		up := filepath.Dir(dir)
		if up == dir {
			return ""
		}
		dir = up
	}
	return filepath.Join(filepath.Dir(dir), "shared", "rxe-vm", "captures")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// HelperEnv returns the environment entry ("GOROCE_TEST_BLOCK=n") that
// gives a helper process the addresses of this one, so that the two can
// name each other's devices.
func HelperEnv() string { return BlockEnv + "=" + strconv.Itoa(block) }
