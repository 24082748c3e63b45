package verbs_test

import (
	"context"
	"errors"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// Ports rdma-core's tests/test_cq.py and test_cq_events.py: create with and
// without a channel and with bad sizes, resize, destroy while in use, and
// completion events.

func TestCreateCQ(t *testing.T) {
	d := newDevice(t)
	maxCQE := d.Query().MaxCQE
	ch, err := d.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	other, err := rdmatest.OpenDevice(t, verbs.DeviceConfig{Addr: testkit.Addr(4)}).CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		cqe    int
		ch     *verbs.CompChannel
		vector int
		want   error
		field  string
	}{
		{"1", 1, nil, 0, nil, ""},
		{"half", maxCQE / 2, nil, 0, nil, ""},
		{"max", maxCQE, nil, 0, nil, ""},
		{"with channel", 100, ch, 0, nil, ""},
		{"last vector", 4, nil, d.NumCompVectors() - 1, nil, ""},
		{"0", 0, nil, 0, verbs.ErrInvalidArgument, "cqe"},
		{"negative", -1, nil, 0, verbs.ErrInvalidArgument, "cqe"},
		{"max+1", maxCQE + 1, nil, 0, verbs.ErrInvalidArgument, "cqe"},
		{"vector too big", 100, nil, d.NumCompVectors(), verbs.ErrInvalidArgument, "comp_vector"},
		{"vector negative", 100, nil, -1, verbs.ErrInvalidArgument, "comp_vector"},
		{"channel of another device", 4, other, 0, verbs.ErrInvalidArgument, "channel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cq, err := d.CreateCQ(tt.cqe, tt.ch, tt.vector)
			rdmatest.WantError(t, err, tt.want, tt.field)
			if err != nil {
				return
			}
			if cq.Size() < tt.cqe || cq.Channel() != tt.ch || cq.Device() != d {
				t.Errorf("Size %d Channel %v", cq.Size(), cq.Channel())
			}
			if err := cq.Destroy(); err != nil {
				t.Fatal(err)
			}
			rdmatest.WantError(t, cq.Destroy(), verbs.ErrClosed, "cq")
		})
	}
	if err := ch.Destroy(); err != nil {
		t.Errorf("channel Destroy after its CQs: %v", err)
	}
}

func wcWithID(id uint64) verbs.WorkCompletion {
	return verbs.WorkCompletion{WRID: id, Status: verbs.WCSuccess, Opcode: verbs.WCSend, QPNum: 7}
}

func TestCQPushPollOverflow(t *testing.T) {
	d := newDevice(t)
	cq := rdmatest.CQ(t, d, 3)
	buf := make([]verbs.WorkCompletion, 8)
	if n, err := cq.Poll(buf); n != 0 || err != nil {
		t.Fatalf("Poll on empty CQ = %d, %v", n, err)
	}
	for i := range uint64(3) {
		if cq.Push(wcWithID(i), false) {
			t.Fatalf("push %d overflowed", i)
		}
	}
	if !cq.Push(wcWithID(3), false) || cq.OverrunCount() != 1 {
		t.Fatal("push into a full CQ did not report the overrun")
	}
	// The overrun put the CQ in error: it keeps what it holds and accepts
	// nothing more, even with room (see TestCQOverrunState).
	if n, _ := cq.Poll(buf[:1]); n != 1 || buf[0].WRID != 0 {
		t.Fatalf("Poll(1) after the overrun = %d %v", n, buf[:1])
	}
	if !cq.Push(wcWithID(9), false) || cq.OverrunCount() != 2 {
		t.Fatal("a CQ in error accepted a completion")
	}

	// Partial poll, then wrap around the ring, on a CQ that never overran.
	cq = rdmatest.CQ(t, d, 3)
	for i := range uint64(3) {
		cq.Push(wcWithID(i), false)
	}
	if n, _ := cq.Poll(buf[:2]); n != 2 || buf[0].WRID != 0 || buf[1].WRID != 1 {
		t.Fatalf("Poll(2) = %d %v", n, buf[:2])
	}
	cq.Push(wcWithID(4), false)
	cq.Push(wcWithID(5), false)
	n, _ := cq.Poll(buf)
	if n != 3 || buf[0].WRID != 2 || buf[1].WRID != 4 || buf[2].WRID != 5 {
		t.Fatalf("Poll = %d %v, want WRIDs 2 4 5", n, buf[:n])
	}
	if buf[0] != wcWithID(2) {
		t.Errorf("completion not copied whole: %+v", buf[0])
	}
	if n, _ := cq.Poll(nil); n != 0 {
		t.Error("Poll(nil) returned entries")
	}
}

