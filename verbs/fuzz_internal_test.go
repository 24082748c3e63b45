package verbs

import (
	"math/bits"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

// FuzzMRCheckRemote checks the bounds and rights test the responder applies
// to network-supplied (va, length, rights) against 128-bit arithmetic: the
// check must accept exactly the ranges inside the region, whatever the
// overflow.
func FuzzMRCheckRemote(f *testing.F) {
	f.Add(uint64(0x1000), uint16(0x100), uint64(0x1000), int64(0x100), uint8(AccessLocalWrite|AccessRemoteWrite), uint8(AccessRemoteWrite))
	f.Add(^uint64(0)-0xff, uint16(0x100), ^uint64(0), int64(2), uint8(AccessLocalWrite|AccessRemoteAtomic), uint8(AccessRemoteAtomic))
	f.Add(uint64(0), uint16(1), ^uint64(0), int64(2), uint8(AccessRemoteRead), uint8(AccessRemoteRead))
	d, err := Open(DeviceConfig{Addr: testkit.Addr(1)})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = d.Close() })
	pd, err := d.AllocPD()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, iova uint64, size uint16, va uint64, length int64, regAccess, need uint8) {
		if size == 0 {
			size = 1
		}
		access := AccessFlags(regAccess) & (AccessLocalWrite | accessRemote)
		if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 {
			access |= AccessLocalWrite
		}
		mr, err := pd.RegMRIOVA(make([]byte, size), iova, access)
		if err != nil {
			// Only a region wrapping around 2^64 may be refused.
			if _, carry := bits.Add64(iova, uint64(size)-1, 0); carry == 0 {
				t.Fatalf("RegMRIOVA(%d bytes at %#x, %v): %v", size, iova, access, err)
			}
			return
		}
		defer mr.Dereg()
		n := int(length)
		if int64(n) != length {
			return
		}
		needed := AccessFlags(need) & accessRemote

		var want error
		switch {
		case needed&^access != 0:
			want = faultAccess
		case n < 0 || va < iova:
			want = faultBounds
		default:
			// end = va - iova + n must not exceed size, in 128 bits.
			lo, hi := bits.Add64(va-iova, uint64(n), 0)
			if hi != 0 || lo > uint64(size) {
				want = faultBounds
			}
		}
		got := mr.checkRemote(pd, va, n, needed)
		if got != want {
			t.Fatalf("check(va %#x, len %d, need %v) on [%#x, +%d) %v = %v, want %v", va, n, needed, iova, size, access, got, want)
		}
		if got == nil {
			r, err := d.acquireMR(mr.RKey(), pd, va, n, needed)
			if err != nil {
				t.Fatalf("acquireMR = %v after check passed", err)
			}
			if len(r.bytes(va, n)) != n {
				t.Fatal("bytes has the wrong length")
			}
			r.release()
		}
	})
}
