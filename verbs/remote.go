package verbs

import (
	"encoding"
	"encoding/binary"
	"fmt"
	"math"
)

// RemoteRegion is memory a peer may access one-sidedly: the address of its
// first byte (in the region's IOVA space), the rkey that grants access and
// its length. MR.Remote (and MW.Remote for a bound window) describes local
// memory for a peer; MarshalBinary encodes it in RemoteRegionSize bytes,
// small enough for connection private data (rdma_cm allows 56 bytes on
// connect, 196 on accept); the peer decodes it with UnmarshalBinary and
// builds its work requests with Read, Write, WriteImm, CompareSwap and
// FetchAdd, which check the bounds (and an atomic's alignment) before
// anything is posted.
//
// The rkey only names the memory: the target's device still checks every
// access against the region's rights and the target QP's access flags.
type RemoteRegion struct {
	Addr   uint64 // first byte, in the region's IOVA space
	RKey   uint32
	Length uint64 // bytes
}

var (
	_ encoding.BinaryMarshaler   = RemoteRegion{}
	_ encoding.BinaryAppender    = RemoteRegion{}
	_ encoding.BinaryUnmarshaler = (*RemoteRegion)(nil)
)

// RemoteRegionSize is the length of a RemoteRegion's binary encoding:
// Addr (8 bytes), RKey (4) and Length (4), big-endian. A region of 4 GiB
// or more does not fit: hand out Slices of it.
const RemoteRegionSize = 16

// Remote describes the region for a peer: its IOVA, its rkey and its
// length.
func (mr *MR) Remote() RemoteRegion {
	r := mr.reg.Load()
	rr := RemoteRegion{Addr: r.iova, RKey: r.key, Length: uint64(len(r.buf))}
	if mr.hw != nil {
		rr.RKey = mr.hw.rkey()
	}
	return rr
}

// Remote describes the window's current binding for a peer: its first
// address (0 for a zero-based window), its rkey and its length. It fails
// with ErrInvalidState while the window is unbound.
func (mw *MW) Remote() (RemoteRegion, error) {
	b := mw.binding.Load()
	if b == nil {
		return RemoteRegion{}, newError("MW.Remote", "mw", ErrInvalidState, "the window is not bound")
	}
	return RemoteRegion{Addr: b.iova, RKey: b.key, Length: uint64(len(b.buf))}, nil
}

// String describes the region, e.g. "[0x7f3a2c000000, +4096) rkey 0x1234".
func (r RemoteRegion) String() string {
	return fmt.Sprintf("[%#x, +%d) rkey %#x", r.Addr, r.Length, r.RKey)
}

// AppendBinary appends the region's RemoteRegionSize-byte encoding to b
// (encoding.BinaryAppender). It fails, naming the field, for a region the
// encoding cannot carry: empty, of 4 GiB or more, or wrapping around 2^64.
func (r RemoteRegion) AppendBinary(b []byte) ([]byte, error) {
	if err := r.valid("RemoteRegion.AppendBinary"); err != nil {
		return b, err
	}
	b = binary.BigEndian.AppendUint64(b, r.Addr)
	b = binary.BigEndian.AppendUint32(b, r.RKey)
	return binary.BigEndian.AppendUint32(b, uint32(r.Length)), nil
}

// valid checks what the encoding requires of a region.
func (r RemoteRegion) valid(op string) error {
	switch {
	case r.Length == 0:
		return newError(op, "Length", ErrInvalidArgument, "0: a region has at least one byte")
	case r.Length > math.MaxUint32:
		return errorf(op, "Length", ErrInvalidArgument, "%d bytes do not fit the encoding's 32 bits: hand out Slices of under 4 GiB", r.Length)
	case r.Addr > math.MaxUint64-(r.Length-1):
		return errorf(op, "Addr", ErrInvalidArgument, "%#x + %d bytes wraps around 2^64", r.Addr, r.Length)
	}
	return nil
}

// MarshalBinary encodes the region in RemoteRegionSize bytes
// (encoding.BinaryMarshaler); it fails as AppendBinary does.
func (r RemoteRegion) MarshalBinary() ([]byte, error) {
	if err := r.valid("RemoteRegion.MarshalBinary"); err != nil {
		return nil, err
	}
	return r.AppendBinary(make([]byte, 0, RemoteRegionSize))
}

// UnmarshalBinary decodes a region encoded by MarshalBinary
// (encoding.BinaryUnmarshaler). The bytes come from a peer, so they are
// checked: exactly RemoteRegionSize of them, a Length of at least one
// byte, and a range that does not wrap around 2^64. On error r is
// unchanged and the *Error names the field at fault; it wraps
// ErrInvalidArgument.
func (r *RemoteRegion) UnmarshalBinary(b []byte) error {
	const op = "RemoteRegion.UnmarshalBinary"
	if len(b) != RemoteRegionSize {
		return errorf(op, "encoding", ErrInvalidArgument, "%d bytes, want %d (address, rkey, length)", len(b), RemoteRegionSize)
	}
	v := RemoteRegion{
		Addr:   binary.BigEndian.Uint64(b[0:]),
		RKey:   binary.BigEndian.Uint32(b[8:]),
		Length: uint64(binary.BigEndian.Uint32(b[12:])),
	}
	if err := v.valid(op); err != nil {
		return err
	}
	*r = v
	return nil
}

