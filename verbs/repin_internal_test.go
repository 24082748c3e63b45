package verbs

import (
	"runtime"
	"testing"
)

// TestLocalAgain: a pin the QP's Output took covers a further local access
// (transport.LocalRepinner) only while it pins the registration the key
// names, its MR's current one, unrevoked, and the access passes Local's
// checks; a memory window's binding or a replaced registration never does.
func TestLocalAgain(t *testing.T) {
	d := openDevice(t, 1)
	pd, pd2 := mustPD(t, d), mustPD(t, d)
	mr := mustMR(t, pd, 128, AccessLocalWrite)
	other := mustMR(t, pd, 128, AccessLocalWrite)
	cq, err := d.CreateCQ(4, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	newQP := func(pd *PD) *qpMemory {
		qp, err := pd.CreateQP(QPInitAttr{QPType: QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return (*qpMemory)(qp)
	}
	m, m2 := newQP(pd), newQP(pd2)
	r := mr.reg.Load()
	lkey, base := mr.LKey(), r.iova

	_, held, err := m.Local(0, lkey, base, 16, 0)
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := m.LocalAgain(held, 0, lkey, base+16, 16, 0); !ok || &b[0] != &r.buf[16] || len(b) != 16 {
		t.Errorf("the same registration, in bounds: ok %v, %d bytes", ok, len(b))
	}
	binding := newRegion(mr, lkey, pd, r.buf, r.iova, r.access) // as a window's binding is
	refused := []struct {
		name string
		m    *qpMemory
		held *mrRegion
		key  uint32
		addr uint64
		n    uint32
		need AccessFlags
	}{
		{"another key", m, r, other.LKey(), other.reg.Load().iova, 16, 0},
		{"out of bounds", m, r, lkey, base + 120, 16, 0},
		{"another PD's QP", m2, r, lkey, base, 16, 0},
		{"not the MR's registration", m, binding, lkey, base, 16, 0},
		{"a right the MR lacks", m, r, lkey, base, 16, AccessRemoteRead},
	}
	for _, tt := range refused {
		if _, ok := tt.m.LocalAgain(tt.held, 0, tt.key, tt.addr, tt.n, tt.need); ok {
			t.Errorf("%s: covered", tt.name)
		}
	}

	done := make(chan error)
	go func() { done <- mr.Dereg() }()
	for r.refs.Load()&regionDead == 0 {
		runtime.Gosched()
	}
	if _, ok := m.LocalAgain(held, 0, lkey, base+16, 16, 0); ok {
		t.Error("covered while Dereg revokes the registration")
	}
	held.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
