package verbs_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
)

// TestE2ECloseWithWindowBound closes a device whose region still has a
// memory window bound to it, and drops both. A kernel RDMA device refuses
// to deregister such a region (EBUSY), so on the hardware backend the
// region's buffer stays pinned (runtime.Pinner) past Close's Dereg; a
// Pinner that becomes garbage while it pins makes the Go runtime panic
// ("found leaking pinned pointer"). Close must unpin those buffers once the
// device is closed, which releases the registrations the kernel kept. On a
// goroce device the test checks only that Close succeeds.
func TestE2ECloseWithWindowBound(t *testing.T) {
	a, _ := newMWPair(t)
	closeWithBoundWindow(t, a)
	// The region, its window and their Pinner are garbage now: collect
	// them and let the runtime's cleanups run, within this test.
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// closeWithBoundWindow registers a buffer of its own in a's PD, binds a
// type 1 window over it, and closes a's device with the window bound,
// keeping no reference to the region or the window.
func closeWithBoundWindow(t *testing.T, a *rdmatest.End) {
	t.Helper()
	mr, err := a.PD.RegMR(make([]byte, 8192), mwMRAccess)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := a.PD.AllocMW(verbs.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.QP.BindMW(mw, verbs.MWBind{WRID: 0xC1, SendFlags: verbs.SendSignaled, MR: mr,
		Addr: mr.IOVA(), Length: 64, Access: mwAccess}); err != nil {
		t.Fatalf("BindMW: %v", err)
	}
	if wc := rdmatest.WaitOne(t, a.CQ); wc.WRID != 0xC1 || wc.Status != verbs.WCSuccess {
		t.Fatalf("bind completion %+v", wc)
	}
	if err := a.Dev.Close(); err != nil {
		t.Fatalf("Close with a window bound: %v", err)
	}
}
