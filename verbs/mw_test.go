package verbs_test

import (
	"errors"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// The memory window tests port rdma-core's tests/test_mr.py MWTest (bind,
// traffic, invalidate, rebind, dealloc, for type 1 and type 2) and add the
// bind rules of IBA 10.6.7.2 that rxe enforces (rxe_mw.c).

// mwMRAccess is what test_mr's MWRC registers: local write and MW_BIND.
const mwMRAccess = verbs.AccessLocalWrite | verbs.AccessMWBind

// mwWindow is what test_mr's MWRC binds: the whole message buffer, remote
// write.
const (
	mwLen    = 4096
	mwAccess = verbs.AccessRemoteWrite | verbs.AccessLocalWrite
)

// newMWPair opens two connected ends whose buffers are registered with
// mwMRAccess, like test_mr's MWRC resources.
func newMWPair(t *testing.T) (a, b *rdmatest.End) {
	t.Helper()
	return rdmatest.Pair(t, rdmatest.EndOptions{MRAccess: mwMRAccess}, rdmatest.EndOptions{MRAccess: mwMRAccess})
}

func mustAllocMW(t testing.TB, pd *verbs.PD, typ verbs.MWType) *verbs.MW {
	t.Helper()
	mw, err := pd.AllocMW(typ)
	if err != nil {
		t.Fatalf("AllocMW(%v): %v", typ, err)
	}
	// Deallocated before the region's cleanup (cleanups run last in,
	// first out): a kernel device refuses to deregister a region a window
	// is bound to, and the PD's deallocation then fails too.
	t.Cleanup(func() { _ = mw.Dealloc() })
	return mw
}

// bindType1 binds mw over e's buffer [0, mwLen) with ibv_bind_mw semantics
// and waits for the bind's completion.
func bindType1(t *testing.T, e *rdmatest.End, mw *verbs.MW, length uint64, access verbs.AccessFlags) uint32 {
	t.Helper()
	rkey, err := e.QP.BindMW(mw, verbs.MWBind{WRID: 0xB1, SendFlags: verbs.SendSignaled, MR: e.MR, Addr: e.MR.IOVA(), Length: length, Access: access})
	if err != nil {
		t.Fatalf("BindMW: %v", err)
	}
	if wc := rdmatest.WaitOne(t, e.CQ); wc.WRID != 0xB1 || wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCBindMW {
		t.Fatalf("bind completion %+v", wc)
	}
	if mw.RKey() != rkey {
		t.Fatalf("RKey %#x after the bind, BindMW returned %#x", mw.RKey(), rkey)
	}
	return rkey
}

// bindType2 binds mw with a BIND_MW work request over e's buffer at off and
// waits for its completion.
func bindType2(t *testing.T, e *rdmatest.End, mw *verbs.MW, off int, length uint64, access verbs.AccessFlags) uint32 {
	t.Helper()
	rkey := verbs.IncRKey(mw.RKey())
	rdmatest.PostSend(t, e.QP, verbs.SendWR{WRID: 0xB2, Opcode: verbs.WRBindMW, SendFlags: verbs.SendSignaled,
		BindMW: verbs.MWBindParams{MW: mw, RKey: rkey, MR: e.MR, Addr: e.MR.IOVA() + uint64(off), Length: length, Access: access}})
	if wc := rdmatest.WaitOne(t, e.CQ); wc.WRID != 0xB2 || wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCBindMW {
		t.Fatalf("bind completion %+v", wc)
	}
	if mw.RKey() != rkey {
		t.Fatalf("RKey %#x after the bind, want %#x", mw.RKey(), rkey)
	}
	return rkey
}

// writeThrough RDMA-writes n bytes from a's buffer to b's at raddr under
// rkey and returns the completion status.
func writeThrough(t *testing.T, a, b *rdmatest.End, raddr uint64, rkey uint32, n int, seed byte) verbs.WCStatus {
	t.Helper()
	fill(a.Buf[:n], seed)
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 0x77, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, n)}, RDMA: verbs.RDMAParams{RemoteAddr: raddr, RKey: rkey}})
	wc := rdmatest.WaitOne(t, a.CQ)
	if wc.WRID != 0x77 {
		t.Fatalf("write completion %+v", wc)
	}
	return wc.Status
}

