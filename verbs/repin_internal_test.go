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
	m, m2 := newMemoryQP(t, pd), newMemoryQP(t, pd2)
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

// TestStoreInBatch: the remote stores of a receive batch's packets share
// one pin per registration (qpMemory.storeInBatch), counted on the MR when
// the pin goes; the pin covers only the registration the rkey's slot still
// holds, unrevoked, in bounds and with the right; Dereg and Rereg wait for
// it and refuse stores meanwhile; Destroy lets it go.
func TestStoreInBatch(t *testing.T) {
	d := openDevice(t, 1)
	pd, pd2 := mustPD(t, d), mustPD(t, d)
	const rw = AccessLocalWrite | AccessRemoteWrite
	mr := mustMR(t, pd, 128, rw)
	other := mustMR(t, pd, 128, rw)
	readOnly := mustMR(t, pd, 128, AccessLocalWrite|AccessRemoteRead)
	m, m2 := newMemoryQP(t, pd), newMemoryQP(t, pd2)
	m.rxBatch, m2.rxBatch = &rxQueue{}, &rxQueue{} // as while a receive batch handles their packets
	r := mr.reg.Load()
	rkey, base := mr.RKey(), r.iova
	store := func(m *qpMemory, key uint32, va uint64, n uint32) error {
		b, ref, err := m.Remote(0, key, va, n, AccessRemoteWrite)
		if err != nil {
			return err
		}
		b[0]++
		ref.Release()
		return nil
	}

	if err := m.CheckRemote(0, rkey, base, 64, AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := store(m, rkey, base+uint64(16*i), 16); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.refs.Load(); got != 1 {
		t.Errorf("pins after a check and four stores = %d, want 1", got)
	}
	if got := mr.RemoteWrites(); got != 0 {
		t.Errorf("stores counted before the pin went = %d, want 0", got)
	}
	for _, tt := range []struct {
		name string
		m    *qpMemory
		key  uint32
		va   uint64
	}{
		{"out of bounds", m, rkey, base + 120},
		{"another PD's QP", m2, rkey, base},
		{"a right the MR lacks", m, readOnly.RKey(), readOnly.reg.Load().iova},
	} {
		if err := store(tt.m, tt.key, tt.va, 16); err == nil {
			t.Errorf("%s: stored", tt.name)
		}
	}
	if m.storePin != r || r.refs.Load() != 1 {
		t.Errorf("a refused store changed the pin: %p (refs %d), want %p (refs 1)", m.storePin, r.refs.Load(), r)
	}
	// A store through another region moves the pin and counts the first's.
	if err := store(m, other.RKey(), other.reg.Load().iova, 16); err != nil {
		t.Fatal(err)
	}
	if got, refs := mr.RemoteWrites(), r.refs.Load(); got != 4 || refs != 0 {
		t.Errorf("after a store elsewhere: %d stores counted, %d pins; want 4, 0", got, refs)
	}
	(*QP)(m).releaseStorePinLocked()
	if got, refs := other.RemoteWrites(), other.reg.Load().refs.Load(); got != 1 || refs != 0 {
		t.Errorf("after the pin went: %d stores counted, %d pins; want 1, 0", got, refs)
	}

	// Rereg and Dereg wait for the pin; stores through it are refused as
	// soon as the registration is replaced or revoked.
	for _, tt := range []struct {
		name string
		op   func() error
	}{
		{"Rereg", func() error { return mr.Rereg(ReregChangeAccess, nil, nil, rw|AccessRemoteRead) }},
		{"Dereg", mr.Dereg},
	} {
		rkey, r := mr.RKey(), mr.reg.Load()
		if err := store(m, rkey, r.iova, 16); err != nil {
			t.Fatal(err)
		}
		done := make(chan error)
		go func() { done <- tt.op() }()
		for r.refs.Load()&regionDead == 0 {
			runtime.Gosched()
		}
		if err := store(m, rkey, r.iova, 16); err == nil {
			t.Errorf("%s: stored through the pin while it revokes the registration", tt.name)
		}
		select {
		case err := <-done:
			t.Fatalf("%s returned (%v) with the pin held", tt.name, err)
		default:
		}
		(*QP)(m).releaseStorePinLocked()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}

	// Destroy lets the pin go, counted.
	if err := store(m, other.RKey(), other.reg.Load().iova, 16); err != nil {
		t.Fatal(err)
	}
	if err := (*QP)(m).Destroy(); err != nil {
		t.Fatal(err)
	}
	if got, refs := other.RemoteWrites(), other.reg.Load().refs.Load(); got != 2 || refs != 0 {
		t.Errorf("after Destroy: %d stores counted, %d pins; want 2, 0", got, refs)
	}
}

// newMemoryQP returns a new RC QP in pd, with a CQ of its own, as the
// transport sees its memory.
func newMemoryQP(t *testing.T, pd *PD) *qpMemory {
	t.Helper()
	cq, err := pd.dev.CreateCQ(4, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(QPInitAttr{QPType: QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return (*qpMemory)(qp)
}
