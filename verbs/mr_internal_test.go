package verbs

import (
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestMRDeregTwiceAndKeyRevocation(t *testing.T) {
	d := openDevice(t, 1)
	pd := mustPD(t, d)
	mr := mustMR(t, pd, 32, AccessLocalWrite|AccessRemoteWrite)
	key := mr.RKey()
	if d.lookupAndAcquire(key) == nil {
		t.Fatal("key not found")
	}
	// (The acquisition above must be released for Dereg to complete.)
	d.mrs.lookup(key).release()
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if d.lookupMR(key) != nil || d.lookupAndAcquire(key) != nil {
		t.Error("key still resolves after Dereg")
	}
	wantErr(t, mr.Dereg(), ErrClosed, "mr")
	wantErr(t, mr.Rereg(ReregChangeAccess, nil, nil, AccessLocalWrite), ErrClosed, "mr")
	if err := pd.Dealloc(); err != nil {
		t.Errorf("Dealloc after Dereg: %v", err)
	}
}

func TestMRKeyChangesOnIndexReuse(t *testing.T) {
	d := openDevice(t, 1)
	d.mrs.reuseDelay = 0 // reuse freed indices at once
	pd := mustPD(t, d)
	seen := map[uint32]bool{}
	var index uint32
	for i := range 300 {
		mr := mustMR(t, pd, 8, 0)
		key := mr.RKey()
		if i == 0 {
			index = mr.index
		} else if mr.index != index {
			t.Fatalf("slot %#x not reused (first %#x)", mr.index, index)
		}
		if slot, _ := d.mrs.slotOf(key); slot != index {
			t.Fatalf("key %#x names slot %#x, not %#x", key, slot, index)
		}
		if seen[key] {
			t.Fatalf("key %#x repeated after %d reuses", key, i)
		}
		seen[key] = true
		if err := mr.Dereg(); err != nil {
			t.Fatal(err)
		}
		if d.lookupMR(key) != nil {
			t.Fatalf("stale key %#x resolves", key)
		}
	}
}

func TestMRRereg(t *testing.T) {
	d := openDevice(t, 1)
	pd := mustPD(t, d)
	pd2 := mustPD(t, d)
	other := mustPD(t, openDevice(t, 3))
	newBuf := make([]byte, 128)

	tests := []struct {
		name   string
		flags  ReregFlags
		pd     *PD
		buf    []byte
		access AccessFlags
		want   error
		field  string
		check  func(t *testing.T, mr *MR, old []byte)
	}{
		{name: "access", flags: ReregChangeAccess, access: AccessLocalWrite | AccessRemoteAtomic,
			check: func(t *testing.T, mr *MR, _ []byte) {
				if mr.Access() != AccessLocalWrite|AccessRemoteAtomic {
					t.Errorf("access %v", mr.Access())
				}
			}},
		{name: "access to zero-based", flags: ReregChangeAccess, access: AccessZeroBased,
			check: func(t *testing.T, mr *MR, _ []byte) {
				if mr.IOVA() != 0 {
					t.Errorf("IOVA %#x", mr.IOVA())
				}
			}},
		{name: "translation", flags: ReregChangeTranslation, buf: newBuf,
			check: func(t *testing.T, mr *MR, _ []byte) {
				if mr.IOVA() != bufAddr(newBuf) || mr.Len() != len(newBuf) {
					t.Errorf("IOVA %#x len %d", mr.IOVA(), mr.Len())
				}
			}},
		{name: "pd", flags: ReregChangePD, pd: pd2,
			check: func(t *testing.T, mr *MR, _ []byte) {
				if mr.PD() != pd2 {
					t.Error("PD not changed")
				}
				wantErr(t, pd2.Dealloc(), ErrBusy, "pd")
			}},
		{name: "all", flags: reregAll, pd: pd2, buf: newBuf, access: AccessLocalWrite,
			check: func(t *testing.T, mr *MR, _ []byte) {
				if mr.PD() != pd2 || mr.Len() != len(newBuf) || mr.Access() != AccessLocalWrite {
					t.Error("not all changed")
				}
			}},
		{name: "no flags", flags: 0, want: ErrInvalidArgument, field: "flags"},
		{name: "unknown flag", flags: 8 | ReregChangeAccess, want: ErrInvalidArgument, field: "flags"},
		{name: "access without flag", flags: ReregChangePD, pd: pd2, access: AccessLocalWrite, want: ErrInvalidArgument, field: "access"},
		{name: "bad access", flags: ReregChangeAccess, access: AccessRemoteWrite, want: ErrInvalidArgument, field: "access"},
		{name: "empty translation", flags: ReregChangeTranslation, want: ErrInvalidArgument, field: "length"},
		{name: "nil pd", flags: ReregChangePD, want: ErrInvalidArgument, field: "pd"},
		{name: "pd of another device", flags: ReregChangePD, pd: other, want: ErrInvalidArgument, field: "pd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := make([]byte, 64)
			mr, err := pd.RegMR(old, AccessLocalWrite|AccessRemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			before := *mr.reg.Load()
			err = mr.Rereg(tt.flags, tt.pd, tt.buf, tt.access)
			wantErr(t, err, tt.want, tt.field)
			if tt.want != nil {
				// A failed Rereg changes nothing.
				if after := mr.reg.Load(); after.key != before.key || after.pd != before.pd ||
					after.access != before.access || after.iova != before.iova || len(after.buf) != len(before.buf) {
					t.Error("failed Rereg changed the registration")
				}
			} else {
				if slot, _ := d.mrs.slotOf(mr.RKey()); mr.RKey() == before.key || slot != mr.index {
					t.Errorf("key %#x -> %#x: want the same slot, a new key", before.key, mr.RKey())
				}
				if d.lookupMR(before.key) != nil || d.lookupMR(mr.RKey()) != mr {
					t.Error("old key still valid or new key not published")
				}
				tt.check(t, mr, old)
			}
			if err := mr.Dereg(); err != nil {
				t.Fatal(err)
			}
		})
	}
	// Every PD is free again.
	for _, p := range []*PD{pd, pd2} {
		if err := p.Dealloc(); err != nil {
			t.Errorf("Dealloc: %v", err)
		}
	}
}

func TestMRBoundWindowsBlockDereg(t *testing.T) {
	d := openDevice(t, 1)
	pd := mustPD(t, d)
	mr := mustMR(t, pd, 8, AccessLocalWrite|AccessMWBind)
	mr.boundMWs.Add(1) // as binding a memory window will
	wantErr(t, mr.Dereg(), ErrBusy, "mr")
	wantErr(t, mr.Rereg(ReregChangeAccess, nil, nil, AccessLocalWrite), ErrBusy, "mr")
	if d.lookupMR(mr.RKey()) != mr {
		t.Error("failed Dereg revoked the key")
	}
	mr.boundMWs.Add(-1)
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
}

func TestMRCheckRemote(t *testing.T) {
	d := openDevice(t, 1)
	pd := mustPD(t, d)
	pd2 := mustPD(t, d)
	rw := AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead
	low, err := pd.RegMRIOVA(make([]byte, 0x100), 0x1000, rw)
	if err != nil {
		t.Fatal(err)
	}
	const top = math.MaxUint64 - 0xff // the region ends at 2^64-1
	high, err := pd.RegMRIOVA(make([]byte, 0x100), top, AccessLocalWrite|AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mr     *MR
		pd     *PD
		va     uint64
		length int
		need   AccessFlags
		want   error
	}{
		{"whole", low, pd, 0x1000, 0x100, AccessRemoteWrite, nil},
		{"inside", low, pd, 0x1010, 0x10, AccessRemoteRead | AccessRemoteWrite, nil},
		{"empty at end", low, pd, 0x1100, 0, AccessRemoteRead, nil},
		{"local read needs no right", low, pd, 0x1000, 8, 0, nil},
		{"one past the end", low, pd, 0x1001, 0x100, AccessRemoteWrite, faultBounds},
		{"before", low, pd, 0xfff, 1, AccessRemoteWrite, faultBounds},
		{"start past end", low, pd, 0x1101, 0, AccessRemoteWrite, faultBounds},
		{"negative length", low, pd, 0x1000, -1, AccessRemoteWrite, faultBounds},
		{"va+len wraps", low, pd, math.MaxUint64, 2, AccessRemoteWrite, faultBounds},
		{"huge length", low, pd, 0x1000, math.MaxInt, AccessRemoteWrite, faultBounds},
		{"wrong pd", low, pd2, 0x1000, 1, AccessRemoteWrite, faultPD},
		{"missing right", low, pd, 0x1000, 8, AccessRemoteAtomic, faultAccess},
		{"top whole", high, pd, top, 0x100, AccessRemoteAtomic, nil},
		{"top last byte", high, pd, math.MaxUint64, 1, AccessRemoteAtomic, nil},
		{"top overflow", high, pd, math.MaxUint64, 2, AccessRemoteAtomic, faultBounds},
		{"top aligned 8", high, pd, math.MaxUint64 - 7, 8, AccessRemoteAtomic, nil},
		{"top length past", high, pd, top, 0x101, AccessRemoteAtomic, faultBounds},
		{"top write not allowed", high, pd, top, 8, AccessRemoteWrite, faultAccess},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.mr.checkRemote(tt.pd, tt.va, tt.length, tt.need)
			if err != tt.want {
				t.Fatalf("checkRemote = %v, want %v", err, tt.want)
			}
			r, err := d.acquireMR(tt.mr.RKey(), tt.pd, tt.va, tt.length, tt.need)
			if err != tt.want {
				t.Fatalf("acquireMR = %v, want %v", err, tt.want)
			}
			if r != nil {
				if got := r.bytes(tt.va, tt.length); len(got) != tt.length {
					t.Errorf("bytes: %d bytes", len(got))
				}
				r.release()
			}
		})
	}
	if _, err := d.acquireMR(low.RKey()+1, pd, 0x1000, 1, 0); err != faultKey {
		t.Errorf("acquireMR with a bad key = %v", err)
	}
	for _, f := range []accessFault{faultKey, faultPD, faultAccess, faultBounds, 0} {
		if f.Error() == "" {
			t.Errorf("fault %d has no text", f)
		}
	}
	// A fault converts to error without allocating.
	if n := testing.AllocsPerRun(100, func() { _ = low.checkRemote(pd2, 0, 1, 0) }); n != 0 {
		t.Errorf("checkRemote allocates %v times", n)
	}
}