// rdmaTraffic is test_mr's u.rdma_traffic with RDMA WRITE: both sides write
// into each other through the windows, several iterations.
func rdmaTraffic(t *testing.T, a, b *rdmatest.End, aRKey, bRKey uint32) {
	t.Helper()
	for i := range 3 {
		if st := writeThrough(t, a, b, b.MR.IOVA(), bRKey, mwLen, byte(2*i)); st != verbs.WCSuccess {
			t.Fatalf("iteration %d: client write: %v", i, st)
		}
		checkBytes(t, "client to server", b.Buf[:mwLen], a.Buf[:mwLen])
		if st := writeThrough(t, b, a, a.MR.IOVA(), aRKey, mwLen, byte(2*i+1)); st != verbs.WCSuccess {
			t.Fatalf("iteration %d: server write: %v", i, st)
		}
		checkBytes(t, "server to client", a.Buf[:mwLen], b.Buf[:mwLen])
	}
}

// wantRemoteAccessError checks that a WRITE through rkey fails with
// REM_ACCESS_ERR, as test_mr's "Remote access error" assertions.
func wantRemoteAccessError(t *testing.T, a, b *rdmatest.End, raddr uint64, rkey uint32) {
	t.Helper()
	if st := writeThrough(t, a, b, raddr, rkey, 64, 0x5A); st != verbs.WCRemAccessErr {
		t.Fatalf("write through rkey %#x: %v, want %v", rkey, st, verbs.WCRemAccessErr)
	}
}

