package verbs

import (
	"math"
	"sync"
	"sync/atomic"
	"unsafe"
)

// MR is a memory region (struct ibv_mr): a byte slice registered with a PD
// and access rights, addressed by peers through its rkey and by local work
// requests through its lkey. Remote describes it for a peer.
//
// A peer's READ, WRITE or atomic needs the right both here (RegMR's
// access: AccessRemoteRead, AccessRemoteWrite, AccessRemoteAtomic) and in
// the access flags of the QP it arrives on (QPAttr.QPAccessFlags); see
// "Remote access" in the package documentation.
//
// The MR keeps its buffer referenced until Dereg, so the garbage collector
// cannot free memory a peer may still address. (Go's collector does not move
// heap objects, and a slice passed to RegMR escapes to the heap, so the
// registered address stays valid.) Dereg and Rereg wait for the remote
// accesses in flight, so once they return no remote operation touches the
// old memory or uses the old rights.
type MR struct {
	// Each registration (and each Rereg) is an immutable snapshot
	// published atomically in the device's key table. The receive path
	// looks keys up without locks and pins the snapshot it found for the
	// duration of an access.

	dev   *Device
	index uint32

	mu       sync.Mutex // serializes Dereg and Rereg
	dead     bool       // deregistered; guarded by mu
	baseIOVA uint64     // IOVA when not zero-based; guarded by mu

	reg atomic.Pointer[mrRegion] // the current registration; never nil

	// boundMWs counts memory windows bound to the region; Dereg and Rereg
	// fail while it is non-zero (IBA 10.6.7.2.6). A bind increments it
	// with mu held, so it cannot race with their check; unbinding
	// decrements it once the window's accesses have drained.
	boundMWs atomic.Int32

	// writes counts the remote stores into the region (RemoteWrites,
	// remotewrite.go).
	writes remoteWrites

	hw hwMR // the hardware backend's registration; nil on a goroce device
}

// mrRegion is one registration of an MR, or one binding of a memory window
// onto an MR: key, PD, memory and rights. It never changes after
// publication, so readers need no lock; refs counts accesses in flight.
type mrRegion struct {
	mr     *MR // for a window's binding, the region it is bound to
	key    uint32
	pd     *PD
	buf    []byte
	iova   uint64
	access AccessFlags
	// qp, for the binding of a type 2 window, is the only QP that may use
	// it (rxe_lookup_mw); nil for regions and type 1 windows.
	qp *QP

	refs    atomic.Int64  // accesses in flight, plus regionDead once revoked
	drained chan struct{} // closed by the last release after revocation
}

// regionDead is set in refs when the registration is revoked.
const regionDead = 1 << 62

// ReregFlags select what Rereg changes (enum ibv_rereg_mr_flags).
type ReregFlags int

// Rereg flags, with the libibverbs values.
const (
	ReregChangeTranslation ReregFlags = 1 << 0 // new buffer (and IOVA)
	ReregChangePD          ReregFlags = 1 << 1 // new protection domain
	ReregChangeAccess      ReregFlags = 1 << 2 // new access flags

	reregAll = ReregChangeTranslation | ReregChangePD | ReregChangeAccess
)

// RegMR registers buf (ibv_reg_mr). The IOVA is the address of buf's first
// byte, as libibverbs uses the virtual address, so a peer can be sent
// mr.IOVA() (perftest's VADDR) and address the buffer with it; with
// AccessZeroBased the IOVA is 0 and peers address the region by offset.
//
// Errors: an empty buf (ErrInvalidArgument, "length"); remote write or remote
// atomic without local write, or unknown flags (ErrInvalidArgument,
// "access"); AccessOnDemand (ErrNotSupported); a region longer than
// MaxMRSize; the max_mr limit (ErrResourceLimit).
func (pd *PD) RegMR(buf []byte, access AccessFlags) (*MR, error) {
	if pd != nil && pd.hw != nil {
		return pd.hw.regMR("RegMR", pd, buf, effectiveIOVA(bufAddr(buf), access), access)
	}
	return pd.regMR("RegMR", buf, bufAddr(buf), access)
}

// RegMRIOVA registers buf with a caller-chosen IOVA (ibv_reg_mr_iova): peers
// address byte i of buf as iova+i. With AccessZeroBased, iova must be 0.
// The region [iova, iova+len(buf)) must not wrap around 2^64. On a
// hardware device (OpenHardware) iova must also lie at buf's offset in its
// page, as the kernel maps whole pages: a zero-based buf starts a page.
func (pd *PD) RegMRIOVA(buf []byte, iova uint64, access AccessFlags) (*MR, error) {
	const op = "RegMRIOVA"
	if access&AccessZeroBased != 0 && iova != 0 {
		return nil, errorf(op, "iova", ErrInvalidArgument, "%#x with a zero-based registration", iova)
	}
	if pd != nil && pd.hw != nil {
		return pd.hw.regMR(op, pd, buf, iova, access)
	}
	return pd.regMR(op, buf, iova, access)
}

