package verbs

import (
	"errors"
	"testing"
)

// The memory window tests port rdma-core's tests/test_mr.py MWTest (bind,
// traffic, invalidate, rebind, dealloc, for type 1 and type 2) and add the
// bind rules of IBA 10.6.7.2 that rxe enforces (rxe_mw.c).

// mwMRAccess is what test_mr's MWRC registers: local write and MW_BIND.
const mwMRAccess = AccessLocalWrite | AccessMWBind

// mwWindow is what test_mr's MWRC binds: the whole message buffer, remote
// write.
const (
	mwLen    = 4096
	mwAccess = AccessRemoteWrite | AccessLocalWrite
)

// newMWPair opens two connected ends whose buffers are registered with
// mwMRAccess, like test_mr's MWRC resources.
func newMWPair(t *testing.T) (a, b *rcEnd) {
	t.Helper()
	return newPair(t, endOpts{mrAccess: mwMRAccess}, endOpts{mrAccess: mwMRAccess})
}

func mustAllocMW(t testing.TB, pd *PD, typ MWType) *MW {
	t.Helper()
	mw, err := pd.AllocMW(typ)
	if err != nil {
		t.Fatalf("AllocMW(%v): %v", typ, err)
	}
	return mw
}

// bindType1 binds mw over e's buffer [0, mwLen) with ibv_bind_mw semantics
// and waits for the bind's completion.
func bindType1(t *testing.T, e *rcEnd, mw *MW, length uint64, access AccessFlags) uint32 {
	t.Helper()
	rkey, err := e.qp.BindMW(mw, MWBind{WRID: 0xB1, SendFlags: SendSignaled, MR: e.mr, Addr: e.mr.IOVA(), Length: length, Access: access})
	if err != nil {
		t.Fatalf("BindMW: %v", err)
	}
	if wc := waitWC(t, e.cq); wc.WRID != 0xB1 || wc.Status != WCSuccess || wc.Opcode != WCBindMW {
		t.Fatalf("bind completion %+v", wc)
	}
	if mw.RKey() != rkey {
		t.Fatalf("RKey %#x after the bind, BindMW returned %#x", mw.RKey(), rkey)
	}
	return rkey
}

// bindType2 binds mw with a BIND_MW work request over e's buffer at off and
// waits for its completion.
func bindType2(t *testing.T, e *rcEnd, mw *MW, off int, length uint64, access AccessFlags) uint32 {
	t.Helper()
	rkey := IncRKey(mw.RKey())
	mustPostSend(t, e.qp, SendWR{WRID: 0xB2, Opcode: WRBindMW, SendFlags: SendSignaled,
		BindMW: MWBindParams{MW: mw, RKey: rkey, MR: e.mr, Addr: e.mr.IOVA() + uint64(off), Length: length, Access: access}})
	if wc := waitWC(t, e.cq); wc.WRID != 0xB2 || wc.Status != WCSuccess || wc.Opcode != WCBindMW {
		t.Fatalf("bind completion %+v", wc)
	}
	if mw.RKey() != rkey {
		t.Fatalf("RKey %#x after the bind, want %#x", mw.RKey(), rkey)
	}
	return rkey
}

// writeThrough RDMA-writes n bytes from a's buffer to b's at raddr under
// rkey and returns the completion status.
func writeThrough(t *testing.T, a, b *rcEnd, raddr uint64, rkey uint32, n int, seed byte) WCStatus {
	t.Helper()
	fill(a.buf[:n], seed)
	mustPostSend(t, a.qp, SendWR{WRID: 0x77, Opcode: WRRDMAWrite, SendFlags: SendSignaled,
		SGList: []SGE{a.mr.SGE(0, n)}, RDMA: RDMAParams{RemoteAddr: raddr, RKey: rkey}})
	wc := waitWC(t, a.cq)
	if wc.WRID != 0x77 {
		t.Fatalf("write completion %+v", wc)
	}
	return wc.Status
}

// rdmaTraffic is test_mr's u.rdma_traffic with RDMA WRITE: both sides write
// into each other through the windows, several iterations.
func rdmaTraffic(t *testing.T, a, b *rcEnd, aRKey, bRKey uint32) {
	t.Helper()
	for i := range 3 {
		if st := writeThrough(t, a, b, b.mr.IOVA(), bRKey, mwLen, byte(2*i)); st != WCSuccess {
			t.Fatalf("iteration %d: client write: %v", i, st)
		}
		checkBytes(t, "client to server", b.buf[:mwLen], a.buf[:mwLen])
		if st := writeThrough(t, b, a, a.mr.IOVA(), aRKey, mwLen, byte(2*i+1)); st != WCSuccess {
			t.Fatalf("iteration %d: server write: %v", i, st)
		}
		checkBytes(t, "server to client", a.buf[:mwLen], b.buf[:mwLen])
	}
}

