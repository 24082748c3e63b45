package verbs

// What a device hands out and counts: objects against its limits, and QP
// numbers.

import "sync/atomic"

// resources counts objects against the device limits.
type resources struct {
	pd, mr, mw, cq, qp, srq, ah resource
}

// resource is one counted kind of object. acquire and release are
// lock-free.
type resource struct {
	name  string // the DeviceAttr limit, as ibv_device_attr spells it
	limit int64
	n     atomic.Int64
}

func (r *resource) acquire(op string) error {
	for {
		n := r.n.Load()
		if n >= r.limit {
			return errorf(op, r.name, ErrResourceLimit, "all %d in use", r.limit)
		}
		if r.n.CompareAndSwap(n, n+1) {
			return nil
		}
	}
}

func (r *resource) release() { r.n.Add(-1) }

// QP numbers: 24 bits, never 0 or 1 (QP0 and QP1 are the subnet management
// and general services QPs).
const (
	qpnMin = 2
	qpnMax = 0xFFFFFF
)

// addQP assigns qp a QP number unique among the device's live QPs and makes
// it visible to lookupQP. Numbers are the images of a counter (from a
// random start) under a secret permutation (perm24): unpredictable from
// the numbers seen before (an off-path attacker must guess the 24 bits),
// and not reused before 2^24 more QPs were created, so stale packets find
// no QP.
//
// With several receive queues, which steer by QP number mod their count
// (DeviceConfig.ReceiveQueues), the QPs take the queues in turn: numbers
// of other residues are skipped (about one in n of the permutation's
// images is taken), so n QPs created one after another use n queues, and
// the number's residue, known to whoever counts QPs, leaves an
// attacker log2(n) bits fewer to guess.
func (d *Device) addQP(op string, qp *QP) error {
	d.qpnMu.Lock()
	defer d.qpnMu.Unlock()
	if d.isClosed() {
		return closedError(op, "device")
	}
	queues := uint32(1)
	if d.eng != nil { // nil in tests of a device without sockets
		queues = uint32(len(d.eng.rxqs))
	}
	queue := d.qpnQueue
	d.qpnQueue = (d.qpnQueue + 1) % queues
	// After a whole cycle of the counter every number of the residue
	// was seen taken (a device of millions of QPs): any residue will do.
	for tries := 0; ; tries++ {
		qpn := d.qpnPerm.encrypt(d.qpnCounter)
		d.qpnCounter = (d.qpnCounter + 1) & 0xFFFFFF
		if qpn < qpnMin || qpn%queues != queue && tries <= qpnMax {
			continue
		}
		if _, taken := d.qps.Load(qpn); !taken {
			qp.qpn = qpn
			d.qps.Store(qpn, qp)
			return nil
		}
	}
}

// lookupQP returns the live QP with number qpn, or nil. It takes no lock.
func (d *Device) lookupQP(qpn uint32) *QP {
	v, ok := d.qps.Load(qpn)
	if !ok {
		return nil
	}
	return v.(*QP)
}