func (pd *PD) regMR(op string, buf []byte, base uint64, access AccessFlags) (*MR, error) {
	if pd == nil {
		return nil, newError(op, "pd", ErrInvalidArgument, "nil")
	}
	d := pd.dev
	if err := validateMRAccess(op, access); err != nil {
		return nil, err
	}
	iova := effectiveIOVA(base, access)
	if err := d.checkTranslation(op, buf, iova); err != nil {
		return nil, err
	}
	if err := pd.use(op); err != nil {
		return nil, err
	}
	if err := d.res.mr.acquire(op); err != nil {
		pd.unuse()
		return nil, err
	}
	index, key, ok := d.mrs.alloc()
	if !ok {
		d.res.mr.release()
		pd.unuse()
		return nil, newError(op, "max_mr", ErrResourceLimit, "no free key index")
	}
	mr := &MR{dev: d, index: index, baseIOVA: base}
	r := newRegion(mr, key, pd, buf, iova, access)
	mr.reg.Store(r)
	if err := d.register(op, func() { d.mrs.publish(index, r) }); err != nil {
		d.mrs.release(index)
		d.res.mr.release()
		pd.unuse()
		return nil, err
	}
	return mr, nil
}

func newRegion(mr *MR, key uint32, pd *PD, buf []byte, iova uint64, access AccessFlags) *mrRegion {
	return &mrRegion{mr: mr, key: key, pd: pd, buf: buf, iova: iova, access: access, drained: make(chan struct{})}
}

// bufAddr returns the virtual address of buf's first byte.
func bufAddr(buf []byte) uint64 {
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
}

// effectiveIOVA is the IOVA of a registration: 0 when zero-based.
func effectiveIOVA(base uint64, access AccessFlags) uint64 {
	if access&AccessZeroBased != 0 {
		return 0
	}
	return base
}

// checkTranslation validates a registration's memory: not empty, not over
// MaxMRSize, and [iova, iova+len) inside the 64-bit address space.
func (d *Device) checkTranslation(op string, buf []byte, iova uint64) error {
	n := uint64(len(buf))
	switch {
	case n == 0:
		return newError(op, "length", ErrInvalidArgument, "empty region")
	case n > d.attr.MaxMRSize:
		return errorf(op, "length", ErrInvalidArgument, "%d exceeds max_mr_size %d", n, d.attr.MaxMRSize)
	case n-1 > math.MaxUint64-iova:
		return errorf(op, "iova", ErrInvalidArgument, "%#x + length %d wraps around 2^64", iova, n)
	}
	return nil
}

// LKey returns the local key, used in SGEs of local work requests.
func (mr *MR) LKey() uint32 { return mr.reg.Load().key }

// RKey returns the remote key, which peers put in RDMA and atomic requests.
// It equals LKey.
func (mr *MR) RKey() uint32 {
	if mr.hw != nil {
		return mr.hw.rkey()
	}
	return mr.reg.Load().key
}

// IOVA returns the address at which the region starts for peers and SGEs.
func (mr *MR) IOVA() uint64 { return mr.reg.Load().iova }

// Len returns the region's length in bytes.
func (mr *MR) Len() int { return len(mr.reg.Load().buf) }

// Access returns the region's access flags.
func (mr *MR) Access() AccessFlags { return mr.reg.Load().access }

// PD returns the region's protection domain.
func (mr *MR) PD() *PD { return mr.reg.Load().pd }

// Buf returns the registered buffer.
func (mr *MR) Buf() []byte { return mr.reg.Load().buf }

// SGE returns a scatter/gather entry for length bytes at offset in the
// region. It panics if the range is outside the region, like slicing.
func (mr *MR) SGE(offset, length int) SGE {
	r := mr.reg.Load()
	if offset < 0 || length < 0 || offset > len(r.buf) || length > len(r.buf)-offset || uint64(length) > math.MaxUint32 {
		panic("verbs: MR.SGE: range out of the region")
	}
	return SGE{Addr: r.iova + uint64(offset), Length: uint32(length), LKey: r.key}
}

// Dereg deregisters the region (ibv_dereg_mr). The keys stop resolving at
// once; Dereg then waits for remote accesses already in flight, so when it
// returns no peer operation touches the buffer. It fails with ErrBusy while
// memory windows are bound to the region and with ErrClosed if the region
// was already deregistered.
func (mr *MR) Dereg() error {
	const op = "DeregMR"
	if mr.hw != nil {
		return mr.hw.dereg(mr)
	}
	mr.mu.Lock()
	if mr.dead {
		mr.mu.Unlock()
		return closedError(op, "mr")
	}
	if n := mr.boundMWs.Load(); n > 0 {
		mr.mu.Unlock()
		return errorf(op, "mr", ErrBusy, "%d memory windows bound", n)
	}
	r := mr.retireLocked()
	mr.mu.Unlock()
	mr.drain(r)
	return nil
}