func TestCQPollDoesNotAllocate(t *testing.T) {
	d := newDevice(t)
	cq := rdmatest.CQ(t, d, 16)
	buf := make([]verbs.WorkCompletion, 4)
	allocs := testing.AllocsPerRun(100, func() {
		cq.Push(wcWithID(1), false)
		cq.Push(wcWithID(2), true)
		_, _ = cq.Poll(buf)
	})
	if allocs != 0 {
		t.Errorf("push+Poll allocate %v times", allocs)
	}
}

func TestCQResize(t *testing.T) {
	d := rdmatest.OpenDevice(t, verbs.DeviceConfig{Limits: &verbs.DeviceAttr{MaxCQE: 10}})
	cq := rdmatest.CQ(t, d, 3)
	// Shrink and grow an empty CQ.
	for _, n := range []int{1, 7} {
		if err := cq.Resize(n); err != nil {
			t.Fatalf("Resize(%d): %v", n, err)
		}
		if cq.Size() < n {
			t.Fatalf("Size %d after Resize(%d)", cq.Size(), n)
		}
	}
	// Fill with a wrapped ring, then resize: order is kept.
	buf := make([]verbs.WorkCompletion, 10)
	for i := range uint64(5) {
		cq.Push(wcWithID(i), false)
	}
	cq.Poll(buf[:3])
	for i := uint64(5); i < 9; i++ {
		cq.Push(wcWithID(i), false)
	}
	// Six completions queued (3..8): shrinking below fails.
	rdmatest.WantError(t, cq.Resize(5), verbs.ErrInvalidArgument, "cqe")
	rdmatest.WantError(t, cq.Resize(0), verbs.ErrInvalidArgument, "cqe")
	rdmatest.WantError(t, cq.Resize(11), verbs.ErrInvalidArgument, "cqe")
	if err := cq.Resize(6); err != nil {
		t.Fatal(err)
	}
	n, _ := cq.Poll(buf)
	for i := range n {
		if buf[i].WRID != uint64(3+i) {
			t.Fatalf("after Resize: WRIDs %v", buf[:n])
		}
	}
	if n != 6 {
		t.Fatalf("after Resize: %d completions", n)
	}
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	rdmatest.WantError(t, cq.Resize(4), verbs.ErrClosed, "cq")
	_, err := cq.Poll(buf)
	rdmatest.WantError(t, err, verbs.ErrClosed, "cq")
	rdmatest.WantError(t, cq.ReqNotify(false), verbs.ErrClosed, "cq")
	if !cq.Push(wcWithID(1), false) {
		t.Error("push into a destroyed CQ succeeded")
	}
}

func TestCQDestroyBusy(t *testing.T) {
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	scq, rcq := rdmatest.CQ(t, d, 4), rdmatest.CQ(t, d, 4)
	qp, err := pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: scq, RecvCQ: rcq, Cap: defaultCap})
	if err != nil {
		t.Fatal(err)
	}
	rdmatest.WantError(t, scq.Destroy(), verbs.ErrBusy, "cq")
	rdmatest.WantError(t, rcq.Destroy(), verbs.ErrBusy, "cq")
	if err := qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	for _, cq := range []*verbs.CQ{scq, rcq} {
		if err := cq.Destroy(); err != nil {
			t.Errorf("Destroy after the QP: %v", err)
		}
	}
	_, err = pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: scq, RecvCQ: scq})
	rdmatest.WantError(t, err, verbs.ErrClosed, "send_cq")
}

