package simnet

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

func TestClockStartsAtEpoch(t *testing.T) {
	var c Clock
	if got, want := c.Now(), time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("zero Clock reads %v, want %v", got, want)
	}
	if !Epoch().Equal(New(0).Clock().Now()) {
		t.Fatalf("network clock starts at %v, want Epoch %v", New(0).Clock().Now(), Epoch())
	}
}

func TestClockAdvance(t *testing.T) {
	tests := []struct {
		name string
		step func(c *Clock)
		want time.Duration // since epoch, after step from 10ms
	}{
		{"Advance", func(c *Clock) { c.Advance(5 * time.Millisecond) }, 15 * time.Millisecond},
		{"Advance zero", func(c *Clock) { c.Advance(0) }, 10 * time.Millisecond},
		{"AdvanceTo later", func(c *Clock) { c.AdvanceTo(Epoch().Add(time.Second)) }, time.Second},
		{"AdvanceTo now", func(c *Clock) { c.AdvanceTo(Epoch().Add(10 * time.Millisecond)) }, 10 * time.Millisecond},
		{"AdvanceTo earlier keeps time", func(c *Clock) { c.AdvanceTo(Epoch()) }, 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Clock
			c.Advance(10 * time.Millisecond)
			tt.step(&c)
			if got := c.Since(Epoch()); got != tt.want {
				t.Fatalf("clock at %v, want %v", got, tt.want)
			}
		})
	}
}

func TestClockAdvanceNegativePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Advance(-1) did not panic")
		}
	}()
	var c Clock
	c.Advance(-1)
}

// TestClockTimerOrder checks that timers fire in deadline order, ties in
// scheduling order, each seeing the clock at its own deadline.
func TestClockTimerOrder(t *testing.T) {
	var c Clock
	var log []string
	at := func(name string) func() {
		return func() { log = append(log, fmt.Sprintf("%s@%v", name, c.Since(Epoch()))) }
	}
	c.AfterFunc(3*time.Millisecond, at("c"))
	c.AfterFunc(1*time.Millisecond, at("a1"))
	c.AfterFunc(2*time.Millisecond, at("b"))
	c.AfterFunc(1*time.Millisecond, at("a2"))
	c.AfterFunc(1*time.Millisecond, at("a3"))
	c.AfterFunc(10*time.Millisecond, at("late"))

	if next, ok := c.NextTimer(); !ok || !next.Equal(Epoch().Add(time.Millisecond)) {
		t.Fatalf("NextTimer = %v, %v; want epoch+1ms, true", next, ok)
	}
	c.Advance(5 * time.Millisecond)
	want := []string{"a1@1ms", "a2@1ms", "a3@1ms", "b@2ms", "c@3ms"}
	if !reflect.DeepEqual(log, want) {
		t.Fatalf("fired %v, want %v", log, want)
	}
	if got := c.Since(Epoch()); got != 5*time.Millisecond {
		t.Fatalf("clock at %v after Advance, want 5ms", got)
	}
	if next, ok := c.NextTimer(); !ok || !next.Equal(Epoch().Add(10*time.Millisecond)) {
		t.Fatalf("NextTimer = %v, %v; want epoch+10ms, true", next, ok)
	}
}

// TestClockTimerChains checks that timers scheduled by a firing timer fire in
// the same Advance when due, including zero-delay ones, and not before their
// deadline.
func TestClockTimerChains(t *testing.T) {
	var c Clock
	var log []string
	note := func(s string) { log = append(log, fmt.Sprintf("%s@%v", s, c.Since(Epoch()))) }
	c.AfterFunc(time.Millisecond, func() {
		note("first")
		c.AfterFunc(0, func() { note("zero") })
		c.AfterFunc(time.Millisecond, func() { note("second") })
		c.AfterFunc(time.Hour, func() { note("never") })
	})
	c.Advance(3 * time.Millisecond)
	want := []string{"first@1ms", "zero@1ms", "second@2ms"}
	if !reflect.DeepEqual(log, want) {
		t.Fatalf("fired %v, want %v", log, want)
	}
}

func TestClockZeroDelayTimerFiresWithoutMovingTime(t *testing.T) {
	var c Clock
	fired := false
	c.AfterFunc(-time.Second, func() { fired = true })
	c.AdvanceTo(Epoch())
	if !fired {
		t.Fatal("due timer did not fire on AdvanceTo(now)")
	}
	if c.Since(Epoch()) != 0 {
		t.Fatalf("clock moved to %v", c.Since(Epoch()))
	}
}

func TestTimerStopReset(t *testing.T) {
	var c Clock
	var log []string
	a := c.AfterFunc(time.Millisecond, func() { log = append(log, "a") })
	b := c.AfterFunc(time.Millisecond, func() { log = append(log, "b") })
	d := c.AfterFunc(2*time.Millisecond, func() { log = append(log, "d") })

	if !a.Stop() {
		t.Fatal("Stop of a pending timer returned false")
	}
	if a.Stop() {
		t.Fatal("second Stop returned true")
	}
	// Reset to d's deadline: b, then a, now sort after d.
	if !b.Reset(2 * time.Millisecond) {
		t.Fatal("Reset of a pending timer returned false")
	}
	if a.Reset(2 * time.Millisecond) {
		t.Fatal("Reset of a stopped timer returned true")
	}
	c.Advance(5 * time.Millisecond)
	if want := []string{"d", "b", "a"}; !reflect.DeepEqual(log, want) {
		t.Fatalf("fired %v, want %v", log, want)
	}
	if d.Stop() {
		t.Fatal("Stop of a fired timer returned true")
	}
	if _, ok := c.NextTimer(); ok {
		t.Fatal("NextTimer reports a pending timer after all fired")
	}
}

// TestTimerHeapRandomStops cross-checks the timer heap against a sort: many
// timers, some stopped, must fire in (deadline, scheduling) order.
func TestTimerHeapRandomStops(t *testing.T) {
	var c Clock
	var fired []int
	timers := make([]*Timer, 200)
	for i := range timers {
		d := time.Duration((i*7919)%37) * time.Microsecond
		timers[i] = c.AfterFunc(d, func() { fired = append(fired, i) })
	}
	stopped := map[int]bool{}
	for i := 0; i < len(timers); i += 3 {
		timers[i].Stop()
		stopped[i] = true
	}
	c.Advance(time.Second)

	var want []int
	for d := range 37 {
		for i := range timers {
			if !stopped[i] && (i*7919)%37 == d {
				want = append(want, i)
			}
		}
	}
	if !reflect.DeepEqual(fired, want) {
		t.Fatalf("fired %v\nwant %v", fired, want)
	}
}

func TestAfterFuncNilPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("AfterFunc(nil) did not panic")
		}
	}()
	var c Clock
	c.AfterFunc(0, nil)
}