// wantRemoteAccessError checks that a WRITE through rkey fails with
// REM_ACCESS_ERR, as test_mr's "Remote access error" assertions.
func wantRemoteAccessError(t *testing.T, a, b *rcEnd, raddr uint64, rkey uint32) {
	t.Helper()
	if st := writeThrough(t, a, b, raddr, rkey, 64, 0x5A); st != WCRemAccessErr {
		t.Fatalf("write through rkey %#x: %v, want %v", rkey, st, WCRemAccessErr)
	}
}

func TestMWTestMR(t *testing.T) {
	cases := []struct {
		name string
		typ  MWType
		// after runs once traffic succeeded; it reports whether the
		// windows must now refuse access.
		after func(t *testing.T, a, b *rcEnd, amw, bmw *MW, aKey, bKey uint32) bool
	}{
		{name: "test_mw_type1", typ: MWType1},
		{name: "test_mw_type2", typ: MWType2},
		{
			name: "test_invalidate_mw_type1", typ: MWType1,
			after: func(t *testing.T, a, b *rcEnd, amw, bmw *MW, _, _ uint32) bool {
				// A zero-length bind unbinds a type 1 window.
				bindType1(t, a, amw, 0, 0)
				bindType1(t, b, bmw, 0, 0)
				return true
			},
		},
		{
			name: "test_mw_type2_invalidate_local", typ: MWType2,
			after: func(t *testing.T, a, b *rcEnd, amw, bmw *MW, aKey, bKey uint32) bool {
				for _, x := range []struct {
					e   *rcEnd
					key uint32
				}{{a, aKey}, {b, bKey}} {
					mustPostSend(t, x.e.qp, SendWR{WRID: 0x1C, Opcode: WRLocalInv, SendFlags: SendSignaled, InvalidateRKey: x.key})
					if wc := waitWC(t, x.e.cq); wc.Status != WCSuccess || wc.Opcode != WCLocalInv {
						t.Fatalf("LOCAL_INV completion %+v", wc)
					}
				}
				return true
			},
		},
		{
			name: "test_mw_type2_invalidate_remote", typ: MWType2,
			after: func(t *testing.T, a, b *rcEnd, amw, bmw *MW, aKey, bKey uint32) bool {
				mustPostRecv(t, b.qp, RecvWR{WRID: 0x5E, SGList: []SGE{b.mr.SGE(recvOff, 64)}})
				mustPostSend(t, a.qp, SendWR{WRID: 0x5D, Opcode: WRSendWithInv, SendFlags: SendSignaled,
					SGList: []SGE{a.mr.SGE(0, 16)}, InvalidateRKey: bKey})
				if wc := waitWC(t, a.cq); wc.Status != WCSuccess || wc.Opcode != WCSend {
					t.Fatalf("SEND_WITH_INV completion %+v", wc)
				}
				wc := waitWC(t, b.cq)
				if wc.Status != WCSuccess || wc.Opcode != WCRecv || wc.WCFlags&WCWithInv == 0 || wc.InvalidatedRKey != bKey {
					t.Fatalf("receive completion %+v, want WITH_INV of %#x", wc, bKey)
				}
				if bmw.Bound() {
					t.Fatal("window still bound after SEND_WITH_INV")
				}
				mustPostRecv(t, a.qp, RecvWR{WRID: 0x5E, SGList: []SGE{a.mr.SGE(recvOff, 64)}})
				mustPostSend(t, b.qp, SendWR{WRID: 0x5D, Opcode: WRSendWithInv, SendFlags: SendSignaled,
					SGList: []SGE{b.mr.SGE(0, 16)}, InvalidateRKey: aKey})
				if wc := waitWC(t, b.cq); wc.Status != WCSuccess {
					t.Fatalf("SEND_WITH_INV completion %+v", wc)
				}
				if wc := waitWC(t, a.cq); wc.Status != WCSuccess || wc.InvalidatedRKey != aKey {
					t.Fatalf("receive completion %+v", wc)
				}
				return true
			},
		},
		{
			name: "test_mw_type2_invalidate_dealloc", typ: MWType2,
			after: func(t *testing.T, a, b *rcEnd, amw, bmw *MW, _, _ uint32) bool {
				for _, mw := range []*MW{amw, bmw} {
					if err := mw.Dealloc(); err != nil {
						t.Fatal(err)
					}
					if err := mw.Dealloc(); !errors.Is(err, ErrClosed) {
						t.Fatalf("second Dealloc: %v", err)
					}
				}
				return true
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := newMWPair(t)
			amw, bmw := mustAllocMW(t, a.pd, c.typ), mustAllocMW(t, b.pd, c.typ)
			if amw.Bound() || amw.Type() != c.typ || !KeyIsMW(amw.RKey()) {
				t.Fatalf("new window: bound %v, type %v, rkey %#x", amw.Bound(), amw.Type(), amw.RKey())
			}
			var aKey, bKey uint32
			if c.typ == MWType1 {
				aKey, bKey = bindType1(t, a, amw, mwLen, mwAccess), bindType1(t, b, bmw, mwLen, mwAccess)
			} else {
				aKey, bKey = bindType2(t, a, amw, 0, mwLen, mwAccess), bindType2(t, b, bmw, 0, mwLen, mwAccess)
			}
			rdmaTraffic(t, a, b, aKey, bKey)
			if c.after == nil || !c.after(t, a, b, amw, bmw, aKey, bKey) {
				return
			}
			// The old rkeys now give "Remote access error" (new
			// connections: the failure takes the QPs to ERR).
			wantRemoteAccessError(t, a, b, b.mr.IOVA(), bKey)
		})
	}
}