func TestMWTestMR(t *testing.T) {
	cases := []struct {
		name string
		typ  verbs.MWType
		// after runs once traffic succeeded; it reports whether the
		// windows must now refuse access.
		after func(t *testing.T, a, b *rdmatest.End, amw, bmw *verbs.MW, aKey, bKey uint32) bool
	}{
		{name: "test_mw_type1", typ: verbs.MWType1},
		{name: "test_mw_type2", typ: verbs.MWType2},
		{
			name: "test_invalidate_mw_type1", typ: verbs.MWType1,
			after: func(t *testing.T, a, b *rdmatest.End, amw, bmw *verbs.MW, _, _ uint32) bool {
				// A zero-length bind unbinds a type 1 window.
				bindType1(t, a, amw, 0, 0)
				bindType1(t, b, bmw, 0, 0)
				return true
			},
		},
		{
			name: "test_mw_type2_invalidate_local", typ: verbs.MWType2,
			after: func(t *testing.T, a, b *rdmatest.End, amw, bmw *verbs.MW, aKey, bKey uint32) bool {
				for _, x := range []struct {
					e   *rdmatest.End
					key uint32
				}{{a, aKey}, {b, bKey}} {
					rdmatest.PostSend(t, x.e.QP, verbs.SendWR{WRID: 0x1C, Opcode: verbs.WRLocalInv, SendFlags: verbs.SendSignaled, InvalidateRKey: x.key})
					if wc := rdmatest.WaitOne(t, x.e.CQ); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCLocalInv {
						t.Fatalf("LOCAL_INV completion %+v", wc)
					}
				}
				return true
			},
		},
		{
			name: "test_mw_type2_invalidate_remote", typ: verbs.MWType2,
			after: func(t *testing.T, a, b *rdmatest.End, amw, bmw *verbs.MW, aKey, bKey uint32) bool {
				rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: 0x5E, SGList: []verbs.SGE{b.MR.SGE(recvOff, 64)}})
				rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 0x5D, Opcode: verbs.WRSendWithInv, SendFlags: verbs.SendSignaled,
					SGList: []verbs.SGE{a.MR.SGE(0, 16)}, InvalidateRKey: bKey})
				if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCSend {
					t.Fatalf("SEND_WITH_INV completion %+v", wc)
				}
				// rxe (the VM's Linux 6.1) reports the receive without
				// IBV_WC_WITH_INV nor the rkey (flags GRH|1<<2, the
				// kernel's IB_WC_WITH_INVALIDATE); that the window was
				// invalidated is checked below by the remote access error.
				hw := rdmatest.Hardware() != ""
				wc := rdmatest.WaitOne(t, b.CQ)
				if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || !hw && (wc.WCFlags&verbs.WCWithInv == 0 || wc.InvalidatedRKey != bKey) {
					t.Fatalf("receive completion %+v, want WITH_INV of %#x", wc, bKey)
				}
				// A hardware device holds the binding (Bound is false
				// there); the remote access error below checks it.
				if bmw.Bound() {
					t.Fatal("window still bound after SEND_WITH_INV")
				}
				rdmatest.PostRecv(t, a.QP, verbs.RecvWR{WRID: 0x5E, SGList: []verbs.SGE{a.MR.SGE(recvOff, 64)}})
				rdmatest.PostSend(t, b.QP, verbs.SendWR{WRID: 0x5D, Opcode: verbs.WRSendWithInv, SendFlags: verbs.SendSignaled,
					SGList: []verbs.SGE{b.MR.SGE(0, 16)}, InvalidateRKey: aKey})
				if wc := rdmatest.WaitOne(t, b.CQ); wc.Status != verbs.WCSuccess {
					t.Fatalf("SEND_WITH_INV completion %+v", wc)
				}
				if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess || !hw && wc.InvalidatedRKey != aKey {
					t.Fatalf("receive completion %+v", wc)
				}
				return true
			},
		},
		{
			name: "test_mw_type2_invalidate_dealloc", typ: verbs.MWType2,
			after: func(t *testing.T, a, b *rdmatest.End, amw, bmw *verbs.MW, _, _ uint32) bool {
				for _, mw := range []*verbs.MW{amw, bmw} {
					if err := mw.Dealloc(); err != nil {
						t.Fatal(err)
					}
					if err := mw.Dealloc(); !errors.Is(err, verbs.ErrClosed) {
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
			amw, bmw := mustAllocMW(t, a.PD, c.typ), mustAllocMW(t, b.PD, c.typ)
			// KeyIsMW knows goroce's key classes; a provider's keys
			// have none (false on hardware).
			if amw.Bound() || amw.Type() != c.typ || (rdmatest.Hardware() == "" && !a.Dev.KeyIsMW(amw.RKey())) {
				t.Fatalf("new window: bound %v, type %v, rkey %#x", amw.Bound(), amw.Type(), amw.RKey())
			}
			var aKey, bKey uint32
			if c.typ == verbs.MWType1 {
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
			wantRemoteAccessError(t, a, b, b.MR.IOVA(), bKey)
		})
	}
}

func TestMWAllocWrongType(t *testing.T) {
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	for _, typ := range []verbs.MWType{0, 3, -1} {
		if _, err := pd.AllocMW(typ); !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("AllocMW(%v): %v, want ErrInvalidArgument", typ, err)
		}
	}
	attr := d.Query()
	caps := verbs.DeviceMemWindow | verbs.DeviceMemWindowType2B | verbs.DeviceFlushGlobal | verbs.DeviceFlushPersistent | verbs.DeviceAtomicWrite
	if rdmatest.Hardware() != "" {
		// rxe has FLUSH and ATOMIC_WRITE from Linux 6.2 on (the VM's is 6.1).
		caps = verbs.DeviceMemWindow | verbs.DeviceMemWindowType2B
	}
	if attr.MaxMW == 0 || attr.DeviceCapFlags&caps != caps {
		t.Errorf("max_mw %d, cap flags %#x", attr.MaxMW, uint64(attr.DeviceCapFlags))
	}
	mw := mustAllocMW(t, pd, verbs.MWType2)
	if err := pd.Dealloc(); !errors.Is(err, verbs.ErrBusy) {
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
		a, b  *rdmatest.End
		mw    *verbs.MW
		other *verbs.MR // b's buffer in a's device, registered in another PD
	}
	cases := []struct {
		name    string
		typ     verbs.MWType
		mrFlags verbs.AccessFlags // a's MR; default mwMRAccess
		post    func(t *testing.T, e *env) error
		wantErr error          // at post time
		want    verbs.WCStatus // else: the bind's completion
	}{
		{
			name: "MR without MW_BIND (C10-73)", typ: verbs.MWType2, mrFlags: verbs.AccessLocalWrite,
			post: func(t *testing.T, e *env) error { return postBind2(e.a, e.mw, e.a.MR, 0, 64, mwAccess) },
			want: verbs.WCMWBindErr,
		},
		{
			name: "writable window on a region without local write (C10-74)", typ: verbs.MWType2, mrFlags: verbs.AccessMWBind,
			post: func(t *testing.T, e *env) error { return postBind2(e.a, e.mw, e.a.MR, 0, 64, verbs.AccessRemoteWrite) },
			want: verbs.WCMWBindErr,
		},
		{
			name: "window beyond the region (C10-75)", typ: verbs.MWType2,
			post: func(t *testing.T, e *env) error {
				return postBind2(e.a, e.mw, e.a.MR, e.a.MR.Len()-64, 65, mwAccess)
			},
			want: verbs.WCMWBindErr,
		},
		{
			name: "window before the region (C10-75)", typ: verbs.MWType2,
			post: func(t *testing.T, e *env) error { return postBind2(e.a, e.mw, e.a.MR, -1, 16, mwAccess) },
			want: verbs.WCMWBindErr,
		},
		{
			name: "zero-based region", typ: verbs.MWType2, mrFlags: mwMRAccess | verbs.AccessZeroBased,
			post: func(t *testing.T, e *env) error { return postBind2(e.a, e.mw, e.a.MR, 0, 64, mwAccess) },
			want: verbs.WCMWBindErr,
		},
		{
			name: "type 2 with zero length (o10-37.2.40)", typ: verbs.MWType2,
			post: func(t *testing.T, e *env) error { return postBind2(e.a, e.mw, e.a.MR, 0, 0, mwAccess) },
			want: verbs.WCMWBindErr,
		},
		{
			name: "type 2 bound twice (o10-37.2.30)", typ: verbs.MWType2,
			post: func(t *testing.T, e *env) error {
				if err := postBind2(e.a, e.mw, e.a.MR, 0, 64, mwAccess); err != nil {
					return err
				}
				if wc := rdmatest.WaitOne(t, e.a.CQ); wc.Status != verbs.WCSuccess {
					t.Fatalf("first bind %+v", wc)
				}
				return postBind2(e.a, e.mw, e.a.MR, 0, 64, mwAccess)
			},
			want: verbs.WCMWBindErr,
		},
		{
			name: "type 2 of another PD than the QP (C10-72)", typ: verbs.MWType2,
			post: func(t *testing.T, e *env) error {
				mw := mustAllocMW(t, rdmatest.PD(t, e.a.Dev), verbs.MWType2)
				return postBind2(e.a, mw, e.a.MR, 0, 64, mwAccess)
			},
			want: verbs.WCMWBindErr,
		},
		{
			name: "region of another PD than the window", typ: verbs.MWType2,
			post: func(t *testing.T, e *env) error { return postBind2(e.a, e.mw, e.other, 0, 64, mwAccess) },
			want: verbs.WCMWBindErr,
		},
		{
			name: "deregistered region", typ: verbs.MWType2,
			post: func(t *testing.T, e *env) error {
				mr := rdmatest.MR(t, e.a.PD, make([]byte, 128), mwMRAccess)
				if err := mr.Dereg(); err != nil {
					t.Fatal(err)
				}
				return postBind2(e.a, e.mw, mr, 0, 64, mwAccess)
			},
			want: verbs.WCMWBindErr,
		},
		{
			name: "type 1 zero-based (o10-36.2.2)", typ: verbs.MWType1,
			post: func(t *testing.T, e *env) error {
				_, err := e.a.QP.BindMW(e.mw, verbs.MWBind{MR: e.a.MR, Addr: e.a.MR.IOVA(), Length: 64, Access: mwAccess | verbs.AccessZeroBased})
				return err
			},
			wantErr: verbs.ErrInvalidArgument,
		},
		{
			name: "type 1 through PostSend", typ: verbs.MWType1,
			post:    func(t *testing.T, e *env) error { return postBind2(e.a, e.mw, e.a.MR, 0, 64, mwAccess) },
			wantErr: verbs.ErrInvalidArgument,
		},
		{
			name: "type 2 through BindMW", typ: verbs.MWType2,
			post: func(t *testing.T, e *env) error {
				_, err := e.a.QP.BindMW(e.mw, verbs.MWBind{MR: e.a.MR, Addr: e.a.MR.IOVA(), Length: 64, Access: mwAccess})
				return err
			},
			wantErr: verbs.ErrInvalidArgument,
		},
		{
			name: "rkey of another window", typ: verbs.MWType2,
			post: func(t *testing.T, e *env) error {
				return e.a.QP.PostSend(&verbs.SendWR{WRID: 9, Opcode: verbs.WRBindMW, SendFlags: verbs.SendSignaled,
					BindMW: verbs.MWBindParams{MW: e.mw, RKey: e.mw.RKey() + 0x100, MR: e.a.MR, Addr: e.a.MR.IOVA(), Length: 64, Access: mwAccess}})
			},
			wantErr: verbs.ErrInvalidArgument,
		},
		{
			name: "unknown window rights", typ: verbs.MWType2,
			post:    func(t *testing.T, e *env) error { return postBind2(e.a, e.mw, e.a.MR, 0, 64, verbs.AccessOnDemand) },
			wantErr: verbs.ErrInvalidArgument,
		},
		{
			name: "bind with data", typ: verbs.MWType2,
			post: func(t *testing.T, e *env) error {
				return e.a.QP.PostSend(&verbs.SendWR{WRID: 9, Opcode: verbs.WRBindMW, SGList: []verbs.SGE{e.a.MR.SGE(0, 8)},
					BindMW: verbs.MWBindParams{MW: e.mw, RKey: verbs.IncRKey(e.mw.RKey()), MR: e.a.MR, Addr: e.a.MR.IOVA(), Length: 64}})
			},
			wantErr: verbs.ErrInvalidArgument,
		},
		{
			name: "missing region", typ: verbs.MWType2,
			post: func(t *testing.T, e *env) error {
				return e.a.QP.PostSend(&verbs.SendWR{WRID: 9, Opcode: verbs.WRBindMW,
					BindMW: verbs.MWBindParams{MW: e.mw, RKey: verbs.IncRKey(e.mw.RKey()), Length: 64}})
			},
			wantErr: verbs.ErrInvalidArgument,
		},
	}
	// rxe (the VM's Linux 6.1) executes these binds successfully.
	rxeBinds := map[string]bool{"zero-based region": true, "region of another PD than the window": true}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if rxeBinds[c.name] {
				rdmatest.SkipOnHardware(t, "rxe (the VM's Linux 6.1) executes this bind")
			}
			flags := c.mrFlags
			if flags == 0 {
				flags = mwMRAccess
			}
			a, b := rdmatest.Pair(t, rdmatest.EndOptions{MRAccess: flags}, rdmatest.EndOptions{MRAccess: mwMRAccess})
			e := &env{a: a, b: b, mw: mustAllocMW(t, a.PD, c.typ),
				other: rdmatest.MR(t, rdmatest.PD(t, a.Dev), make([]byte, 4096), mwMRAccess)}
			err := c.post(t, e)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("post: %v, want %v", err, c.wantErr)
				}
				rdmatest.ExpectEmpty(t, a.CQ)
				return
			}
			if err != nil {
				t.Fatalf("post: %v", err)
			}
			wc := rdmatest.WaitOne(t, a.CQ)
			if wc.Status != c.want {
				t.Fatalf("bind completion %+v, want %v", wc, c.want)
			}
			if c.want != verbs.WCSuccess {
				if e.mw.Bound() && c.name != "type 2 bound twice (o10-37.2.30)" {
					t.Fatal("a failed bind left the window bound")
				}
				if st := a.QP.State(); st != verbs.QPStateErr {
					t.Fatalf("QP in %v after a bind error, want ERR", st)
				}
			}
		})
	}
}