// forceDereg deregisters during Device.Close.
func (mr *MR) forceDereg() {
	mr.mu.Lock()
	if mr.dead {
		mr.mu.Unlock()
		return
	}
	r := mr.retireLocked()
	mr.mu.Unlock()
	mr.drain(r)
}

// retireLocked marks the region deregistered and withdraws its keys; the
// caller holds mu, then calls drain without it.
func (mr *MR) retireLocked() *mrRegion {
	mr.dead = true
	mr.dev.mrs.release(mr.index)
	return mr.reg.Load()
}

// drain waits for the accesses in flight under the retired registration r
// and releases what it held. It runs without mu: the device's receive
// path may hold r pinned until the end of its batch (a zero-copy send
// from the region, see transport.Output.SetZeroCopy; the stores of its
// WRITEs, qpMemory.storeInBatch) and take mu meanwhile
// (binding a window to the region), so waiting under mu could deadlock.
func (mr *MR) drain(r *mrRegion) {
	r.revoke()
	r.pd.unuse()
	mr.dev.res.mr.release()
}

// Rereg modifies the registration in place (ibv_rereg_mr): flags select
// which of pd, buf and access take effect; the others are ignored (access
// must be 0 unless ReregChangeAccess is set, as libibverbs requires). With
// ReregChangeTranslation the IOVA becomes buf's address (0 if zero-based);
// changing AccessZeroBased alone switches the IOVA between 0 and the
// previous address.
//
// Rereg keeps the key table index and changes the key byte, so LKey and RKey
// return new values afterwards and peers holding the old rkey are refused,
// as after a deregistration: a change of PD or rights must not be usable
// through an rkey handed out under the old ones. Like Dereg, it waits for
// accesses in flight under the old registration. On error nothing changes.
func (mr *MR) Rereg(flags ReregFlags, pd *PD, buf []byte, access AccessFlags) error {
	a := ReregAttr{Flags: flags, PD: pd, Buf: buf, Access: access}
	if flags&ReregChangeTranslation != 0 {
		a.IOVA = bufAddr(buf)
	}
	return mr.rereg("ReregMR", a)
}

func (mr *MR) rereg(op string, a ReregAttr) error {
	if a.Flags == 0 || a.Flags&^reregAll != 0 {
		return errorf(op, "flags", ErrInvalidArgument, "%#x", int(a.Flags))
	}
	if a.Flags&ReregChangeAccess == 0 && a.Access != 0 {
		return newError(op, "access", ErrInvalidArgument, "set without ReregChangeAccess")
	}
	if mr.hw != nil {
		return mr.hw.rereg(op, mr, a)
	}
	mr.mu.Lock()
	old, newPD, err := mr.reregLocked(op, a)
	mr.mu.Unlock()
	if err != nil {
		return err
	}
	// Waited for without mu, as in Dereg (see drain).
	old.revoke()
	if newPD != old.pd {
		old.pd.unuse()
	}
	return nil
}

// reregLocked is Rereg's work under mu: it publishes the new registration
// and returns the old one, which the caller revokes without mu.
func (mr *MR) reregLocked(op string, a ReregAttr) (*mrRegion, *PD, error) {
	if mr.dead {
		return nil, nil, closedError(op, "mr")
	}
	if n := mr.boundMWs.Load(); n > 0 {
		return nil, nil, errorf(op, "mr", ErrBusy, "%d memory windows bound", n)
	}
	d := mr.dev
	old := mr.reg.Load()
	newPD, newBuf, newAccess, base := old.pd, old.buf, old.access, mr.baseIOVA
	if a.Flags&ReregChangeAccess != 0 {
		if err := validateMRAccess(op, a.Access); err != nil {
			return nil, nil, err
		}
		newAccess = a.Access
	}
	if a.Flags&ReregChangeTranslation != 0 {
		if len(a.Buf) == 0 {
			return nil, nil, newError(op, "length", ErrInvalidArgument, "empty region")
		}
		newBuf, base = a.Buf, a.IOVA
	}
	iova := effectiveIOVA(base, newAccess)
	if err := d.checkTranslation(op, newBuf, iova); err != nil {
		return nil, nil, err
	}
	if a.Flags&ReregChangePD != 0 {
		switch {
		case a.PD == nil:
			return nil, nil, newError(op, "pd", ErrInvalidArgument, "nil")
		case a.PD.dev != d:
			return nil, nil, newError(op, "pd", ErrInvalidArgument, "belongs to another device")
		}
		if a.PD != old.pd {
			if err := a.PD.use(op); err != nil {
				return nil, nil, err
			}
		}
		newPD = a.PD
	}

	key := old.key
	if !a.KeepKeys {
		key = d.mrs.rekey(mr.index)
	}
	r := newRegion(mr, key, newPD, newBuf, iova, newAccess)
	mr.reg.Store(r)
	mr.baseIOVA = base
	d.mrs.publish(mr.index, r)
	return old, newPD, nil
}