func TestMWAllocWrongType(t *testing.T) {
	d := newDevice(t)
	pd := mustPD(t, d)
	for _, typ := range []MWType{0, 3, -1} {
		if _, err := pd.AllocMW(typ); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("AllocMW(%v): %v, want ErrInvalidArgument", typ, err)
		}
	}
	attr := d.Query()
	caps := DeviceMemWindow | DeviceMemWindowType2B | DeviceFlushGlobal | DeviceFlushPersistent | DeviceAtomicWrite
	if attr.MaxMW == 0 || attr.DeviceCapFlags&caps != caps {
		t.Errorf("max_mw %d, cap flags %#x", attr.MaxMW, uint64(attr.DeviceCapFlags))
	}
	mw := mustAllocMW(t, pd, MWType2)
	if err := pd.Dealloc(); !errors.Is(err, ErrBusy) {
		t.Errorf("Dealloc of a PD with a window: %v, want ErrBusy", err)
	}
	if err := mw.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := pd.Dealloc(); err != nil {
		t.Errorf("Dealloc of the PD after the window: %v", err)
	}
}

// TestMWBindErrors covers the rules a bind is checked against when it
// executes (rxe_check_bind_mw; completion MW_BIND_ERR, QP to ERR) and the
// argument errors PostSend and BindMW report at once.
func TestMWBindErrors(t *testing.T) {
	type env struct {
		a, b  *rcEnd
		mw    *MW
		other *MR // b's buffer in a's device, registered in another PD
	}
	cases := []struct {
		name    string
		typ     MWType
		mrFlags AccessFlags // a's MR; default mwMRAccess
		post    func(t *testing.T, e *env) error
		wantErr error    // at post time
		want    WCStatus // else: the bind's completion
	}{
		{
			name: "MR without MW_BIND (C10-73)", typ: MWType2, mrFlags: AccessLocalWrite,
			post: func(t *testing.T, e *env) error { return postBind2(e.a, e.mw, e.a.mr, 0, 64, mwAccess) },
			want: WCMWBindErr,
		},
		{
			name: "writable window on a region without local write (C10-74)", typ: MWType2, mrFlags: AccessMWBind,
			post: func(t *testing.T, e *env) error { return postBind2(e.a, e.mw, e.a.mr, 0, 64, AccessRemoteWrite) },
			want: WCMWBindErr,
		},
		{
			name: "window beyond the region (C10-75)", typ: MWType2,
			post: func(t *testing.T, e *env) error {
				return postBind2(e.a, e.mw, e.a.mr, e.a.mr.Len()-64, 65, mwAccess)
			},
			want: WCMWBindErr,
		},
		{
			name: "window before the region (C10-75)", typ: MWType2,
			post: func(t *testing.T, e *env) error { return postBind2(e.a, e.mw, e.a.mr, -1, 16, mwAccess) },
			want: WCMWBindErr,
		},
		{
			name: "zero-based region", typ: MWType2, mrFlags: mwMRAccess | AccessZeroBased,
			post: func(t *testing.T, e *env) error { return postBind2(e.a, e.mw, e.a.mr, 0, 64, mwAccess) },
			want: WCMWBindErr,
		},
		{
			name: "type 2 with zero length (o10-37.2.40)", typ: MWType2,
			post: func(t *testing.T, e *env) error { return postBind2(e.a, e.mw, e.a.mr, 0, 0, mwAccess) },
			want: WCMWBindErr,
		},
		{
			name: "type 2 bound twice (o10-37.2.30)", typ: MWType2,
			post: func(t *testing.T, e *env) error {
				if err := postBind2(e.a, e.mw, e.a.mr, 0, 64, mwAccess); err != nil {
					return err
				}
				if wc := waitWC(t, e.a.cq); wc.Status != WCSuccess {
					t.Fatalf("first bind %+v", wc)
				}
				return postBind2(e.a, e.mw, e.a.mr, 0, 64, mwAccess)
			},
			want: WCMWBindErr,
		},
		{
			name: "type 2 of another PD than the QP (C10-72)", typ: MWType2,
			post: func(t *testing.T, e *env) error {
				mw := mustAllocMW(t, mustPD(t, e.a.dev), MWType2)
				return postBind2(e.a, mw, e.a.mr, 0, 64, mwAccess)
			},
			want: WCMWBindErr,
		},
		{
			name: "region of another PD than the window", typ: MWType2,
			post: func(t *testing.T, e *env) error { return postBind2(e.a, e.mw, e.other, 0, 64, mwAccess) },
			want: WCMWBindErr,
		},
		{
			name: "deregistered region", typ: MWType2,
			post: func(t *testing.T, e *env) error {
				mr := mustMR2(t, e.a.pd, make([]byte, 128), mwMRAccess)
				if err := mr.Dereg(); err != nil {
					t.Fatal(err)
				}
				return postBind2(e.a, e.mw, mr, 0, 64, mwAccess)
			},
			want: WCMWBindErr,
		},
		{
			name: "type 1 zero-based (o10-36.2.2)", typ: MWType1,
			post: func(t *testing.T, e *env) error {
				_, err := e.a.qp.BindMW(e.mw, MWBind{MR: e.a.mr, Addr: e.a.mr.IOVA(), Length: 64, Access: mwAccess | AccessZeroBased})
				return err
			},
			wantErr: ErrInvalidArgument,
		},
		{
			name: "type 1 through PostSend", typ: MWType1,
			post:    func(t *testing.T, e *env) error { return postBind2(e.a, e.mw, e.a.mr, 0, 64, mwAccess) },
			wantErr: ErrInvalidArgument,
		},
		{
			name: "type 2 through BindMW", typ: MWType2,
			post: func(t *testing.T, e *env) error {
				_, err := e.a.qp.BindMW(e.mw, MWBind{MR: e.a.mr, Addr: e.a.mr.IOVA(), Length: 64, Access: mwAccess})
				return err
			},
			wantErr: ErrInvalidArgument,
		},
		{
			name: "rkey of another window", typ: MWType2,
			post: func(t *testing.T, e *env) error {
				return e.a.qp.PostSend(&SendWR{WRID: 9, Opcode: WRBindMW, SendFlags: SendSignaled,
					BindMW: MWBindParams{MW: e.mw, RKey: e.mw.RKey() + 0x100, MR: e.a.mr, Addr: e.a.mr.IOVA(), Length: 64, Access: mwAccess}})
			},
			wantErr: ErrInvalidArgument,
		},
		{
			name: "unknown window rights", typ: MWType2,
			post:    func(t *testing.T, e *env) error { return postBind2(e.a, e.mw, e.a.mr, 0, 64, AccessOnDemand) },
			wantErr: ErrInvalidArgument,
		},
		{
			name: "bind with data", typ: MWType2,
			post: func(t *testing.T, e *env) error {
				return e.a.qp.PostSend(&SendWR{WRID: 9, Opcode: WRBindMW, SGList: []SGE{e.a.mr.SGE(0, 8)},
					BindMW: MWBindParams{MW: e.mw, RKey: IncRKey(e.mw.RKey()), MR: e.a.mr, Addr: e.a.mr.IOVA(), Length: 64}})
			},
			wantErr: ErrInvalidArgument,
		},
		{
			name: "missing region", typ: MWType2,
			post: func(t *testing.T, e *env) error {
				return e.a.qp.PostSend(&SendWR{WRID: 9, Opcode: WRBindMW,
					BindMW: MWBindParams{MW: e.mw, RKey: IncRKey(e.mw.RKey()), Length: 64}})
			},
			wantErr: ErrInvalidArgument,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			flags := c.mrFlags
			if flags == 0 {
				flags = mwMRAccess
			}
			a, b := newPair(t, endOpts{mrAccess: flags}, endOpts{mrAccess: mwMRAccess})
			e := &env{a: a, b: b, mw: mustAllocMW(t, a.pd, c.typ),
				other: mustMR2(t, mustPD(t, a.dev), make([]byte, 4096), mwMRAccess)}
			err := c.post(t, e)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("post: %v, want %v", err, c.wantErr)
				}
				expectEmpty(t, a.cq)
				return
			}
			if err != nil {
				t.Fatalf("post: %v", err)
			}
			wc := waitWC(t, a.cq)
			if wc.Status != c.want {
				t.Fatalf("bind completion %+v, want %v", wc, c.want)
			}
			if c.want != WCSuccess {
				if e.mw.Bound() && c.name != "type 2 bound twice (o10-37.2.30)" {
					t.Fatal("a failed bind left the window bound")
				}
				if st := a.qp.State(); st != QPStateErr {
					t.Fatalf("QP in %v after a bind error, want ERR", st)
				}
			}
		})
	}
}

