package verbs

import (
	"context"
	"errors"
	"net/netip"
	"testing"
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
	other, err := openDevice(t, DeviceConfig{Addr: netip.MustParseAddr("127.0.1.4")}).CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		cqe    int
		ch     *CompChannel
		vector int
		want   error
		field  string
	}{
		{"1", 1, nil, 0, nil, ""},
		{"half", maxCQE / 2, nil, 0, nil, ""},
		{"max", maxCQE, nil, 0, nil, ""},
		{"with channel", 100, ch, 0, nil, ""},
		{"last vector", 4, nil, d.NumCompVectors() - 1, nil, ""},
		{"0", 0, nil, 0, ErrInvalidArgument, "cqe"},
		{"negative", -1, nil, 0, ErrInvalidArgument, "cqe"},
		{"max+1", maxCQE + 1, nil, 0, ErrInvalidArgument, "cqe"},
		{"vector too big", 100, nil, d.NumCompVectors(), ErrInvalidArgument, "comp_vector"},
		{"vector negative", 100, nil, -1, ErrInvalidArgument, "comp_vector"},
		{"channel of another device", 4, other, 0, ErrInvalidArgument, "channel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cq, err := d.CreateCQ(tt.cqe, tt.ch, tt.vector)
			wantErr(t, err, tt.want, tt.field)
			if err != nil {
				return
			}
			if cq.Size() < tt.cqe || cq.Channel() != tt.ch || cq.Device() != d {
				t.Errorf("Size %d Channel %v", cq.Size(), cq.Channel())
			}
			if err := cq.Destroy(); err != nil {
				t.Fatal(err)
			}
			wantErr(t, cq.Destroy(), ErrClosed, "cq")
		})
	}
	if err := ch.Destroy(); err != nil {
		t.Errorf("channel Destroy after its CQs: %v", err)
	}
}

func wcWithID(id uint64) WorkCompletion {
	return WorkCompletion{WRID: id, Status: WCSuccess, Opcode: WCSend, QPNum: 7}
}

func TestCQPushPollOverflow(t *testing.T) {
	d := newDevice(t)
	cq := mustCQ(t, d, 3)
	buf := make([]WorkCompletion, 8)
	if n, err := cq.Poll(buf); n != 0 || err != nil {
		t.Fatalf("Poll on empty CQ = %d, %v", n, err)
	}
	for i := range uint64(3) {
		if cq.push(wcWithID(i), false) {
			t.Fatalf("push %d overflowed", i)
		}
	}
	if !cq.push(wcWithID(3), false) || cq.overrunCount() != 1 {
		t.Fatal("push into a full CQ did not report the overrun")
	}
	// The overrun put the CQ in error: it keeps what it holds and accepts
	// nothing more, even with room (see TestCQOverrunState).
	if n, _ := cq.Poll(buf[:1]); n != 1 || buf[0].WRID != 0 {
		t.Fatalf("Poll(1) after the overrun = %d %v", n, buf[:1])
	}
	if !cq.push(wcWithID(9), false) || cq.overrunCount() != 2 {
		t.Fatal("a CQ in error accepted a completion")
	}

	// Partial poll, then wrap around the ring, on a CQ that never overran.
	cq = mustCQ(t, d, 3)
	for i := range uint64(3) {
		cq.push(wcWithID(i), false)
	}
	if n, _ := cq.Poll(buf[:2]); n != 2 || buf[0].WRID != 0 || buf[1].WRID != 1 {
		t.Fatalf("Poll(2) = %d %v", n, buf[:2])
	}
	cq.push(wcWithID(4), false)
	cq.push(wcWithID(5), false)
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
	cq := mustCQ(t, d, 16)
	buf := make([]WorkCompletion, 4)
	allocs := testing.AllocsPerRun(100, func() {
		cq.push(wcWithID(1), false)
		cq.push(wcWithID(2), true)
		_, _ = cq.Poll(buf)
	})
	if allocs != 0 {
		t.Errorf("push+Poll allocate %v times", allocs)
	}
}