func TestCompletionEvents(t *testing.T) {
	d := newDevice(t)
	ch, err := d.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fail := verbs.WorkCompletion{WRID: 9, Status: verbs.WCRemAccessErr}
	tests := []struct {
		name      string
		arm       []bool // ReqNotify calls (solicitedOnly)
		push      []verbs.WorkCompletion
		solicited []bool
		events    int
	}{
		{"unarmed", nil, []verbs.WorkCompletion{wcWithID(1)}, []bool{false}, 0},
		{"armed", []bool{false}, []verbs.WorkCompletion{wcWithID(1)}, []bool{false}, 1},
		{"one event per arm", []bool{false}, []verbs.WorkCompletion{wcWithID(1), wcWithID(2)}, []bool{false, false}, 1},
		{"arming twice is one arm", []bool{false, false}, []verbs.WorkCompletion{wcWithID(1), wcWithID(2)}, []bool{false, false}, 1},
		{"solicited ignores unsolicited", []bool{true}, []verbs.WorkCompletion{wcWithID(1)}, []bool{false}, 0},
		{"solicited", []bool{true}, []verbs.WorkCompletion{wcWithID(1), wcWithID(2)}, []bool{false, true}, 1},
		{"solicited by an error", []bool{true}, []verbs.WorkCompletion{fail}, []bool{false}, 1},
		{"next overrides solicited", []bool{true, false}, []verbs.WorkCompletion{wcWithID(1)}, []bool{false}, 1},
		{"solicited does not weaken next", []bool{false, true}, []verbs.WorkCompletion{wcWithID(1)}, []bool{false}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cq, err := d.CreateCQ(8, ch, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.arm {
				if err := cq.ReqNotify(s); err != nil {
					t.Fatal(err)
				}
			}
			for i, wc := range tt.push {
				cq.Push(wc, tt.solicited[i])
			}
			got := 0
			for {
				// A done context still returns pending events.
				cctx, cancel := context.WithCancel(ctx)
				cancel()
				ev, err := ch.GetEvent(cctx)
				if errors.Is(err, context.Canceled) {
					break
				}
				if err != nil || ev != cq {
					t.Fatalf("GetEvent = %v, %v", ev, err)
				}
				got++
			}
			if got != tt.events {
				t.Errorf("%d events, want %d", got, tt.events)
			}
			if got > 0 {
				rdmatest.WantError(t, cq.Destroy(), verbs.ErrBusy, "cq")
				cq.AckEvents(got)
			}
			if err := cq.Destroy(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestGetEventBlocksUntilEvent(t *testing.T) {
	d := newDevice(t)
	ch, _ := d.CreateCompChannel()
	cq, err := d.CreateCQ(4, ch, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	got := make(chan *verbs.CQ)
	go func() {
		ev, err := ch.GetEvent(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- ev
	}()
	cq.Push(wcWithID(1), false)
	if ev := <-got; ev != cq {
		t.Fatalf("event for %v", ev)
	}
	cq.AckEvents(1)

	// Cancellation of a blocked wait.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := ch.GetEvent(ctx)
		errc <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("GetEvent after cancel = %v", err)
	}
}

func TestEventOrderAcrossCQs(t *testing.T) {
	d := newDevice(t)
	ch, _ := d.CreateCompChannel()
	a, _ := d.CreateCQ(4, ch, 0)
	b, _ := d.CreateCQ(4, ch, 0)
	arm := func(cq *verbs.CQ) {
		if err := cq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
	}
	// Events A, B, A: the second event of A comes after B's.
	arm(a)
	a.Push(wcWithID(1), false)
	arm(b)
	b.Push(wcWithID(2), false)
	arm(a)
	a.Push(wcWithID(3), false)
	want := []*verbs.CQ{a, b, a}
	for i, w := range want {
		ev, err := ch.GetEvent(context.Background())
		if err != nil || ev != w {
			t.Fatalf("event %d = %p, %v; want %p", i, ev, err, w)
		}
	}
	a.AckEvents(5) // more than delivered: acknowledges the two
	b.AckEvents(1)
	if err := a.Destroy(); err != nil {
		t.Errorf("Destroy after over-acknowledging: %v", err)
	}

	// Destroying a CQ discards its undelivered events.
	arm(b)
	b.Push(wcWithID(4), false)
	if err := b.Destroy(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ev, err := ch.GetEvent(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("event %v of a destroyed CQ delivered", ev)
	}
}

func TestCompChannelDestroy(t *testing.T) {
	d := newDevice(t)
	ch, _ := d.CreateCompChannel()
	cq, err := d.CreateCQ(4, ch, 0)
	if err != nil {
		t.Fatal(err)
	}
	rdmatest.WantError(t, ch.Destroy(), verbs.ErrBusy, "channel")
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := ch.Destroy(); err != nil {
		t.Fatal(err)
	}
	rdmatest.WantError(t, ch.Destroy(), verbs.ErrClosed, "channel")
	_, err = ch.GetEvent(context.Background())
	rdmatest.WantError(t, err, verbs.ErrClosed, "channel")
	_, err = d.CreateCQ(4, ch, 0)
	rdmatest.WantError(t, err, verbs.ErrClosed, "channel")

	// A CQ without a channel: arming and acknowledging are harmless.
	plain := rdmatest.CQ(t, d, 2)
	if err := plain.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	plain.Push(wcWithID(1), true)
	plain.AckEvents(1)
	if err := plain.Destroy(); err != nil {
		t.Fatal(err)
	}
}