// postBind2 posts a signaled BIND_MW of mw over [off, off+length) of mr.
func postBind2(e *rcEnd, mw *MW, mr *MR, off int, length uint64, access AccessFlags) error {
	return e.qp.PostSend(&SendWR{WRID: 9, Opcode: WRBindMW, SendFlags: SendSignaled,
		BindMW: MWBindParams{MW: mw, RKey: IncRKey(mw.RKey()), MR: mr, Addr: mr.IOVA() + uint64(int64(off)), Length: length, Access: access}})
}

// TestMWRemoteAccess checks what a peer can do through a bound window:
// the window's bounds and rights, not the region's, limit it; a zero-based
// window is addressed from 0; a type 2 window serves only the QP that
// bound it; each bind changes the key byte and the old rkey stops working.
func TestMWRemoteAccess(t *testing.T) {
	const off = 1024
	cases := []struct {
		name   string
		typ    MWType
		access AccessFlags
		// raddr is the peer's address for byte i of the window.
		zeroBased bool
		op        func(t *testing.T, a, b *rcEnd, mw *MW, rkey uint32) WCStatus
		want      WCStatus
		check     func(t *testing.T, a, b *rcEnd)
	}{
		{
			name: "write inside the window", typ: MWType2, access: mwAccess,
			op: func(t *testing.T, a, b *rcEnd, _ *MW, rkey uint32) WCStatus {
				return writeThrough(t, a, b, b.mr.IOVA()+off+100, rkey, 200, 3)
			},
			want:  WCSuccess,
			check: func(t *testing.T, a, b *rcEnd) { checkBytes(t, "window", b.buf[off+100:off+300], a.buf[:200]) },
		},
		{
			name: "write past the window's end inside the region", typ: MWType2, access: mwAccess,
			op: func(t *testing.T, a, b *rcEnd, _ *MW, rkey uint32) WCStatus {
				return writeThrough(t, a, b, b.mr.IOVA()+off+mwLen-8, rkey, 16, 3)
			},
			want: WCRemAccessErr,
		},
		{
			name: "write before the window's start", typ: MWType1, access: mwAccess,
			op: func(t *testing.T, a, b *rcEnd, _ *MW, rkey uint32) WCStatus {
				return writeThrough(t, a, b, b.mr.IOVA()+off-8, rkey, 16, 3)
			},
			want: WCRemAccessErr,
		},
		{
			name: "write through a read-only window", typ: MWType2, access: AccessRemoteRead,
			op: func(t *testing.T, a, b *rcEnd, _ *MW, rkey uint32) WCStatus {
				return writeThrough(t, a, b, b.mr.IOVA()+off, rkey, 16, 3)
			},
			want: WCRemAccessErr,
		},
		{
			name: "read through a read-only window", typ: MWType1, access: AccessRemoteRead,
			op: func(t *testing.T, a, b *rcEnd, _ *MW, rkey uint32) WCStatus {
				fill(b.buf[off:off+300], 9)
				mustPostSend(t, a.qp, SendWR{WRID: 5, Opcode: WRRDMARead, SendFlags: SendSignaled,
					SGList: []SGE{a.mr.SGE(dstOff, 300)}, RDMA: RDMAParams{RemoteAddr: b.mr.IOVA() + off, RKey: rkey}})
				return waitWC(t, a.cq).Status
			},
			want:  WCSuccess,
			check: func(t *testing.T, a, b *rcEnd) { checkBytes(t, "read", a.buf[dstOff:dstOff+300], b.buf[off:off+300]) },
		},
		{
			name: "zero-based type 2 window", typ: MWType2, access: mwAccess | AccessZeroBased, zeroBased: true,
			op: func(t *testing.T, a, b *rcEnd, _ *MW, rkey uint32) WCStatus {
				return writeThrough(t, a, b, 40, rkey, 100, 4)
			},
			want:  WCSuccess,
			check: func(t *testing.T, a, b *rcEnd) { checkBytes(t, "zero-based", b.buf[off+40:off+140], a.buf[:100]) },
		},
		{
			name: "atomic through an atomic window", typ: MWType2, access: AccessRemoteAtomic | AccessLocalWrite,
			op: func(t *testing.T, a, b *rcEnd, _ *MW, rkey uint32) WCStatus {
				mustPostSend(t, a.qp, SendWR{WRID: 6, Opcode: WRAtomicFetchAndAdd, SendFlags: SendSignaled,
					SGList: []SGE{a.mr.SGE(dstOff, 8)}, Atomic: AtomicParams{RemoteAddr: b.mr.IOVA() + off, RKey: rkey, CompareAdd: 5}})
				return waitWC(t, a.cq).Status
			},
			want: WCSuccess,
		},
		{
			name: "type 2 window through another QP", typ: MWType2, access: mwAccess,
			op: func(t *testing.T, a, b *rcEnd, _ *MW, rkey uint32) WCStatus {
				// A second connection between the same devices, QPs in
				// the same PDs: the window belongs to b's first QP.
				a2, b2 := secondConnection(t, a, b)
				return writeThrough(t, a2, b2, b.mr.IOVA()+off, rkey, 16, 5)
			},
			want: WCRemAccessErr,
		},
		{
			name: "type 1 window through another QP of the PD", typ: MWType1, access: mwAccess,
			op: func(t *testing.T, a, b *rcEnd, _ *MW, rkey uint32) WCStatus {
				a2, b2 := secondConnection(t, a, b)
				return writeThrough(t, a2, b2, b.mr.IOVA()+off, rkey, 16, 5)
			},
			want: WCSuccess,
		},
		{
			name: "old rkey after a rebind", typ: MWType1, access: mwAccess,
			op: func(t *testing.T, a, b *rcEnd, mw *MW, rkey uint32) WCStatus {
				next := bindType1(t, b, mw, mwLen, mwAccess)
				if next == rkey || next>>8 != rkey>>8 {
					t.Fatalf("rebind rkey %#x after %#x: want the same index, another key", next, rkey)
				}
				if st := writeThrough(t, a, b, b.mr.IOVA(), next, 16, 6); st != WCSuccess {
					t.Fatalf("write through the new rkey: %v", st)
				}
				return writeThrough(t, a, b, b.mr.IOVA(), rkey, 16, 6)
			},
			want: WCRemAccessErr,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := newMWPair(t)
			mw := mustAllocMW(t, b.pd, c.typ)
			var rkey uint32
			if c.typ == MWType1 {
				rkey, _ = b.qp.BindMW(mw, MWBind{WRID: 0xB1, SendFlags: SendSignaled, MR: b.mr, Addr: b.mr.IOVA() + off, Length: mwLen, Access: c.access})
				if wc := waitWC(t, b.cq); wc.Status != WCSuccess {
					t.Fatalf("bind %+v", wc)
				}
				if c.name == "old rkey after a rebind" {
					// rebinding below starts at the region's start
					rkey = bindType1(t, b, mw, mwLen, mwAccess)
				}
			} else {
				rkey = bindType2(t, b, mw, off, mwLen, c.access)
			}
			if got := c.op(t, a, b, mw, rkey); got != c.want {
				t.Fatalf("status %v, want %v", got, c.want)
			}
			if c.check != nil {
				c.check(t, a, b)
			}
		})
	}
}