// postBind2 posts a signaled BIND_MW of mw over [off, off+length) of mr.
func postBind2(e *rdmatest.End, mw *verbs.MW, mr *verbs.MR, off int, length uint64, access verbs.AccessFlags) error {
	return e.QP.PostSend(&verbs.SendWR{WRID: 9, Opcode: verbs.WRBindMW, SendFlags: verbs.SendSignaled,
		BindMW: verbs.MWBindParams{MW: mw, RKey: verbs.IncRKey(mw.RKey()), MR: mr, Addr: mr.IOVA() + uint64(int64(off)), Length: length, Access: access}})
}

// TestMWRemoteAccess checks what a peer can do through a bound window:
// the window's bounds and rights, not the region's, limit it; a zero-based
// window is addressed from 0; a type 2 window serves only the QP that
// bound it; each bind changes the key byte and the old rkey stops working.
func TestMWRemoteAccess(t *testing.T) {
	const off = 1024
	cases := []struct {
		name   string
		typ    verbs.MWType
		access verbs.AccessFlags
		// raddr is the peer's address for byte i of the window.
		zeroBased bool
		op        func(t *testing.T, a, b *rdmatest.End, mw *verbs.MW, rkey uint32) verbs.WCStatus
		want      verbs.WCStatus
		check     func(t *testing.T, a, b *rdmatest.End)
	}{
		{
			name: "write inside the window", typ: verbs.MWType2, access: mwAccess,
			op: func(t *testing.T, a, b *rdmatest.End, _ *verbs.MW, rkey uint32) verbs.WCStatus {
				return writeThrough(t, a, b, b.MR.IOVA()+off+100, rkey, 200, 3)
			},
			want:  verbs.WCSuccess,
			check: func(t *testing.T, a, b *rdmatest.End) { checkBytes(t, "window", b.Buf[off+100:off+300], a.Buf[:200]) },
		},
		{
			name: "write past the window's end inside the region", typ: verbs.MWType2, access: mwAccess,
			op: func(t *testing.T, a, b *rdmatest.End, _ *verbs.MW, rkey uint32) verbs.WCStatus {
				return writeThrough(t, a, b, b.MR.IOVA()+off+mwLen-8, rkey, 16, 3)
			},
			want: verbs.WCRemAccessErr,
		},
		{
			name: "write before the window's start", typ: verbs.MWType1, access: mwAccess,
			op: func(t *testing.T, a, b *rdmatest.End, _ *verbs.MW, rkey uint32) verbs.WCStatus {
				return writeThrough(t, a, b, b.MR.IOVA()+off-8, rkey, 16, 3)
			},
			want: verbs.WCRemAccessErr,
		},
		{
			name: "write through a read-only window", typ: verbs.MWType2, access: verbs.AccessRemoteRead,
			op: func(t *testing.T, a, b *rdmatest.End, _ *verbs.MW, rkey uint32) verbs.WCStatus {
				return writeThrough(t, a, b, b.MR.IOVA()+off, rkey, 16, 3)
			},
			want: verbs.WCRemAccessErr,
		},
		{
			name: "read through a read-only window", typ: verbs.MWType1, access: verbs.AccessRemoteRead,
			op: func(t *testing.T, a, b *rdmatest.End, _ *verbs.MW, rkey uint32) verbs.WCStatus {
				fill(b.Buf[off:off+300], 9)
				rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 5, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
					SGList: []verbs.SGE{a.MR.SGE(dstOff, 300)}, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA() + off, RKey: rkey}})
				return rdmatest.WaitOne(t, a.CQ).Status
			},
			want: verbs.WCSuccess,
			check: func(t *testing.T, a, b *rdmatest.End) {
				checkBytes(t, "read", a.Buf[dstOff:dstOff+300], b.Buf[off:off+300])
			},
		},
		{
			name: "zero-based type 2 window", typ: verbs.MWType2, access: mwAccess | verbs.AccessZeroBased, zeroBased: true,
			op: func(t *testing.T, a, b *rdmatest.End, _ *verbs.MW, rkey uint32) verbs.WCStatus {
				return writeThrough(t, a, b, 40, rkey, 100, 4)
			},
			want: verbs.WCSuccess,
			check: func(t *testing.T, a, b *rdmatest.End) {
				checkBytes(t, "zero-based", b.Buf[off+40:off+140], a.Buf[:100])
			},
		},
		{
			name: "atomic through an atomic window", typ: verbs.MWType2, access: verbs.AccessRemoteAtomic | verbs.AccessLocalWrite,
			op: func(t *testing.T, a, b *rdmatest.End, _ *verbs.MW, rkey uint32) verbs.WCStatus {
				rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 6, Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled,
					SGList: []verbs.SGE{a.MR.SGE(dstOff, 8)}, Atomic: verbs.AtomicParams{RemoteAddr: b.MR.IOVA() + off, RKey: rkey, CompareAdd: 5}})
				return rdmatest.WaitOne(t, a.CQ).Status
			},
			want: verbs.WCSuccess,
		},
		{
			name: "type 2 window through another QP", typ: verbs.MWType2, access: mwAccess,
			op: func(t *testing.T, a, b *rdmatest.End, _ *verbs.MW, rkey uint32) verbs.WCStatus {
				// A second connection between the same devices, QPs in
				// the same PDs: the window belongs to b's first QP.
				a2, b2 := secondConnection(t, a, b)
				return writeThrough(t, a2, b2, b.MR.IOVA()+off, rkey, 16, 5)
			},
			want: verbs.WCRemAccessErr,
		},
		{
			name: "type 1 window through another QP of the PD", typ: verbs.MWType1, access: mwAccess,
			op: func(t *testing.T, a, b *rdmatest.End, _ *verbs.MW, rkey uint32) verbs.WCStatus {
				a2, b2 := secondConnection(t, a, b)
				return writeThrough(t, a2, b2, b.MR.IOVA()+off, rkey, 16, 5)
			},
			want: verbs.WCSuccess,
		},
		{
			name: "old rkey after a rebind", typ: verbs.MWType1, access: mwAccess,
			op: func(t *testing.T, a, b *rdmatest.End, mw *verbs.MW, rkey uint32) verbs.WCStatus {
				next := bindType1(t, b, mw, mwLen, mwAccess)
				if next == rkey || next>>8 != rkey>>8 {
					t.Fatalf("rebind rkey %#x after %#x: want the same index, another key", next, rkey)
				}
				if st := writeThrough(t, a, b, b.MR.IOVA(), next, 16, 6); st != verbs.WCSuccess {
					t.Fatalf("write through the new rkey: %v", st)
				}
				return writeThrough(t, a, b, b.MR.IOVA(), rkey, 16, 6)
			},
			want: verbs.WCRemAccessErr,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "write past the window's end inside the region" || c.name == "write before the window's start" {
				rdmatest.SkipOnHardware(t, "rxe checks only the region's bounds, not the window's")
			}
			a, b := newMWPair(t)
			mw := mustAllocMW(t, b.PD, c.typ)
			var rkey uint32
			if c.typ == verbs.MWType1 {
				rkey, _ = b.QP.BindMW(mw, verbs.MWBind{WRID: 0xB1, SendFlags: verbs.SendSignaled, MR: b.MR, Addr: b.MR.IOVA() + off, Length: mwLen, Access: c.access})
				if wc := rdmatest.WaitOne(t, b.CQ); wc.Status != verbs.WCSuccess {
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
	for _, typ := range []verbs.MWType{verbs.MWType1, 0} {
		t.Run("LOCAL_INV of "+map[verbs.MWType]string{verbs.MWType1: "a type 1 window", 0: "a region"}[typ], func(t *testing.T) {
			a, _ := newMWPair(t)
			key := a.MR.RKey()
			if typ == verbs.MWType1 {
				mw := mustAllocMW(t, a.PD, verbs.MWType1)
				key = bindType1(t, a, mw, mwLen, mwAccess)
				defer func() {
					// On hardware the device holds the binding.
					if rdmatest.Hardware() == "" && !mw.Bound() {
						t.Error("failed LOCAL_INV unbound the type 1 window")
					}
				}()
			}
			rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 0x1C, Opcode: verbs.WRLocalInv, SendFlags: verbs.SendSignaled, InvalidateRKey: key})
			if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCLocQPOpErr {
				t.Fatalf("LOCAL_INV of %#x: %+v, want %v", key, wc, verbs.WCLocQPOpErr)
			}
		})
	}
	t.Run("SEND_WITH_INV of a type 1 window", func(t *testing.T) {
		rdmatest.SkipOnHardware(t, "rxe (the VM's Linux 6.1) completes the SEND_WITH_INV successfully")
		a, b := newMWPair(t)
		mw := mustAllocMW(t, b.PD, verbs.MWType1)
		key := bindType1(t, b, mw, mwLen, mwAccess)
		rdmatest.PostRecv(t, b.QP, verbs.RecvWR{WRID: 0x5E, SGList: []verbs.SGE{b.MR.SGE(recvOff, 64)}})
		rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 0x5D, Opcode: verbs.WRSendWithInv, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(0, 16)}, InvalidateRKey: key})
		if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCRemInvReqErr {
			t.Fatalf("sender %+v, want %v", wc, verbs.WCRemInvReqErr)
		}
		if wc := rdmatest.WaitOne(t, b.CQ); wc.WRID != 0x5E || wc.Status == verbs.WCSuccess {
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
	rdmatest.SkipOnHardware(t, "rxe (the VM's Linux 6.1) refuses it with EINVAL (ErrInvalidArgument), not EBUSY, Rereg is not on hardware, and the device holds the bindings (Bound)")
	a, _ := newMWPair(t)
	mw1, mw2 := mustAllocMW(t, a.PD, verbs.MWType1), mustAllocMW(t, a.PD, verbs.MWType2)
	bindType1(t, a, mw1, 64, mwAccess)
	key2 := bindType2(t, a, mw2, 128, 64, mwAccess)
	if err := a.MR.Dereg(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("Dereg with 2 windows: %v, want ErrBusy", err)
	}
	if err := a.MR.Rereg(verbs.ReregChangeAccess, nil, nil, mwMRAccess); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("Rereg with windows: %v, want ErrBusy", err)
	}
	bindType1(t, a, mw1, 0, 0)
	if err := a.MR.Dereg(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("Dereg with 1 window: %v, want ErrBusy", err)
	}
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 0x1C, Opcode: verbs.WRLocalInv, InvalidateRKey: key2})
	if mw2.Bound() {
		t.Fatal("LOCAL_INV did not unbind the window")
	}
	// A window deallocated while bound releases its region too.
	key3 := bindType2(t, a, mw2, 0, 64, mwAccess)
	if err := mw2.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := a.MR.Dereg(); err != nil {
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
	a, b := rdmatest.Pair(t, rdmatest.EndOptions{MRAccess: rdmatest.RCAccess | verbs.AccessMWBind}, rdmatest.EndOptions{})
	mw := mustAllocMW(t, a.PD, verbs.MWType2)
	fill(a.Buf[:mwLen], 1)
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, mwLen)}, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}})
	key := verbs.IncRKey(mw.RKey())
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRBindMW,
		BindMW: verbs.MWBindParams{MW: mw, RKey: key, MR: a.MR, Addr: a.MR.IOVA(), Length: 64, Access: mwAccess}})
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 3, Opcode: verbs.WRLocalInv, SendFlags: verbs.SendSignaled | verbs.SendFence, InvalidateRKey: key})
	wcs := rdmatest.WaitN(t, a.CQ, 2)
	if wcs[0].WRID != 1 || wcs[1].WRID != 3 || wcs[1].Opcode != verbs.WCLocalInv || wcs[1].Status != verbs.WCSuccess {
		t.Fatalf("completions %+v", wcs)
	}
	if mw.Bound() || mw.RKey() != key {
		t.Fatalf("window bound %v rkey %#x, want free with %#x", mw.Bound(), mw.RKey(), key)
	}
}

