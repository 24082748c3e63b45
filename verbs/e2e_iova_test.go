package verbs_test

import (
	"fmt"
	"os"
	"testing"
	"unsafe"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
)

// TestE2ERegMRIOVA registers memory at IOVAs of the caller's choosing
// (RegMRIOVA) and zero-based (AccessZeroBased), on both ends: the
// requester gathers a WRITE from its own region through the region's
// IOVA, the responder's region is addressed through its IOVA by that
// WRITE and by a READ back, and the bytes land at the matching offsets of
// the buffers. Each IOVA keeps the buffer's offset in its page, as a
// kernel RDMA device requires (a buffer that starts a page is used).
func TestE2ERegMRIOVA(t *testing.T) {
	a, b := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	page := os.Getpagesize()
	const n, span = 3000, 16384
	// aligned returns span bytes of e's buffer that start a page.
	aligned := func(e *rdmatest.End) []byte {
		addr := uintptr(unsafe.Pointer(unsafe.SliceData(e.Buf)))
		off := (page - int(addr%uintptr(page))) % page
		return e.Buf[off : off+span]
	}
	ab, bb := aligned(a), aligned(b)
	for i, c := range []struct {
		iova   uint64
		access verbs.AccessFlags
	}{
		{0, verbs.AccessZeroBased},
		{0, 0},
		{0x7_3450_0000, 0},
		{1 << 63, 0},
	} {
		t.Run(fmt.Sprintf("%#x/%v", c.iova, c.access), func(t *testing.T) {
			ra, err := a.PD.RegMRIOVA(ab, c.iova, rdmatest.RCAccess|c.access)
			if err != nil {
				t.Fatalf("RegMRIOVA(%d bytes, %#x, %v): %v", span, c.iova, c.access, err)
			}
			defer ra.Dereg()
			rb, err := b.PD.RegMRIOVA(bb, c.iova, rdmatest.RCAccess|c.access)
			if err != nil {
				t.Fatalf("RegMRIOVA(%d bytes, %#x, %v): %v", span, c.iova, c.access, err)
			}
			defer rb.Dereg()
			if ra.IOVA() != c.iova || rb.IOVA() != c.iova {
				t.Fatalf("IOVAs %#x and %#x, want %#x", ra.IOVA(), rb.IOVA(), c.iova)
			}
			seed := byte(40 + i)
			fill(ab[100:100+n], seed)
			clear(bb)
			// A WRITE from a's region at offset 100 to b's at offset 200.
			rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{ra.SGE(100, n)}, RDMA: verbs.RDMAParams{RemoteAddr: c.iova + 200, RKey: rb.RKey()}})
			if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess || wc.WRID != 1 {
				t.Fatalf("WRITE to IOVA %#x: %+v", c.iova+200, wc)
			}
			checkBytes(t, "WRITE through the IOVAs", bb[200:200+n], ab[100:100+n])
			checkUntouched(t, "before the WRITE", bb, 0, 200, 0)
			checkUntouched(t, "after the WRITE", bb, 200+n, span, 0)
			// And a READ of it back into a's region at offset 8192.
			clear(ab[8192 : 8192+n])
			rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{ra.SGE(8192, n)}, RDMA: verbs.RDMAParams{RemoteAddr: c.iova + 200, RKey: rb.RKey()}})
			if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess || wc.WRID != 2 {
				t.Fatalf("READ from IOVA %#x: %+v", c.iova+200, wc)
			}
			checkBytes(t, "READ through the IOVAs", ab[8192:8192+n], ab[100:100+n])
		})
	}
	// Off the buffer's page offset: any IOVA on a goroce device; on a
	// kernel RDMA device an error naming the field, not the kernel's
	// EINVAL.
	t.Run("page offset", func(t *testing.T) {
		mr, err := b.PD.RegMRIOVA(bb, 0x1000+8, rdmatest.RCAccess)
		if rdmatest.Hardware() != "" {
			rdmatest.WantError(t, err, verbs.ErrInvalidArgument, "iova")
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := mr.Dereg(); err != nil {
			t.Fatal(err)
		}
	})
}