// TestMWInvalidateErrors covers invalidations IBA forbids: LOCAL_INV of a
// type 1 window (o10-37.2.26) or of a region's rkey (goroce has no
// fast-registration regions), and SEND_WITH_INV naming a type 1 window,
// which fails the receive and NAKs the request.
func TestMWInvalidateErrors(t *testing.T) {
	for _, typ := range []MWType{MWType1, 0} {
		t.Run("LOCAL_INV of "+map[MWType]string{MWType1: "a type 1 window", 0: "a region"}[typ], func(t *testing.T) {
			a, _ := newMWPair(t)
			key := a.mr.RKey()
			if typ == MWType1 {
				mw := mustAllocMW(t, a.pd, MWType1)
				key = bindType1(t, a, mw, mwLen, mwAccess)
				defer func() {
					if !mw.Bound() {
						t.Error("failed LOCAL_INV unbound the type 1 window")
					}
				}()
			}
			mustPostSend(t, a.qp, SendWR{WRID: 0x1C, Opcode: WRLocalInv, SendFlags: SendSignaled, InvalidateRKey: key})
			if wc := waitWC(t, a.cq); wc.Status != WCLocQPOpErr {
				t.Fatalf("LOCAL_INV of %#x: %+v, want %v", key, wc, WCLocQPOpErr)
			}
		})
	}
	t.Run("SEND_WITH_INV of a type 1 window", func(t *testing.T) {
		a, b := newMWPair(t)
		mw := mustAllocMW(t, b.pd, MWType1)
		key := bindType1(t, b, mw, mwLen, mwAccess)
		mustPostRecv(t, b.qp, RecvWR{WRID: 0x5E, SGList: []SGE{b.mr.SGE(recvOff, 64)}})
		mustPostSend(t, a.qp, SendWR{WRID: 0x5D, Opcode: WRSendWithInv, SendFlags: SendSignaled,
			SGList: []SGE{a.mr.SGE(0, 16)}, InvalidateRKey: key})
		if wc := waitWC(t, a.cq); wc.Status != WCRemInvReqErr {
			t.Fatalf("sender %+v, want %v", wc, WCRemInvReqErr)
		}
		if wc := waitWC(t, b.cq); wc.WRID != 0x5E || wc.Status == WCSuccess {
			t.Fatalf("receiver %+v, want an error", wc)
		}
		if !mw.Bound() {
			t.Error("the type 1 window was unbound")
		}
	})
}

