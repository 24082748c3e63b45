package testkit

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
)

// Program is a command's run function running on a goroutine of the test,
// as a server the test then talks to: its output is kept, and the test can
// wait for a line (the server's "listening on ...") and for its end.
type Program struct {
	done chan struct{}
	err  error // what run returned, once done is closed

	mu      sync.Mutex
	all     bytes.Buffer
	partial []byte
	lines   []string // complete lines not yet looked at by Await
	more    chan struct{}
}

// Start runs run on a goroutine, writing to the Program.
func Start(run func(stdout io.Writer) error) *Program {
	p := &Program{done: make(chan struct{}), more: make(chan struct{}, 1)}
	go func() {
		p.err = run(p)
		close(p.done)
	}()
	return p
}

// Write keeps b and hands over the lines it completes.
func (p *Program) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.all.Write(b)
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			break
		}
		p.lines = append(p.lines, string(p.partial[:i]))
		p.partial = p.partial[i+1:]
	}
	select {
	case p.more <- struct{}{}:
	default:
	}
	return len(b), nil
}

// String returns everything the program wrote so far.
func (p *Program) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.all.String()
}

// Await returns the rest of the first line not looked at yet that begins
// with prefix, failing t if the program ends, or ctx does, before it
// writes one.
func (p *Program) Await(t testing.TB, ctx context.Context, prefix string) string {
	t.Helper()
	for {
		p.mu.Lock()
		for len(p.lines) > 0 {
			line := p.lines[0]
			p.lines = p.lines[1:]
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				p.mu.Unlock()
				return rest
			}
		}
		p.mu.Unlock()
		select {
		case <-p.more:
		case <-p.done:
			// Lines written just before the end may be waiting.
			select {
			case <-p.more:
				continue
			default:
			}
			t.Fatalf("the program ended (%v) before writing %q:\n%s", p.err, prefix, p)
		case <-ctx.Done():
			t.Fatalf("no line %q: %v:\n%s", prefix, ctx.Err(), p)
		}
	}
}

// Wait waits for the program to end and returns what it returned.
func (p *Program) Wait() error {
	<-p.done
	return p.err
}

// Done is closed when the program has ended.
func (p *Program) Done() <-chan struct{} { return p.done }