func TestCQResize(t *testing.T) {
	d := openDevice(t, DeviceConfig{Limits: &DeviceAttr{MaxCQE: 10}})
	cq := mustCQ(t, d, 3)
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
	buf := make([]WorkCompletion, 10)
	for i := range uint64(5) {
		cq.push(wcWithID(i), false)
	}
	cq.Poll(buf[:3])
	for i := uint64(5); i < 9; i++ {
		cq.push(wcWithID(i), false)
	}
	// Six completions queued (3..8): shrinking below fails.
	wantErr(t, cq.Resize(5), ErrInvalidArgument, "cqe")
	wantErr(t, cq.Resize(0), ErrInvalidArgument, "cqe")
	wantErr(t, cq.Resize(11), ErrInvalidArgument, "cqe")
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
	wantErr(t, cq.Resize(4), ErrClosed, "cq")
	_, err := cq.Poll(buf)
	wantErr(t, err, ErrClosed, "cq")
	wantErr(t, cq.ReqNotify(false), ErrClosed, "cq")
	if !cq.push(wcWithID(1), false) {
		t.Error("push into a destroyed CQ succeeded")
	}
}

func TestCQDestroyBusy(t *testing.T) {
	d := newDevice(t)
	pd := mustPD(t, d)
	scq, rcq := mustCQ(t, d, 4), mustCQ(t, d, 4)
	qp, err := pd.CreateQP(QPInitAttr{QPType: QPTypeRC, SendCQ: scq, RecvCQ: rcq, Cap: defaultCap})
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, scq.Destroy(), ErrBusy, "cq")
	wantErr(t, rcq.Destroy(), ErrBusy, "cq")
	if err := qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	for _, cq := range []*CQ{scq, rcq} {
		if err := cq.Destroy(); err != nil {
			t.Errorf("Destroy after the QP: %v", err)
		}
	}
	_, err = pd.CreateQP(QPInitAttr{QPType: QPTypeRC, SendCQ: scq, RecvCQ: scq})
	wantErr(t, err, ErrClosed, "send_cq")
}

func TestCompletionEvents(t *testing.T) {
	d := newDevice(t)
	ch, err := d.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fail := WorkCompletion{WRID: 9, Status: WCRemAccessErr}
	tests := []struct {
		name      string
		arm       []bool // ReqNotify calls (solicitedOnly)
		push      []WorkCompletion
		solicited []bool
		events    int
	}{
		{"unarmed", nil, []WorkCompletion{wcWithID(1)}, []bool{false}, 0},
		{"armed", []bool{false}, []WorkCompletion{wcWithID(1)}, []bool{false}, 1},
		{"one event per arm", []bool{false}, []WorkCompletion{wcWithID(1), wcWithID(2)}, []bool{false, false}, 1},
		{"arming twice is one arm", []bool{false, false}, []WorkCompletion{wcWithID(1), wcWithID(2)}, []bool{false, false}, 1},
		{"solicited ignores unsolicited", []bool{true}, []WorkCompletion{wcWithID(1)}, []bool{false}, 0},
		{"solicited", []bool{true}, []WorkCompletion{wcWithID(1), wcWithID(2)}, []bool{false, true}, 1},
		{"solicited by an error", []bool{true}, []WorkCompletion{fail}, []bool{false}, 1},
		{"next overrides solicited", []bool{true, false}, []WorkCompletion{wcWithID(1)}, []bool{false}, 1},
		{"solicited does not weaken next", []bool{false, true}, []WorkCompletion{wcWithID(1)}, []bool{false}, 1},
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
				cq.push(wc, tt.solicited[i])
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
				wantErr(t, cq.Destroy(), ErrBusy, "cq")
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
	got := make(chan *CQ)
	go func() {
		ev, err := ch.GetEvent(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- ev
	}()
	cq.push(wcWithID(1), false)
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
	arm := func(cq *CQ) {
		if err := cq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
	}
	// Events A, B, A: the second event of A comes after B's.
	arm(a)
	a.push(wcWithID(1), false)
	arm(b)
	b.push(wcWithID(2), false)
	arm(a)
	a.push(wcWithID(3), false)
	want := []*CQ{a, b, a}
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
	b.push(wcWithID(4), false)
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
	wantErr(t, ch.Destroy(), ErrBusy, "channel")
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := ch.Destroy(); err != nil {
		t.Fatal(err)
	}
	wantErr(t, ch.Destroy(), ErrClosed, "channel")
	_, err = ch.GetEvent(context.Background())
	wantErr(t, err, ErrClosed, "channel")
	_, err = d.CreateCQ(4, ch, 0)
	wantErr(t, err, ErrClosed, "channel")

	// A CQ without a channel: arming and acknowledging are harmless.
	plain := mustCQ(t, d, 2)
	if err := plain.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	plain.push(wcWithID(1), true)
	plain.AckEvents(1)
	if err := plain.Destroy(); err != nil {
		t.Fatal(err)
	}
}
