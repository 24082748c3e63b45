package cm

import (
	"fmt"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// TestSelectiveRepeatNegotiation: selective repeat is on for both QPs
// only when the active side offers it (the REQ's ECE vendor ID) and the
// passive side grants it (the REP's); otherwise neither QP has it, and
// the connection works either way.
func TestSelectiveRepeatNegotiation(t *testing.T) {
	checkLeaks(t)
	a, b := newHost(t, 1), newHost(t, 2)
	for _, c := range []struct{ dial, accept bool }{{true, true}, {true, false}, {false, true}, {false, false}} {
		t.Run(fmt.Sprintf("dial=%v/accept=%v", c.dial, c.accept), func(t *testing.T) {
			l, err := Listen(b.at(0))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			qa, qb := a.qp(t, verbs.QPTypeRC), b.qp(t, verbs.QPTypeRC)
			done := acceptOne(t, l, qb, &Params{SelectiveRepeat: c.accept})
			ca, err := Dial(testkit.Context(t), l.Addr().String(), qa, &Params{SelectiveRepeat: c.dial})
			if err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			want := c.dial && c.accept
			for _, qp := range []*verbs.QP{qa, qb} {
				attr, _, err := qp.Query(0)
				if err != nil {
					t.Fatal(err)
				}
				if attr.SelectiveRepeat != want || qp.State() != verbs.QPStateRTS {
					t.Errorf("QP %#x: selective repeat %v in %v, want %v", qp.QPN(), attr.SelectiveRepeat, qp.State(), want)
				}
			}
			_ = ca.Close()
			_ = r.conn.Close()
		})
	}
}
