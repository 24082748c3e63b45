//go:build linux

package nic

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goroce/goroce/internal/nicproto"
)

// Kinds of queue a posted work request came from, in the top bits of the
// verbs work request ID; the rest is its position in the queue (send and
// receive queues) or its slot (SRQ). The application's wr_id stays in the
// daemon and is put back into the completion.
const (
	wridSend uint64 = 1 << 62
	wridRecv uint64 = 2 << 62
	wridSRQ  uint64 = 3 << 62
	wridKind uint64 = 3 << 62
)

// wq is the daemon's view of one work queue ring (see proto.h):
// the client produces slots, the pump drains them into verbs, the CQ mover
// retires them.
type wq struct {
	hdr     *nicproto.WQHdr
	slots   unsafe.Pointer
	entries uint64
	stride  uintptr
	maxSGE  int

	drained atomic.Uint64 // slots handed to verbs (written by the pump)
	// wrid holds the application's wr_id by position (send and receive
	// queues). Atomic: the pump reuses an entry once the client saw its
	// completion, an order only the client (another process) establishes.
	wrid []atomic.Uint64

	cmu  sync.Mutex // done and resets
	done uint64
}

func newWQ(r *ring, off, entries, stride, maxSGE int) *wq {
	return &wq{
		hdr:     (*nicproto.WQHdr)(r.at(off)),
		slots:   r.at(off + nicproto.WQHdrSize),
		entries: uint64(entries),
		stride:  uintptr(stride),
		maxSGE:  maxSGE,
		wrid:    make([]atomic.Uint64, entries),
	}
}

// pending returns how many slots the client has published past the drained
// ones. A client never runs more than a ring ahead (it keeps prod - done
// below the queue's capacity); one that claims to has its whole claim
// skipped, and broken reports it, so that the caller fails the queue.
func (w *wq) pending() (n uint64, broken bool) {
	prod := atomic.LoadUint64(&w.hdr.Prod)
	n = prod - w.drained.Load()
	if n > w.entries {
		w.publishDrained(prod)
		return 0, true
	}
	return n, false
}

// hasWork reports whether the client published slots not yet drained.
func (w *wq) hasWork() bool {
	return atomic.LoadUint64(&w.hdr.Prod) != w.drained.Load()
}

func (w *wq) slot(pos uint64) unsafe.Pointer {
	return unsafe.Add(w.slots, uintptr(pos%w.entries)*w.stride)
}

// sges returns the SGE array of a slot whose header is hdrSize bytes.
func (w *wq) sges(slot unsafe.Pointer, hdrSize uintptr) []nicproto.SGE {
	return unsafe.Slice((*nicproto.SGE)(unsafe.Add(slot, hdrSize)), w.maxSGE)
}

// publishDrained makes pos the first slot not yet drained, both for the CQ
// mover (which only accepts completions of drained slots) and the client.
func (w *wq) publishDrained(pos uint64) {
	w.drained.Store(pos)
	atomic.StoreUint64(&w.hdr.Cons, pos)
}

// complete retires the work request at position pos and those before it
// (completions of a queue come in order) and returns its wr_id; false for
// a completion from before a reset or for a position never drained.
func (w *wq) complete(pos uint64) (uint64, bool) {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	if pos < w.done || pos >= w.drained.Load() {
		return 0, false
	}
	w.done = pos + 1
	atomic.StoreUint64(&w.hdr.Done, w.done)
	return w.wrid[pos%w.entries].Load(), true
}

// outstanding returns how many work requests the client posted that have
// not completed yet.
func (w *wq) outstanding() uint64 {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	n := atomic.LoadUint64(&w.hdr.Prod) - w.done
	if n > w.entries {
		return w.entries
	}
	return n
}

// reset discards everything posted: the verbs QP has dropped what it held,
// and what the client published but the pump had not drained goes too.
// The caller holds the QP's pump lock.
func (w *wq) reset() {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	p := atomic.LoadUint64(&w.hdr.Prod)
	w.publishDrained(p)
	w.done = p
	atomic.StoreUint64(&w.hdr.Done, p)
}

// sleep tells the client to ring the doorbell for new work.
func (w *wq) sleep(on bool) {
	var v uint32
	if on {
		v = 1
	}
	atomic.StoreUint32(&w.hdr.NeedDoorbell, v)
}