func TestMRDeregWaitsForAccesses(t *testing.T) {
	d := openDevice(t, 1)
	pd := mustPD(t, d)
	mr := mustMR(t, pd, 64, AccessLocalWrite|AccessRemoteWrite)
	key := mr.RKey()
	r := d.lookupAndAcquire(key)
	if r == nil {
		t.Fatal("acquire failed")
	}
	done := make(chan error)
	go func() { done <- mr.Dereg() }()

	// Wait until Dereg has revoked the registration (it then blocks on
	// the access still in flight).
	for r.refs.Load()&regionDead == 0 {
		runtime.Gosched()
	}
	if d.lookupAndAcquire(key) != nil {
		t.Error("acquire succeeded after Dereg started")
	}
	select {
	case err := <-done:
		t.Fatalf("Dereg returned (%v) with an access in flight", err)
	default:
	}
	r.buf[0] = 1 // the access may still touch the memory
	r.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestMRReregWaitsForAccesses(t *testing.T) {
	d := openDevice(t, 1)
	pd := mustPD(t, d)
	mr := mustMR(t, pd, 64, AccessLocalWrite|AccessRemoteWrite)
	r := d.lookupAndAcquire(mr.RKey())
	done := make(chan error)
	go func() { done <- mr.Rereg(ReregChangeAccess, nil, nil, AccessLocalWrite) }()
	for r.refs.Load()&regionDead == 0 {
		runtime.Gosched()
	}
	select {
	case err := <-done:
		t.Fatalf("Rereg returned (%v) with an access in flight", err)
	default:
	}
	r.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if mr.Access() != AccessLocalWrite {
		t.Error("Rereg did not apply")
	}
}

// TestMRConcurrentLookup registers and deregisters regions in several
// goroutines while others look keys up and read the memory they find, the
// way the receive path will. Run with -race: the writers overwrite each
// buffer after Dereg, which races with any access Dereg failed to wait for.
func TestMRConcurrentLookup(t *testing.T) {
	d := openDevice(t, 1)
	d.mrs.reuseDelay = 4 // make index reuse frequent
	pd := mustPD(t, d)
	const (
		writers = 2
		readers = 2
		rounds  = 100
	)
	var keys, seen [64]atomic.Uint32
	var writing, reading sync.WaitGroup
	errs := make(chan error, 16)
	report := func(err error) {
		select {
		case errs <- err:
		default: // enough errors to fail the test already
		}
	}

	for w := range writers {
		writing.Go(func() {
			for i := range rounds {
				buf := make([]byte, 16)
				mr, err := pd.RegMR(buf, AccessLocalWrite|AccessRemoteWrite)
				if err != nil {
					report(err)
					return
				}
				key := mr.RKey()
				slot := w*len(keys)/writers + i%(len(keys)/writers) // each writer has its slots
				keys[slot].Store(key)
				if i%8 == 0 {
					// Make sure some accesses overlap a Dereg.
					for seen[slot].Load() != key {
						runtime.Gosched()
					}
				}
				if i%3 == 0 {
					if err := mr.Rereg(ReregChangeAccess, nil, nil, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead); err != nil {
						errs <- err
						return
					}
					key = mr.RKey()
					keys[slot].Store(key)
				}
				runtime.Gosched() // give readers a chance to find the key
				if err := mr.Dereg(); err != nil {
					report(err)
					return
				}
				if d.lookupMR(key) != nil {
					report(errors.New("key resolves after Dereg returned"))
					return
				}
				// The memory is the owner's again: the race detector
				// flags this write if a reader's access were not
				// ordered before Dereg's return.
				clear(buf)
			}
		})
	}
	var stop atomic.Bool
	var hits atomic.Int64
	for range readers {
		reading.Go(func() {
			for i := 0; !stop.Load(); i++ {
				key := keys[i%len(keys)].Load()
				r := d.lookupAndAcquire(key)
				if r == nil {
					continue
				}
				seen[i%len(keys)].Store(key)
				if r.key != key {
					report(errors.New("lookup returned another key's region"))
				}
				if err := r.check(pd, r.iova, len(r.buf), AccessRemoteWrite); err != nil {
					report(err)
				}
				_ = r.buf[i%len(r.buf)] // a remote read of the region
				r.release()
				hits.Add(1)
			}
		})
	}
	writing.Wait()
	stop.Store(true)
	reading.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := d.res.mr.n.Load(); n != 0 {
		t.Errorf("%d MRs still counted", n)
	}
	t.Logf("%d accesses to live regions", hits.Load())
}

// TestDeregDrainsWithoutTheMRLock pins a region as an access in flight does
// (a zero-copy send keeps its source region pinned until the end of the
// receive batch that built it) and deregisters it: Dereg, and Rereg, must
// wait for the pin without holding the MR's lock, which the receive path
// may need meanwhile (binding a window to the region), or the two would
// wait for each other forever.
// rcAccess is every remote right of an RC responder.
const rcAccess = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic

func TestDeregDrainsWithoutTheMRLock(t *testing.T) {
	for _, rereg := range []bool{false, true} {
		d := openDevice(t, 1)
		mr := mustMR(t, mustPD(t, d), 1<<16, rcAccess|AccessMWBind)
		r := d.lookupAndAcquire(mr.LKey())
		if r == nil {
			t.Fatal("lookupAndAcquire failed")
		}
		done := make(chan error, 1)
		go func() {
			if rereg {
				done <- mr.Rereg(ReregChangeAccess, nil, nil, rcAccess)
			} else {
				done <- mr.Dereg()
			}
		}()
		// Wait until the old registration is withdrawn (its keys no
		// longer resolve), then take the MR's lock as a bind would.
		deadline := time.Now().Add(5 * time.Second)
		for d.lookupMR(r.key) != nil && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		locked := false
		for !locked && time.Now().Before(deadline) {
			if locked = mr.mu.TryLock(); !locked {
				time.Sleep(time.Millisecond)
			}
		}
		if !locked {
			t.Fatalf("rereg %v: the MR's lock is held while the in-flight access drains", rereg)
		}
		mr.mu.Unlock()
		select {
		case err := <-done:
			t.Fatalf("rereg %v: returned (%v) with an access still in flight", rereg, err)
		case <-time.After(20 * time.Millisecond):
		}
		r.release()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("rereg %v: %v", rereg, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("rereg %v: still waiting after the access ended", rereg)
		}
		_ = d.Close()
	}
}