// Slice returns the part [off, off+n) of the region, as a region of its
// own: what to give a peer that should see only that part (the rkey is
// the same, so it is a convention between cooperating peers, not a
// protection; a memory window is one). It fails if the part is not
// inside the region or is empty.
func (r RemoteRegion) Slice(off, n int) (RemoteRegion, error) {
	const op = "RemoteRegion.Slice"
	if n <= 0 {
		return RemoteRegion{}, errorf(op, "n", ErrInvalidArgument, "%d: a region has at least one byte", n)
	}
	if err := r.check(op, off, uint64(n)); err != nil {
		return RemoteRegion{}, err
	}
	return RemoteRegion{Addr: r.Addr + uint64(off), RKey: r.RKey, Length: uint64(n)}, nil
}

// check verifies that [off, off+n) lies in the region; the error names the
// offset argument, "off".
func (r RemoteRegion) check(op string, off int, n uint64) error {
	if off < 0 || uint64(off) > r.Length || n > r.Length-uint64(off) {
		return errorf(op, "off", ErrInvalidArgument, "[%d, %d+%d) is outside the remote region of %d bytes %v", off, off, n, r.Length, r)
	}
	return nil
}

// Read returns an RDMA READ work request of the region's bytes [off,
// off+n) into local, where n is the total length of the SGEs in local
// (which must grant LOCAL_WRITE): for example
//
//	wr, err := remote.Read(0, mr.SGE(0, 64))
//
// The request is not signaled; set WRID and SendFlags (SendSignaled) as
// needed before posting it, or pass it to QP.PostSendWait. It fails,
// naming the argument, if the range is not inside the region. The
// returned request's SGList is local itself: passing a slice with local...
// allocates nothing, a list of SGEs allocates it once.
func (r RemoteRegion) Read(off int, local ...SGE) (SendWR, error) {
	return r.rdma("RemoteRegion.Read", WRRDMARead, off, local)
}

// Write returns an RDMA WRITE work request of the bytes of local to the
// region at [off, off+n), where n is the total length of the SGEs in
// local. It fails, naming the argument, if the range is not inside the
// region. See Read for the rest.
func (r RemoteRegion) Write(off int, local ...SGE) (SendWR, error) {
	return r.rdma("RemoteRegion.Write", WRRDMAWrite, off, local)
}

// WriteImm is Write with immediate data: the write also consumes a receive
// work request at the target, whose completion (WCRecvRDMAWithImm) carries
// imm and comes after the written bytes are in place.
func (r RemoteRegion) WriteImm(off int, imm uint32, local ...SGE) (SendWR, error) {
	wr, err := r.rdma("RemoteRegion.WriteImm", WRRDMAWriteWithImm, off, local)
	wr.ImmData = imm
	return wr, err
}

// rdma builds a READ or WRITE of local's bytes at off.
func (r RemoteRegion) rdma(op string, opcode WROpcode, off int, local []SGE) (SendWR, error) {
	if err := r.check(op, off, sgListLength(local)); err != nil {
		return SendWR{}, err
	}
	return SendWR{
		Opcode: opcode,
		SGList: local,
		RDMA:   RDMAParams{RemoteAddr: r.Addr + uint64(off), RKey: r.RKey},
	}, nil
}

// CompareSwap returns an ATOMIC_CMP_AND_SWP work request on the 8 bytes
// at off in the region: if they equal compare they become swap, and the
// value they had is stored in result, 8 bytes of local memory with
// LOCAL_WRITE. The target word is in the target's native byte order. It
// fails, naming the argument, if the word is not inside the region, its
// address is not 8-byte aligned, or result is not 8 bytes.
func (r RemoteRegion) CompareSwap(off int, result SGE, compare, swap uint64) (SendWR, error) {
	wr, err := r.atomic("RemoteRegion.CompareSwap", WRAtomicCmpAndSwp, off, result)
	wr.Atomic.CompareAdd, wr.Atomic.Swap = compare, swap
	return wr, err
}

// FetchAdd returns an ATOMIC_FETCH_AND_ADD work request on the 8 bytes at
// off in the region: add is added to them and the value they had is
// stored in result. See CompareSwap for the checks.
func (r RemoteRegion) FetchAdd(off int, result SGE, add uint64) (SendWR, error) {
	wr, err := r.atomic("RemoteRegion.FetchAdd", WRAtomicFetchAndAdd, off, result)
	wr.Atomic.CompareAdd = add
	return wr, err
}

// atomic builds an atomic on the word at off, its old value into result.
func (r RemoteRegion) atomic(op string, opcode WROpcode, off int, result SGE) (SendWR, error) {
	if err := r.check(op, off, 8); err != nil {
		return SendWR{}, err
	}
	if a := r.Addr + uint64(off); a%8 != 0 {
		return SendWR{}, errorf(op, "off", ErrInvalidArgument, "address %#x is not 8-byte aligned, as atomics need", a)
	}
	if result.Length != 8 {
		return SendWR{}, errorf(op, "result", ErrInvalidArgument, "%d bytes, want 8 for the old value", result.Length)
	}
	return SendWR{
		Opcode: opcode,
		SGList: []SGE{result},
		Atomic: AtomicParams{RemoteAddr: r.Addr + uint64(off), RKey: r.RKey},
	}, nil
}
