//go:build linux

package nic

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nicproto"
)

// ring is shared memory the daemon creates for a queue: a sealed memfd
// (neither side can shrink it, so no access ever faults) mapped here and
// handed to the client.
type ring struct {
	mem []byte
	fd  int // until handed over; -1 after
}

func newRing(name string, size int) (*ring, error) {
	size = (size + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, err
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS,
		unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return nil, err
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &ring{mem: mem, fd: fd}, nil
}

// closeFD drops the daemon's descriptor once the client has its copy.
func (r *ring) closeFD() {
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}

func (r *ring) unmap() {
	r.closeFD()
	if r.mem != nil {
		unix.Munmap(r.mem)
		r.mem = nil
	}
}

// at returns a pointer to byte off of the ring.
func (r *ring) at(off int) unsafe.Pointer { return unsafe.Pointer(&r.mem[off]) }

// view is the daemon's mapping of registered application memory: the pieces
// a registration names, mapped contiguously so that the region is one slice.
type view struct {
	base     unsafe.Pointer
	size     int
	writable bool // every piece is mapped writable
}

// mapView maps pieces (which must tile [0, total) page by page) of the
// client's file descriptors. Only sealed memfds are accepted: a file that the
// client could truncate would make the daemon fault on its next access.
func mapView(pieces []nicproto.Piece, fds []int) (*view, error) {
	page := uint64(os.Getpagesize())
	var total uint64
	for _, p := range pieces {
		if p.Length == 0 || p.Length%page != 0 || p.Offset%page != 0 || int(p.FDIndex) >= len(fds) {
			return nil, fmt.Errorf("piece %+v: %w", p, errInval)
		}
		total += p.Length
		if total > 1<<46 {
			return nil, fmt.Errorf("view of %d bytes: %w", total, errInval)
		}
	}
	if total == 0 {
		return nil, errInval
	}
	// A hugetlb file maps at huge page boundaries and in whole huge pages
	// (its block size): a piece that is not is refused, since the kernel
	// would round the mapping past the view.
	align := page
	var pos uint64
	for _, p := range pieces {
		fd := fds[p.FDIndex]
		if err := checkSealed(fd, p.Offset+p.Length); err != nil {
			return nil, err
		}
		if bs := fileBlockSize(fd); bs > page {
			if p.Offset%bs != 0 || p.Length%bs != 0 || pos%bs != 0 {
				return nil, fmt.Errorf("hugetlb piece %+v at %d not in whole %d-byte pages: %w", p, pos, bs, errInval)
			}
			align = max(align, bs)
		}
		pos += p.Length
	}
	base, err := reserveAligned(total, align)
	if err != nil {
		return nil, err
	}
	v := &view{base: base, size: int(total), writable: true}
	pos = 0
	for _, p := range pieces {
		prot := unix.PROT_READ
		if p.Writable != 0 {
			prot |= unix.PROT_WRITE
		} else {
			v.writable = false
		}
		_, err := unix.MmapPtr(fds[p.FDIndex], int64(p.Offset), unsafe.Add(base, pos), uintptr(p.Length),
			prot, unix.MAP_SHARED|unix.MAP_FIXED)
		if err != nil {
			v.unmap()
			return nil, err
		}
		pos += p.Length
	}
	return v, nil
}

// fileBlockSize returns the block size of fd's file: a hugetlb file's
// huge page size, a few KiB for others.
func fileBlockSize(fd int) uint64 {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Blksize <= 0 {
		return 0
	}
	return uint64(st.Blksize)
}

// reserveAligned reserves size bytes of address space aligned to align.
func reserveAligned(size, align uint64) (unsafe.Pointer, error) {
	page := uint64(os.Getpagesize())
	if align <= page {
		return unix.MmapPtr(-1, 0, nil, uintptr(size), unix.PROT_NONE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	}
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(size+align), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, err
	}
	start := uint64(uintptr(p))
	aligned := (start + align - 1) &^ (align - 1)
	if head := aligned - start; head > 0 {
		unix.MunmapPtr(p, uintptr(head))
	}
	if tail := start + size + align - (aligned + size); tail > 0 {
		unix.MunmapPtr(unsafe.Add(p, aligned-start+size), uintptr(tail))
	}
	return unsafe.Add(p, aligned-start), nil
}

// bytes returns length bytes at off of the view.
func (v *view) bytes(off, length uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(v.base, off)), length)
}

func (v *view) unmap() {
	if v.base != nil {
		unix.MunmapPtr(v.base, uintptr(v.size))
		v.base = nil
	}
}

// checkSealed accepts fd if it cannot shrink below need bytes.
func checkSealed(fd int, need uint64) error {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return fmt.Errorf("memory not in a shrink-sealed memfd: %w", errNotSup)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if uint64(st.Size) < need {
		return fmt.Errorf("memfd of %d bytes, piece ends at %d: %w", st.Size, need, errInval)
	}
	return nil
}

// newEventfd returns a doorbell: the daemon's end, readable through Go's
// poller, and the descriptor to hand to the client.
func newEventfd(name string) (*os.File, int, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, -1, err
	}
	return os.NewFile(uintptr(fd), name), fd, nil
}

// newEventPipe returns a pipe whose read end goes to the client (blocking,
// as libibverbs' event fds are until the application says otherwise) and
// whose write end the daemon writes without blocking.
func newEventPipe() (r, w int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, -1, err
	}
	if err := unix.SetNonblock(p[1], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return -1, -1, err
	}
	return p[0], p[1], nil
}
