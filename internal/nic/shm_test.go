//go:build linux

package nic

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nicproto"
)

// sealedMemfd returns a shrink-sealed memfd of size bytes.
func sealedMemfd(t *testing.T, flags int, size int64) int {
	t.Helper()
	fd, err := unix.MemfdCreate("goroce-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|flags)
	if err != nil {
		t.Skipf("memfd_create(%#x): %v", flags, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Ftruncate(fd, size); err != nil {
		t.Skipf("ftruncate: %v", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		t.Fatal(err)
	}
	return fd
}

// A client can name part of a huge page; the kernel would round such a
// mapping up to the whole page, past the view and over whatever the daemon
// keeps there. mapView must refuse it before mapping anything.
func TestMapViewRefusesPartialHugePages(t *testing.T) {
	huge := sealedMemfd(t, unix.MFD_HUGETLB, 2<<20)
	bs := fileBlockSize(huge)
	if bs <= 4096 {
		t.Skipf("hugetlb memfd block size %d", bs)
	}
	small := sealedMemfd(t, 0, 4096)
	fds := []int{huge, small}
	for name, pieces := range map[string][]nicproto.Piece{
		"4 KiB of a huge page":    {{FDIndex: 0, Writable: 1, Length: 4096}},
		"a huge page at 4 KiB":    {{FDIndex: 1, Writable: 1, Length: 4096}, {FDIndex: 0, Writable: 1, Length: bs}},
		"a huge page, misaligned": {{FDIndex: 0, Writable: 1, Offset: 4096, Length: bs - 4096}},
	} {
		if v, err := mapView(pieces, fds); !errors.Is(err, errInval) {
			if v != nil {
				v.unmap()
			}
			t.Errorf("%s: mapView = %v, want EINVAL", name, err)
		}
	}
	// Whole huge pages map (when the machine has huge pages to give).
	if v, err := mapView([]nicproto.Piece{{FDIndex: 0, Writable: 1, Length: bs}}, fds); err == nil {
		if uintptr(v.base)%uintptr(bs) != 0 {
			t.Errorf("view at %p, not aligned to %d", v.base, bs)
		}
		v.unmap()
	}
}