// TestMWRemoteNoAllocs checks that resolving a window's rkey on the
// receive path does not allocate.
func TestMWRemoteNoAllocs(t *testing.T) {
	rdmatest.SkipOnHardware(t, "it drives goroce's receive path (QPMemory)")
	a, _ := newMWPair(t)
	mw := mustAllocMW(t, a.PD, verbs.MWType1)
	key := bindType1(t, a, mw, mwLen, mwAccess)
	m := verbs.QPMemory(a.QP)
	va := a.MR.IOVA() + 8
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
	rdmatest.SkipOnHardware(t, "it drives goroce's receive path (QPMemory)")
	a, _ := newMWPair(t)
	mw := mustAllocMW(t, a.PD, verbs.MWType1)
	key := bindType1(t, a, mw, mwLen, mwAccess)
	m := verbs.QPMemory(a.QP)
	_, ref, err := m.Remote(0, key, a.MR.IOVA(), 8, 2)
	if err != nil {
		t.Fatal(err)
	}
	withdrawn := verbs.WatchWithdrawal(mw)
	done := make(chan error)
	go func() { done <- mw.Dealloc() }()
	testkit.WaitFor(t, "the withdrawal to start", withdrawn)
	if _, _, err := m.Remote(0, key, a.MR.IOVA(), 8, 2); err == nil {
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
	if err := a.MR.Dereg(); err != nil {
		t.Fatalf("Dereg after the window's Dealloc: %v", err)
	}
}

// secondConnection connects a second pair of RC QPs between a's and b's
// devices, in the same PDs, with the same CQs and memory.
func secondConnection(t *testing.T, a, b *rdmatest.End) (a2, b2 *rdmatest.End) {
	t.Helper()
	a2 = &rdmatest.End{Dev: a.Dev, PD: a.PD, CQ: a.CQ, Buf: a.Buf, MR: a.MR}
	b2 = &rdmatest.End{Dev: b.Dev, PD: b.PD, CQ: b.CQ, Buf: b.Buf, MR: b.MR}
	for _, e := range []*rdmatest.End{a2, b2} {
		qp, err := e.PD.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: e.CQ, RecvCQ: e.CQ,
			Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		e.QP = qp
	}
	rdmatest.Connect(t, a2, b2, rdmatest.DefaultLink(), rdmatest.DefaultLink())
	return a2, b2
}
