package testkit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
)

func TestAddr(t *testing.T) {
	a, b := Addr(1), Addr(254)
	if !a.IsLoopback() || !b.IsLoopback() || a.As4()[1] < 128 || a.As4()[3] != 1 || b.As4()[3] != 254 {
		t.Fatalf("Addr(1) = %v, Addr(254) = %v", a, b)
	}
	if a.As4()[1] != b.As4()[1] || a.As4()[2] != b.As4()[2] {
		t.Fatalf("Addr(1) = %v and Addr(254) = %v are in different blocks", a, b)
	}
	// The address is usable: bind it.
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: a.AsSlice()})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	for _, i := range []int{0, 255} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Addr(%d) did not panic", i)
				}
			}()
			Addr(i)
		}()
	}
	if want := fmt.Sprintf("%s=%d", BlockEnv, os.Getpid()%blocks); os.Getenv(BlockEnv) == "" && HelperEnv() != want {
		t.Errorf("HelperEnv() = %q, want %q", HelperEnv(), want)
	}
}

// recorder is a testing.TB that records a failure instead of failing;
// like testing.T, it ends the goroutine on Fatal.
type recorder struct {
	testing.TB
	failed bool
	msg    string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatal(args ...any) {
	r.failed, r.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// record runs f with a recorder on a goroutine of its own.
func record(t *testing.T, f func(testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

type codeErr struct{ code int }

func (e *codeErr) Error() string { return fmt.Sprintf("code %d", e.code) }
func (e *codeErr) Unwrap() error { return io.EOF }

func TestWantErr(t *testing.T) {
	wrapped := fmt.Errorf("reading: %w", &codeErr{7})
	tests := []struct {
		name    string
		err     error
		targets []error
		fail    bool
	}{
		{"nil wanted", nil, nil, false},
		{"nil target", nil, []error{nil}, false},
		{"unexpected", io.EOF, nil, true},
		{"missing", nil, []error{io.EOF}, true},
		{"match", wrapped, []error{io.EOF}, false},
		{"all match", wrapped, []error{io.EOF, wrapped}, false},
		{"one does not", wrapped, []error{io.EOF, io.ErrUnexpectedEOF}, true},
	}
	for _, tt := range tests {
		r := record(t, func(tb testing.TB) { WantErr(tb, tt.err, tt.targets...) })
		if r.failed != tt.fail {
			t.Errorf("%s: failed %v (%q), want %v", tt.name, r.failed, r.msg, tt.fail)
		}
	}
	code := func(want int) func(*codeErr) string {
		return func(e *codeErr) string {
			if e.code != want {
				return fmt.Sprintf("code %d, want %d", e.code, want)
			}
			return ""
		}
	}
	for _, tt := range []struct {
		name string
		err  error
		want int
		fail bool
	}{
		{"right code", wrapped, 7, false},
		{"wrong code", wrapped, 8, true},
		{"no such type", io.EOF, 7, true},
	} {
		r := record(t, func(tb testing.TB) { WantErrAs(tb, tt.err, io.EOF, code(tt.want)) })
		if r.failed != tt.fail {
			t.Errorf("%s: failed %v (%q), want %v", tt.name, r.failed, r.msg, tt.fail)
		}
	}
	field := func(e *codeErr) string { return fmt.Sprint(e.code) }
	for _, tt := range []struct {
		name, field, prefix string
		fail                bool
	}{
		{"field and prefix", "7", "code", false},
		{"any field", "", "code", false},
		{"wrong field", "8", "code", true},
		{"wrong prefix", "7", "reading", true},
	} {
		r := record(t, func(tb testing.TB) { WantFieldErr(tb, &codeErr{7}, io.EOF, tt.field, field, tt.prefix) })
		if r.failed != tt.fail {
			t.Errorf("%s: failed %v (%q), want %v", tt.name, r.failed, r.msg, tt.fail)
		}
	}
	if !errors.Is(wrapped, io.EOF) {
		t.Fatal("test error does not unwrap")
	}
}

func TestWaitForAndLeaks(t *testing.T) {
	check := CheckLeaks(t)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		<-stop
		close(done)
	}()
	n := 0
	WaitFor(t, "three looks", func() bool { n++; return n == 3 })
	close(stop)
	<-done
	check()
	WaitGone(t, "testkit.TestWaitForAndLeaks.func")
}

func TestProgram(t *testing.T) {
	release := make(chan struct{})
	p := Start(func(w io.Writer) error {
		fmt.Fprint(w, "starting\nlistening on ")
		fmt.Fprint(w, "127.0.0.1:5; ok\n")
		<-release
		fmt.Fprintln(w, "bye")
		return io.EOF
	})
	ctx := Context(t)
	if got := p.Await(t, ctx, "listening on "); got != "127.0.0.1:5; ok" {
		t.Errorf("Await = %q", got)
	}
	close(release)
	if err := p.Wait(); err != io.EOF {
		t.Errorf("Wait = %v", err)
	}
	if p.String() != "starting\nlistening on 127.0.0.1:5; ok\nbye\n" {
		t.Errorf("String = %q", p.String())
	}
	// A line after the end is still found; a missing one fails.
	if got := p.Await(t, ctx, "by"); got != "e" {
		t.Errorf("Await after the end = %q", got)
	}
	if r := record(t, func(tb testing.TB) { p.Await(tb, ctx, "never") }); !r.failed || !strings.Contains(r.msg, "ended") {
		t.Errorf("Await of a missing line: failed %v, %q", r.failed, r.msg)
	}
}