// TestMWDeregBusy checks IBA 10.6.7.2.6: a region with bound windows cannot
// be deregistered (nor reregistered); once they are unbound it can.
func TestMWDeregBusy(t *testing.T) {
	a, _ := newMWPair(t)
	mw1, mw2 := mustAllocMW(t, a.pd, MWType1), mustAllocMW(t, a.pd, MWType2)
	bindType1(t, a, mw1, 64, mwAccess)
	key2 := bindType2(t, a, mw2, 128, 64, mwAccess)
	if err := a.mr.Dereg(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Dereg with 2 windows: %v, want ErrBusy", err)
	}
	if err := a.mr.Rereg(ReregChangeAccess, nil, nil, mwMRAccess); !errors.Is(err, ErrBusy) {
		t.Fatalf("Rereg with windows: %v, want ErrBusy", err)
	}
	bindType1(t, a, mw1, 0, 0)
	if err := a.mr.Dereg(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Dereg with 1 window: %v, want ErrBusy", err)
	}
	mustPostSend(t, a.qp, SendWR{WRID: 0x1C, Opcode: WRLocalInv, InvalidateRKey: key2})
	if mw2.Bound() {
		t.Fatal("LOCAL_INV did not unbind the window")
	}
	// A window deallocated while bound releases its region too.
	key3 := bindType2(t, a, mw2, 0, 64, mwAccess)
	if err := mw2.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := a.mr.Dereg(); err != nil {
		t.Fatalf("Dereg with no window: %v", err)
	}
	if key3 == key2 {
		t.Errorf("rebind kept rkey %#x", key3)
	}
	if err := mw1.Dealloc(); err != nil {
		t.Fatal(err)
	}
}

