package verbs

import "sync"

// PD is a protection domain (struct ibv_pd). Memory regions, QPs, SRQs and
// address handles belong to one PD, and a QP can only use memory registered
// in its own PD: the responder checks an rkey's PD against the QP's, and a
// local SGE's lkey against the QP's as well.
type PD struct {
	dev *Device
	id  uint32 // names it in String (strings.go)

	mu     sync.Mutex
	closed bool
	users  int // MRs, QPs, SRQs, AHs (and later MWs) in this PD

	hw hwPD // the hardware backend's; nil on a goroce device
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	const op = "AllocPD"
	if d.hw != nil {
		return d.hw.allocPD(d)
	}
	if err := d.res.pd.acquire(op); err != nil {
		return nil, err
	}
	pd := &PD{dev: d, id: pdIDs.Add(1)}
	if err := d.register(op, func() { d.pds[pd] = struct{}{} }); err != nil {
		d.res.pd.release()
		return nil, err
	}
	return pd, nil
}

// Device returns the device the PD belongs to.
func (pd *PD) Device() *Device { return pd.dev }

// Dealloc deallocates the PD (ibv_dealloc_pd). It fails with ErrBusy while
// any memory region, QP, SRQ or address handle still uses the PD, and with
// ErrClosed if the PD was already deallocated.
func (pd *PD) Dealloc() error {
	const op = "DeallocPD"
	pd.mu.Lock()
	switch {
	case pd.closed:
		pd.mu.Unlock()
		return closedError(op, "pd")
	case pd.users > 0:
		n := pd.users
		pd.mu.Unlock()
		return errorf(op, "pd", ErrBusy, "%d objects still use it", n)
	}
	pd.closed = true
	pd.mu.Unlock()
	pd.dev.unregister(func() { delete(pd.dev.pds, pd) })
	if pd.hw != nil {
		return pd.hw.dealloc()
	}
	pd.dev.res.pd.release()
	return nil
}

// use records a new object in the PD, failing if the PD is gone. The
// caller names the argument ("pd") in errors.
func (pd *PD) use(op string) error {
	if pd == nil {
		return newError(op, "pd", ErrInvalidArgument, "nil")
	}
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closed {
		return closedError(op, "pd")
	}
	pd.users++
	return nil
}

// unuse drops an object recorded by use.
func (pd *PD) unuse() {
	pd.mu.Lock()
	pd.users--
	pd.mu.Unlock()
}

// forceDealloc deallocates the PD during Device.Close, after its objects.
func (pd *PD) forceDealloc() {
	pd.mu.Lock()
	was := pd.closed
	pd.closed = true
	pd.mu.Unlock()
	if !was {
		pd.dev.res.pd.release()
	}
}