// acquire pins the registration for an access; it fails once the
// registration is revoked. Lock-free.
func (r *mrRegion) acquire() bool {
	for {
		n := r.refs.Load()
		if n&regionDead != 0 {
			return false
		}
		if r.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release ends an access begun by acquire.
func (r *mrRegion) release() {
	if r.refs.Add(-1) == regionDead {
		close(r.drained)
	}
}

// revoke stops new acquisitions and waits until accesses in flight have
// released the registration.
func (r *mrRegion) revoke() {
	if old := r.refs.Or(regionDead); old&^regionDead != 0 {
		<-r.drained
	}
}

// lookupMR returns the memory region whose current key is key, or nil. It
// takes no lock.
func (d *Device) lookupMR(key uint32) *MR {
	r := d.mrs.lookup(key)
	if r == nil || r.key != key {
		return nil
	}
	return r.mr
}

// lookupAndAcquire returns the current registration with key, pinned until
// release, or nil if the key is not (or no longer) valid. It takes no lock.
func (d *Device) lookupAndAcquire(key uint32) *mrRegion { return acquireKeyed(d.mrs.lookup(key), key) }

// acquireKeyed pins r, what key's slot holds (or nil), if its key is key.
func acquireKeyed(r *mrRegion, key uint32) *mrRegion {
	if r == nil || r.key != key || !r.acquire() {
		return nil
	}
	return r
}

// acquireMR resolves key for an access of length bytes at va with rights
// need on behalf of a QP in pd, and pins the registration; the caller
// releases it after copying. On failure it returns an accessFault.
func (d *Device) acquireMR(key uint32, pd *PD, va uint64, length int, need AccessFlags) (*mrRegion, error) {
	return checkAcquired(d.lookupAndAcquire(key), pd, va, length, need)
}

// acquireRegion is acquireMR for r, what key's slot holds (or nil).
func (d *Device) acquireRegion(r *mrRegion, key uint32, pd *PD, va uint64, length int, need AccessFlags) (*mrRegion, error) {
	return checkAcquired(acquireKeyed(r, key), pd, va, length, need)
}

// checkAcquired checks an access against r, pinned (nil: no such key),
// and releases it if refused.
func checkAcquired(r *mrRegion, pd *PD, va uint64, length int, need AccessFlags) (*mrRegion, error) {
	if r == nil {
		return nil, faultKey
	}
	if err := r.check(pd, va, length, need); err != nil {
		r.release()
		return nil, err
	}
	return r, nil
}

// accessFault is why a memory access was refused. The transport turns any
// of them into a remote access error (NAK) or a local protection error; the
// distinction is for counters and debugging. Converting one to an error does
// not allocate.
type accessFault uint8

const (
	faultKey    accessFault = iota + 1 // no registration with this key
	faultPD                            // registration in another PD than the QP
	faultAccess                        // registration lacks a needed right
	faultBounds                        // range outside the registration
)

func (f accessFault) Error() string {
	switch f {
	case faultKey:
		return "verbs: invalid memory key"
	case faultPD:
		return "verbs: memory key of another protection domain"
	case faultAccess:
		return "verbs: access not permitted by the memory region"
	case faultBounds:
		return "verbs: access outside the memory region"
	}
	return "verbs: memory access fault"
}

// check validates an access of length bytes at va needing rights need by a
// QP in pd, in rxe's order: PD, rights, bounds. The bounds test cannot
// overflow: it compares offsets within the region.
func (r *mrRegion) check(pd *PD, va uint64, length int, need AccessFlags) error {
	switch {
	case r.pd != pd:
		return faultPD
	case need&^r.access != 0:
		return faultAccess
	case length < 0 || va < r.iova:
		return faultBounds
	}
	off, n := va-r.iova, uint64(len(r.buf))
	if off > n || uint64(length) > n-off {
		return faultBounds
	}
	return nil
}

// bytes returns the registered bytes [va, va+length); check must have
// accepted the range.
func (r *mrRegion) bytes(va uint64, length int) []byte {
	off := va - r.iova
	return r.buf[off : off+uint64(length)]
}

// checkRemote validates an access to the region's current registration as
// check does. The transport normally uses acquireMR, which also pins the
// registration.
func (mr *MR) checkRemote(pd *PD, va uint64, length int, need AccessFlags) error {
	return mr.reg.Load().check(pd, va, length, need)
}