// TestMWUnsignaledOrder checks that local operations complete in order
// behind earlier work requests: an unsignaled bind after a WRITE takes
// effect at once, and a signaled LOCAL_INV behind a WRITE completes after
// the WRITE.
func TestMWUnsignaledOrder(t *testing.T) {
	a, b := newPair(t, endOpts{mrAccess: rcAccess | AccessMWBind}, endOpts{})
	mw := mustAllocMW(t, a.pd, MWType2)
	fill(a.buf[:mwLen], 1)
	mustPostSend(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, SendFlags: SendSignaled,
		SGList: []SGE{a.mr.SGE(0, mwLen)}, RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}})
	key := IncRKey(mw.RKey())
	mustPostSend(t, a.qp, SendWR{WRID: 2, Opcode: WRBindMW,
		BindMW: MWBindParams{MW: mw, RKey: key, MR: a.mr, Addr: a.mr.IOVA(), Length: 64, Access: mwAccess}})
	mustPostSend(t, a.qp, SendWR{WRID: 3, Opcode: WRLocalInv, SendFlags: SendSignaled | SendFence, InvalidateRKey: key})
	wcs := waitN(t, a.cq, 2)
	if wcs[0].WRID != 1 || wcs[1].WRID != 3 || wcs[1].Opcode != WCLocalInv || wcs[1].Status != WCSuccess {
		t.Fatalf("completions %+v", wcs)
	}
	if mw.Bound() || mw.RKey() != key {
		t.Fatalf("window bound %v rkey %#x, want free with %#x", mw.Bound(), mw.RKey(), key)
	}
}

// TestMWRemoteNoAllocs checks that resolving a window's rkey on the
// receive path does not allocate.
func TestMWRemoteNoAllocs(t *testing.T) {
	a, _ := newMWPair(t)
	mw := mustAllocMW(t, a.pd, MWType1)
	key := bindType1(t, a, mw, mwLen, mwAccess)
	m := (*qpMemory)(a.qp)
	va := a.mr.IOVA() + 8
	n := testing.AllocsPerRun(1000, func() {
		b, ref, err := m.Remote(0, key, va, 64, 2)
		if err != nil || len(b) != 64 {
			panic(err)
		}
		ref.Release()
	})
	if n != 0 {
		t.Fatalf("%v allocations per access", n)
	}
}

// TestMWDeallocWaitsForAccess checks that deallocating a window waits for
// a remote access in flight through it, and that the rkey resolves to
// nothing from the moment the withdrawal starts.
func TestMWDeallocWaitsForAccess(t *testing.T) {
	a, _ := newMWPair(t)
	mw := mustAllocMW(t, a.pd, MWType1)
	key := bindType1(t, a, mw, mwLen, mwAccess)
	m := (*qpMemory)(a.qp)
	_, ref, err := m.Remote(0, key, a.mr.IOVA(), 8, 2)
	if err != nil {
		t.Fatal(err)
	}
	r := mw.binding.Load()
	done := make(chan error)
	go func() { done <- mw.Dealloc() }()
	waitFor(t, "the withdrawal to start", func() bool { return r.refs.Load()&regionDead != 0 })
	if _, _, err := m.Remote(0, key, a.mr.IOVA(), 8, 2); err == nil {
		t.Fatal("the rkey still resolves while the window is withdrawn")
	}
	select {
	case <-done:
		t.Fatal("Dealloc returned with an access in flight")
	default:
	}
	ref.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := a.mr.Dereg(); err != nil {
		t.Fatalf("Dereg after the window's Dealloc: %v", err)
	}
}

// secondConnection connects a second pair of RC QPs between a's and b's
// devices, in the same PDs, with the same CQs and memory.
func secondConnection(t *testing.T, a, b *rcEnd) (a2, b2 *rcEnd) {
	t.Helper()
	a2 = &rcEnd{dev: a.dev, pd: a.pd, cq: a.cq, buf: a.buf, mr: a.mr}
	b2 = &rcEnd{dev: b.dev, pd: b.pd, cq: b.cq, buf: b.buf, mr: b.mr}
	for _, e := range []*rcEnd{a2, b2} {
		qp, err := e.pd.CreateQP(QPInitAttr{QPType: QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
			Cap: QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		e.qp = qp
	}
	connect(t, a2, b2, defaultLink(), defaultLink())
	return a2, b2
}
